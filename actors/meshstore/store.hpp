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

#include "meshstore/dtype.hpp"
#include "meshstore/errc.hpp"
#include "meshstore/future.hpp"
#include "meshstore/object_format.hpp"
#include "meshstore/placement.hpp"
#include "meshstore/result.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"
#include "meshstore/tls.hpp"

namespace meshstore {

namespace internal {
struct StagedAccess;
struct PublicationAccess;
struct StoreRuntimeAccess;
class ActorRuntime;
}  // namespace internal

/// A volume as a placement strategy sees it.
struct VolumeDesc {
  std::string volume_id;
  std::string host;
  int local_rank = -1;  ///< the local rank hosting it; -1 for the server's volumes
};

/// A client as a placement strategy sees it.
struct ClientDesc {
  int rank = 0;
  int local_rank = 0;
  std::string host;
};

/// A user-defined strategy: a built-in placement decides which processes
/// host volumes (connecting processes follow it), and `select` decides which
/// of the live volumes each client writes to. `select` runs in the store's
/// strategy actor, one call at a time, on the process that created the
/// store; it must not block.
struct CustomStrategy {
  /// A built-in strategy name whose volume placement to use.
  std::string placement = "controller_colocated";
  /// The volume id for `client` among `volumes` (registration order), or an
  /// error (Errc::unavailable when none fits yet: the client retries).
  std::function<Result<std::string>(const ClientDesc& client,
                                    const std::vector<VolumeDesc>& volumes)>
      select;
};

/// Where a store's volumes go, and who this process is to its strategy
/// (StoreOptions::placement).
struct StorePlacement {
  /// Placement strategy of a store this process creates (embedded, rank 0,
  /// meshstore serve): "singleton", "controller_colocated", "per_host" or
  /// "per_local_rank" (docs/meshes.md). A connecting process follows the
  /// strategy of the store it connects to.
  std::string strategy = "singleton";
  /// A user-defined strategy; when its `select` is set it replaces
  /// `strategy` (examples/strategies/custom_strategy.cpp).
  CustomStrategy custom_strategy;
  /// Volumes the server hosts under "controller_colocated" (1 to 1024);
  /// the other strategies place their volumes themselves.
  int num_volumes = 1;
  /// This process's rank (what the strategy sees).
  int rank = 0;
  /// This process's rank on its host; -1 when it is not a rank (a
  /// standalone server or a tool), so no per-rank volume is placed here.
  int local_rank = 0;
  /// This process's host identity for placement; empty = MESHSTORE_HOST,
  /// else the hostname.
  std::string host;
  /// Store::connect(): host the volumes the store's strategy places in this
  /// process (per_host, per_local_rank). Tools that only look set false.
  bool host_volumes = true;
};

/// How this process's clients and volumes move bytes
/// (StoreOptions::transport).
struct StoreTransport {
  /// Force a transport by name ("shm", "cma", "rdma", "tcp", "rpc"); empty =
  /// MESHSTORE_TRANSPORT, else the best one for each client-volume pair
  /// (shm, else cma, on one host; rdma, else tcp, across hosts; rpc as the
  /// fallback). A forced transport that cannot serve a pair is an error,
  /// never a fallback; one that cannot run here (rdma without a device) is
  /// Errc::unsupported at the store's start.
  std::string name;
  /// tcp: connections per client-volume pair, in [1, 16].
  int tcp_streams = 2;
  /// tcp: bytes per request on one connection, in [64 KiB, 1 GiB].
  std::size_t tcp_chunk_bytes = std::size_t{16} << 20;
  /// shm: segments a client keeps mapped per volume it talks to (least
  /// recently used go first), in [1, 60000]. Each mapping counts against
  /// vm.max_map_count (65530).
  int shm_max_mappings = 4096;
  /// Volumes of this process keep their bytes in shared memory (/dev/shm),
  /// so same-host clients reach them through the shm transport. false keeps
  /// them in process memory and offers no shm (for hosts or containers whose
  /// /dev/shm is small: Docker's default is 64 MiB); clients then use tcp.
  bool shared_memory_volumes = true;
  /// Largest rpc chunk (one actor message), in [4 KiB, 1 GiB].
  std::size_t rpc_chunk_bytes = std::size_t{64} << 20;
  /// rpc chunks in flight per transfer, in [1, 64].
  int rpc_chunks_in_flight = 4;
  /// How long a channel's waiting end spins before it sleeps
  /// (in [0, 1 s]): on a shm ring (then a futex) the volume's small-op
  /// service between requests and a caller waiting for its answer; on a tcp
  /// small-operations connection (then recv) the volume's end between
  /// requests and the caller's after sending one. Longer spins answer a
  /// request that follows soon without a wake-up (tens of microseconds on
  /// a busy 2-core VM) at the cost of a core busy that long after each
  /// request; 0 never spins. Applies to the channels this process's
  /// clients open and those its volumes serve. Store::from_env takes
  /// MESHSTORE_FAST_PATH_SPIN_US.
  std::chrono::microseconds fast_path_spin{50};
};

/// How much the volumes hold and how long calls wait
/// (StoreOptions::limits).
struct StoreLimits {
  /// Bytes each volume may hold; 0 = unlimited. A put that does not fit
  /// fails with Errc::out_of_capacity and stores nothing (unless eviction).
  std::uint64_t volume_capacity_bytes = 0;
  /// What a full volume does with a put: "none" refuses it
  /// (Errc::out_of_capacity); "lru" first removes the least recently used
  /// keys stored whole on that volume and put on their own (not state
  /// dicts, not shards, not pinned by a reader that lost a race, not held
  /// by a reader's lease such as a live view, ReadOptions::view), then stages again: a
  /// cache-style store (docs/reliability.md, "Eviction").
  /// Recency is what the controller sees: puts and locates, not reads a
  /// client serves from its location cache.
  std::string eviction = "none";
  /// Memory each volume keeps, once released (a replaced or retired
  /// version), for the next objects of the same sizes: a state dict
  /// published every step then reuses the same segments. Up to this many
  /// bytes per volume; 0 keeps none.
  std::uint64_t volume_pool_bytes = std::uint64_t{8} << 30;
  /// Deadline of every control request (and every rpc chunk).
  std::chrono::milliseconds request_timeout{30000};
  /// Store::connect(): keep retrying an unreachable store this long.
  std::chrono::milliseconds connect_timeout{30000};
  /// Actor scheduler threads; 0 = max(2, the CPUs the process may run on) capped at 8.
  int scheduler_threads = 0;
};

/// Who may connect, and what is encrypted (StoreOptions::security;
/// docs/security.md).
struct StoreSecurity {
  /// Mutual TLS for the store's port and its connections (docs/security.md):
  /// a store that listens with TLS refuses every peer without a certificate
  /// tls.ca_file signed; a connecting process needs the same CA. The data
  /// plane's secrets then travel only over authenticated connections.
  /// Store::from_env takes MESHSTORE_TLS_* when unset.
  TlsOptions tls;
  /// tcp: the volumes this process hosts encrypt and authenticate every
  /// byte of their tcp connections (AES-256-GCM under a key handed to
  /// clients over the control plane) and refuse clients that do not;
  /// clients follow each volume. Costs CPU (docs/security.md, "Encrypted
  /// tcp"); protects only with `tls` set, which keeps the key secret.
  /// Store::from_env and meshstore serve turn it on when
  /// MESHSTORE_ENCRYPT_TCP=1.
  bool encrypt_tcp = false;
};

/// How a store is built, in four parts and two settings of its own. Every
/// field is validated by Store::embedded(), connect() and from_env().
struct StoreOptions {
  StorePlacement placement;
  StoreTransport transport;
  StoreLimits limits;
  StoreSecurity security;
  /// Publish this store on "HOST:PORT" (port 0 picks a free one) so other
  /// processes can Store::connect() to it; empty = private to this process.
  /// Binds exactly HOST: keep 127.0.0.1 unless other hosts must reach it.
  std::string listen;
  /// Log level (trace, debug, info, warn, error, critical, off); empty
  /// keeps MESHSTORE_LOG_LEVEL or the default "warn".
  std::string log_level;

