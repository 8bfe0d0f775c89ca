// The machinery every actor mesh shares (actor_mesh.hpp): the caller (its
// requests in mesh_requests.cpp), and supervision on its caller actor,
// which applies a mesh's FailurePolicy when a member goes down. Mesh
// (mesh.cpp) and ProcMesh (proc_mesh.cpp) build their meshes on it.
#include "meshstore/actor_mesh.hpp"

#include <algorithm>
#include <caf/io/all.hpp>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/mesh_requests.hpp"
#include "meshstore/internal/mesh_runtime.hpp"
#include "meshstore/logging.hpp"

namespace meshstore {

// A job for a mesh's caller actor (local only: it carries a closure).
struct MeshJob {
  std::shared_ptr<internal::MeshCaller::Job> job;
};

}  // namespace meshstore

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::MeshJob)

namespace meshstore {
namespace {

// The caller's requests still waiting, by watch id, with their targets.
struct CallerState {
  static inline const char* name = "meshstore.mesh_caller";
  std::uint64_t next = 1;
  std::map<std::uint64_t, std::pair<caf::actor_addr, std::function<void(const Status&)>>> waiting;
  std::set<caf::actor_addr> monitored;
  std::set<caf::actor_addr> dead;             // every actor seen going down
  std::weak_ptr<internal::MeshCaller> owner;  // supervision
};
using caller_pointer = caf::stateful_actor<CallerState>*;

// Monitors `target` from the caller, once however often it is asked.
void monitor_once(caller_pointer caller, const caf::actor_addr& target) {
  if (caller->state.monitored.insert(target).second) caller->monitor(target);
}

caf::behavior caller_impl(caller_pointer self, std::weak_ptr<internal::MeshCaller> owner) {
  self->state.owner = std::move(owner);
  self->set_down_handler([=](caf::down_msg& m) {
    auto& st = self->state;
    st.monitored.erase(m.source);
    // A dead member can be monitored again (a call to it before its
    // restart): only its first down message is a failure.
    const bool first = st.dead.insert(m.source).second;
    const Status why(Errc::unavailable, "went down (" + caf::to_string(m.reason) + ")");
    std::vector<std::function<void(const Status&)>> fire;
    for (auto it = st.waiting.begin(); it != st.waiting.end();) {
      if (it->second.first == m.source) {
        fire.push_back(std::move(it->second.second));
        it = st.waiting.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& f : fire) f(why);
    if (!first) return;
    if (auto owner = st.owner.lock()) owner->member_down(self, m.source, m.reason);
  });
  return {
      [=](MeshJob& j) { (*j.job)(self); },
  };
}

}  // namespace

caf::error actor_error(const Status& status) { return internal::to_caf_error(status); }

Status internal::port_receiver_gone() {
  return Status(Errc::unavailable, "port: its receiver is gone (closed, or its process went away)");
}

Status internal::port_error(const caf::error& e) {
  // The monitor heard of the port's actor's death (a close, or its
  // process's), or CAF answered the request with the same: one wording,
  // whichever came first, with CAF's reason beside it.
  auto s = from_caf_error(e, "port");
  if (s.code() != Errc::unavailable || e.category() != caf::atom("system")) return s;
  if (e == caf::sec::request_receiver_down) return port_receiver_gone();
  return Status(Errc::unavailable,
                "port: its receiver is gone or unreachable (" + caf::to_string(e) + ")");
}

Status internal::port_reply_error(const caf::error& e) {
  return from_caf_error(e, "port: a member's call failed");
}

void internal::port_reply_dropped(std::size_t capacity) {
  log::get("mesh")->warn(
      "port: full ({} values not received): a member's reply to ActorMesh::send was dropped",
      capacity);
}

caf::behavior internal::ready_waiter(caf::stateful_actor<ReadyWaiterState>* self,
                                     std::chrono::milliseconds timeout) {
  return {
      [=](ready_wait_atom) {
        auto rp = self->make_response_promise();
        if (self->state.done) {
          rp.deliver(true);
          self->quit();
          return;
        }
        self->state.waiting = std::move(rp);
      },
      [=](ready_done_atom) {
        if (!self->state.waiting.pending()) {
          self->state.done = true;
          return;
        }
        self->state.waiting.deliver(true);
        self->quit();
      },
      caf::after(timeout) >>
          [=] {
            if (self->state.waiting.pending()) {
              self->state.waiting.deliver(caf::make_error(caf::sec::request_timeout));
            }
            self->quit();
          },
  };
}

void internal::run_stop_hook(const std::function<void(const Status&)>& hook,
                             const caf::error& reason) {
  Status why;
  if (reason && reason != caf::exit_reason::normal && reason != caf::exit_reason::user_shutdown) {
    why = from_caf_error(reason, "stopped");
  }
  try {
    hook(why);
  } catch (const std::exception& e) {
    log::get("mesh")->warn("an on_stop hook threw: {}", e.what());
  } catch (...) {
    log::get("mesh")->warn("an on_stop hook threw a non-standard exception");
  }
}

namespace internal {

Status check_mesh_options(const MeshOptions& options, const std::string& context) {
  if (options.request_timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return Status(Errc::invalid_argument,
                  context + ": request_timeout and connect_timeout must be positive");
  }
  if (options.heartbeat_interval.count() <= 0 ||
      options.connection_timeout <= options.heartbeat_interval) {
    return Status(Errc::invalid_argument,
                  context +
                      ": heartbeat_interval must be positive and connection_timeout "
                      "longer than it");
  }
  return Status();
}

RuntimeOptions mesh_runtime_options(const MeshOptions& options, bool network,
                                    std::function<void(caf::actor_system_config&)> own_types) {
  RuntimeOptions ro;
  ro.scheduler_threads = options.scheduler_threads;
  ro.with_middleman = network;
  ro.heartbeat_interval = options.heartbeat_interval;
  ro.connection_timeout = options.connection_timeout;
  ro.tls = options.tls;
  ro.add_types = [own = std::move(own_types),
                  user = options.add_types](caf::actor_system_config& cfg) {
    if (own) own(cfg);
    if (user) user(cfg);
  };
  return ro;
}

std::string interface_text(const std::vector<std::string>& sigs) {
  if (sigs.empty()) return "(untyped)";
  std::string out;
  for (const auto& s : sigs) out += (out.empty() ? "" : ", ") + s;
  return out;
}

Result<caf::actor> spawn_named(caf::execution_unit* host, const std::string& type,
                               const std::vector<std::string>& interface, caf::message& args,
                               const std::string& what) {
  auto& sys = host->system();
  const auto& factories = sys.config().actor_factories;
  auto it = factories.find(type);
  if (it == factories.end()) {
    std::string known;
    for (const auto& [name, f] : factories) known += (known.empty() ? "" : ", ") + name;
    return Status(Errc::not_found, what + ": no actor type '" + type +
                                       "' is registered there (registered: " +
                                       (known.empty() ? "none" : known) + ")");
  }
  caf::actor_config cfg{host};
  auto made = it->second(cfg, args);
  if (!made.first) {
    return Status(Errc::invalid_argument,
                  what + ": actor type '" + type + "' does not take the arguments " +
                      caf::to_string(args) + " (a rank, then the arguments spawn() was given)");
  }
  const std::vector<std::string> has(made.second.begin(), made.second.end());
  if (has != interface) {
    caf::anon_send_exit(made.first, caf::exit_reason::user_shutdown);
    return Status(Errc::invalid_argument, what + ": actor type '" + type + "' has the interface " +
                                              interface_text(has) + ", not the handle's " +
                                              interface_text(interface));
  }
  return caf::actor_cast<caf::actor>(std::move(made.first));
}

Status mesh_rank_error(int rank, const caf::error& e) {
  return from_caf_error(e, "rank " + std::to_string(rank));
}

std::shared_ptr<MeshCaller> MeshCaller::make(caf::actor_system& sys, RootHandler root) {
  std::shared_ptr<MeshCaller> c(new MeshCaller());
  c->root_ = std::move(root);
  {
    ForeignThreadGuard guard;  // the mesh may be made on any thread
    c->caller_ = sys.spawn(caller_impl, std::weak_ptr<MeshCaller>(c));
  }
  c->requests_ = make_requests(sys);
  return c;
}

MeshCaller::~MeshCaller() { close(); }

Status MeshCaller::check_owner(const std::string& owner) const {
  if (owner.empty()) return Status();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& s : supervised_) {
    if (s.name == owner) return Status();
  }
  return Status(Errc::invalid_argument,
                "Supervision::owner: no mesh '" + owner + "' was spawned here before");
}

std::size_t MeshCaller::add_mesh(std::string name, std::vector<caf::actor> members, bool supervise,
                                 Supervision sup, Respawn respawn) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t id = meshes_.size();
  std::ptrdiff_t owner = -1;
  for (std::size_t m = 0; m < supervised_.size() && !sup.owner.empty(); ++m) {
    if (supervised_[m].name == sup.owner) owner = static_cast<std::ptrdiff_t>(m);
  }
  const bool owner_stopped =
      owner >= 0 && !supervised_[static_cast<std::size_t>(owner)].stopped.empty();
  if (supervise && caller_) {
    // Monitored from the caller itself (monitors are the actor's own).
    auto watched = members;
    caf::anon_send(caller_, MeshJob{std::make_shared<Job>([watched](caf::event_based_actor* self) {
                     for (const auto& a : watched) {
                       monitor_once(static_cast<caller_pointer>(self), a.address());
                     }
                   })});
  }
  meshes_.push_back(std::move(members));
  Supervised s;
  s.name = std::move(name);
  s.supervise = supervise;
  s.sup = std::move(sup);
  s.respawn = std::move(respawn);
  s.owner = owner;
  supervised_.push_back(std::move(s));
  // Spawned under an owner that stopped meanwhile: it stops at once.
  if (owner_stopped) {
    const auto& o = supervised_[static_cast<std::size_t>(owner)];
    stop_mesh_locked(id, "its owner '" + o.name + "' stopped after " + o.stopped);
  }
  return id;
}

caf::actor MeshCaller::member(std::size_t id, int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= meshes_.size() || rank < 0 || static_cast<std::size_t>(rank) >= meshes_[id].size() ||
      !supervised_[id].stopped.empty()) {
    return caf::actor();
  }
  return meshes_[id][static_cast<std::size_t>(rank)];
}

