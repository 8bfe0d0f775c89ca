#pragma once

// meshstore's public API: a distributed tensor store whose every call
// returns a Future at once. Include this header only; CAF stays hidden.
//
//   auto store = meshstore::Store::embedded().value();
//   std::vector<float> w(1024, 1.0f);
//   store.put("layer0.w", meshstore::TensorView::of(w.data(), {32, 32})).get().value();
//   meshstore::Tensor t = store.get("layer0.w").get().value();

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/future.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/state_dict_types.hpp"  // StateDicts' options, StagedStateDict, Publication
#include "meshstore/status.hpp"
#include "meshstore/store_options.hpp"  // StoreOptions and its parts
#include "meshstore/store_types.hpp"    // ReadOptions, PutOptions, KeyInfo, the counters
#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"
#include "meshstore/tls.hpp"

namespace meshstore {

namespace internal {
struct StoreRuntimeAccess;
struct StoreDirectory;
class ActorRuntime;
}  // namespace internal

/// A tensor store. Keys name tensors or byte objects; a put of an existing
/// key replaces it atomically (readers see the old complete value or the
/// new one, never a mix).
///
/// Every call validates its input, returns a Future immediately and runs
/// in the background; errors arrive in the future as a Status naming the
/// key. Buffers passed in (TensorView) must stay valid until the returned
/// future completes.
///
/// The everyday verbs are Store's own; state dicts and the operator's
/// calls are its two facets, state_dicts() and admin().
///
/// Thread-safe: any number of threads may call any method concurrently,
/// including threads the store's runtime does not own. Move-only; a
/// moved-from Store answers every call with Errc::shutdown.
class Store {
 public:
  class StateDicts;
  class Admin;

  /// A whole store inside this process: controller, strategy, volumes and
  /// client actors on the process's actor runtime, which the process's
  /// other stores and meshes share (docs/actors.md, "One runtime per
  /// process"). Fails with
  /// Errc::invalid_argument on a bad option.
  static Result<Store> embedded(StoreOptions options = {});

  /// Joins the store published at `address` ("HOST:PORT") by another
  /// process, retrying with backoff up to options.connect_timeout; hosts the
  /// volumes the store's strategy places here. Fails with Errc::unavailable
  /// naming the address and the last error, or Errc::protocol_error when the
  /// versions cannot talk.
  static Result<Store> connect(const std::string& address, StoreOptions options = {});

  /// A store for a launched rank (meshrun, torchrun, mpirun, srun; see
  /// LaunchEnv): rank 0 creates the store and listens on MASTER_ADDR at
  /// MESHSTORE_PORT (default MASTER_PORT + 1, so it never collides with
  /// torch.distributed on MASTER_PORT); every other rank connects to it.
  static Result<Store> from_env(StoreOptions options = {});

  /// Moves the handle; the moved-from Store answers every call with Errc::shutdown.
  Store(Store&&) noexcept;
  /// Lets go of the store this one held (as the destructor does), then takes over the other.
  Store& operator=(Store&&) noexcept;
  /// Closes the store (see close()).
  ~Store();

  // -- tensors -------------------------------------------------------------

  /// Stores a copy of `tensor` under `key` (any strides; packed on the
  /// way): the whole key, or one shard of it (PutOptions).
  Future<void> put(std::string key, const TensorView& tensor, const PutOptions& options = {});
  /// Stores several tensors; they move in parallel and become visible
  /// together, with one notification to the controller. Keys must be unique.
  Future<void> put_batch(std::vector<std::pair<std::string, TensorView>> items);

  /// Fetches `key` (or the box options.slice of it) into a newly allocated
  /// contiguous Tensor, or maps it read-only with options.view.
  /// Errc::not_found if there is no such key; Errc::wrong_kind for an
  /// object; Errc::invalid_argument for options.cast (it converts into
  /// get_into's destination) or a view of a slice.
  Future<Tensor> get(std::string key, const ReadOptions& options = {});
  /// Fetches several keys, in parallel.
  Future<std::vector<Tensor>> get_batch(std::vector<std::string> keys);

