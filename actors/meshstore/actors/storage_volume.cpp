#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "meshstore/actors/controller_actor.hpp"
#include "meshstore/actors/internal/fast_get.hpp"
#include "meshstore/actors/internal/limits.hpp"
#include "meshstore/actors/internal/wire_glue.hpp"
#include "meshstore/actors/storage_volume_actor.hpp"
#include "meshstore/actors/volume/memory.hpp"
#include "meshstore/actors/volume/small_ops.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/internal/idle_spin.hpp"
#include "meshstore/internal/memory.hpp"
#include "meshstore/internal/thread_name.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/store/checks.hpp"
#include "meshstore/transports/registry.hpp"
#include "meshstore/transports/shm/peer_memory.hpp"
#include "meshstore/transports/shm/ring.hpp"

namespace meshstore::actors {
namespace {

using internal::to_caf_error;

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
};

struct Lease {
  std::vector<std::shared_ptr<transports::Region>> pinned;
  caf::actor_addr owner;  // the client that opened it
  bool revoked = false;   // a revoke took regions it pinned
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
  // Revocable loans (a lending volume's): their objects' ids, by loan.
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> loans;
  std::set<caf::actor_addr> watched;      // clients monitored for their leases and staging
  std::set<caf::actor_addr> controllers;  // monitored for small puts (ring_attach, small_attach)
  std::uint64_t next_object_id = 1;
  std::shared_ptr<spdlog::logger> log = log::get("volume");

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
};

using volume_pointer = storage_volume_actor::stateful_pointer<VolumeState>;

// What a client is told of object `id`; its transport servers describe it
// (describe()) with what their clients need to reach it.
wire::RegionRef region_ref(std::uint64_t id, const transports::Region& region) {
  wire::RegionRef ref;
  ref.region_id = id;
  ref.nbytes = region.size();
  ref.device = region.device();
  return ref;
}

// The client behind the current request, monitored so its leases and
// staging do not outlive it.
caf::actor_addr watch(volume_pointer self, const caf::actor& client) {
  if (!client) return caf::actor_addr();
  auto addr = client.address();
  if (self->state.watched.insert(addr).second) self->monitor(client);
  return addr;
}

caf::actor sender_of(volume_pointer self) {
  return caf::actor_cast<caf::actor>(self->current_sender());
}

// Where a fast-path channel's puts go (ring_attach, small_attach): this
// volume commits them at `controller`, monitored so that a dead one ends
// waiting puts at once, for `owner`.
volume::FastPuts fast_puts_for(volume_pointer self, const caf::actor& controller,
                               const caf::actor_addr& owner) {
  auto& st = self->state;
  if (controller && st.controllers.insert(controller.address()).second) {
    self->monitor(controller);
  }
  return volume::FastPuts{self->address(), controller.address(), owner,
                          st.config.transport_config.request_timeout};
}

// A client died: its read leases go now; its staged objects go after the
// grace period, unless the controller's commit (already on its way,
// perhaps) adopts them first.
void client_down(volume_pointer self, const caf::down_msg& msg) {
  auto& st = self->state;
  st.watched.erase(msg.source);
  for (auto it = st.leases.begin(); it != st.leases.end();) {
    it = it->second.owner == msg.source ? st.leases.erase(it) : std::next(it);
  }
  st.regions->prune();
  self->delayed_send(self, st.config.orphan_grace, reclaim_atom::value, msg.source);
}

// Allocates one staged object per request, all or none, for `client`
// (watched: what it staged goes if it dies before a commit).
Result<std::vector<wire::RegionRef>> stage(volume_pointer self,
                                           const std::vector<wire::StageRequest>& reqs,
                                           const caf::actor& client) {
  auto& st = self->state;
  if (st.config.lending) {
    return Status(Errc::unsupported, "volume '" + st.config.volume_id +
                                         "' only serves buffers its process lends; it stages none");
  }
  std::uint64_t total = 0;
  for (const auto& r : reqs) {
    if (__builtin_add_overflow(total, r.nbytes, &total)) {
      return Status(Errc::invalid_argument, "stage: sizes overflow 64 bits");
    }
  }
  const auto held = st.memory->bytes_held();
  if (st.config.capacity_bytes != 0 && held + total > st.config.capacity_bytes) {
    std::string first = reqs.empty() ? std::string() : reqs.front().key;
    return Status(Errc::out_of_capacity,
                  "volume '" + st.config.volume_id + "' is full: it holds " + std::to_string(held) +
                      " of " + std::to_string(st.config.capacity_bytes) +
                      " bytes and cannot stage " + std::to_string(total) + " more for " +
                      std::to_string(reqs.size()) + " key(s) (first '" + first + "')");
  }
  const caf::actor_addr owner = watch(self, client);
  std::vector<wire::RegionRef> out;
  std::vector<std::uint64_t> staged;
  for (const auto& r : reqs) {
    const auto id = st.next_object_id++;
    auto allocated = st.allocate(id, r.nbytes, r.device);
    if (!allocated.ok()) {
      for (auto s : staged) st.drop(s, true);  // all or nothing
      return allocated.status().with_context("volume '" + st.config.volume_id +
                                             "': cannot allocate " + std::to_string(r.nbytes) +
                                             " bytes for '" + r.key + "'");
    }
    StoredObject object = std::move(allocated).value();
    const auto& region = object.region;
    if (r.has_data) {
      if (r.data.size() != r.nbytes) {
        for (auto id2 : staged) st.drop(id2, true);
        return Status(Errc::protocol_error, "stage '" + r.key + "': inline data of " +
                                                std::to_string(r.data.size()) + " bytes for " +
                                                std::to_string(r.nbytes) + " announced");
      }
      if (region->device() >= 0) {
        if (auto s = internal::cuda::copy_bytes(region->data(), r.data.data(), r.nbytes); !s.ok()) {
          for (auto id2 : staged) st.drop(id2, true);
          return s.with_context("stage '" + r.key + "'");
        }
      } else {
        std::memcpy(region->data(), r.data.data(), r.nbytes);
      }
    }
    wire::RegionRef ref = region_ref(id, *region);
    if (auto s = st.describe(*region, ref); !s.ok()) {
      for (auto id2 : staged) st.drop(id2, true);
      return s.with_context("volume '" + st.config.volume_id + "': stage '" + r.key + "'");
    }
    st.regions->add(region);
    out.push_back(std::move(ref));
    object.key = r.key;
    object.owner = owner;
    st.small->track(id, region, object.tag);
    st.objects.emplace(id, std::move(object));
    staged.push_back(id);
  }
  return out;
}

// A lending volume adopts buffers its process lends (direct publishing) as
// staged objects: no allocation, no copy. Each region's memory is the
// caller's; its deleter tells the transport servers (rdma drops what it
// registered) and lets the loan's token go, so the token is released once
// the last owner (the object table, a lease) is gone.
Result<std::vector<wire::RegionRef>> lend(volume_pointer self, const LendRequest& req) {
  auto& st = self->state;
  if (!st.config.lending) {
    return Status(Errc::unsupported, "volume '" + st.config.volume_id +
                                         "' is not a lending volume: it adopts no buffers");
  }
  const caf::actor_addr owner = watch(self, sender_of(self));
  std::vector<wire::RegionRef> out;
  std::vector<std::uint64_t> made;
  auto undo = [&](Status s) {
    for (auto id : made) st.drop(id, false);
    st.regions->prune();
    return s.with_context("volume '" + st.config.volume_id + "': lend");
  };
  for (const auto& b : req.buffers) {
    if (b.address == 0 || b.nbytes == 0) {
      return undo(Status(Errc::invalid_argument,
                         "'" + b.key + "': a lent buffer needs an address and at least one byte"));
    }
    const auto id = st.next_object_id++;
    // The buffer is the publisher's again once the token goes.
    auto memory = st.memory->adopt(reinterpret_cast<std::byte*>(b.address), b.nbytes,
                                   [token = req.token]() mutable { token.reset(); });
    StoredObject object;
    object.loan = req.revocable;
    object.region = std::make_shared<transports::Region>(id, std::move(memory), b.nbytes, b.segment,
                                                         b.segment_offset);
    object.region->set_device(b.device);
    wire::RegionRef ref = region_ref(id, *object.region);
    if (auto s = st.describe(*object.region, ref); !s.ok()) return undo(s);
    st.regions->add(object.region);
    object.key = b.key;
    object.owner = owner;
    st.small->track(id, object.region, nullptr);
    st.objects.emplace(id, std::move(object));
    made.push_back(id);
    out.push_back(std::move(ref));
  }
  if (req.revocable != 0) {
    // Loans whose every region is gone (ended the usual way) are forgotten.
    for (auto it = st.loans.begin(); it != st.loans.end();) {
      const bool live = std::any_of(it->second.begin(), it->second.end(), [&](std::uint64_t id) {
        return st.regions->find(id) != nullptr;
      });
      it = live ? std::next(it) : st.loans.erase(it);
    }
    auto& ids = st.loans[req.revocable];
    ids.insert(ids.end(), made.begin(), made.end());
  }
  return out;
}

// Ends revocable loan `loan` now (reclaim with revoke_on_timeout): its
// objects go, and every lease pinning one of its regions loses those pins
// and is marked revoked, so its reader's copy will not count (a checked
// close answers false). Its regions leave the region table and the
// transport servers interrupt the transfers of them under way (tcp), so
// the buffers are the publisher's again once the rest of their holders,
// copies of one bounded chunk (rpc), let go.
void revoke(volume_pointer self, std::uint64_t loan) {
  auto& st = self->state;
  auto it = st.loans.find(loan);
  if (it == st.loans.end()) return;
  const std::set<std::uint64_t> ids(it->second.begin(), it->second.end());
  st.loans.erase(it);
  for (auto id : ids) st.drop(id, false);
  std::size_t revoked = 0;
  for (auto& [key, lease] : st.leases) {
    auto& pinned = lease.pinned;
    const auto before = pinned.size();
    pinned.erase(std::remove_if(pinned.begin(), pinned.end(),
                                [&](const auto& r) { return ids.count(r->id()) != 0; }),
                 pinned.end());
    if (pinned.size() != before) {
      lease.revoked = true;
      ++revoked;
    }
  }
  // No transfer of them starts any more, and those under way (a tcp send
  // to a reader that may have stalled) end now rather than when done.
  const std::vector<std::uint64_t> withdrawn(ids.begin(), ids.end());
  st.regions->withdraw(withdrawn);
  for (const auto& server : st.servers) server->interrupt(withdrawn);
  st.regions->prune();
  st.log->info("volume '{}': revoked a loan of {} object(s); {} read lease(s) lost it",
               st.config.volume_id, ids.size(), revoked);
}

// Closes the sender's lease `lease_id`, answering whether it was still
// whole: open until now and not revoked. A lease this volume no longer
// holds (never opened, or its client seen dead) cannot be vouched for.
bool close_lease(volume_pointer self, std::uint64_t lease_id) {
  auto& st = self->state;
  const auto owner = caf::actor_cast<caf::actor>(self->current_sender());
  auto it = st.leases.find({owner ? owner.address() : caf::actor_addr(), lease_id});
  const bool whole = it != st.leases.end() && !it->second.revoked;
  if (it != st.leases.end()) st.leases.erase(it);
  st.regions->prune();
  return whole;
}

// A fast-path channel's request (FastCommitJob): what its client gives back
// goes, its records commit at the controller, then what it asks is staged
// for it (after the commit, so the next put's objects may land in the
// memory the commit retired). Checked as input from another process: every
// object given back or committed must be one that client staged here, not
// committed, of the record's size; else nothing is done.
void fast_commit(volume_pointer self, FastCommitJob job) {
  auto done = job.done;
  auto& st = self->state;
  auto& req = job.request;
  auto staged_by_owner = [&](std::uint64_t id, std::uint64_t nbytes, bool any_size) {
    auto it = st.objects.find(id);
    return it != st.objects.end() && !it->second.committed && it->second.owner == job.owner &&
           it->second.region && (any_size || it->second.region->size() == nbytes);
  };
  for (const auto& r : req.records) {
    const auto& shard = r.shards.front();
    if (!staged_by_owner(shard.object_id, shard.nbytes, false)) {
      return (*done)(
          Status(Errc::protocol_error, "fast commit of '" + r.key + "': object " +
                                           std::to_string(shard.object_id) +
                                           " is no object of that size its client staged here"));
    }
  }
  for (auto id : req.release) {
    if (!staged_by_owner(id, 0, true)) {
      return (*done)(Status(Errc::protocol_error, "fast commit: object " + std::to_string(id) +
                                                      " to give back is no object its client "
                                                      "staged here"));
    }
  }
  // Committed under the records' keys (objects staged ahead were staged
  // under the keys of the put before: a version's keys change).
  for (const auto& r : req.records) st.objects[r.shards.front().object_id].key = r.key;
  for (auto id : req.release) st.drop(id, true);
  if (!req.release.empty()) st.regions->prune();
  std::vector<wire::StageRequest> wanted;
  for (auto& s : req.stage) {
    wire::StageRequest r;
    r.key = std::move(s.key);
    r.nbytes = s.nbytes;
    wanted.push_back(std::move(r));
  }
  const auto owner = caf::actor_cast<caf::actor>(job.owner);
  const std::size_t limit = job.reply_limit;
  // Stages what was asked, answering it with `versions`. After a commit, a
  // refusal (no room, say) or a reply too large for the channel stages
  // nothing and still answers the commit; alone, it is the answer.
  auto stage_and_answer = [self, done, wanted, owner, limit](std::vector<std::uint64_t> versions) {
    fast_get::CommitDone d;
    d.versions = std::move(versions);
    const bool alone = d.versions.empty();
    if (!wanted.empty()) {
      auto regions = owner ? stage(self, wanted, owner)
                           : Result<std::vector<wire::RegionRef>>(
                                 Status(Errc::unavailable, "the client is gone"));
      if (regions.ok()) d.staged = std::move(regions).value();
      if (regions.ok() && fast_get::encoded_size(d) > limit) {
        for (const auto& r : d.staged) self->state.drop(r.region_id, true);
        self->state.regions->prune();
        d.staged.clear();
        regions = Status(Errc::unsupported, "volume '" + self->state.config.volume_id +
                                                "': " + std::to_string(wanted.size()) +
                                                " staged objects do not fit a reply");
      }
      if (!regions.ok() && alone) return (*done)(regions.status());
    }
    (*done)(std::move(d));
  };
  if (req.records.empty()) return stage_and_answer({});
  auto controller = caf::actor_cast<caf::actor>(job.controller);
  if (!controller) {
    return (*done)(Status(Errc::unavailable, "fast commit: the controller is gone"));
  }
  // The controller answers this volume without a flush: its release of
  // what the commit superseded reaches this actor before the answer.
  self->request(controller, st.config.transport_config.request_timeout, replace_atom::value,
                std::move(req.records), std::move(req.prefixes), true)
      .then(
          [stage_and_answer](std::vector<std::uint64_t>& versions) mutable {
            stage_and_answer(std::move(versions));
          },
          [done](caf::error& e) {
            (*done)(internal::from_caf_error(e, "commit at the controller"));
          });
}

// Stages small objects whose bytes came with the request and commits them
// at the controller in the same call: a small put costs one round trip to
// the volume (the controller usually sits in the volume's process) instead
// of one to the volume and one to the controller. `k` gets the committed
// versions and the objects holding them, or why not.
// Names in each of `records` (one shard each) the object staged for it,
// and in `ids` and `places` those objects and their places.
void place_records(volume_pointer self, const std::vector<wire::RegionRef>& staged,
                   std::vector<wire::KeyRecord>& records, std::vector<std::uint64_t>& ids,
                   std::vector<std::string>& places) {
  for (std::size_t i = 0; i < records.size(); ++i) {
    auto& shard = records[i].shards.front();
    shard.volume_id = self->state.config.volume_id;
    shard.object_id = staged[i].region_id;
    shard.nbytes = staged[i].nbytes;
    // For readers on this host (lease-free and direct reads), as a writer
    // that staged through a transport records it.
    auto shm = staged[i].described.find("shm");
    if (shm != staged[i].described.end()) shard.place = shm->second;
    ids.push_back(shard.object_id);
    places.push_back(shard.place);
  }
}

// A small put from a channel whose controller runs in this process: staged
// here, then committed at the controller, which answers the channel itself
// (LocalCommit): one actor hop after this one, not two.
void local_put(volume_pointer self, FastPutJob job, const caf::actor& controller) {
  auto done = job.done;
  auto staged = stage(self, {job.request}, caf::actor_cast<caf::actor>(job.owner));
  if (!staged.ok()) return (*done)(staged.status());
  LocalCommit commit;
  commit.records.push_back(std::move(job.record));
  std::vector<std::uint64_t> ids;
  std::vector<std::string> places;
  place_records(self, *staged, commit.records, ids, places);
  commit.volume_id = self->state.config.volume_id;
  commit.retire = [small = self->state.small](const std::vector<std::uint64_t>& retired) {
    return small->retire(retired);
  };
  commit.done = [done, small = self->state.small, volume = caf::actor_cast<caf::actor_addr>(self),
                 id = ids.front(), key = commit.records.front().key,
                 place = places.front()](Result<std::vector<std::uint64_t>> r) {
    if (!r.ok()) {
      // Refused: nothing was committed, so the staged object goes.
      if (auto v = caf::actor_cast<caf::actor>(volume)) {
        caf::anon_send(v, release_atom::value, std::vector<std::uint64_t>{id});
      }
      return (*done)(r.status());
    }
    if (r->size() != 1) {
      return (*done)(
          Status(Errc::internal, "a put of one key committed " + std::to_string(r->size())));
    }
    // Gets serve it from now, not only once this actor has the verdict.
    small->commit(id, key);
    (*done)(fast_get::PutDone{r->front(), id, place});
  };
  caf::anon_send(controller, local_commit_atom::value, std::move(commit));
}

// What stage_commit committed: a version, an object and its place per record.
struct Committed {
  std::vector<std::uint64_t> versions, ids;
  std::vector<std::string> places;
};
void stage_commit(volume_pointer self, const std::vector<wire::StageRequest>& reqs,
                  std::vector<wire::KeyRecord> records, const caf::actor& controller,
                  const caf::actor& client, std::function<void(Result<Committed>)> k,
                  std::vector<std::string> retire = {}) {
  auto& st = self->state;
  if (!controller || reqs.size() != records.size()) {
    return k(Status(Errc::protocol_error, "stage_commit: " + std::to_string(reqs.size()) +
                                              " objects for " + std::to_string(records.size()) +
                                              " records, or no controller"));
  }
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    if (!reqs[i].has_data || records[i].shards.size() != 1 || records[i].key != reqs[i].key) {
      return k(Status(Errc::protocol_error, "stage_commit: '" + reqs[i].key +
                                                "' lacks its bytes or does not match its record"));
    }
  }
  auto staged = stage(self, reqs, client);
  if (!staged.ok()) return k(staged.status());
  std::vector<std::uint64_t> ids;
  std::vector<std::string> places;
  place_records(self, *staged, records, ids, places);
  auto on_versions = [=](const std::vector<std::uint64_t>& versions) {
    k(Committed{versions, ids, places});
  };
  auto on_error = [=](caf::error& e) {
    // The controller answered and refused: nothing was committed, so the
    // staged objects go. After a timeout it may still have committed
    // them; they stay, and go with their client.
    const bool refused = e.category() == internal::kErrorCategory &&
                         e.code() != static_cast<std::uint8_t>(Errc::timeout) &&
                         e.code() != static_cast<std::uint8_t>(Errc::unavailable);
    if (refused) {
      for (auto id : ids) self->state.drop(id, true);
      self->state.regions->prune();
    }
    k(internal::from_caf_error(e, "commit at the controller"));
  };
  if (!retire.empty()) {
    self->request(controller, st.config.transport_config.request_timeout, replace_atom::value,
                  std::move(records), std::move(retire), true)
        .then(on_versions, on_error);
    return;
  }
  self->request(controller, st.config.transport_config.request_timeout,
                notify_put_batch_atom::value, std::move(records))
      .then(on_versions, on_error);
}