  /// Checks every field; Errc::invalid_argument names the bad one.
  Status validate() const;
};

/// The port `meshstore serve` listens on and the tools dial by default.
constexpr std::uint16_t kDefaultStorePort = 29517;

/// How get() and get_into() read a key. The defaults read the whole key,
/// by copy, in its stored dtype.
struct ReadOptions {
  /// Read only this box of the key's global tensor (sharded or not), from
  /// the shards that overlap it, each once (docs/sharding.md): get()
  /// answers a tensor of the box's shape, and get_into()'s destination
  /// must have it. Errc::out_of_range when the box is not in the key's
  /// global shape.
  std::optional<TensorSlice> slice;
  /// get_into() only: when the destination's dtype differs from the stored
  /// one, convert the elements on the way, in the same pass as the copy:
  /// between float32 and bfloat16 or float16 (can_cast()), rounded to
  /// nearest even (bit-exact with torch's Tensor.to()). Whole keys (and
  /// state-dict entries) into host memory; a box, a sharded key or a GPU
  /// destination is Errc::unsupported (a dtype_mismatch for state-dict
  /// entries). Without it a dtype difference is Errc::dtype_mismatch.
  bool cast = false;
  /// get() only: read without copying where it can. On a volume this
  /// process reaches through shared memory (the shm transport), the tensor
  /// is a read-only mapping of the stored bytes (Tensor::read_only() is
  /// true; writing through it faults), and it keeps that version pinned in
  /// the volume until its last copy is destroyed, even if the key is
  /// replaced or removed meanwhile (the memory is then freed). Elsewhere,
  /// and for small tensors that travel inline, it is a copy. The tensor may
  /// outlive the store. Not with a slice.
  bool view = false;