  /// Copies `key` (or the box options.slice of it) into the caller's `dst`
  /// (any strides) without allocating a tensor. dtype and shape must match
  /// (unless options.cast): Errc::dtype_mismatch or Errc::shape_mismatch
  /// otherwise, with `dst` untouched. Errc::invalid_argument for
  /// options.view.
  Future<void> get_into(std::string key, const TensorView& dst, const ReadOptions& options = {});
  /// get_into for several keys, in parallel; every destination is checked
  /// before any byte moves.
  Future<void> get_into_batch(std::vector<std::pair<std::string, TensorView>> items);

  // -- byte objects --------------------------------------------------------

  /// Stores `bytes` under `key` as an object (not a tensor), tagged with
  /// `format` (what the bytes are; ObjectFormat).
  Future<void> put_object(std::string key, std::string bytes,
                          ObjectFormat format = ObjectFormat::bytes);
  /// Fetches an object. Errc::wrong_kind if `key` holds a tensor.
  Future<std::string> get_object(std::string key);
  /// Fetches an object with the format it was put with.
  Future<StoredObject> get_stored_object(std::string key);

  // -- the key space -------------------------------------------------------

  /// Keys under `prefix`, sorted. The prefix matches whole components
  /// separated by '/' or '.': "model.layers" matches "model.layers.0.w" but
  /// not "model.layers_extra". An empty prefix lists every key.
  Future<std::vector<std::string>> keys(std::string prefix = "");
  /// Metadata of the keys under `prefix` (same matching as keys()), sorted.
  Future<std::vector<KeyInfo>> list(std::string prefix = "");
  /// True when `key` exists.
  Future<bool> exists(std::string key);
  /// Removes `key`; Errc::not_found if it does not exist. Readers holding
  /// the old value finish their read; its memory goes after them. The key
  /// of a state dict (StateDicts::put's, or a published version "P/vN")
  /// removes the whole state dict: its packed buckets and entries too, not
  /// keys put on their own under its name. A prefix P that was published
  /// to (its version pointer) removes every version P/vN with it; a direct
  /// version's loan then ends (Publication::returned()).
  Future<void> remove(std::string key);
  /// Removes the keys that exist, ignores the others; answers how many of
  /// them were removed (a state dict's key counts once, as for remove()).
  Future<std::size_t> remove_batch(std::vector<std::string> keys);

  // -- facets --------------------------------------------------------------

  /// State dicts: whole, sharded, published as versions, staged in place.
  StateDicts state_dicts() const;
  /// Usage, counters, transports and where this store listens.
  Admin admin() const;

  /// Stops the store. Calls still in flight end with Errc::shutdown (never a
  /// hang); later calls fail with Errc::shutdown at once. Idempotent.
  /// Blocks until the store's actors have stopped; do not call it from a
  /// future continuation.
  void close();
  /// True after close().
  bool closed() const noexcept;