// What spawn_storage_volume prepared before the actor exists: the region
// table and the transport servers serving it.
struct VolumeSetup {
  std::shared_ptr<transports::RegionTable> regions;
  std::vector<std::unique_ptr<transports::TransportServer>> servers;
  std::shared_ptr<volume::SmallOpService> small_ops;
  std::shared_ptr<volume::SmallObjects> small;
};

storage_volume_actor::behavior_type volume_impl(volume_pointer self, VolumeConfig config,
                                                std::shared_ptr<VolumeSetup> setup) {
  auto& st = self->state;
  st.config = std::move(config);
  st.regions = setup->regions;
  st.servers = std::move(setup->servers);
  st.memory = std::make_unique<volume::VolumeMemory>(st.config.pool_bytes);
  st.memory->use_servers(st.servers);
  st.small = std::move(setup->small);
  st.small_ops = std::move(setup->small_ops);
  // Small requests across hosts, on the transports that carry them (tcp).
  for (const auto& server : st.servers) {
    server->serve_small_ops(
        [ops = st.small_ops](const std::byte* p, std::size_t n) { return ops->serve_token(p, n); });
  }
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& st = self->state;
    if (st.controllers.erase(msg.source) != 0) {
      st.small_ops->controller_gone(msg.source);
      return;
    }
    st.small_ops->owner_gone(msg.source);
    client_down(self, msg);
  });
  return {
      [=](stage_atom, const std::vector<wire::StageRequest>& reqs)
          -> caf::result<std::vector<wire::RegionRef>> {
        auto staged = stage(self, reqs, sender_of(self));
        if (!staged.ok()) return to_caf_error(staged.status());
        return std::move(staged).value();
      },
      [=](stage_commit_atom, const std::vector<wire::StageRequest>& reqs,
          std::vector<wire::KeyRecord>& records, const caf::actor& controller,
          std::vector<std::string>& retire)
          -> caf::result<std::vector<std::uint64_t>, std::vector<std::uint64_t>,
                         std::vector<std::string>> {
        auto rp =
            self->make_response_promise<std::vector<std::uint64_t>, std::vector<std::uint64_t>,
                                        std::vector<std::string>>();
        stage_commit(
            self, reqs, std::move(records), controller, sender_of(self),
            [rp](Result<Committed> r) mutable {
              if (!r.ok()) return (void)rp.deliver(to_caf_error(r.status()));
              rp.deliver(std::move(r->versions), std::move(r->ids), std::move(r->places));
            },
            std::move(retire));
        return rp;
      },
      [=](fast_put_atom, FastPutJob& job) {
        // In this actor system: CAF 0.17 gives each system of a process a
        // node id of its own, so another system's controller is remote.
        auto controller = caf::actor_cast<caf::actor>(job.controller);
        if (controller && controller.node() == self->node()) {
          return local_put(self, std::move(job), controller);
        }
        auto done = job.done;
        std::vector<wire::KeyRecord> records{std::move(job.record)};
        stage_commit(
            self, {std::move(job.request)}, std::move(records),
            caf::actor_cast<caf::actor>(job.controller), caf::actor_cast<caf::actor>(job.owner),
            [done](Result<Committed> r) {
              if (!r.ok()) return (*done)(r.status());
              if (r->versions.size() != 1 || r->ids.size() != 1 || r->places.size() != 1) {
                return (*done)(Status(Errc::internal, "a put of one key committed " +
                                                          std::to_string(r->versions.size())));
              }
              // With where it lies, for the writer's direct reads.
              (*done)(fast_get::PutDone{r->versions.front(), r->ids.front(), r->places.front()});
            });
      },
      [=](fast_commit_atom, FastCommitJob& job) { fast_commit(self, std::move(job)); },
      [=](lend_atom, const LendRequest& req) -> caf::result<std::vector<wire::RegionRef>> {
        auto lent = lend(self, req);
        if (!lent.ok()) return to_caf_error(lent.status());
        return std::move(lent).value();
      },
      [=](commit_atom, const std::vector<std::uint64_t>& ids) {
        for (auto id : ids) {
          auto it = self->state.objects.find(id);
          if (it == self->state.objects.end()) continue;
          it->second.committed = true;
          self->state.small->commit(id, it->second.key);
        }
      },
      [=](release_atom, const std::vector<std::uint64_t>& ids) {
        for (auto id : ids) self->state.drop(id, true);
        self->state.regions->prune();
      },
      [=](discard_atom, const std::vector<std::uint64_t>& ids) {
        for (auto id : ids) self->state.drop(id, false);
        self->state.regions->prune();
      },
      [=](flush_atom) { return caf::ok_atom::value; },
      [=](evict_atom, const std::vector<std::uint64_t>& candidates,
          std::uint64_t bytes) -> std::vector<std::uint64_t> {
        // Decided here, where leases open and close, so no reader holds
        // what goes: a read that arrives later finds the object gone.
        auto& st = self->state;
        std::set<const transports::Region*> leased;
        for (const auto& [id, lease] : st.leases) {
          for (const auto& r : lease.pinned) leased.insert(r.get());
        }
        std::vector<std::uint64_t> dropped;
        std::uint64_t freed = 0;
        for (auto id : candidates) {
          if (freed >= bytes) break;
          auto it = st.objects.find(id);
          if (it == st.objects.end() || !it->second.committed ||
              leased.count(it->second.region.get()) != 0) {
            continue;
          }
          freed += it->second.region->size();
          dropped.push_back(id);
          st.drop(id, false);
        }
        st.regions->prune();
        return dropped;
      },
      [=](open_read_atom, const std::vector<std::uint64_t>& ids,
          std::uint64_t lease_id) -> caf::result<wire::ReadLease> {
        auto& st = self->state;
        wire::ReadLease lease;
        std::vector<std::shared_ptr<transports::Region>> pinned;
        for (auto id : ids) {
          auto it = st.objects.find(id);
          if (it == st.objects.end()) {
            return to_caf_error(Status(Errc::not_found, "volume '" + st.config.volume_id +
                                                            "': object " + std::to_string(id) +
                                                            " is gone (replaced or removed)"));
          }
          pinned.push_back(it->second.region);
          if (it->second.loan != 0) lease.revocable = true;
          const auto& region = it->second.region;
          lease.regions.push_back(region_ref(id, *region));
          if (auto s = st.describe(*region, lease.regions.back()); !s.ok()) {
            return to_caf_error(s.with_context("volume '" + st.config.volume_id + "': open_read"));
          }
        }
        std::uint64_t total = 0;
        for (const auto& r : lease.regions) total += r.nbytes;
        if (total <= actors::limits::kInlineBytes) {
          // Small: answer with the bytes, pin nothing (copied in this handler,
          // so no release can tear them).
          for (const auto& region : pinned) {
            if (region->device() < 0) {
              lease.data.emplace_back(reinterpret_cast<const char*>(region->data()),
                                      region->size());
              continue;
            }
            std::string bytes(region->size(), '\0');
            if (auto s = internal::cuda::copy_bytes(bytes.data(), region->data(), bytes.size());
                !s.ok()) {
              return to_caf_error(
                  s.with_context("volume '" + st.config.volume_id + "': open_read"));
            }
            lease.data.push_back(std::move(bytes));
          }
          return lease;
        }
        const auto owner = watch(self, sender_of(self));
        if (lease_id == 0 || st.leases.count({owner, lease_id}) != 0) {
          return to_caf_error(Status(
              Errc::protocol_error,
              "open_read: lease id " + std::to_string(lease_id) + " is zero or already open"));
        }
        lease.lease_id = lease_id;
        st.leases.emplace(std::make_pair(owner, lease_id), Lease{std::move(pinned), owner});
        return lease;
      },
      [=](reclaim_atom, const caf::actor_addr& owner) {
        auto& st = self->state;
        std::vector<std::uint64_t> doomed;
        for (const auto& [id, object] : st.objects) {
          if (!object.committed && object.owner == owner) doomed.push_back(id);
        }
        for (auto id : doomed) st.drop(id, true);
        st.regions->prune();
        if (!doomed.empty())
          st.log->warn("volume '{}': dropped {} object(s) staged by a client that died",
                       st.config.volume_id, doomed.size());
      },
      [=](close_read_atom, std::uint64_t lease_id) {
        // Closing a lease that was never opened (its open_read failed) is fine.
        close_lease(self, lease_id);
      },
      [=](close_read_atom, std::uint64_t lease_id, bool) -> bool {
        return close_lease(self, lease_id);
      },
      [=](revoke_atom, std::uint64_t loan, internal::Closure& done) {
        revoke(self, loan);
        done.fn();
      },
      [=](ring_attach_atom, const std::string& name, std::int32_t pid,
          const caf::actor& controller) -> caf::result<std::string> {
        auto& st = self->state;
        auto ring =
            transports::shm::Ring::attach(name, static_cast<pid_t>(pid), st.config.ring_spin);
        if (!ring.ok()) {
          return to_caf_error(
              ring.status().with_context("volume '" + st.config.volume_id + "': ring_attach"));
        }
        auto doorbell = st.small_ops->add_ring(
            std::move(ring).value(), fast_puts_for(self, controller, sender_of(self).address()));
        if (!doorbell.ok()) return to_caf_error(doorbell.status());
        return std::move(doorbell).value();
      },
      [=](small_attach_atom, std::uint64_t token,
          const caf::actor& controller) -> caf::result<caf::ok_atom> {
        // Watched: its session goes when it does.
        const auto owner = watch(self, sender_of(self));
        self->state.small_ops->attach_token(token, fast_puts_for(self, controller, owner));
        return caf::ok_atom::value;
      },
      [=](stat_atom) -> wire::VolumeStat {
        auto& st = self->state;
        wire::VolumeStat s;
        s.volume_id = st.config.volume_id;
        s.bytes_held = st.memory->bytes_held();
        s.capacity_bytes = st.config.capacity_bytes;
        for (const auto& [id, obj] : st.objects) (obj.committed ? s.objects : s.staged) += 1;
        s.leases = st.leases.size();
        return s;
      },
      [=](endpoints_atom) -> std::vector<transports::EndpointInfo> {
        std::vector<transports::EndpointInfo> out;
        for (const auto& s : self->state.servers) out.push_back(s->endpoint());
        return out;
      },
  };
}

}  // namespace

