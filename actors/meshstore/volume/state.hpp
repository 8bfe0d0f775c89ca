#pragma once
// A storage volume actor's state (storage_volume.cpp) and the jobs other
// files of the volume share with it: staging objects, and the commits
// that fast-path channels ask for (commits.cpp). Private to the volume.
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "meshstore/internal/connect.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/status.hpp"
#include "meshstore/transports/region.hpp"
#include "meshstore/transports/transport.hpp"
#include "meshstore/volume/memory.hpp"
#include "meshstore/volume/small_ops.hpp"
#include "meshstore/volume/volume.hpp"

namespace meshstore::volume {

struct StoredObject {
  std::shared_ptr<transports::Region> region;
  std::string key;  // for logs and stats
  bool committed = false;
  caf::actor_addr owner;  // the client that staged it
  // Whether the region's memory goes to the pool when freed; shared with
  // the region's deleter (discard clears it). Null for memory never pooled
  // (a publisher's lent buffers).
  std::shared_ptr<std::atomic<bool>> reusable;
  // The tag clients check around a lease-free read (RegionMemory::object_tag):
  // this object's id from its staging until it is dropped. Null: none.
  std::atomic<std::uint64_t>* tag = nullptr;
  // The revocable loan it belongs to (LendRequest::revocable), 0: none.
  std::uint64_t loan = 0;
  // The record the controller committed for it (its key's, naming every
  // shard), from which a new controller rebuilds its index; null while
  // staged, or adopted as one shard of a key not yet covered. Shared by
  // the objects of one record on this volume.
  std::shared_ptr<const wire::KeyRecord> record;
};

struct Lease {
  std::vector<std::shared_ptr<transports::Region>> pinned;
  caf::actor_addr owner;  // the client that opened it
  bool revoked = false;   // a revoke took regions it pinned
};

// A channel's commit held while the store has no controller (a failover;
// commit_waits.cpp), or sent to a controller in another process and not
// answered yet (held if that controller dies).
struct HeldCommit {
  protocol::FastCommitJob job;  // its release done, its inline bytes placed
  std::vector<protocol::fast_get::CommitDone::Placed> placed;  // for its inline bytes
  caf::actor_addr controller;                                  // where it was sent
  std::chrono::steady_clock::time_point deadline;              // when held: fails then
};

struct VolumeState {
  static inline const char* name = "meshstore.volume";

  VolumeConfig config;
  std::shared_ptr<transports::RegionTable> regions;
  std::unique_ptr<volume::VolumeMemory> memory;
  std::vector<std::unique_ptr<transports::TransportServer>> servers;
  std::unordered_map<std::uint64_t, StoredObject> objects;
  // Leases by (client, the client's lease id).
  std::map<std::pair<caf::actor_addr, std::uint64_t>, Lease> leases;
  // Objects evict() dropped, and their bytes, since the volume started.
  std::uint64_t evictions = 0;
  std::uint64_t evicted_bytes = 0;
  // Revocable loans (a lending volume's): their objects' ids, by loan.
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> loans;
  std::set<caf::actor_addr> watched;      // clients monitored for their leases and staging
  std::set<caf::actor_addr> controllers;  // monitored for small puts (ring_attach, small_attach)
  std::set<std::string> peers;            // the store's volumes, as the controller last told
  std::uint64_t next_object_id = 1;
  std::shared_ptr<spdlog::logger> log = log::get("volume");
  // Commits waiting for a new controller, and those sent to a controller
  // in another process, not answered yet (by token); commit_waits.cpp.
  std::vector<HeldCommit> held_commits;
  std::map<std::uint64_t, HeldCommit> commits_sent;
  std::uint64_t next_sent = 1;
  bool wait_timer = false;    // a commits_wait message is on its way
  bool awaiting = false;      // commits wait for a new controller (await_controller)
  caf::actor controller_now;  // the controller that registered it last
  // When its controller went down (held commits wait from then); reset
  // once a new one registered it.
  std::chrono::steady_clock::time_point controller_down_at;

  // Copies of other volumes' objects under way (copies.cpp), by token,
  // and the transports to those volumes.
  struct Copy {
    caf::actor from;
    caf::typed_response_promise<std::vector<std::uint64_t>> reply;
    std::vector<std::uint64_t> ids;  // the staged objects, in order
    std::vector<std::shared_ptr<transports::Region>> regions;
    std::uint64_t lease = 0;  // at the source; 0: none
  };
  std::map<std::uint64_t, Copy> copying;
  std::uint64_t next_copy = 1;
  std::map<caf::actor_addr, std::shared_ptr<transports::Transport>> links;
  // The doors of the copy sources' processes this volume connected to.
  internal::DoorsReached doors;

  // Small committed objects, and the service answering small requests.
  std::shared_ptr<volume::SmallObjects> small;
  std::shared_ptr<volume::SmallOpService> small_ops;

  ~VolumeState() {
    // The small-op service stops before anything it reads goes; puts
    // waiting on a tcp connection's thread are answered before the
    // servers join those threads.
    if (small_ops) small_ops->stop();
    if (memory) memory->forget_servers();
    for (auto& s : servers) s->shutdown();
  }

  // A new object's region (not yet in `objects`). `device` >= 0: device
  // memory.
  Result<StoredObject> allocate(std::uint64_t id, std::uint64_t nbytes, int device = -1) {
    auto allocated = memory->allocate(id, nbytes, device);
    if (!allocated.ok()) return allocated.status();
    StoredObject object;
    object.region = std::move(allocated->region);
    object.reusable = std::move(allocated->reusable);
    object.tag = allocated->tag;
    return object;
  }