 private:
  friend struct internal::StoreRuntimeAccess;
  // embedded() and connect() on an actor runtime this process already has
  // (a ProcMesh's, spawn_store in store_mesh.hpp); null makes its own.
  static Result<Store> embedded_on(std::shared_ptr<internal::ActorRuntime> runtime,
                                   StoreOptions options);
  // With `directory` (the store's directory actor, handed over a
  // connection this process already has), no connection to `address` is
  // opened: `address` only names the store in messages.
  static Result<Store> connect_on(std::shared_ptr<internal::ActorRuntime> runtime,
                                  const std::string& address, StoreOptions options,
                                  const internal::StoreDirectory* directory = nullptr);
  Future<void> put_shard(std::string key, const TensorView& shard, const TensorSlice& slice,
                         std::uint32_t replicas);
  Future<Tensor> get_slice(std::string key, const TensorSlice& slice);
  Future<Tensor> get_view(std::string key);
  Future<void> get_slice_into(std::string key, const TensorView& dst, const TensorSlice& slice);
  Future<void> get_into_items(std::vector<std::pair<std::string, TensorView>> items,
                              const ReadOptions& options);
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

/// A store's state dicts (Store::state_dicts()). A state dict stored under
/// `key` is a manifest at `key` (the names in order, each one's dtype and
/// shape), small tensors packed into one blob at "key#packed", and the
/// other entries at "key/name" (tensors, and values as uint8 tensors);
/// docs/state_dicts.md. The whole state dict commits at once (one
/// controller message), and readers see one complete version: never a mix
/// of two. One writer per key at a time. Keys put on their own under "key/"
/// are not part of it and are left alone.
///
/// A handle onto its store, cheap to copy; its calls fail with
/// Errc::shutdown once the store is closed. Thread-safe as Store is.
class Store::StateDicts {
 public:
  /// Stores every entry of `sd` under `key`, moving tensors in parallel, and
  /// makes the new version visible atomically; names the previous version
  /// had and this one lacks are removed. The tensors' memory must stay valid
  /// until the future completes.
  Future<void> put(std::string key, const StateDict& sd, const StateDictPutOptions& options = {});
  /// Puts rank `rank`'s part of a sharded state dict under `key`. Every rank
  /// of the writing mesh calls it with the same names, dtypes and global
  /// shapes. For an entry named in `layout`, `local` holds this rank's box
  /// of the global tensor (RankShard: Placement::shard_for gives it); the
  /// other entries (whole tensors and values, alike on every rank) are
  /// stored from rank 0's call only. The state dict becomes visible as a
  /// whole, replacing the previous version, when every entry's shards cover
  /// it; until then the previous version stays readable and `key` reads as
  /// partially committed if there is none. Ranks that disagree on the
  /// entries or their layout, replicas that differ in their bytes and
  /// overlapping boxes are refused. remove(key) drops a put that will never
  /// complete (a rank died). The options apply as for put(), but sharded
  /// entries are never packed and no stream is announced. docs/sharding.md.
  Future<void> put_sharded(std::string key, const StateDict& local,
                           const std::map<std::string, RankShard>& layout, std::int64_t rank,
                           const StateDictPutOptions& options = {});

  /// Reads the state dict under `key` into new tensors and values, in its
  /// order. Errc::not_found when there is none.
  Future<StateDict> get(std::string key);
  /// Reads the state dict under `key` into `sd`'s own tensors (in place, no
  /// allocation) and values. `sd` must hold exactly the stored names, each
  /// with the stored dtype and shape (or, with options.cast, a dtype it
  /// converts to; options.boxes: a box of it); otherwise the error lists
  /// every missing, extra and mismatched name (Errc::dtype_mismatch or
  /// shape_mismatch when one differs, else invalid_argument) and `sd` is
  /// untouched. The entries are read in one snapshot of the index, so `sd`
  /// ends holding one complete version (if a writer changed the layout in
  /// between, the read starts over). `sd` must outlive the future.
  Future<void> get_into(std::string key, StateDict& sd, const StateDictReadOptions& options = {});
  /// Waits up to `timeout` for the state dict `key` to be written or
  /// committed, then reads it into `sd` as get_into does. While a writer is
  /// still putting it, the read streams: each tensor (and the packed blob)
  /// is copied into `sd` as soon as the writer has filled it, so the
  /// writer's copy-in and this copy-out overlap; the call completes when
  /// that version commits. Errc::timeout when nothing is written in time;
  /// Errc::unavailable when the writer fails before its commit (the
  /// contents of `sd` are then unspecified). A destination that does not
  /// match is reported before any byte moves, as by get_into. `sd` must
  /// outlive the future.
  Future<void> stream_into(std::string key, StateDict& sd, std::chrono::milliseconds timeout);