Result<storage_volume_actor> spawn_storage_volume(caf::actor_system& sys,
                                                  const VolumeConfig& config) {
  if (config.volume_id.empty()) return Status(Errc::invalid_argument, "volume id is empty");
  MESHSTORE_RETURN_IF_ERROR(config.transport_config.validate());
  auto& registry = transports::builtin_registry();
  auto setup = std::make_shared<VolumeSetup>();
  setup->regions = std::make_shared<transports::RegionTable>();
  auto abandon = [&](Status s) {
    for (auto& server : setup->servers) server->shutdown();
    return s.with_context("volume '" + config.volume_id + "'");
  };
  const auto names = config.transports.empty() ? registry.names() : config.transports;
  for (const auto& name : names) {
    auto f = registry.find(name);
    if (!f.ok()) return abandon(f.status());
    if (f->available) {
      // An unavailable transport (rdma without a device) is not offered,
      // and said so once per process; clients that force it are told why.
      if (auto s = f->available(); !s.ok()) {
        static std::mutex mu;
        static std::set<std::string> told;
        std::lock_guard<std::mutex> lock(mu);
        if (told.insert(name).second) {
          log::get("volume")->info("transport '{}' is not offered: {}", name, s.message());
        }
        continue;
      }
    }
    auto server = f->make_server(transports::ServerContext{
        &sys, setup->regions, config.transport_config, config.volume_id, config.bind_host});
    if (!server.ok())
      return abandon(server.status().with_context("transport '" + name + "' failed to start"));
    setup->servers.push_back(std::move(server).value());
  }
  setup->small = std::make_shared<volume::SmallObjects>();
  setup->small_ops =
      std::make_shared<volume::SmallOpService>(config.volume_id, setup->small, config.ring_spin);
  return sys.spawn(volume_impl, config, std::move(setup));
}

}  // namespace meshstore::actors
