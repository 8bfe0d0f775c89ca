#pragma once

// The storage volume's typed interface. A volume holds payload bytes as
// objects, each in one memory region that its transport servers expose.
// Objects are immutable once written: a put stages a new object, the
// controller's commit makes it part of a key, and the controller releases
// the object a newer version (or a remove) replaced. Readers pin objects
// with a read lease, so a region never goes away under a reader.

#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/protocol/atoms.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/status.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::protocol {

/// One buffer a publisher lends (direct publishing): memory of the
/// publisher's own process, at `address`, that becomes an object as it is.
struct LentBuffer {
  std::string key;  // for logs and stats
  std::uint64_t address = 0;
  std::uint64_t nbytes = 0;
  /// The shared-memory file the buffer lies in ("" = process memory), and
  /// where in it: same-host readers then map it (shm).
  std::string segment;
  std::uint64_t segment_offset = 0;
  /// The GPU whose memory it is (cuda-ipc serves it), -1 for host memory.
  int device = -1;
};

/// The ids of lending volumes (a process's own, for direct publishing:
/// VolumeConfig::lending) start with this.
inline constexpr const char* kLendingVolumePrefix = "lend:";
inline bool is_lending_volume(const std::string& volume_id) {
  return volume_id.rfind(kLendingVolumePrefix, 0) == 0;
}

/// A loan, sent only within one process (never serialized): the buffers,
/// and a token every lent region keeps until its last owner (the object
/// table, a reader's lease) lets go; the token's release is the moment the
/// publisher has its buffers back.
struct LendRequest {
  std::vector<LentBuffer> buffers;
  std::shared_ptr<const void> token;
  /// Nonzero: the publisher may revoke this loan (revoke_atom with this
  /// number) before every reader let go; readers' leases on it are then
  /// revocable (wire::ReadLease::revocable).
  std::uint64_t revocable = 0;
};

/// A request over a fast-path channel (fast_get::CommitRequest), from the
/// small-op service to its volume actor within one process (never
/// serialized): staged objects its client gives back, records to commit
/// at the controller replacing the keys under `prefixes` (of objects it
/// staged here and wrote, or whose bytes came inline: `inlined`, per
/// record or empty), and objects to stage for it afterwards. Who sent it
/// (the client actor that attached the channel: its staged objects go if
/// it dies before the commit) and the controller to commit at.
/// `reply_limit`: the bytes its reply may take (a ring slot). `done` gets
/// what was done or the error.
struct FastCommitJob {
  fast_get::CommitRequest request;  // its `inlined` views are moved to `inlined`
  std::vector<std::optional<std::string>> inlined;
  std::size_t reply_limit = 0;
  caf::actor_addr owner;
  caf::actor_addr controller;
  /// `done` runs on the volume actor's thread (an actor's request, whose
  /// answer must come from it), never the controller's (LocalCommit).
  bool answer_here = false;
  using Done = std::shared_ptr<std::function<void(Result<fast_get::CommitDone>)>>;
  Done done;
};