  /// Shorthands: get(key, ReadOptions::box(s)), get(key,
  /// ReadOptions::mapped()), get_into(key, dst, ReadOptions::converting()).
  static ReadOptions box(TensorSlice s) {
    ReadOptions o;
    o.slice = std::move(s);
    return o;
  }
  static ReadOptions mapped() {
    ReadOptions o;
    o.view = true;
    return o;
  }
  static ReadOptions converting() {
    ReadOptions o;
    o.cast = true;
    return o;
  }
};

/// How put() stores a tensor: whole (the default), or as one shard of a
/// sharded key (docs/sharding.md). Every rank puts its own shard; the key
/// becomes visible, with all its shards at once, when they cover the global
/// tensor. Until then exists() is false and get() fails with
/// Errc::partially_committed naming the regions still missing. Ranks
/// disagreeing on the global shape or dtype, and boxes that overlap without
/// being identical, are refused. The next complete set of shards replaces
/// the key as a whole. At most one of `slice` and `placement`.
struct PutOptions {
  /// The tensor is the box `slice` of the key's global tensor
  /// (Placement::slice_for gives a rank's box); its shape must be the
  /// slice's. A box put this way has one copy per version: put it again
  /// before the version is complete and it is refused (replicated boxes:
  /// use `placement`).
  std::optional<TensorSlice> slice;
  /// The tensor is rank `rank`'s shard under `placement` of a tensor of
  /// `global_shape`: its box is placement.slice_for(global_shape, rank),
  /// and it counts as many replicas as ranks hold that box, so the version
  /// commits once every replica is in (a replica put again for the same
  /// version is refused, not taken for the next one).
  std::optional<Placement> placement;
  Shape global_shape;     ///< with `placement`: the key's global shape
  std::int64_t rank = 0;  ///< with `placement`: the putting rank

