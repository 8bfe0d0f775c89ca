#pragma once

// The client actor: one per Store. It turns facade calls into the store's
// protocol (strategy -> stage -> transport -> commit; locate -> lease ->
// transport), runs transfers in parallel, and caches volume connections and
// key locations. Its messages carry promises, so they are local-only.

#include <caf/all.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshstore/future.hpp"
#include "meshstore/internal/call_guard.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/protocol/strategy_actor.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"
#include "meshstore/transports/copy_engine.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::client {

/// An object assembled from pieces of host memory as it is written (a state
/// dict's packed bucket): each piece's `nbytes` at `src` land at `offset`
/// of the object; the bytes between pieces are zeros. Where the transport
/// maps the volume's memory the pieces are copied straight into it (one
/// copy); elsewhere they are packed into a scratch buffer, then written.
struct Gather {
  struct Piece {
    const std::byte* src = nullptr;
    std::uint64_t offset = 0;
    std::uint64_t nbytes = 0;
  };
  std::vector<Piece> pieces;  // in increasing offset, not overlapping
  /// Keeps what the pieces point into alive (converted copies).
  std::vector<std::shared_ptr<const void>> keep;
};

/// Copies `g` into `dst`, an object of `n` bytes (zeros between the
/// pieces), on the calling thread. Errc::invalid_argument (nothing
/// written) when the pieces are out of order or leave the object.
Status fill_gathered_now(const Gather& g, std::byte* dst, std::uint64_t n);
/// fill_gathered_now with the calling thread copying one share and waiting
/// for the copy engine's threads to copy the others (split when large).
Status fill_gathered_here(const Gather& g, std::byte* dst, std::uint64_t n);

/// Where the bytes of one object of a read go, piece by piece (a state
/// dict's packed bucket unpacked into the caller's tensors): each piece
/// copies `nbytes` at `offset` of the object to `dst` (host memory). Where
/// the transport maps the volume's memory they are copied straight out of
/// it (one copy); elsewhere the object is read into a scratch buffer first.
struct Scatter {
  struct Piece {
    std::uint64_t offset = 0;
    std::byte* dst = nullptr;
    std::uint64_t nbytes = 0;
  };
  std::vector<Piece> pieces;
};

/// Copies the pieces of `s` out of `src`, an object of `n` bytes, on the
/// copy engine's threads, split over them when large. Errc::out_of_range
/// (nothing copied) when a piece leaves the object. `s` and `src` stay
/// alive until it completes.
Future<void> scatter_from(std::shared_ptr<const Scatter> s, std::shared_ptr<const std::byte> src,
                          std::uint64_t n);
/// scatter_from on the calling thread.
Status scatter_now(const Scatter& s, const std::byte* src, std::uint64_t n);
/// Appends the pieces of `s` out of `src`, an object of `n` bytes, to
/// `copies`, for one CopyEngine::copy_all_here with the copies of other
/// objects. Errc::out_of_range (nothing appended) when a piece leaves the
/// object.
Status scatter_copies(const Scatter& s, const std::byte* src, std::uint64_t n,
                      std::vector<transports::CopyEngine::Copy>* copies);

/// One tensor (or object) of a put.
struct PutItem {
  std::string key;
  TensorView view;
  wire::ObjectKind kind = wire::ObjectKind::tensor;
  /// Keeps the bytes the item owns alive while they move (put_object, a
  /// packed bucket, a cast copy).
  std::shared_ptr<const void> owned_bytes;
  /// A shard: `view` is this box of the key's global tensor. The key
  /// commits once its shards cover the tensor (the controller's put_shards).
  std::optional<TensorSlice> slice = std::nullopt;
  /// With `slice`: the copies of this box one version gets (replicas).
  std::uint32_t replicas = 1;
  /// Volumes that keep a key put whole (KeyRecord::copies; 0: the
  /// store's default).
  std::uint32_t copies = 0;
  /// With replicas > 1: content_checksum() of the bytes (0 = none).
  std::uint64_t checksum = 0;
  /// An object's format (kind object only).
  ObjectFormat object_format = ObjectFormat::bytes;
  /// The commit's precondition on this key (KeyRecord::expect_version).
  std::optional<std::uint64_t> expect_version = std::nullopt;
  /// A version pointer: the version it names (KeyRecord::points_to).
  std::uint64_t points_to = 0;
  /// Set: the object's bytes are these pieces (`view` is then a uint8 view
  /// of the object's size with no data), assembled as they are written.
  std::shared_ptr<const Gather> gather = nullptr;
};

/// Regions staged at the client's volume and mapped writable into this
/// process (zero-copy publishing, stage_over_channel): the caller fills
/// them in place and commits them as a StateDictPut's InPlace items.
struct StagedRegions {
  std::string volume_id;
  std::vector<wire::RegionRef> regions;
  std::vector<std::shared_ptr<std::byte>> memory;  // one writable mapping per region
};