Status MeshCaller::gone(std::size_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (caller_ && id < supervised_.size() && !supervised_[id].stopped.empty()) {
    return Status(Errc::unavailable, "mesh '" + supervised_[id].name + "' was stopped after " +
                                         supervised_[id].stopped);
  }
  return Status(Errc::shutdown, "the mesh is closed");
}

Status MeshCaller::unless_stopped(std::size_t id, int rank, Status s) const {
  if (s.code() != Errc::unavailable) return s;
  std::lock_guard<std::mutex> lock(mu_);
  if (!caller_ || id >= supervised_.size() || supervised_[id].stopped.empty()) return s;
  return Status(Errc::unavailable, "rank " + std::to_string(rank) + ": mesh '" +
                                       supervised_[id].name + "' was stopped after " +
                                       supervised_[id].stopped);
}

void MeshCaller::departed(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  departed_.push_back(rank);
}

bool MeshCaller::find_failed(const caf::actor_addr& addr, std::size_t& id, int& rank,
                             Supervised& mesh) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!caller_) return false;  // closing: every member goes
  rank = -1;
  for (std::size_t m = 0; m < meshes_.size() && rank < 0; ++m) {
    if (!supervised_[m].supervise || !supervised_[m].stopped.empty()) continue;
    for (std::size_t r = 0; r < meshes_[m].size(); ++r) {
      if (meshes_[m][r].address() == addr) {
        id = m;
        rank = static_cast<int>(r);
        break;
      }
    }
  }
  if (rank < 0) return false;
  if (std::find(departed_.begin(), departed_.end(), rank) != departed_.end()) return false;
  mesh = supervised_[id];
  return true;
}