  /// Shorthands: put(key, shard, PutOptions::box(s)), put(key, shard,
  /// PutOptions::shard(global_shape, placement, rank)).
  static PutOptions box(TensorSlice s) {
    PutOptions o;
    o.slice = std::move(s);
    return o;
  }
  static PutOptions shard(Shape global_shape, Placement placement, std::int64_t rank) {
    PutOptions o;
    o.placement = std::move(placement);
    o.global_shape = std::move(global_shape);
    o.rank = rank;
    return o;
  }
};

/// A key's metadata, as list() reports it.
struct KeyInfo {
  std::string key;
  bool is_object = false;                            ///< a byte object (put_object), not a tensor
  ObjectFormat object_format = ObjectFormat::bytes;  ///< an object's format
  DType dtype = DType::uint8;
  Shape shape;
  std::uint64_t nbytes = 0;
  std::uint64_t version = 0;  ///< store-wide commit sequence number of its current value
  std::size_t shards = 0;
};

/// A byte object with its format, as get_stored_object() answers it.
struct StoredObject {
  std::string bytes;
  ObjectFormat format = ObjectFormat::bytes;
};

/// One volume's usage, as stats() reports it.
struct VolumeStats {
  std::string volume_id;
  std::uint64_t bytes_held = 0;      ///< payload bytes in memory, staged and leased included
  std::uint64_t capacity_bytes = 0;  ///< 0 = unlimited
  std::uint64_t objects = 0;         ///< committed objects
  std::uint64_t staged = 0;          ///< objects of puts still in flight
  std::uint64_t leases = 0;          ///< open read leases
  /// Why the volume did not answer ("" when it did; the counts are then
  /// zero): one the controller still lists that is gone or cut off.
  std::string unreachable;
};

/// Control messages the store's controller has handled since it started:
/// how many round trips to it the calls cost (a state dict's put commits with
/// one notify_put_batch, whatever its size).
struct ControllerCounters {
  std::uint64_t notify_put = 0;
  std::uint64_t notify_put_batch = 0;
  std::uint64_t locate = 0;
  std::uint64_t exists = 0;
  std::uint64_t keys = 0;
  std::uint64_t remove = 0;   ///< remove, remove_batch, replacing a state dict, retiring a version
  std::uint64_t streams = 0;  ///< state dict puts readers could stream
  std::uint64_t stream_readers = 0;     ///< reads that streamed one (overlapping its put)
  std::uint64_t stream_subscribes = 0;  ///< reads that waited for or looked for a stream
  /// Reads that lost the race to a writer (the version they located was
  /// replaced before they opened it) and then located with a pin, which
  /// holds the located version's memory until they have read it.
  std::uint64_t pinned_locates = 0;
};

/// What this process's calls on the caller's thread did: each client keeps
/// a channel to each volume it reaches (a shared-memory ring over shm, a
/// connection of its own over tcp, actor messages over the other
/// transports) and runs calls over it (docs/architecture.md, "Data path").
struct FastPathStats {
  /// Gets served on the caller's thread: over a ring, or straight from
  /// shared memory (direct_reads).
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;  ///< gets that took the actor path (location unknown, no ring, ...)
  std::uint64_t stale = 0;   ///< gets whose known location was superseded: located afresh
  std::uint64_t rings = 0;   ///< channels open now, one per volume reached: a ring (shm),
                             ///< a tcp connection (tcp), actor messages (other transports)
  /// Puts committed over a channel (a put_batch counts once; a shard of a
  /// sharded key counts as one), and the pointer moves of publishes that
  /// read the pointer through the actors or were staged (stage_publish),
  /// which take the channel from the client's waiting thread.
  std::uint64_t puts = 0;
  /// Reads of objects on a volume of this host whose place this client
  /// knew (its own puts, earlier leases), copied straight from shared
  /// memory without asking the volume, and checked after the copy by the
  /// object's tag (docs/architecture.md, "Lease-free reads").
  std::uint64_t lease_free_reads = 0;
  /// Lease-free reads that found their object replaced, removed or changing:
  /// read again the leased way (never returned).
  std::uint64_t lease_free_stale = 0;
  /// Hits that were lease-free reads on the caller's thread: a whole key of
  /// at most 8 MiB whose place this client knew, copied straight out of a
  /// same-host volume's shared memory without a ring or an actor (counted
  /// in lease_free_reads too; docs/architecture.md, "Direct reads").
  std::uint64_t direct_reads = 0;
  /// State-dict reads (StateDicts::get_into and the version reads into
  /// tensors) served the same way as one snapshot, on the caller's thread
  /// (a version read: on the thread that got the pointer's locate):
  /// the manifest and every bucket copied straight out of same-host
  /// volumes' shared memory, checked by their tags before the first copy
  /// and after the last (docs/architecture.md, "Direct state-dict reads").
  std::uint64_t direct_state_dicts = 0;
  /// State dicts committed over a channel: StateDicts::put calls (written
  /// into objects the volume staged for this client, or sent inline),
  /// publishes' versions, each rank's part of StateDicts::put_sharded, and
  /// staged state dicts' commits (docs/architecture.md, "State dict puts
  /// on the caller's thread").
  std::uint64_t state_dict_puts = 0;
  /// Commits sent again, with their ids, over a new connection after
  /// their channel failed with them on their way (tcp): the volume answers
  /// each what it did with the first, or does it then, once
  /// (docs/architecture.md, "A commit sent again").
  std::uint64_t resent_commits = 0;
};

/// How Store::StateDicts::put, put_sharded, publish and stage store a
/// state dict.
struct StateDictPutOptions {
  /// Tensors of at most this many bytes are packed into one blob (one
  /// object, one transfer) with a table of where each lies; larger ones are
  /// stored one object each. Many small tensors then cost one transfer, not
  /// one each. 0 packs none; UINT64_MAX packs the whole state dict.
  std::uint64_t pack_max_tensor_bytes = std::uint64_t{64} << 10;
  /// Packed tensors go into buckets of at most this many bytes (a tensor
  /// larger than that gets a bucket of its own), each one object: buckets
  /// move in parallel, and a streaming reader starts on each as soon as it
  /// is written. 0 = one bucket for the whole state dict.
  std::uint64_t pack_bucket_bytes = 0;
  /// When set (bfloat16 or float16), float32 tensors are stored in this
  /// dtype, rounded to nearest even (fp32 master weights published as bf16:
  /// half the bytes to move). Readers see the stored dtype. Other dtypes are
  /// stored as they are.
  std::optional<DType> transfer_dtype;
};

/// How Store::StateDicts reads a state dict into the caller's tensors
/// (get_into, get_latest_into, get_next_into).
struct StateDictReadOptions {
  /// An entry stored as float32, bfloat16 or float16 may be read into a
  /// host tensor of another of them (a bf16 version into fp32 buffers),
  /// converted as it is copied (rounded to nearest even), in the same pass
  /// (ReadOptions::cast). A version that needs a conversion is read once
  /// committed rather than streamed. Not with `boxes`.
  bool cast = false;
  /// get_into only: for an entry named here, the destination receives that
  /// box of the stored global tensor (Placement::slice_for gives a rank's),
  /// read from only the shards that overlap it; the others receive the
  /// whole entry. Works for any stored state dict, sharded or not, so a
  /// mesh reads what another mesh put under a different sharding.
  /// Errc::shape_mismatch when a box is not in its entry's global shape or
  /// the destination's shape is not the box's.
  std::map<std::string, TensorSlice> boxes;

