// The client actor: its behaviour, which hands each call to the file that
// runs it (client/), and the calls that are one request to the controller.

#include "meshstore/client/client.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/client/ask.hpp"
#include "meshstore/client/client_state.hpp"
#include "meshstore/client/connections.hpp"
#include "meshstore/client/get.hpp"
#include "meshstore/client/locations.hpp"
#include "meshstore/client/remove.hpp"
#include "meshstore/client/stream.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/internal/deadlines.hpp"

namespace meshstore::client {
namespace {

using internal::from_caf_error;

void handle_stat(client_pointer self, StatCall call) {
  auto promise = call.promise;
  auto& st = self->state;
  ask(self, st.controller, protocol::volumes_atom::value)
      .then(
          [=](const std::vector<wire::VolumeInfo>& infos) {
            // A volume that does not answer (gone, but not yet dropped by
            // the controller; cut off) is reported as such: the others'
            // stats still come back.
            std::vector<Future<VolumeStatReply>> stats;
            for (const auto& info : infos) {
              auto p = std::make_shared<Promise<VolumeStatReply>>(
                  Status(Errc::shutdown, "client stopped"));
              stats.push_back(p->future());
              auto unreachable = [p, id = info.volume_id](const Status& why) {
                VolumeStatReply r;
                r.stat.volume_id = id;
                r.unreachable = why.to_string();
                p->set_value(std::move(r));
              };
              with_volume(self, info.volume_id, [=](const ConnResult& conn) {
                if (!conn.ok()) return unreachable(conn.status());
                ask(self, (*conn)->handle, protocol::stat_atom::value)
                    .then(
                        [=](const wire::VolumeStat& s) {
                          p->set_value(VolumeStatReply{s, ""});
                        },
                        [=](caf::error& e) {
                          unreachable(from_caf_error(e, "stat of volume '" + info.volume_id + "'"));
                        });
              });
            }
            gather(std::move(stats))
                .on_complete(
                    [promise](const Result<std::vector<VolumeStatReply>>& r) { promise->set(r); });
          },
          [=](caf::error& e) { promise->set_error(from_caf_error(e, "stats")); });
}

namespace {

// The controller's process, when CAF's node ids say it is another process
// of this host; null when it is this process or another host's.
std::shared_ptr<transports::shm::ProcessWatch> watch_controller(client_pointer self) {
  using data = caf::node_id::default_data;
  const auto theirs = self->state.controller.node();
  const auto ours = self->node();
  if (!theirs || !ours || theirs->implementation_id() != data::class_id ||
      ours->implementation_id() != data::class_id) {
    return nullptr;
  }
  const auto& t = static_cast<const data&>(*theirs);
  const auto& o = static_cast<const data&>(*ours);
  if (t.host_id() != o.host_id() || t.process_id() == o.process_id()) return nullptr;
  return std::make_shared<transports::shm::ProcessWatch>(static_cast<long>(t.process_id()));
}

// `controller` and `strategy` serve this client from now: at its start,
// and when the store's server came back (store/reconnect.cpp), with this
// process's volumes registered with them already.
void take_control(client_pointer self, protocol::controller_actor controller,
                  protocol::strategy_actor strategy) {
  auto& st = self->state;
  st.controller = std::move(controller);
  st.strategy = std::move(strategy);
  st.control_down.clear();
  st.controller_process = watch_controller(self);
  st.cfg.fast_path->watch_controller(st.controller_process);
  // Watched from the start, not from the first request: a process that
  // only hosts volumes asks the controller nothing, yet must learn of its
  // death to reconnect (on_control_down).
  for (const auto& peer :
       {caf::actor_cast<caf::actor>(st.controller), caf::actor_cast<caf::actor>(st.strategy)}) {
    if (peer && st.monitored.insert(peer.address()).second) self->monitor(peer);
  }
  // Volumes in processes this one has no connection to: their deaths come
  // from the controller.
  self->send(st.controller, protocol::watch_volumes_atom::value);
}

// The keys under the call's prefix, from the controller.
void handle_keys(client_pointer self, const KeysCall& call) {
  auto promise = call.promise;
  const auto prefix = call.prefix;
  ask(self, self->state.controller, protocol::keys_atom::value, prefix)
      .then([=](std::vector<std::string>& keys) { promise->set_value(std::move(keys)); },
            [=](caf::error& e) { promise->set_error(from_caf_error(e, "keys '" + prefix + "'")); });
}

// The records of the keys under the call's prefix: the keys, then their
// locations; keys removed between the two requests come back unfound and
// are left out.
void handle_list(client_pointer self, const ListCall& call) {
  auto promise = call.promise;
  const auto prefix = call.prefix;
  auto failed = [=](caf::error& e) {
    promise->set_error(from_caf_error(e, "list '" + prefix + "'"));
  };
  ask(self, self->state.controller, protocol::keys_atom::value, prefix)
      .then(
          [=](std::vector<std::string>& keys) {
            ask(self, self->state.controller, protocol::locate_atom::value, keys)
                .then(
                    [=](std::vector<wire::KeyRecord>& records) {
                      records.erase(
                          std::remove_if(records.begin(), records.end(),
                                         [](const wire::KeyRecord& r) { return !r.found(); }),
                          records.end());
                      promise->set_value(std::move(records));
                    },
                    failed);
          },
          failed);
}

// The latest pointer under the call's prefix (and, when asked, the
// version's records), cached as located.
void handle_latest(client_pointer self, const LatestCall& call) {
  auto promise = call.promise;
  const auto prefix = call.prefix;
  ask(self, self->state.controller, protocol::locate_latest_atom::value, prefix, call.with_version)
      .then(
          [=](std::vector<wire::KeyRecord>& records) {
            cache_located(self->state, records);
            if (records.empty()) {
              promise->set_error(
                  Status(Errc::protocol_error,
                         "latest '" + prefix + "': the controller answered no record"));
              return;
            }
            promise->set_value(std::move(records.front()));
          },
          [=](caf::error& e) { promise->set_error(from_caf_error(e, "latest '" + prefix + "'")); });
}

// Each key's version (0: absent), from the controller.
void handle_exists(client_pointer self, const ExistsCall& call) {
  auto promise = call.promise;
  const auto what = describe("exists", call.keys);
  ask(self, self->state.controller, protocol::exists_atom::value, call.keys)
      .then([=](std::vector<std::uint64_t>& v) { promise->set_value(std::move(v)); },
            [=](caf::error& e) { promise->set_error(from_caf_error(e, what)); });
}

// The controller's counters.
void handle_counters(client_pointer self, const CountersCall& call) {
  auto promise = call.promise;
  ask(self, self->state.controller, protocol::counters_atom::value)
      .then([=](std::vector<std::uint64_t>& v) { promise->set_value(std::move(v)); },
            [=](caf::error& e) { promise->set_error(from_caf_error(e, "counters")); });
}

// Fails the parked calls whose deadline passed; checks again at the next.
void expire_parked(client_pointer self);

void arm_park_timer(client_pointer self) {
  auto& st = self->state;
  if (st.park_timer || st.parked.empty()) return;
  st.park_timer = true;
  self->delayed_send(self, internal::until_first(st.parked), protocol::run_atom::value,
                     internal::Closure{[self] { expire_parked(self); }});
}

void expire_parked(client_pointer self) {
  auto& st = self->state;
  st.park_timer = false;
  for (auto& p : internal::take_due(st.parked, std::chrono::steady_clock::now())) {
    p.fail(Status(Errc::unavailable, st.control_down +
                                         "; a failover is in progress, and the store was not back "
                                         "within the request timeout (" +
                                         std::to_string(st.cfg.request_timeout.count()) +
                                         " ms after)"));
  }
  arm_park_timer(self);
}

// Whether `call` cannot run now (wait_for_store); `handle` runs it once
// the store is back.
template <class Call, class Handle>
bool held_back(client_pointer self, Call& call, Handle handle) {
  if (self->state.control_down.empty()) return false;
  auto parked = std::make_shared<Call>(std::move(call));
  return wait_for_store(
      self, [self, parked, handle] { handle(self, std::move(*parked)); },
      [promise = parked->promise](const Status& s) { promise->set_error(s); });
}

// The store is back (store/reconnect.cpp): the new controller and
// strategy serve this client, and the calls that waited run.
void reconnected(client_pointer self, protocol::controller_actor c, protocol::strategy_actor s) {
  self->state.locations->clear();
  // The volumes it knew: until they are back, the new controller
  // answers no miss (it may not have heard of a key yet).
  std::vector<std::string> known;
  for (const auto& [id, conn] : self->state.conns) known.push_back(id);
  self->send(c, protocol::expect_volumes_atom::value, std::move(known));
  // The new strategy learns the volumes again as they register: until
  // then "no volume fits" is no final answer.
  self->state.placement_final = false;
  take_control(self, std::move(c), std::move(s));
  auto parked = std::exchange(self->state.parked, {});
  self->state.log->info(
      "client rank {}: reconnected to the store's new controller; {} call(s) "
      "that waited go on",
      self->state.cfg.me.rank, parked.size());
  for (auto& p : parked) p.run();
}

}  // namespace

caf::behavior client_impl(client_pointer self, ClientConfig cfg,
                          protocol::controller_actor controller,
                          protocol::strategy_actor strategy) {
  self->state.cfg = std::move(cfg);
  self->state.locations = self->state.cfg.fast_path->shared_cache();
  self->set_down_handler([=](caf::down_msg& msg) { peer_down(self, msg); });
  take_control(self, std::move(controller), std::move(strategy));
  // Once the controller or strategy is gone, calls wait for the store to
  // be back (held_back).
  return {
      [=](protocol::run_atom, internal::Closure& c) { c.fn(); },
      [=](protocol::placement_final_atom) { self->state.placement_final = true; },
      [=](protocol::reconnected_atom, protocol::controller_actor& c, protocol::strategy_actor& s) {
        reconnected(self, std::move(c), std::move(s));
      },
      [=](protocol::volume_gone_atom, const std::string& id, const std::string& reason) {
        volume_gone(self, id, reason);
      },
      [=](protocol::store_stream_atom, StreamCall& call) {
        if (!held_back(self, call, handle_stream)) handle_stream(self, std::move(call));
      },
      [=](protocol::stream_event_atom, const std::string& key,
          const std::vector<std::uint64_t>& filled, std::uint32_t end,
          const std::string& why) { stream_event(self, key, filled, end, why); },
      [=](protocol::store_get_atom, GetCall& call) {
        if (!held_back(self, call, handle_get)) handle_get(self, std::move(call));
      },
      [=](protocol::store_keys_atom, KeysCall& call) {
        if (!held_back(self, call, handle_keys)) handle_keys(self, call);
      },
      [=](protocol::store_list_atom, ListCall& call) {
        if (!held_back(self, call, handle_list)) handle_list(self, call);
      },
      [=](protocol::store_latest_atom, LatestCall& call) {
        if (!held_back(self, call, handle_latest)) handle_latest(self, call);
      },
      [=](protocol::store_exists_atom, ExistsCall& call) {
        if (!held_back(self, call, handle_exists)) handle_exists(self, call);
      },
      [=](protocol::store_remove_atom, RemoveCall& call) {
        if (!held_back(self, call, handle_remove)) handle_remove(self, std::move(call));
      },
      [=](protocol::store_counters_atom, CountersCall& call) {
        if (!held_back(self, call, handle_counters)) handle_counters(self, call);
      },
      [=](protocol::store_stat_atom, StatCall& call) {
        if (!held_back(self, call, handle_stat)) handle_stat(self, std::move(call));
      },
  };
}

}  // namespace

bool wait_for_store(client_pointer self, std::function<void()> run,
                    std::function<void(const Status&)> fail) {
  auto& st = self->state;
  if (st.control_down.empty()) return false;
  if (!st.cfg.on_control_down || !st.reconnect_over.empty() || st.control_closed) {
    fail(Status(Errc::unavailable,
                "the store is unreachable: " +
                    (st.reconnect_over.empty() ? st.control_down : st.reconnect_over)));
    return true;
  }
  // Until the request timeout after the death, not after the call: a
  // caller's next call does not wait that long again.
  st.parked.push_back(ClientState::Parked{st.control_down_at + st.cfg.request_timeout,
                                          std::move(run), std::move(fail)});
  arm_park_timer(self);
  return true;
}

namespace {

// Runs `job` inside the client actor at `addr`, from any thread (fire and
// forget): false when the actor is gone.
bool run_inside(const caf::actor_addr& addr, std::function<void(client::client_pointer)> job) {
  auto hdl = caf::actor_cast<caf::actor>(addr);
  if (!hdl) return false;
  auto me = caf::actor_cast<client::client_pointer>(hdl);  // runs only inside it
  caf::anon_send(hdl, protocol::run_atom::value,
                 internal::Closure{[me, job = std::move(job)] { job(me); }});
  return true;
}

// Runs `job` inside the client actor at `addr` and waits, at most
// `timeout`, for the answer it gives through its second argument: false
// when the actor is gone, answers nothing in time, or answers false. Only
// for threads other than the actor's (the fast path's callers and waiting
// thread).
bool answer_inside(const caf::actor_addr& addr, std::chrono::milliseconds timeout,
                   std::function<void(client::client_pointer, std::function<void(bool)>)> job) {
  auto done = std::make_shared<Promise<bool>>(Status(Errc::shutdown, "the client is gone"));
  auto answer = done->future();
  const bool sent = run_inside(addr, [done, job = std::move(job)](client::client_pointer me) {
    job(me, [done](bool v) { done->set_value(v); });
  });
  if (!sent || !answer.wait_for(timeout)) return false;
  auto r = answer.get();
  return r.ok() && *r;
}

// answer_inside for a job that answers a Status: the answer, or why there
// was none in time.
Status status_inside(const caf::actor_addr& addr, std::chrono::milliseconds timeout,
                     const std::string& what,
                     std::function<void(client::client_pointer, std::function<void(Status)>)> job) {
  auto done = std::make_shared<Promise<void>>(Status(Errc::shutdown, "the client is gone"));
  auto answer = done->future();
  const bool sent = run_inside(addr, [done, job = std::move(job)](client::client_pointer me) {
    job(me, [done](const Status& s) { s.ok() ? done->set_value() : done->set_error(s); });
  });
  if (!sent) return Status(Errc::shutdown, "the client is gone");
  if (!answer.wait_for(timeout)) {
    return Status(Errc::timeout,
                  what + " took more than " + std::to_string(timeout.count()) + " ms");
  }
  auto r = answer.get();
  return r.ok() ? Status() : r.status();
}

}  // namespace

Result<std::vector<wire::RegionRef>> lend_items(const caf::actor_addr& client, Loan& loan,
                                                std::chrono::milliseconds timeout) {
  const auto& segments = loan.segments;
  const auto& offsets = loan.offsets;
  if (!loan.lend_to) return Status(Errc::internal, "lent items but no lending volume");
  if (!segments.empty() &&
      (segments.size() != loan.items.size() || offsets.size() != segments.size())) {
    return Status(Errc::internal, "lent items and their places differ in number");
  }
  protocol::LendRequest req;
  for (std::size_t i = 0; i < loan.items.size(); ++i) {
    const auto& item = loan.items[i];
    if (!item.view.is_contiguous() || item.view.nbytes() == 0) {
      return Status(Errc::internal,
                    "'" + item.key + "': only whole, contiguous, non-empty tensors are lent");
    }
    const int device = internal::cuda::on_device(item.view) ? item.view.device().index : -1;
    req.buffers.push_back(protocol::LentBuffer{
        item.key, reinterpret_cast<std::uint64_t>(item.view.data()), item.view.nbytes(),
        segments.empty() ? "" : segments[i], segments.empty() ? 0 : offsets[i], device});
  }
  req.token = std::move(loan.token);  // only the regions keep it from now on
  req.revocable = loan.revocable;
  auto done = std::make_shared<Promise<std::vector<wire::RegionRef>>>(
      Status(Errc::shutdown, "the client is gone"));
  auto answer = done->future();
  const std::string what = "lend to volume '" + loan.volume + "'";
  const bool sent = run_inside(client, [done, to = loan.lend_to, req = std::move(req), timeout,
                                        what](client::client_pointer me) mutable {
    me->request(to, timeout, protocol::lend_atom::value, std::move(req))
        .then([done](const std::vector<wire::RegionRef>& lent) { done->set_value(lent); },
              [done, what](caf::error& e) { done->set_error(internal::from_caf_error(e, what)); });
  });
  if (!sent) return Status(Errc::shutdown, "the client is gone");
  if (!answer.wait_for(timeout + std::chrono::seconds(1))) {
    return Status(Errc::timeout,
                  what + " took more than " + std::to_string(timeout.count()) + " ms");
  }
  auto lent = answer.get();
  if (lent.ok() && lent->size() != loan.items.size()) {
    give_back_lent(client, loan, *lent);
    return Status(Errc::protocol_error, "the lending volume made " + std::to_string(lent->size()) +
                                            " objects of " + std::to_string(loan.items.size()) +
                                            " buffers");
  }
  return lent;
}

void give_back_lent(const caf::actor_addr& client, const Loan& loan,
                    const std::vector<wire::RegionRef>& lent) {
  if (lent.empty()) return;
  std::vector<std::uint64_t> ids;
  for (const auto& r : lent) ids.push_back(r.region_id);
  run_inside(client, [to = loan.lend_to, ids = std::move(ids)](client::client_pointer me) {
    me->send(to, protocol::discard_atom::value, ids);
  });
}

void reconnect_failed(const caf::actor& client, const std::string& why) {
  run_inside(client.address(), [why](client::client_pointer me) {
    auto& st = me->state;
    st.reconnect_over = why;
    auto parked = std::exchange(st.parked, {});
    for (auto& p : parked) p.fail(Status(Errc::unavailable, "the store is unreachable: " + why));
  });
}

caf::actor spawn_client(caf::actor_system& sys, ClientConfig config,
                        protocol::controller_actor controller, protocol::strategy_actor strategy) {
  if (!config.fast_path) {
    config.fast_path =
        std::make_shared<FastPath>(std::make_shared<LocationCache>(config.max_cached_locations));
  }
  auto fast = config.fast_path;
  const bool evicts = config.evict_lru;
  auto client =
      sys.spawn(client::client_impl, std::move(config), std::move(controller), std::move(strategy));
  using client::client_pointer;
  const caf::actor_addr addr = client.address();
  // A put that finds no channel yet (the first) has the client connect to
  // its volume and open the channel, from the fast path's waiting thread.
  // Set before the first call can come (the actor starts later).
  // The connection answers within its own deadlines: the wait for the
  // strategy to name a volume, then reaching it and opening the channel,
  // each the client's request timeout, counted from when the actor takes
  // the job. Waiting only `timeout` here raced the strategy's own answer
  // (a put failed as a timeout, not with the strategy's why), so this wait
  // only backstops an answer never sent.
  fast->set_home_connector([addr](std::chrono::milliseconds timeout) {
    return status_inside(addr, 3 * timeout + std::chrono::seconds(1),
                         "connecting to this client's volume",
                         [](client_pointer me, std::function<void(Status)> k) {
                           client::await_home_channel(me, std::move(k));
                         });
  });
  // A state dict put over the channel and announced as a stream: this
  // actor is the stream's writer at the controller (its death ends the
  // stream).
  FastPath::StreamHooks hooks;
  hooks.open = [addr](const std::string& key, const std::string& manifest,
                      const std::vector<wire::KeyRecord>& records,
                      const std::vector<std::uint64_t>& filled, std::chrono::milliseconds timeout) {
    // Asked so that a dead controller answers at once (a put then goes on
    // without a stream), not at the timeout.
    return answer_inside(addr, timeout, [=](client_pointer me, std::function<void(bool)> k) {
      ask(me, me->state.controller, protocol::stream_open_atom::value, key, manifest, records,
          filled)
          .within(timeout)
          .then([k](caf::ok_atom) { k(true); }, [k](caf::error&) { k(false); });
    });
  };
  hooks.progress = [addr](const std::string& key, std::vector<std::uint64_t> filled) {
    run_inside(addr, [key, filled = std::move(filled)](client_pointer me) {
      me->send(me->state.controller, protocol::stream_progress_atom::value, key, filled);
    });
  };
  hooks.abort = [addr](const std::string& key, const std::string& why) {
    run_inside(addr, [key, why](client_pointer me) {
      me->send(me->state.controller, protocol::stream_abort_atom::value, key, why);
    });
  };
  fast->set_stream_hooks(std::move(hooks));
  // A put over the channel that a full volume refused has the controller
  // evict there (the client actor asks it), then tries again.
  if (evicts) {
    fast->set_evictor([addr](const std::string& volume_id, std::uint64_t bytes,
                             std::chrono::milliseconds timeout) {
      return answer_inside(addr, timeout, [=](client_pointer me, std::function<void(bool)> k) {
        ask(me, me->state.controller, protocol::evict_atom::value, volume_id, bytes)
            .within(timeout)
            .then([k](const std::vector<std::string>& keys) { k(!keys.empty()); },
                  [k](caf::error&) { k(false); });
      });
    });
  }
  return client;
}

}  // namespace meshstore::client