using storage_volume_actor = caf::typed_actor<
    // Allocates one staged object per request, all or none: fails with
    // Errc::out_of_capacity (nothing staged) when they do not fit.
    caf::replies_to<stage_atom,
                    std::vector<wire::StageRequest>>::with<std::vector<wire::RegionRef>>,
    // A lending volume (VolumeConfig::lending) adopts buffers of its own
    // process as staged objects (uncommitted until the controller commits
    // them), memory untouched; any other volume answers Errc::unsupported.
    caf::replies_to<lend_atom, LendRequest>::with<std::vector<wire::RegionRef>>,
    // From the controller: these objects now back committed keys, and
    // these are the committed records that name objects here, which the
    // volume keeps beside them (a new controller rebuilds its index from
    // them: held_records_atom).
    caf::reacts_to<commit_atom, std::vector<std::uint64_t>, std::vector<wire::KeyRecord>>,
    // The committed records this volume keeps, one per record (a key's
    // shards here share one), and the store's other volumes as it last
    // heard of them (peers_atom); committed objects that no record names
    // are dropped first. Asked by a controller the volume registers with,
    // naming itself: the volume's channels commit there from now (a
    // failover's new controller). Many records go in parts: each but the
    // last to that controller ahead of the answer (held_records_atom with
    // this volume's id), the answer holding the last part.
    caf::replies_to<held_records_atom, caf::actor>::with<wire::HeldRecords,
                                                         std::vector<std::string>>,
    // From the controller: volumes that joined the store, and volumes that
    // left it (a rebuilt index waits for the volumes its volumes knew).
    caf::reacts_to<peers_atom, std::vector<std::string>, std::vector<std::string>>,
    // Its own: commits held for a new controller go to the one that
    // registered it (`resume`), or those whose wait is over fail
    // (VolumeConfig::await_controller).
    caf::reacts_to<commits_wait_atom, bool>,
    // From the controller: copy objects `ids` (of those sizes, for those
    // keys) of volume `from` (a storage volume's handle, whose process's
    // door is the string: VolumeInfo::control) into objects of this
    // volume, staged for the sender, which commits or discards them.
    // Answers their ids here, in order; nothing stays staged on an error.
    caf::replies_to<copy_from_atom, caf::actor, std::string, std::vector<std::uint64_t>,
                    std::vector<std::uint64_t>,
                    std::vector<std::string>>::with<std::vector<std::uint64_t>>,
    // Its own: copy `token`'s transfers ended (Errc value, 0 = ok; why).
    caf::reacts_to<copied_atom, std::uint64_t, std::int32_t, std::string>,
    // These objects are no longer referenced (superseded, removed, or a
    // failed put's staging); their memory goes once no lease pins it.
    caf::reacts_to<release_atom, std::vector<std::uint64_t>>,
    // These objects were superseded while a reader's pin holds them: they
    // stay for the pinned readers, and nobody else reads them from now on
    // (their tags are cleared, and an open_read without a pin is refused).
    caf::reacts_to<retire_atom, std::vector<std::uint64_t>>,
    // These objects were removed: like release, but their memory is freed
    // (shared-memory segments unlinked) instead of kept for reuse.
    caf::reacts_to<discard_atom, std::vector<std::uint64_t>>,
    // From the controller, after a release or discard: answered once every
    // message it sent before has been handled (the controller's messages
    // arrive in order), so the dropped objects are unreadable by then.
    caf::replies_to<flush_atom>::with<caf::ok_atom>,
    // Pins objects for reading; Errc::not_found if any is gone, or was
    // superseded (released or retired) and the reader holds no pin on it
    // (`pinned`: it located them with locate_pinned, or reads a stream).
    // The lease id is the client's choice (unique per client), so a client
    // whose open_read timed out can still close the lease it may have got.
    caf::replies_to<open_read_atom, std::vector<std::uint64_t>, std::uint64_t /*lease id*/,
                    bool /*pinned*/>::with<wire::ReadLease>,
    // Unpins a lease.
    caf::reacts_to<close_read_atom, std::uint64_t>,
    // Unpins a revocable lease, answering whether it was still whole (no
    // revoke took its regions while it was open): the reader's copy counts
    // only then.
    caf::replies_to<close_read_atom, std::uint64_t, bool>::with<bool>,
    // Ends a revocable loan (LendRequest::revocable) now: its objects
    // go, leases pinning them lose them (their readers' copies will not
    // count), so the buffers are the publisher's once the transfers this
    // volume serves from them (tcp sends in flight) end. Then runs the
    // closure (within this process only, like lend).
    caf::reacts_to<revoke_atom, std::uint64_t, internal::Closure>,
    // Eviction, from the controller: of these committed objects (least
    // recently used first) drops, memory freed, those no read lease pins,
    // until their bytes add up to the bytes asked for; answers those dropped.
    caf::replies_to<evict_atom, std::vector<std::uint64_t>,
                    std::uint64_t /*bytes*/>::with<std::vector<std::uint64_t>>,
    // (to itself) Drops what a dead client staged and nobody committed.
    caf::reacts_to<reclaim_atom, caf::actor_addr>,
    // Bytes held, objects, capacity.
    caf::replies_to<stat_atom>::with<wire::VolumeStat>,
    // How clients reach this volume's transports.
    caf::replies_to<endpoints_atom>::with<std::vector<transports::EndpointInfo>>,
    // Attaches the server end of shared-memory ring `name`
    // (transports/shm/ring.hpp), created by process `pid` on this host, to
    // the volume's small-op service (volume/small_ops.hpp), which
    // serves small committed objects' gets on it, and hands commits to
    // this actor (fast_commit) to commit at `controller` for the client that
    // sent ring_attach. Answers the name of the service's doorbell, which
    // the client rings after each request. Fails with the ring's error
    // (not_found, protocol_error, unavailable).
    caf::replies_to<ring_attach_atom, std::string, std::int32_t, caf::actor>::with<std::string>,
    // A channel without a ring: requests on this volume's transport
    // connections (tcp's small operations), or in small_op messages, that
    // carry `token` commit their puts at `controller` for the client that
    // sent small_attach.
    caf::replies_to<small_attach_atom, std::uint64_t, caf::actor>::with<caf::ok_atom>,
    // The same requests (token first) in actor messages, for the clients
    // of transports with no channel of their own (cma, rpc, rdma): served
    // by the small-op service, answered from this actor's thread.
    caf::replies_to<small_op_atom, std::vector<char>>::with<std::vector<char>>,
    // (from the small-op service) Gives back, commits and stages for the
    // channel's client (FastCommitJob); every object it gives back or
    // commits must be one that client staged here and has not committed.
    // The outcome goes to the job's `done`.
    caf::reacts_to<fast_commit_atom, FastCommitJob>>;

}  // namespace meshstore::protocol

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::protocol::LendRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::protocol::FastCommitJob)