void MeshCaller::member_down(caf::event_based_actor* self, const caf::actor_addr& addr,
                             const caf::error& reason) {
  // An actor that chose to stop is no failure.
  if (reason == caf::exit_reason::normal) return;
  std::size_t id = 0;
  int rank = -1;
  Supervised mesh;
  if (!find_failed(addr, id, rank, mesh)) return;
  MeshFailure f;
  f.rank = rank;
  f.mesh = mesh.name;
  f.why = Status(Errc::unavailable, "rank " + std::to_string(rank) + " of mesh '" + f.mesh +
                                        "' went down (" + caf::to_string(reason) + ")");
  // Calls to the mesh wait until the failure is dealt with (held): then
  // they go to the members it has (a restart's new one), or answer why it
  // has none (stopped).
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_.emplace(id, std::vector<std::function<void()>>{});
  }
  const Supervision& sup = mesh.sup;
  if (sup.on_failure && sup.on_failure(f)) return release_held(id, rank);
  switch (sup.policy) {
    case FailurePolicy::restart:
      return restart(self, id, f, sup, mesh.respawn);
    case FailurePolicy::stop:
      stop_mesh(id, f);
      return release_held(id, rank);
    case FailurePolicy::propagate:
      propagate(id, f);
      return release_held(id, rank);
  }
}

