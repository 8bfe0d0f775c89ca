#include "meshstore/mesh.hpp"

#include <algorithm>
#include <caf/io/all.hpp>
#include <map>
#include <mutex>
#include <set>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/address.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/internal/mesh_runtime.hpp"
#include "meshstore/logging.hpp"

namespace meshstore {
namespace {

using mesh_join_atom = caf::atom_constant<caf::atom("mesh_join")>;
using mesh_expire_atom = caf::atom_constant<caf::atom("mesh_exp")>;
using mesh_leave_atom = caf::atom_constant<caf::atom("mesh_leave")>;

// Rank 0's registry: collects each mesh's actors by rank and answers every
// joiner once all ranks are in (or, after the timeout, an error naming the
// ranks still missing).
using registry_actor = caf::typed_actor<
    caf::replies_to<mesh_join_atom, std::string, std::int32_t, std::vector<caf::actor>,
                    std::vector<std::string>>::with<std::vector<caf::actor>>,
    caf::reacts_to<mesh_expire_atom, std::string>,
    caf::replies_to<mesh_leave_atom, std::int32_t>::with<bool>>;

struct Pending {
  std::vector<caf::actor> slots;
  std::vector<caf::typed_response_promise<std::vector<caf::actor>>> waiting;
  // The actor interface the first joiner declared, and its rank.
  std::vector<std::string> interface;
  std::int32_t interface_rank = -1;
};

struct RegistryState {
  static inline const char* name = "meshstore.mesh_registry";
  std::map<std::string, Pending> pending;
  std::map<std::string, std::vector<caf::actor>> complete;
  // Meshes whose ranks disagreed on the actor interface: every rank of
  // them, earlier or later, gets this error.
  std::map<std::string, caf::error> failed;
};

registry_actor::behavior_type registry_impl(registry_actor::stateful_pointer<RegistryState> self,
                                            int world, std::chrono::milliseconds timeout,
                                            std::weak_ptr<internal::MeshCaller> owner) {
  return {
      [=](mesh_join_atom, const std::string& name, std::int32_t first,
          const std::vector<caf::actor>& actors,
          const std::vector<std::string>& interface) -> caf::result<std::vector<caf::actor>> {
        auto& st = self->state;
        if (auto f = st.failed.find(name); f != st.failed.end()) return f->second;
        if (st.complete.count(name) != 0) {
          return internal::to_caf_error(
              Status(Errc::invalid_argument, "mesh '" + name + "' is already complete"));
        }
        auto [it, fresh] = st.pending.try_emplace(name);
        auto& p = it->second;
        if (fresh) {
          p.slots.resize(static_cast<std::size_t>(world));
          self->delayed_send(self, timeout, mesh_expire_atom::value, name);
        }
        if (p.interface_rank < 0) {
          p.interface = interface;
          p.interface_rank = first;
        } else if (p.interface != interface) {
          auto err = internal::to_caf_error(Status(
              Errc::invalid_argument, "mesh '" + name + "': rank " + std::to_string(first) +
                                          " spawned it with another actor interface than rank " +
                                          std::to_string(p.interface_rank) + " (" +
                                          internal::interface_text(interface) + " vs " +
                                          internal::interface_text(p.interface) + ")"));
          for (auto& w : p.waiting) w.deliver(err);
          st.pending.erase(it);
          st.failed.emplace(name, err);
          return err;
        }
        // Check every slot first: a rejected join leaves nothing behind.
        for (std::size_t i = 0; i < actors.size(); ++i) {
          const auto r = static_cast<std::size_t>(first) + i;
          if (first < 0 || r >= p.slots.size()) {
            return internal::to_caf_error(
                Status(Errc::out_of_range, "mesh '" + name + "': rank " + std::to_string(r) +
                                               " outside a world of " + std::to_string(world)));
          }
          if (p.slots[r]) {
            return internal::to_caf_error(
                Status(Errc::invalid_argument,
                       "mesh '" + name + "': rank " + std::to_string(r) + " joined twice"));
          }
        }
        for (std::size_t i = 0; i < actors.size(); ++i)
          p.slots[static_cast<std::size_t>(first) + i] = actors[i];
        auto rp = self->make_response_promise<std::vector<caf::actor>>();
        p.waiting.push_back(rp);
        if (std::all_of(p.slots.begin(), p.slots.end(),
                        [](const caf::actor& a) { return static_cast<bool>(a); })) {
          auto all = std::move(p.slots);
          for (auto& w : p.waiting) w.deliver(all);
          st.complete.emplace(name, std::move(all));
          st.pending.erase(it);
        }
        return rp;
      },
      [=](mesh_expire_atom, const std::string& name) {
        auto it = self->state.pending.find(name);
        if (it == self->state.pending.end()) return;
        std::string missing;
        for (std::size_t r = 0; r < it->second.slots.size(); ++r) {
          if (!it->second.slots[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        auto err = internal::to_caf_error(Status(
            Errc::timeout, "mesh '" + name + "': ranks " + missing + " did not join in time"));
        for (auto& w : it->second.waiting) w.deliver(err);
        self->state.pending.erase(it);
      },
      // A rank closing its Mesh in good order: its members going away next
      // is not a failure for the owner's supervision.
      [=](mesh_leave_atom, std::int32_t rank) {
        if (auto c = owner.lock()) c->departed(rank);
        return true;
      },
  };
}

void add_mesh_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<std::vector<caf::actor>>("std::vector<caf::actor>");
  cfg.add_message_type<registry_actor>("meshstore::mesh_registry_actor");
}

}  // namespace

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

Status mesh_rank_error(int rank, const caf::error& e) {
  return from_caf_error(e, "rank " + std::to_string(rank));
}

std::shared_ptr<MeshCaller> MeshCaller::make(caf::actor_system& sys, RootHandler root) {
  std::shared_ptr<MeshCaller> c(new MeshCaller());
  c->root_ = std::move(root);
  ForeignThreadGuard guard;  // the mesh may be made on any thread
  c->caller_ = sys.spawn(caller_impl, std::weak_ptr<MeshCaller>(c));
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

void MeshCaller::departed(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  departed_.push_back(rank);
}

void MeshCaller::member_down(caf::event_based_actor* self, const caf::actor_addr& addr,
                             const caf::error& reason) {
  // An actor that chose to stop is no failure.
  if (reason == caf::exit_reason::normal) return;
  std::size_t id = 0;
  int rank = -1;
  Supervision sup;
  Respawn respawn;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!caller_) return;  // closing: every member goes
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
    if (rank < 0) return;
    if (std::find(departed_.begin(), departed_.end(), rank) != departed_.end()) return;
    sup = supervised_[id].sup;
    respawn = supervised_[id].respawn;
    name = supervised_[id].name;
  }
  MeshFailure f;
  f.rank = rank;
  f.mesh = std::move(name);
  f.why = Status(Errc::unavailable, "rank " + std::to_string(rank) + " of mesh '" + f.mesh +
                                        "' went down (" + caf::to_string(reason) + ")");
  if (sup.on_failure && sup.on_failure(f)) return;
  switch (sup.policy) {
    case FailurePolicy::restart: {
      const auto now = std::chrono::steady_clock::now();
      bool allowed = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto& times = supervised_[id].restarts;
        times.erase(std::remove_if(times.begin(), times.end(),
                                   [&](auto t) { return now - t > sup.window; }),
                    times.end());
        allowed = static_cast<int>(times.size()) < sup.max_restarts;
        if (allowed) times.push_back(now);
      }
      if (!allowed || !respawn) {
        stop_mesh(id, f);
        return;
      }
      // `done` runs on the caller actor, now or when the spawn answers.
      respawn(self, rank, [me = shared_from_this(), self, id, rank, f](caf::actor fresh) {
        if (!fresh) {
          me->stop_mesh(id, f);
          return;
        }
        {
          std::lock_guard<std::mutex> lock(me->mu_);
          if (!me->caller_) return;
          me->meshes_[id][static_cast<std::size_t>(rank)] = fresh;
        }
        monitor_once(static_cast<caller_pointer>(self), fresh.address());
      });
      return;
    }
    case FailurePolicy::stop:
      stop_mesh(id, f);
      return;
    case FailurePolicy::propagate:
      break;
  }
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
    if (owner_sup.policy == FailurePolicy::stop) {
      stop_mesh(id, f);
      return;
    }
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

Status MeshCaller::post(Job job, const std::string& what) const {
  // Under the lock: close() cannot stop the system between the check and
  // the send.
  std::lock_guard<std::mutex> lock(mu_);
  if (!caller_) return Status(Errc::shutdown, "mesh: " + what + ": the mesh is closed");
  caf::anon_send(caller_, MeshJob{std::make_shared<Job>(std::move(job))});
  return Status();
}

void MeshCaller::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (caller_) caf::anon_send_exit(caller_, caf::exit_reason::user_shutdown);
  caller_ = nullptr;
  meshes_.clear();
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

struct Mesh::Impl {
  MeshOptions options;
  int rank = 0;
  int world = 1;
  bool local = false;
  // Shared with the layers built on this mesh (spawn_store's store): the
  // actor system goes when the last of them lets go.
  std::shared_ptr<internal::ActorRuntime> runtime;
  std::mutex mu;  // guards registry, owned and names
  registry_actor registry;
  std::vector<caf::actor> owned;
  std::set<std::string> names;
  std::shared_ptr<internal::MeshCaller> caller;  // shared with the ActorMeshes