  // Lets every one-sided transport server describe `region` in `ref`.
  Status describe(const transports::Region& region, wire::RegionRef& ref) {
    for (auto& s : servers) MESHSTORE_RETURN_IF_ERROR(s->describe(region, ref));
    return Status();
  }

  // Drops object `id`; its memory is freed rather than pooled when `reuse`
  // is false. Readers holding a lease keep it until they close.
  void drop(std::uint64_t id, bool reuse) {
    auto it = objects.find(id);
    if (it == objects.end()) return;
    if (!reuse && it->second.reusable) it->second.reusable->store(false);
    // Lease-free readers see it gone now, though leases may keep its memory.
    if (it->second.tag) it->second.tag->store(0, std::memory_order_release);
    small->remove(id);
    objects.erase(it);
  }
  // Drops `ids` (drop), then gives back the memory no lease holds.
  void drop_all(const std::vector<std::uint64_t>& ids, bool reuse) {
    for (auto id : ids) drop(id, reuse);
    regions->prune();
  }
};

using volume_pointer = protocol::storage_volume_actor::stateful_pointer<VolumeState>;

/// Allocates one staged object per request, all or none, for `client`
/// (watched: what it staged goes if it dies before a commit).
Result<std::vector<wire::RegionRef>> stage(volume_pointer self,
                                           const std::vector<wire::StageRequest>& reqs,
                                           const caf::actor& client);

/// The controller committed: objects `ids` back keys now (adopted: no
/// reclaim takes them), and `records` (the committed records naming
/// objects here) are kept beside their objects (records_kept.cpp).
void commit_objects(volume_pointer self, const std::vector<std::uint64_t>& ids,
                    std::vector<wire::KeyRecord> records);

/// The volume a copy reads from, and its process's door (VolumeInfo::control).
struct CopySource {
  caf::actor handle;
  std::string door;
};
/// Copies objects `ids` (of `sizes`, for `keys`) of volume `from` into
/// objects staged here for the sender (copies.cpp): answers their ids.
caf::result<std::vector<std::uint64_t>> copy_from(volume_pointer self, const CopySource& from,
                                                  const std::vector<std::uint64_t>& ids,
                                                  const std::vector<std::uint64_t>& sizes,
                                                  const std::vector<std::string>& keys);
/// Copy `token` ended: `code` 0, or the Errc of its failure and `why`.
void copied(volume_pointer self, std::uint64_t token, std::int32_t code, const std::string& why);

/// The committed records this volume keeps, one per record, and the
/// store's volumes it knows of, for a controller rebuilding its index.
/// Committed objects without a record (the shards of a sharded put no
/// controller finished) are dropped first: no controller will commit them
/// now. `controller`, when set, is the controller asking, which this
/// volume registers with: its channels' puts commit there from now. To it
/// the records go in parts: each but the last as its own held_records
/// message ahead of the answer, which is the last part.
caf::result<wire::HeldRecords, std::vector<std::string>> held_records(volume_pointer self,
                                                                      const caf::actor& controller);

/// The controller says which volumes joined the store and which left it.
void update_peers(volume_pointer self, const std::vector<std::string>& joined,
                  const std::vector<std::string>& left);

/// A commit request (FastCommitJob: a channel's: a ring's, tcp's, or one
/// in a small_op message), answered through its `done`. `placed`: what
/// was staged for its inline bytes before it was held (HeldCommit).
void fast_commit(volume_pointer self, protocol::FastCommitJob job,
                 std::vector<protocol::fast_get::CommitDone::Placed> placed = {});

// -- commits through a failover (commit_waits.cpp) ----------------------------

/// Holds `job` until a new controller registers this volume (resume_held)
/// or VolumeConfig::await_controller passes: false, with nothing held,
/// when the volume does not await one.
bool hold_commit(volume_pointer self, protocol::FastCommitJob& job,
                 std::vector<protocol::fast_get::CommitDone::Placed> placed);
/// `job`, sent to `controller` (in another process) now: a token that
/// sent_answered takes when the answer comes. Kept (a copy) so that the
/// controller's death holds it for the next one; 0 when not awaiting.
std::uint64_t track_sent(volume_pointer self, const protocol::FastCommitJob& job,
                         const std::vector<protocol::fast_get::CommitDone::Placed>& placed,
                         const caf::actor_addr& controller);
/// Whether sent commit `token` is still owed its answer (false: it was
/// held when its controller died, and is answered from there).
bool sent_answered(volume_pointer self, std::uint64_t token);
/// `controller` died: what was sent to it and not answered is held
/// (`hold`; else, the controller closed in order, nothing waits for a next
/// one until one registers this volume).
void controller_lost(volume_pointer self, const caf::actor_addr& controller, bool hold);
/// A controller registered this volume (VolumeState::controller_now):
/// every held commit goes on, to it.
void resume_held(volume_pointer self);
/// Fails the held commits whose wait is over.
void expire_held(volume_pointer self);
/// A commits_wait message: resume_held when `resume`, else expire_held.
inline void held_commits_due(volume_pointer self, bool resume) {
  resume ? resume_held(self) : expire_held(self);
}
/// The versions of `job`'s records if its commit happened already (the
/// controller that died committed it before answering: its objects here
/// are committed, each with its record); nullopt otherwise.
std::optional<std::vector<std::uint64_t>> committed_already(const VolumeState& st,
                                                            const protocol::FastCommitJob& job);

/// Checks a commit request for volume `volume_id` as input from another
/// process (keys; one object of this volume per record, named or with its
/// bytes inline, which must match its dtype and shape): protocol_error
/// naming what is wrong.
Status check_commit(const protocol::fast_get::CommitRequest& req, const std::string& volume_id);

}  // namespace meshstore::volume