bool MeshCaller::member_or_hold(std::size_t id, int rank,
                                const std::function<std::function<void()>()>& again,
                                caf::actor& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(id);
  if (it != held_.end()) {
    it->second.push_back(again());
    return true;
  }
  if (id < meshes_.size() && rank >= 0 && static_cast<std::size_t>(rank) < meshes_[id].size() &&
      supervised_[id].stopped.empty()) {
    out = meshes_[id][static_cast<std::size_t>(rank)];
  }
  return false;
}

void MeshCaller::release_held(std::size_t id, int rank) {
  std::vector<std::function<void()>> again;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = held_.find(id);
    if (it == held_.end()) return;
    again = std::move(it->second);
    held_.erase(it);
  }
  for (auto& f : again) f();
}

void MeshCaller::restart(caf::event_based_actor* self, std::size_t id, const MeshFailure& f,
                         const Supervision& sup, const Respawn& respawn) {
  const auto now = std::chrono::steady_clock::now();
  bool allowed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& times = supervised_[id].restarts;
    times.erase(
        std::remove_if(times.begin(), times.end(), [&](auto t) { return now - t > sup.window; }),
        times.end());
    allowed = static_cast<int>(times.size()) < sup.max_restarts;
    if (allowed) times.push_back(now);
  }
  const int rank = f.rank;
  if (!allowed || !respawn) {
    stop_mesh(id, f);
    return release_held(id, rank);
  }
  // `done` runs on the caller actor, now or when the spawn answers.
  respawn(self, rank, [me = shared_from_this(), self, id, rank, f](caf::actor fresh) {
    if (!fresh) {
      me->stop_mesh(id, f);
      return me->release_held(id, rank);
    }
    {
      std::lock_guard<std::mutex> lock(me->mu_);
      if (me->caller_) me->meshes_[id][static_cast<std::size_t>(rank)] = fresh;
    }
    monitor_once(static_cast<caller_pointer>(self), fresh.address());
    me->release_held(id, rank);
  });
}