  /// Shorthands: get_into(key, sd, StateDictReadOptions::converting()),
  /// get_into(key, sd, StateDictReadOptions::of_boxes(boxes)).
  static StateDictReadOptions converting() {
    StateDictReadOptions o;
    o.cast = true;
    return o;
  }
  static StateDictReadOptions of_boxes(std::map<std::string, TensorSlice> boxes) {
    StateDictReadOptions o;
    o.boxes = std::move(boxes);
    return o;
  }
};

/// A tensor a writer fills in place: what StateDicts::stage allocates.
struct TensorSpec {
  std::string name;
  DType dtype = DType::float32;
  Shape shape;
};

/// A state dict whose tensors were allocated by the store, to be filled in
/// place and committed (zero-copy publishing; docs/state_dicts.md). On a
/// volume this process reaches through shared memory, the tensors *are* the
/// volume's memory: commit() moves no tensor byte. Elsewhere they are
/// private buffers and commit() puts them as StateDicts::put does.
///
/// A handle: copies share one staged state dict. When the last copy goes
/// before commit(), the memory is given back (abort()); the future
/// StateDicts::stage answered holds a copy too, which the store's thread
/// that completed it lets go a moment later, so the memory of a staging
/// dropped at once comes back on that thread (call abort() to have it
/// back before it returns). Thread-compatible:
/// fill disjoint tensors from any threads, but call commit() and abort()
/// from one.
class StagedStateDict {
 public:
  /// An empty handle (every call fails or is empty).
  StagedStateDict();
  ~StagedStateDict();
  StagedStateDict(const StagedStateDict&);
  StagedStateDict& operator=(const StagedStateDict&);
  StagedStateDict(StagedStateDict&&) noexcept;
  StagedStateDict& operator=(StagedStateDict&&) noexcept;

  /// The entries: one tensor per TensorSpec, in order, writable, with
  /// uninitialised contents (the memory of a retired version, perhaps).
  /// Values (step counters, ...) may be inserted before commit(); tensors
  /// may not. After commit() the tensors are the stored version: readers see
  /// every byte, so they must not be written again.
  StateDict& state_dict();
  /// The key the state dict commits under ("PREFIX/vN" for stage_publish).
  const std::string& key() const;
  /// True when the tensors are the volume's shared memory.
  bool zero_copy() const noexcept;
  /// Makes the state dict visible as a whole, exactly as StateDicts::put
  /// would (names the previous version had and this one lacks go). Answers
  /// the version number for stage_publish, 0 for stage. Once
  /// only: a second call is Errc::invalid_argument. If the commit fails, the
  /// memory is given back and nothing changed.
  Future<std::uint64_t> commit();
  /// Gives the memory back uncommitted; the tensors must not be touched
  /// afterwards. Idempotent; nothing after commit().
  void abort();

