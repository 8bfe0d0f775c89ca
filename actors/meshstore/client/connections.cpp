// The client's connections to volumes, and what it does when a peer goes down.

#include "meshstore/client/connections.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>
#include <vector>

#include "meshstore/client/ask.hpp"
#include "meshstore/client/stream.hpp"
#include "meshstore/internal/address.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/transports/copy_engine.hpp"
#include "meshstore/transports/registry.hpp"
#include "meshstore/transports/shm/ring.hpp"

namespace meshstore::client {

using internal::from_caf_error;

namespace {

void finish_conn(client_pointer self, const std::string& id, const ConnResult& r) {
  auto waiters = std::move(self->state.conn_waiters[id]);
  self->state.conn_waiters.erase(id);
  if (r.ok()) self->state.conns[id] = *r;
  for (auto& w : waiters) w(r);
}

// The channel to `volume_id` opened or did not (`why`): those waiting for
// it (await_home_channel) hear which.
void channel_settled(client_pointer self, const std::string& volume_id, Status why = Status()) {
  auto& st = self->state;
  const bool open = st.cfg.fast_path->has_ring(volume_id);
  if (open) {
    st.channel_refused.erase(volume_id);
  } else {
    if (why.ok()) why = Status(Errc::unavailable, "the volume went down or was replaced");
    why = why.with_context("no channel to volume '" + volume_id + "'");
    st.log->info("client rank {}: {}", st.cfg.me.rank, why.to_string());
    st.channel_refused[volume_id] = why;
  }
  auto it = st.channel_waiters.find(volume_id);
  if (it == st.channel_waiters.end()) return;
  auto waiters = std::move(it->second);
  st.channel_waiters.erase(it);
  for (auto& w : waiters) w(open ? Status() : why);
}

void open_small_ops(client_pointer self, const std::string& volume_id,
                    const protocol::storage_volume_actor& handle,
                    std::shared_ptr<transports::Transport> transport);

// Opens the fast path's ring to a volume this client reaches over shm (one
// host): creates it, has the volume attach it, and hands it to the fast
// path. Where that fails (/dev/shm full, the volume refused it), the
// channel is actor messages instead (open_small_ops), as for a transport
// without a channel of its own.
void open_ring(client_pointer self, const std::string& volume_id,
               const protocol::storage_volume_actor& handle,
               std::shared_ptr<transports::Transport> transport) {
  auto& st = self->state;
  st.channel_waiters[volume_id];  // being opened
  auto instead = [self, volume_id, handle, transport](const Status& why) {
    self->state.log->info("client rank {} -> volume '{}': no ring ({}): actor messages instead",
                          self->state.cfg.me.rank, volume_id, why.to_string());
    open_small_ops(self, volume_id, handle, transport);
  };
  transports::shm::Ring::Options o;
  o.slots = 4;  // one request at a time per ring
  o.slot_bytes = static_cast<std::uint32_t>(protocol::fast_get::kMaxObjectBytes + 64);
  o.spin = st.cfg.ring_spin;
  auto ring = transports::shm::Ring::create(o);
  if (!ring.ok()) return instead(ring.status());
  auto held = std::make_shared<std::unique_ptr<transports::shm::Ring>>(std::move(ring).value());
  const std::string name = (*held)->name();
  ask(self, handle, protocol::ring_attach_atom::value, name, static_cast<std::int32_t>(::getpid()),
      caf::actor_cast<caf::actor>(self->state.controller))
      .then(
          [self, volume_id, handle, held, instead](const std::string& doorbell) {
            auto& st = self->state;
            auto it = st.conns.find(volume_id);
            // Not if the volume went down (or was replaced) meanwhile.
            if (it == st.conns.end() || it->second->handle != handle) {
              return channel_settled(self, volume_id);
            }
            auto bell = transports::shm::Doorbell::open(doorbell);
            if (!bell.ok()) return instead(bell.status());
            (*held)->use_doorbell(std::move(bell).value());
            st.cfg.fast_path->add_ring(volume_id, std::move(*held), it->second->transport);
            channel_settled(self, volume_id);
          },
          [self, volume_id, instead](caf::error& e) {
            auto s = from_caf_error(e, "ring_attach");
            // A volume that is down has no channel of any kind.
            if (s.code() == Errc::unavailable) return channel_settled(self, volume_id, s);
            instead(s);
          });
}

// The channel to a volume whose transport carries none of its own (cma,
// rpc, rdma): each request in an actor message to the volume (small_op),
// sent and answered through the client actor; the caller waits for the
// answer. Only weak references: the fast path may outlive the actors.
class ActorChannel final : public transports::SmallOps {
 public:
  ActorChannel(caf::actor_addr client, caf::actor_addr volume, std::string volume_id)
      : client_(std::move(client)), volume_(std::move(volume)), volume_id_(std::move(volume_id)) {}