/// Direct publishing: whole, contiguous host tensors of this process lent
/// to `lend_to` (this process's lending volume, id `volume`) as they are,
/// committed with the rest of a state dict's put and never copied. `token`
/// is what their regions keep until the last reader lets go
/// (LendRequest). If the put fails they are given back.
struct Loan {
  std::vector<PutItem> items;
  /// Per item, when it lies in a named file of /dev/shm: the file and the
  /// offset in it (LentBuffer::segment); empty when none does.
  std::vector<std::string> segments;
  std::vector<std::uint64_t> offsets;
  protocol::storage_volume_actor lend_to;
  std::string volume;
  std::shared_ptr<const void> token;
  /// Nonzero: the publisher may revoke the loan (LendRequest::revocable).
  std::uint64_t revocable = 0;
};

/// Items already written in place into objects staged for this client
/// (`staged`, one region each, in order; a staged state dict's commit):
/// committed with the put's items, moved by nobody. If the commit is
/// refused, their regions go back.
struct InPlace {
  std::vector<PutItem> items;
  StagedRegions staged;
};

/// A rank's part of a sharded state dict: every key of it (sorted;
/// committed together by put_shards once all are covered) and the digest
/// of its layout.
struct ShardGroup {
  std::vector<std::string> members;
  std::uint64_t layout = 0;
};

/// A state dict's put: its items, committed as the state dict `under`
/// (the commit also removes every other key of the state dict it
/// replaces, replace_atom), and what its kind adds: objects written in
/// place, a loan (direct publishing), or one rank's part of a sharded
/// state dict.
struct StateDictPut {
  std::string op;  // the call, for messages
  std::vector<PutItem> items;
  std::string under;  // "" until the put is named (state_dicts::name_put)
  /// The manifest's bytes, to announce the put as a stream of `under`
  /// (readers copy each object as soon as it is filled). Empty: no stream.
  std::string stream_manifest;
  std::optional<InPlace> in_place;
  std::optional<Loan> loan;
  std::optional<ShardGroup> group;
};

/// tensor: a new Tensor; into: the caller's buffers; object: bytes; view:
/// read-only tensors over the volume's shared memory where the transport
/// can map it (a copy otherwise), each pinning its version while it lives.
enum class GetMode { tensor, into, object, view };

struct GetOutput {
  std::vector<Tensor> tensors;                       // GetMode::tensor and GetMode::view
  std::string object;                                // GetMode::object
  ObjectFormat object_format = ObjectFormat::bytes;  // GetMode::object
  std::uint64_t version = 0;                         // GetMode::object: the key's version
};

struct GetCall {
  std::string op;
  GetMode mode = GetMode::tensor;
  std::vector<std::string> keys;
  std::vector<TensorView> dsts;  // GetMode::into, one per key
  /// Per key, the box to read (empty, or nullopt: the whole tensor). Boxes
  /// and sharded keys are read shard by shard and assembled.
  std::vector<std::optional<TensorSlice>> slices;
  /// Per key (GetMode::into; empty or null: none): the object's bytes go
  /// to these pieces instead of a destination (whose `dsts` entry is then
  /// a uint8 view of the object's size with no data, for the checks).
  std::vector<std::shared_ptr<const Scatter>> scatters;
  /// Locate at the controller even when every key's location is cached.
  /// For version pointers: a cached location may name an object a newer
  /// put replaced that its volume has not released yet, so a reader could
  /// see version N and then N - 1; the controller's answer never goes back.
  bool fresh = false;
  /// GetMode::into: a destination of another float dtype than the key's
  /// gets the elements converted as they are copied (ReadOptions::cast).
  bool cast = false;
  /// A cancellable call's guard (null: not cancellable): the destinations
  /// (GetMode::into) are written only inside its entries.
  std::shared_ptr<internal::CallGuard> guard;
  std::shared_ptr<Promise<GetOutput>> promise;
};

/// Waits up to `wait` for state dict `key` to be written or committed. If it
/// is being written, `plan` gets the manifest's bytes and the records the
/// writer will commit and answers one destination per record (a null view:
/// not read); each record is then read into its destination as soon as the
/// writer has filled it, and the call answers StreamKind::streaming once
/// the version committed and every read finished. It answers
/// StreamKind::committed, having read nothing, when `key` was committed
/// without a stream to follow (read it as usual), and fails with
/// Errc::timeout when nothing happened in time, Errc::unavailable when the
/// writer failed before its commit (the destinations then hold part of it).
struct StreamCall {
  std::string op;
  std::string key;
  std::chrono::milliseconds wait{0};
  std::function<Result<std::vector<TensorView>>(const std::string& manifest,
                                                const std::vector<wire::KeyRecord>& records)>
      plan;
  std::shared_ptr<Promise<std::uint32_t>> promise;
};