 private:
  friend struct internal::StagedAccess;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// How publish() moves a state dict's bytes (docs/state_dicts.md, "Direct
/// publishing"). The third way, in place, is stage_publish: the tensors are
/// the volume's memory from the start.
enum class PublishMode : std::uint8_t {
  /// The store picks: direct where this process can lend its tensors
  /// (host memory, no transfer_dtype cast, no forced transport that cannot
  /// serve lent memory, at least one tensor large enough to be stored on its
  /// own), by copy otherwise.
  automatic = 0,
  /// Copied into volume memory: the tensors are
  /// the caller's again once the future completes.
  copy = 1,
  /// Lent: the large, contiguous tensors become the version's objects as
  /// they are, served from this process (cma on this host, tcp or rdma
  /// across hosts) until the Publication is reclaimed or the version
  /// retired; readers copy straight out of them, the one copy end to end.
  /// Small tensors (packed) and strided ones are copied as by `copy`.
  direct = 2,
};

/// "automatic", "copy" or "direct".
const char* publish_mode_name(PublishMode mode) noexcept;

/// How publish() stores a version.
struct PublishOptions {
  PublishMode mode = PublishMode::automatic;
  /// Versions kept readable (>= 1); publishing retires the one that falls
  /// out, and a retired direct version gives its buffers back.
  int keep = 1;
  /// Packing, buckets, transfer_dtype (which forces a copy: direct mode
  /// refuses it with Errc::invalid_argument).
  StateDictPutOptions put;
  /// Publication::reclaim() copies the version into volume memory before it
  /// gives the buffers back, so readers arriving later still find it;
  /// without it the version is withdrawn and later readers wait for the
  /// next one (StateDicts::get_next_into).
  bool retain = false;
  /// How long reclaim() waits for reads still copying out of the buffers
  /// (> 0); after it, reclaim() fails with Errc::timeout and the buffers
  /// stay lent, unless revoke_on_timeout.
  std::chrono::milliseconds reclaim_timeout{30000};
  /// reclaim() revokes the loan once reclaim_timeout has passed: readers
  /// still copying out of the buffers lose their leases, their copies do
  /// not count (such a read locates the key again: it finds the retained
  /// copy, or the version gone), and the buffers are the caller's once the
  /// transfers the lending volume serves itself (tcp sends in flight, which
  /// the revoke interrupts) end, within reclaim_timeout again but at least
  /// 1 s (else Errc::timeout). Readers never see a
  /// torn value either way.
  bool revoke_on_timeout = false;

  /// A version by copy keeping the newest `keep`, packed as `put` says:
  /// publish(prefix, sd, PublishOptions::by_copy()).
  static PublishOptions by_copy(int keep = 1, StateDictPutOptions put = {}) {
    PublishOptions o;
    o.mode = PublishMode::copy;
    o.keep = keep;
    o.put = std::move(put);
    return o;
  }
};

/// A published version (Store::StateDicts::publish). A handle: copies share it. For a
/// direct version, it says when the caller's tensors are its own again:
/// until returned() completes, readers may be copying out of them, so the
/// caller must neither write nor free them. The trainer's loop is
/// `pub = store.publish(...).get(); ...; pub.reclaim().get(); optimizer.step();`.
class Publication {
 public:
  /// An empty handle (version 0; reclaim() fails).
  Publication();
  /// The version number N ("PREFIX/vN").
  std::uint64_t version() const noexcept;
  /// How it was published: copy or direct (never automatic).
  PublishMode mode() const noexcept;
  /// Bytes lent (0 for a copy).
  std::uint64_t lent_bytes() const noexcept;
  /// Completes when the store no longer reads the caller's tensors: at
  /// once for a copy; for a direct version once it was reclaimed or retired
  /// (a later publish) and the last read in flight finished, or the store
  /// closed.
  Future<void> returned() const;
  /// Ends the loan now: with PublishOptions::retain, copies the version into
  /// volume memory first (if it is still published), else withdraws it;
  /// then waits up to reclaim_timeout for reads in flight (returned()).
  /// Errc::timeout when readers still hold the buffers after that (they
  /// stay lent; call reclaim() again, or wait on returned()), unless
  /// PublishOptions::revoke_on_timeout, which then revokes the loan. Calls
  /// after one that is running or succeeded share its future.
  Future<void> reclaim();

 private:
  friend struct internal::PublicationAccess;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

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
  /// client actors on a private actor system. Fails with
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

  Store(Store&&) noexcept;
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
  static Result<Store> connect_on(std::shared_ptr<internal::ActorRuntime> runtime,
                                  const std::string& address, StoreOptions options);
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
  /// nothing of its version stays (docs/state_dicts.md, "Two writers on
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