  Result<std::vector<std::byte>> exchange(const std::byte* request, std::size_t n,
                                          std::chrono::steady_clock::time_point deadline) override {
    using namespace std::chrono;
    auto client = caf::actor_cast<caf::actor>(client_);
    if (!client) return Status(Errc::unavailable, "the client stopped");
    auto promise = std::make_shared<Promise<std::vector<std::byte>>>(Status(
        Errc::unavailable, "the client stopped before volume '" + volume_id_ + "' answered"));
    auto reply = promise->future();
    const auto* p = reinterpret_cast<const char*>(request);
    const auto timeout =
        std::max(duration_cast<milliseconds>(deadline - steady_clock::now()), milliseconds(1));
    auto me = caf::actor_cast<client_pointer>(client);  // runs only inside that actor
    caf::anon_send(
        client, protocol::run_atom::value,
        internal::Closure{[me, volume = volume_, id = volume_id_, promise, timeout,
                           bytes = std::vector<char>(p, p + n)]() mutable {
          auto handle = caf::actor_cast<protocol::storage_volume_actor>(volume);
          if (!handle) {
            return (void)promise->set_error(
                Status(Errc::unavailable, "volume '" + id + "' stopped"));
          }
          me->request(handle, timeout, protocol::small_op_atom::value, std::move(bytes))
              .then(
                  [promise](const std::vector<char>& r) {
                    const auto* b = reinterpret_cast<const std::byte*>(r.data());
                    promise->set_value(std::vector<std::byte>(b, b + r.size()));
                  },
                  [promise, id](caf::error& e) {
                    promise->set_error(from_caf_error(e, "small request to volume '" + id + "'"));
                  });
        }});
    if (!reply.wait_for(std::max(deadline - steady_clock::now(), steady_clock::duration::zero()))) {
      return Status(Errc::timeout, "volume '" + volume_id_ + "' did not answer a small request");
    }
    return reply.get();
  }