void MeshCaller::propagate(std::size_t id, const MeshFailure& f) {
  // Up the ownership tree: each owner may take it; an owner that stops on
  // failures stops (with what it owns); the others pass it on.
  for (;;) {
    std::ptrdiff_t up = -1;
    Supervision owner_sup;
    {
      std::lock_guard<std::mutex> lock(mu_);
      up = supervised_[id].owner;
      if (up >= 0) owner_sup = supervised_[static_cast<std::size_t>(up)].sup;
    }
    if (up < 0) break;
    id = static_cast<std::size_t>(up);
    if (owner_sup.on_failure && owner_sup.on_failure(f)) return;
    if (owner_sup.policy == FailurePolicy::stop) return stop_mesh(id, f);
  }
  RootHandler root;
  {
    std::lock_guard<std::mutex> lock(mu_);
    root = root_;
  }
  if (root && root(f)) return;
  // The root of the tree: fail fast, as a launched job's rank should.
  log::get("mesh")->critical("unhandled mesh failure, exiting: {}", f.to_string());
  log::get("mesh")->flush();
  std::fprintf(stderr, "meshstore: unhandled mesh failure, exiting: %s\n", f.to_string().c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

void MeshCaller::stop_mesh(std::size_t id, const MeshFailure& f) {
  std::lock_guard<std::mutex> lock(mu_);
  stop_mesh_locked(id, f.why.message());
}

void MeshCaller::stop_mesh_locked(std::size_t id, const std::string& why) {
  if (id >= supervised_.size() || !supervised_[id].stopped.empty()) return;
  supervised_[id].stopped = why;
  for (const auto& a : meshes_[id]) {
    if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  // What it owns stops with it.
  for (std::size_t m = 0; m < supervised_.size(); ++m) {
    if (supervised_[m].owner == static_cast<std::ptrdiff_t>(id)) {
      stop_mesh_locked(m, "its owner '" + supervised_[id].name + "' stopped after " + why);
    }
  }
}

Status MeshCaller::post(Job job, const std::string& what, std::chrono::milliseconds after) const {
  // Under the lock: close() cannot stop the system between the check and
  // the send.
  std::lock_guard<std::mutex> lock(mu_);
  if (!caller_) return Status(Errc::shutdown, "mesh: " + what + ": the mesh is closed");
  MeshJob j{std::make_shared<Job>(std::move(job))};
  if (after.count() > 0) {
    caf::delayed_anon_send(caller_, after, std::move(j));
  } else {
    caf::anon_send(caller_, std::move(j));
  }
  return Status();
}

std::vector<caf::actor> MeshCaller::close() {
  auto companion = close_requests();
  std::unique_lock<std::mutex> lock(mu_);
  if (caller_ && companion && delivering_here(*requests_)) {
    // Closed by an answer its companion is delivering, whose enqueue holds
    // the lock disconnect() takes: the caller actor stops it, then quits.
    caf::anon_send(caller_,
                   MeshJob{std::make_shared<Job>([companion](caf::event_based_actor* self) {
                     stop_companion(companion);
                     self->quit(caf::exit_reason::user_shutdown);
                   })});
    companion = nullptr;
  } else if (caller_) {
    caf::anon_send_exit(caller_, caf::exit_reason::user_shutdown);
  }
  caller_ = nullptr;
  std::vector<caf::actor> held;
  for (auto& members : meshes_) {
    for (auto& m : members) {
      if (m) held.push_back(std::move(m));
    }
  }
  meshes_.clear();
  auto held_calls = std::move(held_);
  held_.clear();
  lock.unlock();
  for (auto& [member, again] : held_calls) {
    for (auto& f : again) f();  // each answers shutdown now
  }
  // Not under `mu_`: an answer being delivered may need it to finish.
  if (companion) stop_companion(companion);
  return held;
}

int MeshCaller::acquire_least_busy(std::size_t id, const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (busy_.size() <= id) busy_.resize(id + 1);
  if (turn_.size() <= id) turn_.resize(id + 1, 0);
  auto& busy = busy_[id];
  for (int r : ranks) {
    if (busy.size() <= static_cast<std::size_t>(r)) busy.resize(static_cast<std::size_t>(r) + 1, 0);
  }
  // The least busy; among equals, the first at or after this mesh's turn,
  // so that one caller's calls in sequence go round the members.
  const std::size_t n = ranks.size();
  const std::size_t start = turn_[id] % n;
  std::size_t best = start;
  for (std::size_t k = 1; k < n; ++k) {
    const std::size_t i = (start + k) % n;
    if (busy[static_cast<std::size_t>(ranks[i])] < busy[static_cast<std::size_t>(ranks[best])]) {
      best = i;
    }
  }
  turn_[id] = best + 1;
  const int rank = ranks[best];
  ++busy[static_cast<std::size_t>(rank)];
  return rank;
}

void MeshCaller::release(std::size_t id, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < busy_.size() && static_cast<std::size_t>(rank) < busy_[id].size() &&
      busy_[id][static_cast<std::size_t>(rank)] > 0) {
    --busy_[id][static_cast<std::size_t>(rank)];
  }
}

void MeshCaller::watch(caf::event_based_actor* self, const caf::actor_addr& target,
                       std::function<void(const Status&)> on_down, std::uint64_t& id) {
  auto* caller = static_cast<caller_pointer>(self);  // jobs run on the caller only
  auto& st = caller->state;
  id = st.next++;
  st.waiting.emplace(id, std::make_pair(target, std::move(on_down)));
  monitor_once(caller, target);
}

void MeshCaller::settled(caf::event_based_actor* self, std::uint64_t id) {
  static_cast<caller_pointer>(self)->state.waiting.erase(id);
}

}  // namespace internal

}  // namespace meshstore