struct KeysCall {
  std::string prefix;
  std::shared_ptr<Promise<std::vector<std::string>>> promise;
};

/// keys(prefix) with each key's record (metadata and placement).
struct ListCall {
  std::string prefix;
  std::shared_ptr<Promise<std::vector<wire::KeyRecord>>> promise;
};

/// The version pointer P's record (version 0: no such key), located at the
/// controller; with `with_version`, the records of the version it names are
/// cached too, for the read that follows (controller's locate_latest).
struct LatestCall {
  std::string prefix;
  bool with_version = false;
  std::shared_ptr<Promise<wire::KeyRecord>> promise;
};

struct ExistsCall {
  std::vector<std::string> keys;
  std::shared_ptr<Promise<std::vector<std::uint64_t>>> promise;
};

struct RemoveCall {
  std::vector<std::string> keys;
  bool single = false;  // remove(): a missing key is an error
  bool under = false;   // keys are prefixes: remove each and everything under it
  bool reuse = false;   // with under: the volumes keep the memory (a retired version)
  std::shared_ptr<Promise<std::size_t>> promise;
};

struct CountersCall {
  std::shared_ptr<Promise<std::vector<std::uint64_t>>> promise;
};

/// One volume's stat, or why it did not answer (Store::Admin::stats).
struct VolumeStatReply {
  wire::VolumeStat stat;    ///< its volume_id set either way
  std::string unreachable;  ///< "" when it answered
};

struct StatCall {
  std::shared_ptr<Promise<std::vector<VolumeStatReply>>> promise;
};

/// What a client is created with.
class FastPath;

struct ClientConfig {
  wire::ClientInfo me;
  /// Force this transport for every volume ("" = best available).
  std::string forced_transport;
  transports::TransportConfig transport_config;
  std::chrono::milliseconds request_timeout{30000};
  /// Reads retried after a concurrent overwrite released what they located.
  int max_read_attempts = 8;
  /// Key locations cached at most (the cache is dropped when full).
  std::size_t max_cached_locations = 1 << 16;
  /// StoreOptions::limits.eviction "lru": a put refused for capacity evicts the
  /// least recently used keys on its volume and stages again, once.
  bool evict_lru = false;
  /// The client's channels and location cache, shared with the Store
  /// facade, which runs calls over them on the caller's thread; null: the
  /// client makes its own. The client opens a channel to each volume it
  /// reaches.
  std::shared_ptr<FastPath> fast_path;
  /// How long the fast path's rings this client opens spin before their
  /// waiting end sleeps (StoreOptions::transport.fast_path_spin).
  std::chrono::microseconds ring_spin{50};
  /// Called (on the client actor's thread) when the controller or the
  /// strategy goes down, with why: the store then reconnects to a
  /// restarted server (store/reconnect.cpp) and sends the client
  /// (reconnected_atom, controller, strategy). Null: calls fail for good.
  std::function<void(const std::string&)> on_control_down;
  /// The controller stops in order only when its store closes (a store
  /// whose ProcMesh restarts its controller): no reconnecting then.
  bool orderly_stop_closes = false;
};

/// The store gave up reconnecting (`why`): the client's calls waiting for
/// it fail, and later ones at once.
void reconnect_failed(const caf::actor& client, const std::string& why);

/// Spawns a client actor bound to a controller and strategy.
caf::actor spawn_client(caf::actor_system& sys, ClientConfig config,
                        protocol::controller_actor controller, protocol::strategy_actor strategy);

/// Direct publishing: lends `loan`'s items to its lending volume
/// (Loan::lend_to, in this process) through the client actor at `client`,
/// waiting at most `timeout`: the objects the volume made of them, in
/// order (the loan's token goes with them). Only for threads other than
/// the client actor's (the fast path's waiting thread). Errc::internal for
/// items that cannot be lent (not whole, contiguous and non-empty); the
/// volume's refusal; nothing is lent then.
Result<std::vector<wire::RegionRef>> lend_items(const caf::actor_addr& client, Loan& loan,
                                                std::chrono::milliseconds timeout);
/// Gives lent objects `lent` back to `loan`'s lending volume (a put that
/// did not commit them): their memory returns to the publisher once no
/// reader holds it. Fire and forget.
void give_back_lent(const caf::actor_addr& client, const Loan& loan,
                    const std::vector<wire::RegionRef>& lent);

}  // namespace meshstore::client

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::client::StreamCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::client::GetCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::client::KeysCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::client::ListCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::client::LatestCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::client::ExistsCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::client::RemoveCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::client::StatCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::client::CountersCall)