 private:
  const caf::actor_addr client_;
  const caf::actor_addr volume_;
  const std::string volume_id_;
};

// Opens the fast path's channel to a volume this client reaches over any
// transport but shm (or over shm without a ring): attaches a fresh token
// at the volume (whose puts it commits for this client), then opens the
// transport's small-operations channel (tcp) off this actor's thread (a
// connect may take long), or else one over actor messages (ActorChannel),
// and hands it to the fast path, unless the connection changed meanwhile.
// A failure is what waiters hear (channel_settled).
void open_small_ops(client_pointer self, const std::string& volume_id,
                    const protocol::storage_volume_actor& handle,
                    std::shared_ptr<transports::Transport> transport) {
  std::random_device rd;
  const std::uint64_t token = (std::uint64_t{rd()} << 32) ^ rd();
  self->state.channel_waiters[volume_id];  // being opened
  ask(self, handle, protocol::small_attach_atom::value, token,
      caf::actor_cast<caf::actor>(self->state.controller))
      .then(
          [self, volume_id, handle, transport, token](caf::ok_atom) {
            // Only weak references on the copy thread, which may wait long
            // for a connect: a strong handle there could hold up shutdown.
            const caf::actor_addr client = self->address();
            const caf::actor_addr volume = handle.address();
            (void)transports::CopyEngine::instance().run([client, volume_id, volume, transport,
                                                          token] {
              auto ops = transport->open_small_ops();
              if (!ops.ok() && ops.status().code() == Errc::unsupported) {
                ops = std::unique_ptr<transports::SmallOps>(
                    std::make_unique<ActorChannel>(client, volume, volume_id));
              }
              auto hdl = caf::actor_cast<caf::actor>(client);
              if (!hdl) return;  // the client is gone; the channel closes here
              auto held =
                  std::make_shared<Result<std::unique_ptr<transports::SmallOps>>>(std::move(ops));
              auto me = caf::actor_cast<client_pointer>(hdl);  // runs only inside that actor
              caf::anon_send(hdl, protocol::run_atom::value,
                             internal::Closure{[me, volume_id, volume, held, token] {
                               auto& st = me->state;
                               if (!held->ok())
                                 return channel_settled(me, volume_id, held->status());
                               auto it = st.conns.find(volume_id);
                               // Not if the volume went down (or was replaced) meanwhile.
                               if (it == st.conns.end() || it->second->handle.address() != volume) {
                                 return channel_settled(me, volume_id);
                               }
                               st.cfg.fast_path->add_remote(volume_id, std::move(**held), token,
                                                            it->second->transport);
                               channel_settled(me, volume_id);
                             }});
            });
          },
          [self, volume_id](caf::error& e) {
            channel_settled(self, volume_id, from_caf_error(e, "small_attach"));
          });
}

// Opens the channel to `conn`'s volume: a ring over shm, else the
// transport's small-operations channel or actor messages.
void open_channel(client_pointer self, const VolumeConn& conn) {
  if (conn.transport->name() == "shm") {
    open_ring(self, conn.info.volume_id, conn.handle, conn.transport);
  } else {
    open_small_ops(self, conn.info.volume_id, conn.handle, conn.transport);
  }
}

// The channel to `conn`'s volume failed (FastPath::take_reopen): a new one
// opens, unless one is opening. Once per failure.
void reopen_if_failed(client_pointer self, const VolumeConn& conn) {
  const auto& id = conn.info.volume_id;
  if (self->state.channel_waiters.count(id) != 0) return;  // opening
  auto& fast = *self->state.cfg.fast_path;
  if (fast.take_reopen(id) && !fast.has_ring(id)) open_channel(self, conn);
}

// Connects this process to the process hosting `info`'s volume directly,
// through its door (VolumeInfo::control), once per process and before the
// first message to it: CAF then routes their messages without the store's
// server (docs/internals/connections.md, "Direct connections"). Then `k`, whatever
// the outcome: the server still routes when the door cannot be reached.
void reach_directly(client_pointer self, const wire::VolumeInfo& info,
                    const protocol::storage_volume_actor& handle, std::function<void()> k) {
  if (handle.node() == self->node()) return k();
  internal::reach_door(self, self->state.doors, info.control, self->state.cfg.request_timeout,
                       "volume '" + info.volume_id + "'", std::move(k));
}

// Asks the volume for its endpoints and opens the chosen transport.
void ask_endpoints(client_pointer self, const wire::VolumeInfo& info,
                   const protocol::storage_volume_actor& handle) {
  ask(self, handle, protocol::endpoints_atom::value)
      .then(
          [=](const std::vector<transports::EndpointInfo>& offered) {
            auto& st = self->state;
            auto& registry = transports::builtin_registry();
            auto chosen = transports::select_transport(registry, offered, st.cfg.forced_transport,
                                                       info.volume_id);
            if (!chosen.ok()) return finish_conn(self, info.volume_id, chosen.status());
            auto factory = registry.find(chosen->transport);
            if (!factory.ok()) return finish_conn(self, info.volume_id, factory.status());
            transports::ClientContext ctx{&self->system(), st.cfg.transport_config};
            auto transport = factory->make_client(ctx, *chosen);
            if (!transport.ok()) {
              return finish_conn(
                  self, info.volume_id,
                  transport.status().with_context("volume '" + info.volume_id + "'"));
            }
            st.log->info("client rank {} -> volume '{}': transport {}", st.cfg.me.rank,
                         info.volume_id, chosen->transport);
            auto conn = std::make_shared<VolumeConn>();
            conn->info = info;
            conn->handle = handle;
            conn->transport = std::shared_ptr<transports::Transport>(std::move(transport).value());
            // The channel starts opening before the callers waiting for the
            // connection run: one of them may wait for the channel too.
            open_channel(self, *conn);
            finish_conn(self, info.volume_id, conn);
          },
          [=](caf::error& e) {
            finish_conn(self, info.volume_id,
                        from_caf_error(e, "endpoints of volume '" + info.volume_id + "'"));
          });
}

// Connects to the volume: directly to its process first, then its endpoints.
void connect(client_pointer self, const wire::VolumeInfo& info,
             const protocol::storage_volume_actor& handle) {
  reach_directly(self, info, handle, [=] { ask_endpoints(self, info, handle); });
}

}  // namespace

void with_volume(client_pointer self, const std::string& id, ConnCallback k) {
  auto& st = self->state;
  if (auto it = st.conns.find(id); it != st.conns.end()) {
    reopen_if_failed(self, *it->second);
    return k(it->second);
  }
  auto& waiters = st.conn_waiters[id];
  waiters.push_back(std::move(k));
  if (waiters.size() > 1) return;  // already being set up
  ask(self, st.controller, protocol::volume_atom::value, id)
      .then([=](const wire::VolumeInfo& info,
                const protocol::storage_volume_actor& handle) { connect(self, info, handle); },
            [=](caf::error& e) {
              auto s = from_caf_error(e, "volume '" + id + "'");
              // Every caller learnt the id from the controller or the strategy
              // moments ago: a volume the controller no longer knows went down
              // (its down message reached the controller before ours reached
              // us) or left.
              if (s.code() == Errc::not_found) {
                s = Status(Errc::unavailable, "volume '" + id + "' went down or left the store");
              }
              finish_conn(self, id, s);
            });
}

namespace {

// Asks the strategy for this client's volume. While the strategy answers
// Errc::unavailable (the volume this client should use has not registered
// yet: ranks start in any order), asks again every 50 ms until `deadline`;
// not once the placement is final (spawn_store: every process joined).
void select_home(client_pointer self, std::function<void(const ConnResult&)> finish,
                 std::chrono::steady_clock::time_point deadline) {
  auto& st = self->state;
  ask(self, st.strategy, protocol::select_atom::value, st.cfg.me)
      .then(
          [=](const wire::VolumeInfo& info, const protocol::storage_volume_actor&) {
            // Remembered only once connected: a volume that died in the
            // meantime must not stay this client's home.
            with_volume(self, info.volume_id,
                        [self, finish, id = info.volume_id](const ConnResult& r) {
                          if (r.ok()) {
                            self->state.home_volume = id;
                            self->state.cfg.fast_path->set_home(id);
                            self->state.home_lost.clear();
                          }
                          finish(r);
                        });
          },
          [=](caf::error& e) {
            auto s = from_caf_error(e, "strategy select");
            if (s.code() == Errc::unavailable && !self->state.home_lost.empty()) {
              // Not a volume yet to register: this client's own went down.
              return finish(Status(Errc::unavailable,
                                   "this client's " + self->state.home_lost +
                                       ", and the store has no other for it: " + s.message()));
            }
            if (s.code() == Errc::unavailable && self->state.placement_final) {
              // No volume is still to register: "none fits" is the answer.
              return finish(Status(Errc::unavailable,
                                   s.message() + "; every process of the store has joined, "
                                                 "so no volume will come for this client"));
            }
            const bool retry =
                s.code() == Errc::unavailable && self->state.control_down.empty() &&
                std::chrono::steady_clock::now() + std::chrono::milliseconds(50) < deadline;
            if (!retry) return finish(s);
            self->delayed_send(self, std::chrono::milliseconds(50), protocol::run_atom::value,
                               internal::Closure{[=] { select_home(self, finish, deadline); }});
          });
}

}  // namespace

void with_home_volume(client_pointer self, ConnCallback k) {
  auto& st = self->state;
  if (!st.home_volume.empty()) {
    return with_volume(self, st.home_volume, [self, k = std::move(k)](const ConnResult& r) {
      if (!r.ok()) {
        self->state.home_volume.clear();  // ask the strategy next time
        self->state.cfg.fast_path->set_home("");
      }
      k(r);
    });
  }
  st.home_waiters.push_back(std::move(k));
  if (st.home_pending) return;
  st.home_pending = true;
  auto finish = [self](const ConnResult& r) {
    auto& st = self->state;
    st.home_pending = false;
    auto waiters = std::move(st.home_waiters);
    st.home_waiters.clear();
    for (auto& w : waiters) w(r);
  };
  select_home(self, finish, std::chrono::steady_clock::now() + st.cfg.request_timeout);
}

void await_home_channel(client_pointer self, std::function<void(Status)> k) {
  with_home_volume(self, [self, k = std::move(k)](const ConnResult& r) {
    auto& st = self->state;
    if (!r.ok()) return k(r.status());
    const auto& id = (*r)->info.volume_id;
    if (st.cfg.fast_path->has_ring(id)) return k(Status());
    reopen_if_failed(self, **r);
    auto it = st.channel_waiters.find(id);
    if (it != st.channel_waiters.end()) return it->second.push_back(k);
    // None opening: it failed to open before; this call opens one again.
    open_channel(self, **r);
    it = st.channel_waiters.find(id);
    if (it != st.channel_waiters.end()) return it->second.push_back(k);
    auto refused = st.channel_refused.find(id);
    k(refused != st.channel_refused.end()
          ? refused->second
          : Status(Errc::unavailable, "no channel to volume '" + id + "'"));
  });
}

namespace {

// `source` went down for `reason`: forget it, and fail every request
// waiting on it.
void peer_gone(client_pointer self, const caf::actor_addr& source, const std::string& reason) {
  auto& st = self->state;
  st.monitored.erase(source);
  std::string name = "peer";
  if (source == st.controller.address()) {
    name = "the controller";
  } else if (source == st.strategy.address()) {
    name = "the strategy";
  }
  for (auto it = st.conns.begin(); it != st.conns.end();) {
    if (it->second->handle.address() != source) {
      ++it;
      continue;
    }
    const std::string id = it->first;
    name = "volume '" + id + "'";
    // Transfers in flight on its transport end now, not at a socket's
    // timeout (a host cut off sends no FIN).
    if (it->second->transport) {
      it->second->transport->abort(Status(Errc::unavailable, name + " went down (" + reason + ")"));
    }
    if (st.home_volume == id) {
      st.home_volume.clear();
      st.cfg.fast_path->set_home("");
      st.home_lost = name + " went down (" + reason + ")";
    }
    st.locations->erase_on_volume(id);
    st.cfg.fast_path->close_ring(id);
    it = st.conns.erase(it);
  }
  const std::string why = name + " went down (" + reason + ")";
  // Stopped in order (its store closing): news, not trouble.
  static const std::string kShutdown =
      caf::to_string(caf::make_error(caf::exit_reason::user_shutdown));
  static const std::string kNormal = caf::to_string(caf::make_error(caf::exit_reason::normal));
  const bool orderly = reason == kShutdown || reason == kNormal;
  if ((name == "the controller" || name == "the strategy") && st.control_down.empty()) {
    st.control_down = why;
    st.control_down_at = std::chrono::steady_clock::now();
    st.control_closed = orderly;
    if (st.cfg.on_control_down && !(orderly && st.cfg.orderly_stop_closes)) {
      st.cfg.on_control_down(why);
    }
  }
  if (name == "the controller") {
    controller_gone(self, why);
    // Every call fails from now on, the fast path's direct reads too.
    st.locations->clear();
  }
  st.log->log(orderly ? spdlog::level::info : spdlog::level::warn, "client rank {}: {}",
              st.cfg.me.rank, why);
  auto w = st.waiting.find(source);
  if (w == st.waiting.end()) return;
  auto waiters = std::move(w->second);
  st.waiting.erase(w);
  auto err = internal::to_caf_error(Status(Errc::unavailable, why));
  for (auto& [token, fail] : waiters) fail(err);
}

}  // namespace

void peer_down(client_pointer self, const caf::down_msg& msg) {
  peer_gone(self, msg.source, caf::to_string(msg.reason));
}

void volume_gone(client_pointer self, const std::string& id, const std::string& reason) {
  auto it = self->state.conns.find(id);
  if (it != self->state.conns.end()) return peer_gone(self, it->second->handle.address(), reason);
  // Being connected to (the controller named it before it went): those
  // waiting fail now, not when a request to its dead process times out
  // (CAF tells only directly connected nodes of a death).
  if (self->state.conn_waiters.count(id) != 0) {
    finish_conn(self, id,
                Status(Errc::unavailable, "volume '" + id + "' went down (" + reason + ")"));
  }
}

}  // namespace meshstore::client