  /// Publishes `sd` as the next version under `prefix`: stores it as the
  /// state dict "PREFIX/vN" (N = the previous version + 1, from 1), then
  /// points the object "PREFIX" at N, then retires the version that fell
  /// out of the newest options.keep. A retired version's memory stays with
  /// the volumes for the next version of the same shapes, so publishing
  /// every step reuses the same shared-memory segments instead of faulting
  /// in new ones. Moves the bytes in the mode options.mode asks or the
  /// store picks (PublishMode): by copy, or directly out of `sd`'s own
  /// tensors, which readers then copy from once, straight into theirs.
  /// Answers the Publication (its version() is N), which says when the
  /// tensors are the caller's again (for a direct version: after reclaim()
  /// or the version's retirement, not when this future completes).
  /// Errc::unsupported when options.mode is direct and this process cannot
  /// lend (the message says why). Fenced: when another writer publishes
  /// under `prefix` at the same time, one of them gets Errc::conflict and
  /// nothing of its version stays (docs/publishing.md, "Two writers on
  /// one prefix").
  Future<Publication> publish(std::string prefix, const StateDict& sd,
                              const PublishOptions& options = {});
  /// The newest version published under `prefix`; 0 when none is.
  Future<std::uint64_t> latest(std::string prefix);
  /// Reads the newest complete version under `prefix` into `sd` (as
  /// get_into does, without boxes); if the writer retires it before it is
  /// read, follows the pointer to the newer one. Answers the version read.
  /// Errc::not_found when nothing was published. `sd` must outlive the
  /// future.
  Future<std::uint64_t> get_latest_into(std::string prefix, StateDict& sd,
                                        const StateDictReadOptions& options = {});
  /// Waits up to `timeout` for a version newer than `after` under `prefix`,
  /// reads it into `sd` (streamed while its writer still puts it, the
  /// newest complete one when the writer is ahead; without boxes) and
  /// answers its number. The worker loop:
  /// `v = store.state_dicts().get_next_into("weights", sd, v, 60s).get()`.
  Future<std::uint64_t> get_next_into(std::string prefix, StateDict& sd, std::uint64_t after,
                                      std::chrono::milliseconds timeout,
                                      const StateDictReadOptions& options = {});

  /// Allocates a state dict of `tensors` for the caller to fill in place,
  /// then commit() under `key` (StagedStateDict): on a volume in shared
  /// memory, no byte is copied in. Packing follows
  /// options.pack_max_tensor_bytes (small tensors are views into one blob);
  /// options.transfer_dtype must be unset (the tensors are written in their
  /// stored dtype). Names must be unique and non-empty. Errc::out_of_capacity
  /// when the volume cannot hold them.
  Future<StagedStateDict> stage(std::string key, std::vector<TensorSpec> tensors,
                                const StateDictPutOptions& options = {});
  /// stage() for the next version under `prefix`: commit() stores it as
  /// "PREFIX/vN", points "PREFIX" at N and retires the version that fell
  /// out of the newest `keep`, as publish() does, and answers N. The staged
  /// memory is a retired version's when the shapes repeat.
  Future<StagedStateDict> stage_publish(std::string prefix, std::vector<TensorSpec> tensors,
                                        int keep = 1, const StateDictPutOptions& options = {});

 private:
  friend class Store;
  explicit StateDicts(std::shared_ptr<Store::Impl> impl) : impl_(std::move(impl)) {}
  Future<std::uint64_t> publish_copy(std::string prefix, const StateDict& sd, int keep,
                                     const StateDictPutOptions& options, const std::string& op);
  std::shared_ptr<Store::Impl> impl_;
};

/// A store's operator's view (Store::admin()): usage, counters, transports
/// and where it listens. A handle onto its store, cheap to copy.
class Store::Admin {
 public:
  /// Usage of every volume.
  Future<std::vector<VolumeStats>> stats();
  /// The controller's message counters (ControllerCounters).
  Future<ControllerCounters> controller_counters();
  /// What this process's calls on the caller's thread did (FastPathStats).
  FastPathStats fast_path_stats() const;
  /// Where this process serves /metrics, /healthz and /readyz
  /// (StoreOptions::metrics, with the port it got); empty when it does not.
  std::string metrics_address() const;
  /// The port this store listens on (0 when it does not listen).
  std::uint16_t port() const noexcept;
  /// "HOST:PORT" this store listens on, or "" when it does not listen.
  std::string address() const;

  /// Names of the transports built into this binary, preferred first.
  static std::vector<std::string> available_transports();
  /// Each transport built into this binary with whether it can run in this
  /// process: ok, or why not (rdma: "no RDMA device: ...").
  static std::vector<std::pair<std::string, Status>> transport_status();
  /// Each transport built into this binary with whether it moves a
  /// caller's GPU tensors itself, without staging them through host memory
  /// (docs/gpu.md): ok, or why not ("tcp: copies host memory only", rdma:
  /// why GPUDirect RDMA is off). Over the others the client stages GPU
  /// tensors through page-locked host memory in pipelined pieces.
  static std::vector<std::pair<std::string, Status>> gpu_transport_status();

 private:
  friend class Store;
  explicit Admin(std::shared_ptr<Store::Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Store::Impl> impl_;
};

}  // namespace meshstore