  static Result<std::unique_ptr<Impl>> start(const MeshOptions& options, bool network);
  // A rank > 0 of a launched job tells the owner (rank 0's registry) it is
  // leaving in good order before its members stop; bounded, best effort.
  void leave() {
    registry_actor to;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (local || rank == 0 || !runtime || !registry) return;
      to = registry;
    }
    ForeignThreadGuard guard;  // before self: it goes after self
    caf::scoped_actor self{runtime->system()};
    self->request(to, std::chrono::seconds(2), mesh_leave_atom::value,
                  static_cast<std::int32_t>(rank))
        .receive([](bool) {}, [](caf::error&) {});
  }
  ~Impl() { close(); }
  void close() {
    leave();
    std::shared_ptr<internal::ActorRuntime> doomed;
    {
      std::lock_guard<std::mutex> lock(mu);
      // First: ActorMeshes that outlive the mesh answer shutdown from now on
      // and hold no handle into the system that goes next.
      if (caller) caller->close();
      caller = nullptr;
      for (auto& a : owned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      owned.clear();
      registry = nullptr;
      doomed = std::move(runtime);
    }
    doomed.reset();
  }
};

Result<std::unique_ptr<Mesh::Impl>> Mesh::Impl::start(const MeshOptions& options, bool network) {
  MESHSTORE_RETURN_IF_ERROR(internal::check_mesh_options(options, "MeshOptions"));
  auto rt = internal::ActorRuntime::create(
      internal::mesh_runtime_options(options, network, add_mesh_types));
  if (!rt.ok()) return rt.status();
  auto impl = std::make_unique<Mesh::Impl>();
  impl->options = options;
  impl->runtime = std::move(rt).value();
  impl->caller = internal::MeshCaller::make(impl->runtime->system(), options.on_failure);
  return impl;
}

Result<Mesh> Mesh::local(int world_size, MeshOptions options) {
  ForeignThreadGuard guard;  // this thread may outlive the mesh
  if (world_size < 1 || world_size > 4096) {
    return Status(Errc::invalid_argument, "Mesh::local: world size must be in [1, 4096], got " +
                                              std::to_string(world_size));
  }
  auto impl = Impl::start(options, false);
  if (!impl.ok()) return impl.status();
  auto& m = **impl;
  m.world = world_size;
  m.local = true;
  m.registry = m.runtime->system().spawn(registry_impl, world_size, options.request_timeout,
                                         std::weak_ptr<internal::MeshCaller>(m.caller));
  m.owned.push_back(caf::actor_cast<caf::actor>(m.registry));
  return Mesh(std::move(impl).value());
}

Result<Mesh> Mesh::from_env(MeshOptions options) {
  ForeignThreadGuard guard;  // this thread may outlive the mesh
  auto env = LaunchEnv::from_env();
  if (!env.ok()) return env.status().with_context("Mesh::from_env");
  auto service = env->service_port("MESHSTORE_MESH_PORT", 2);
  if (!service.ok()) return service.status().with_context("Mesh::from_env");
  const std::uint16_t port = *service;
  if (!options.tls.enabled()) options.tls = TlsOptions::from_env();
  auto started = Impl::start(options, true);
  if (!started.ok()) return started.status();
  auto impl = std::move(started).value();
  impl->rank = env->rank;
  impl->world = env->world_size;
  auto& sys = impl->runtime->system();
  const std::string address = env->master_addr + ":" + std::to_string(port);
  if (env->rank == 0) {
    impl->registry = sys.spawn(registry_impl, env->world_size, options.request_timeout,
                               std::weak_ptr<internal::MeshCaller>(impl->caller));
    impl->owned.push_back(caf::actor_cast<caf::actor>(impl->registry));
    auto bound = internal::publish_actor(sys, impl->registry, port, env->master_addr, true);
    if (!bound.ok()) {
      return bound.status().with_context("Mesh::from_env: cannot listen on " + address);
    }
    internal::warn_if_exposed(env->master_addr, *bound, "the mesh's rank 0", impl->runtime->tls());
  } else {
    auto reached = internal::connect_with_retry<registry_actor>(
        sys, env->master_addr, port, options.connect_timeout, "mesh registry");
    if (!reached.ok()) return reached.status().with_context("Mesh::from_env");
    impl->registry = std::move(reached).value();
  }
  return Mesh(std::move(impl));
}

std::shared_ptr<internal::ActorRuntime> internal::mesh_runtime(const Mesh& mesh) {
  if (!mesh.impl_) return nullptr;
  std::lock_guard<std::mutex> lock(mesh.impl_->mu);
  return mesh.impl_->runtime;
}

bool internal::mesh_is_local(const Mesh& mesh) { return mesh.is_local(); }

Mesh::Mesh(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mesh::Mesh(Mesh&&) noexcept = default;
Mesh& Mesh::operator=(Mesh&&) noexcept = default;
Mesh::~Mesh() = default;

int Mesh::rank() const noexcept { return impl_ ? impl_->rank : 0; }
int Mesh::world_size() const noexcept { return impl_ ? impl_->world : 0; }
caf::actor_system& Mesh::system() { return impl_->runtime->system(); }
bool Mesh::is_local() const noexcept { return impl_ && impl_->local; }
std::chrono::milliseconds Mesh::timeout() const noexcept {
  return impl_ ? impl_->options.request_timeout : std::chrono::milliseconds(30000);
}

Supervision Mesh::default_supervision() const {
  return impl_ ? impl_->options.supervision : Supervision();
}

std::shared_ptr<internal::MeshCaller> Mesh::caller() const {
  if (!impl_) return nullptr;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->caller;
}

void Mesh::close() {
  if (impl_) impl_->close();
}

Status Mesh::reserve(const std::string& name) {
  if (!impl_) return Status(Errc::shutdown, "Mesh::spawn: the mesh was moved from");
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->runtime)
    return Status(Errc::shutdown, "Mesh::spawn '" + name + "': the mesh is closed");
  if (name.empty()) return Status(Errc::invalid_argument, "Mesh::spawn: mesh name is empty");
  if (!impl_->names.insert(name).second) {
    return Status(Errc::invalid_argument,
                  "Mesh::spawn: mesh '" + name + "' was already spawned here");
  }
  return Status();
}

Result<std::vector<caf::actor>> Mesh::join(const std::string& name, std::vector<caf::actor> mine,
                                           std::vector<std::string> interface) {
  registry_actor registry;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& a : mine) impl_->owned.push_back(a);
    if (!impl_->runtime) return Status(Errc::shutdown, "mesh '" + name + "': the mesh is closed");
    registry = impl_->registry;
  }
  Result<std::vector<caf::actor>> out = Status(Errc::internal, "no answer");
  ForeignThreadGuard guard;  // before self: it goes after self
  caf::scoped_actor self{system()};
  // A little longer than the registry's own timeout, so its error (naming
  // the missing ranks) arrives first.
  const auto wait = impl_->options.request_timeout + std::chrono::seconds(5);
  self->request(registry, wait, mesh_join_atom::value, name,
                static_cast<std::int32_t>(is_local() ? 0 : rank()), mine, std::move(interface))
      .receive(
          [&](std::vector<caf::actor>& all) { out = std::move(all); },
          [&](caf::error& e) { out = internal::from_caf_error(e, "Mesh::spawn '" + name + "'"); });
  if (!out.ok()) {
    // A spawn that failed leaves nothing behind: this rank's members stop
    // and the name may be spawned again.
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& a : mine) {
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      impl_->owned.erase(std::remove(impl_->owned.begin(), impl_->owned.end(), a),
                         impl_->owned.end());
    }
    impl_->names.erase(name);
  }
  return out;
}

}  // namespace meshstore
