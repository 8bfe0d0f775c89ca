#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/internal/idle_spin.hpp"
#include "meshstore/internal/memory.hpp"
#include "meshstore/internal/thread_name.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/checks.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/transports/registry.hpp"
#include "meshstore/transports/shm/peer_memory.hpp"
#include "meshstore/transports/shm/ring.hpp"
#include "meshstore/volume/memory.hpp"
#include "meshstore/volume/small_ops.hpp"
#include "meshstore/volume/state.hpp"
#include "meshstore/volume/volume.hpp"

namespace meshstore::volume {
namespace {

using internal::to_caf_error;

using volume::check_commit;
using volume::fast_commit;
using volume::Lease;
using volume::stage;
using volume::StoredObject;
using volume::volume_pointer;
using volume::VolumeState;

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
  self->delayed_send(self, st.config.orphan_grace, protocol::reclaim_atom::value, msg.source);
}

}  // namespace

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

namespace {

// A lending volume adopts buffers its process lends (direct publishing) as
// staged objects: no allocation, no copy. Each region's memory is the
// caller's; its deleter tells the transport servers (rdma drops what it
// registered) and lets the loan's token go, so the token is released once
// the last owner (the object table, a lease) is gone.
Result<std::vector<wire::RegionRef>> lend(volume_pointer self, const protocol::LendRequest& req) {
  auto& st = self->state;
  if (!st.config.lending) {
    return Status(Errc::unsupported, "volume '" + st.config.volume_id +
                                         "' is not a lending volume: it adopts no buffers");
  }
  const caf::actor_addr owner = watch(self, sender_of(self));
  std::vector<wire::RegionRef> out;
  std::vector<std::uint64_t> made;
  auto undo = [&](Status s) {
    st.drop_all(made, false);
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

// What spawn_storage_volume prepared before the actor exists: the region
// table and the transport servers serving it.
struct VolumeSetup {
  std::shared_ptr<transports::RegionTable> regions;
  std::vector<std::unique_ptr<transports::TransportServer>> servers;
  std::shared_ptr<volume::SmallOpService> small_ops;
  std::shared_ptr<volume::SmallObjects> small;
};

// The volume's memory, servers and small-op service, from what
// spawn_storage_volume prepared; small requests across hosts (tcp) go to
// the service.
void adopt(volume_pointer self, VolumeConfig config, VolumeSetup& setup) {
  auto& st = self->state;
  st.config = std::move(config);
  st.regions = setup.regions;
  st.servers = std::move(setup.servers);
  st.memory = std::make_unique<volume::VolumeMemory>(st.config.pool_bytes);
  st.memory->use_servers(st.servers);
  st.small = std::move(setup.small);
  st.small_ops = std::move(setup.small_ops);
  st.awaiting = st.config.await_controller.count() > 0;
  st.small_ops->await_controller(st.awaiting);
  for (const auto& server : st.servers) {
    server->serve_small_ops(
        [ops = st.small_ops](const std::byte* p, std::size_t n) { return ops->serve_token(p, n); });
  }
}

// Drops committed `candidates`, in order, until `bytes` are freed; what a
// lease holds stays. Decided here, where leases open and close, so no
// reader holds what goes: a read that arrives later finds the object gone.
std::vector<std::uint64_t> evict(volume_pointer self, const std::vector<std::uint64_t>& candidates,
                                 std::uint64_t bytes) {
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
    st.evictions += 1;
    st.evicted_bytes += it->second.region->size();
    dropped.push_back(id);
    st.drop(id, false);
  }
  st.regions->prune();
  return dropped;
}

// A read of `ids`: their bytes when small (copied here, so no release can
// tear them, and nothing pinned), else a lease `lease_id` of the
// sender's that pins their regions until close_read.
Result<wire::ReadLease> open_read(volume_pointer self, const std::vector<std::uint64_t>& ids,
                                  std::uint64_t lease_id, bool located_pinned) {
  auto& st = self->state;
  auto where = [&] { return "volume '" + st.config.volume_id + "'"; };  // errors only
  wire::ReadLease lease;
  std::vector<std::shared_ptr<transports::Region>> pinned;
  for (auto id : ids) {
    auto it = st.objects.find(id);
    // A superseded object a pin holds back is read only by the pinned
    // readers: anyone else located it before the write that replaced
    // it returned, and must locate again.
    if (it == st.objects.end() || (!located_pinned && !st.small->current(id))) {
      return Status(Errc::not_found,
                    where() + ": object " + std::to_string(id) + " is gone (replaced or removed)");
    }
    pinned.push_back(it->second.region);
    if (it->second.loan != 0) lease.revocable = true;
    const auto& region = it->second.region;
    lease.regions.push_back(region_ref(id, *region));
    if (auto s = st.describe(*region, lease.regions.back()); !s.ok()) {
      return s.with_context(where() + ": open_read");
    }
  }
  std::uint64_t total = 0;
  for (const auto& r : lease.regions) total += r.nbytes;
  if (total <= protocol::limits::kInlineBytes) {
    for (const auto& region : pinned) {
      if (region->device() < 0) {
        lease.data.emplace_back(reinterpret_cast<const char*>(region->data()), region->size());
        continue;
      }
      std::string bytes(region->size(), '\0');
      if (auto s = internal::cuda::copy_bytes(bytes.data(), region->data(), bytes.size());
          !s.ok()) {
        return s.with_context(where() + ": open_read");
      }
      lease.data.push_back(std::move(bytes));
    }
    return lease;
  }
  const auto owner = watch(self, sender_of(self));
  if (lease_id == 0 || st.leases.count({owner, lease_id}) != 0) {
    return Status(Errc::protocol_error,
                  "open_read: lease id " + std::to_string(lease_id) + " is zero or already open");
  }
  lease.lease_id = lease_id;
  st.leases.emplace(std::make_pair(owner, lease_id), Lease{std::move(pinned), owner});
  return lease;
}

// What `owner`, a client that died, staged and never committed goes.
void reclaim(volume_pointer self, const caf::actor_addr& owner) {
  auto& st = self->state;
  std::vector<std::uint64_t> doomed;
  for (const auto& [id, object] : st.objects) {
    if (!object.committed && object.owner == owner) doomed.push_back(id);
  }
  st.drop_all(doomed, true);
  if (!doomed.empty()) {
    st.log->warn("volume '{}': dropped {} object(s) staged by a client that died",
                 st.config.volume_id, doomed.size());
  }
}

// Attaches the sender's ring `name` (made by process `pid`) to the
// small-op service, its puts committed at `controller`; the doorbell's name.
Result<std::string> attach_ring(volume_pointer self, const std::string& name, std::int32_t pid,
                                const caf::actor& controller) {
  auto& st = self->state;
  auto ring = transports::shm::Ring::attach(name, static_cast<pid_t>(pid), st.config.ring_spin);
  if (!ring.ok()) {
    return ring.status().with_context("volume '" + st.config.volume_id + "': ring_attach");
  }
  return st.small_ops->add_ring(std::move(ring).value(),
                                fast_puts_for(self, controller, sender_of(self).address()));
}

wire::VolumeStat volume_stat(volume_pointer self) {
  auto& st = self->state;
  wire::VolumeStat s;
  s.volume_id = st.config.volume_id;
  s.bytes_held = st.memory->bytes_held();
  s.capacity_bytes = st.config.capacity_bytes;
  for (const auto& [id, obj] : st.objects) (obj.committed ? s.objects : s.staged) += 1;
  s.leases = st.leases.size();
  s.evictions = st.evictions;
  s.evicted_bytes = st.evicted_bytes;
  return s;
}

// A monitored actor went down: a controller (its waiting small puts fail
// at once, or wait for the next: commit_waits.cpp) or a client
// (client_down).
void on_down(volume_pointer self, const caf::down_msg& msg) {
  auto& st = self->state;
  if (st.controllers.erase(msg.source) != 0) {
    // Stopped in order (its store closed): nothing waits for a next one.
    const bool orderly =
        msg.reason == caf::exit_reason::user_shutdown || msg.reason == caf::exit_reason::normal;
    if (orderly) st.small_ops->await_controller(false);
    st.small_ops->controller_gone(msg.source);
    controller_lost(self, msg.source, !orderly);
    return;
  }
  st.small_ops->owner_gone(msg.source);
  client_down(self, msg);
}

// A channel's request in an actor message (the transports with no channel
// of their own): served like tcp's, answered from here.
caf::typed_response_promise<std::vector<char>> serve_small_op(volume_pointer self,
                                                              const std::vector<char>& request) {
  auto rp = self->make_response_promise<std::vector<char>>();
  self->state.small_ops->serve_framed(
      reinterpret_cast<const std::byte*>(request.data()), request.size(),
      [rp](const std::vector<std::byte>& reply) mutable {
        const auto* p = reinterpret_cast<const char*>(reply.data());
        rp.deliver(std::vector<char>(p, p + reply.size()));
      },
      true);
  return rp;
}

// A result as a handler's answer: the value, or the error.
template <class T>
caf::result<T> answer(Result<T> r) {
  if (!r.ok()) return to_caf_error(r.status());
  return std::move(r).value();
}

using Ids = std::vector<std::uint64_t>;

protocol::storage_volume_actor::behavior_type volume_impl(volume_pointer self, VolumeConfig config,
                                                          std::shared_ptr<VolumeSetup> setup) {
  adopt(self, std::move(config), *setup);
  self->set_down_handler([=](caf::down_msg& msg) { on_down(self, msg); });
  return {
      [=](protocol::stage_atom, const std::vector<wire::StageRequest>& reqs) {
        return answer(stage(self, reqs, sender_of(self)));
      },
      [=](protocol::small_op_atom, const std::vector<char>& request)
          -> caf::result<std::vector<char>> { return serve_small_op(self, request); },
      [=](protocol::fast_commit_atom, protocol::FastCommitJob& job) {
        fast_commit(self, std::move(job));
      },
      [=](protocol::lend_atom, const protocol::LendRequest& req) {
        return answer(lend(self, req));
      },
      [=](protocol::commit_atom, const std::vector<std::uint64_t>& ids,
          std::vector<wire::KeyRecord>& records) { commit_objects(self, ids, std::move(records)); },
      [=](protocol::held_records_atom, const caf::actor& c) { return held_records(self, c); },
      [=](protocol::commits_wait_atom, bool resume) { held_commits_due(self, resume); },
      [=](protocol::copy_from_atom, const caf::actor& from, const std::string& door, const Ids& ids,
          const Ids& n, const std::vector<std::string>& keys) {
        return copy_from(self, CopySource{from, door}, ids, n, keys);
      },
      [=](protocol::copied_atom, std::uint64_t t, std::int32_t c, const std::string& w) {
        copied(self, t, c, w);
      },
      [=](protocol::peers_atom, const std::vector<std::string>& joined,
          const std::vector<std::string>& left) { update_peers(self, joined, left); },
      [=](protocol::release_atom, const Ids& ids) { self->state.drop_all(ids, true); },
      [=](protocol::retire_atom, const Ids& ids) { self->state.small->retire(ids); },
      [=](protocol::discard_atom, const Ids& ids) { self->state.drop_all(ids, false); },
      [=](protocol::flush_atom) { return caf::ok_atom::value; },
      [=](protocol::evict_atom, const std::vector<std::uint64_t>& candidates, std::uint64_t bytes) {
        return evict(self, candidates, bytes);
      },
      [=](protocol::open_read_atom, const std::vector<std::uint64_t>& ids, std::uint64_t lease_id,
          bool located_pinned) -> caf::result<wire::ReadLease> {
        auto lease = open_read(self, ids, lease_id, located_pinned);
        if (!lease.ok()) return to_caf_error(lease.status());
        return std::move(lease).value();
      },
      [=](protocol::reclaim_atom, const caf::actor_addr& owner) { reclaim(self, owner); },
      [=](protocol::close_read_atom, std::uint64_t lease_id) {
        // Closing a lease that was never opened (its open_read failed) is fine.
        close_lease(self, lease_id);
      },
      [=](protocol::close_read_atom, std::uint64_t lease_id, bool) -> bool {
        return close_lease(self, lease_id);
      },
      [=](protocol::revoke_atom, std::uint64_t loan, internal::Closure& done) {
        revoke(self, loan);
        done.fn();
      },
      [=](protocol::ring_attach_atom, const std::string& name, std::int32_t pid,
          const caf::actor& controller) -> caf::result<std::string> {
        auto doorbell = attach_ring(self, name, pid, controller);
        if (!doorbell.ok()) return to_caf_error(doorbell.status());
        return std::move(doorbell).value();
      },
      [=](protocol::small_attach_atom, std::uint64_t token,
          const caf::actor& controller) -> caf::result<caf::ok_atom> {
        // Watched: its session goes when it does.
        const auto owner = watch(self, sender_of(self));
        self->state.small_ops->attach_token(token, fast_puts_for(self, controller, owner));
        return caf::ok_atom::value;
      },
      [=](protocol::stat_atom) { return volume_stat(self); },
      [=](protocol::endpoints_atom) -> std::vector<transports::EndpointInfo> {
        std::vector<transports::EndpointInfo> out;
        for (const auto& s : self->state.servers) out.push_back(s->endpoint());
        return out;
      },
  };
}

}  // namespace

Result<protocol::storage_volume_actor> spawn_storage_volume(caf::actor_system& sys,
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
  setup->small_ops = std::make_shared<volume::SmallOpService>(
      config.volume_id, setup->small, config.ring_spin, config.transport_config.request_timeout);
  return sys.spawn(volume_impl, config, std::move(setup));
}

}  // namespace meshstore::volume
