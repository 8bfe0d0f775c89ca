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
using mesh_door_atom = caf::atom_constant<caf::atom("mesh_door")>;
using mesh_single_atom = caf::atom_constant<caf::atom("mesh_one")>;
using mesh_set_atom = caf::atom_constant<caf::atom("mesh_set")>;
using mesh_value_atom = caf::atom_constant<caf::atom("mesh_value")>;
using mesh_fail_atom = caf::atom_constant<caf::atom("mesh_fail")>;

// Rank 0's registry: collects each mesh's actors by rank and answers every
// joiner once all ranks are in (or, after the timeout, an error naming the
// ranks still missing).
using registry_actor = caf::typed_actor<
    caf::replies_to<mesh_join_atom, std::string, std::int32_t, std::vector<caf::actor>,
                    std::vector<std::string>>::with<std::vector<caf::actor>>,
    caf::reacts_to<mesh_expire_atom, std::string>,
    caf::replies_to<mesh_leave_atom, std::int32_t>::with<bool>,
    caf::replies_to<mesh_door_atom, std::int32_t, std::string>::with<std::vector<std::string>>,
    caf::replies_to<mesh_single_atom, std::string, std::string, std::vector<std::string>,
                    caf::message>::with<caf::actor>,
    caf::replies_to<mesh_set_atom, std::string, std::string, caf::actor>::with<bool>,
    caf::replies_to<mesh_value_atom, std::string>::with<std::string, caf::actor>,
    caf::reacts_to<mesh_fail_atom, std::string, std::int32_t, caf::error>>;

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
  // By rank > 0: where the later ranks connect to it (from_env).
  std::map<std::int32_t, std::string> doors;
  // Named singletons (ProcMesh::get_or_spawn under from_env), made here.
  struct Single {
    std::string type;
    std::vector<std::string> interface;
    caf::actor actor;
  };
  std::map<std::string, Single> singles;
  // The rendezvous: values by key, and the reads waiting for a key.
  std::map<std::string, std::pair<std::string, caf::actor>> values;
  std::map<std::string, std::vector<caf::typed_response_promise<std::string, caf::actor>>>
      value_waiters;
};

// Whether ranks [first, first + n) of mesh `name` are free to join.
Status check_slots(const Pending& p, const std::string& name, std::int32_t first, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(first) + i;
    if (first < 0 || r >= p.slots.size()) {
      return Status(Errc::out_of_range, "mesh '" + name + "': rank " + std::to_string(r) +
                                            " outside a world of " +
                                            std::to_string(p.slots.size()));
    }
    if (p.slots[r]) {
      return Status(Errc::invalid_argument,
                    "mesh '" + name + "': rank " + std::to_string(r) + " joined twice");
    }
  }
  return Status();
}

// Mesh `name` cannot be made: every rank waiting for it gets `err`, and
// so does every later one (the name stays refused).
caf::error refuse_mesh(RegistryState& st, const std::string& name, caf::error err) {
  if (auto it = st.pending.find(name); it != st.pending.end()) {
    for (auto& w : it->second.waiting) w.deliver(err);
    st.pending.erase(it);
  }
  st.failed.emplace(name, err);
  return err;
}

// A rank's members of mesh `name` (ranks first..): answered with every
// rank's once all are in.
caf::result<std::vector<caf::actor>> join_mesh(registry_actor::stateful_pointer<RegistryState> self,
                                               int world, std::chrono::milliseconds timeout,
                                               const std::string& name, std::int32_t first,
                                               const std::vector<caf::actor>& actors,
                                               const std::vector<std::string>& interface) {
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
    auto err = internal::to_caf_error(
        Status(Errc::invalid_argument, "mesh '" + name + "': rank " + std::to_string(first) +
                                           " spawned it with another actor interface than rank " +
                                           std::to_string(p.interface_rank) + " (" +
                                           internal::interface_text(interface) + " vs " +
                                           internal::interface_text(p.interface) + ")"));
    return refuse_mesh(st, name, std::move(err));
  }
  // Check every slot first: a rejected join leaves nothing behind.
  if (auto s = check_slots(p, name, first, actors.size()); !s.ok()) {
    return internal::to_caf_error(s);
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
}

// The named singleton `name`: made here, on rank 0, by its first caller
// (of any rank); the same actor for every later one.
caf::result<caf::actor> single(registry_actor::stateful_pointer<RegistryState> self,
                               const std::shared_ptr<std::vector<caf::actor>>& made,
                               const std::string& name, const std::string& type,
                               const std::vector<std::string>& interface, caf::message& args) {
  auto& st = self->state;
  const std::string ctx = "singleton '" + name + "'";
  if (auto it = st.singles.find(name); it != st.singles.end()) {
    if (it->second.type != type) {
      return internal::to_caf_error(
          Status(Errc::invalid_argument,
                 ctx + " is of type '" + it->second.type + "', not '" + type + "'"));
    }
    if (it->second.interface != interface) {
      return internal::to_caf_error(
          Status(Errc::invalid_argument, ctx + " was spawned with another actor interface"));
    }
    return it->second.actor;
  }
  if (st.pending.count(name) || st.complete.count(name) || st.failed.count(name)) {
    return internal::to_caf_error(
        Status(Errc::invalid_argument, ctx + ": spawn() made a mesh of that name"));
  }
  auto a = internal::spawn_named(self->context(), type, interface, args, ctx + " on rank 0");
  if (!a.ok()) return internal::to_caf_error(a.status());
  made->push_back(*a);
  st.singles.emplace(name, RegistryState::Single{type, interface, *a});
  return *a;
}

// The rendezvous: `key`'s value, set once; the readers waiting for it
// get it now.
caf::result<bool> set_value(registry_actor::stateful_pointer<RegistryState> self,
                            const std::string& key, const std::string& text,
                            const caf::actor& actor) {
  const std::pair<std::string, caf::actor> value{text, actor};
  auto& st = self->state;
  if (!st.values.emplace(key, value).second) {
    return internal::to_caf_error(
        Status(Errc::invalid_argument, "rendezvous: '" + key + "' is set already"));
  }
  if (auto it = st.value_waiters.find(key); it != st.value_waiters.end()) {
    for (auto& w : it->second) w.deliver(value.first, value.second);
    st.value_waiters.erase(it);
  }
  return true;
}

// A rank that could not make its member of `name`: every rank's spawn of
// it fails now, naming that rank and why, instead of waiting for it until
// the timeout; the name stays refused.
void fail_mesh(registry_actor::stateful_pointer<RegistryState> self, const std::string& name,
               std::int32_t rank, const caf::error& why) {
  auto& st = self->state;
  if (st.complete.count(name) || st.failed.count(name)) return;
  const auto reason = internal::from_caf_error(why, "");
  refuse_mesh(st, name,
              internal::to_caf_error(
                  Status(reason.code(), "mesh '" + name + "': rank " + std::to_string(rank) +
                                            " could not spawn its member: " + reason.message())));
}

registry_actor::behavior_type registry_impl(registry_actor::stateful_pointer<RegistryState> self,
                                            int world, std::chrono::milliseconds timeout,
                                            std::weak_ptr<internal::MeshCaller> owner) {
  // The singletons go with the registry (with the mesh, on rank 0). Not
  // through self->state: it is gone when attached functors run.
  auto made = std::make_shared<std::vector<caf::actor>>();
  self->attach_functor([made] {
    for (auto& a : *made) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  });
  return {
      [=](mesh_join_atom, const std::string& name, std::int32_t first,
          const std::vector<caf::actor>& actors, const std::vector<std::string>& interface) {
        return join_mesh(self, world, timeout, name, first, actors, interface);
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
        self->state.doors.erase(rank);
        if (auto c = owner.lock()) c->departed(rank);
        return true;
      },
      // A rank > 0 of a launched job names its door and learns those of
      // the ranks before it, which it connects to (one at a time here: of
      // any two ranks, the later learns the earlier's door).
      [=](mesh_door_atom, std::int32_t rank, const std::string& door) {
        std::vector<std::string> before;
        for (const auto& [r, d] : self->state.doors) {
          if (r != rank) before.push_back(d);
        }
        if (!door.empty()) self->state.doors[rank] = door;
        return before;
      },
      [=](mesh_single_atom, const std::string& name, const std::string& type,
          const std::vector<std::string>& interface,
          caf::message& args) { return single(self, made, name, type, interface, args); },
      [=](mesh_set_atom, const std::string& key, const std::string& text, const caf::actor& actor) {
        return set_value(self, key, text, actor);
      },
      [=](mesh_fail_atom, const std::string& name, std::int32_t rank, const caf::error& why) {
        fail_mesh(self, name, rank, why);
      },
      // Answered once the key is set; the reader's own timeout bounds it.
      [=](mesh_value_atom, const std::string& key) -> caf::result<std::string, caf::actor> {
        auto& st = self->state;
        if (auto it = st.values.find(key); it != st.values.end()) {
          return {it->second.first, it->second.second};
        }
        auto rp = self->make_response_promise<std::string, caf::actor>();
        st.value_waiters[key].push_back(rp);
        return rp;
      },
  };
}

void add_mesh_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<std::vector<caf::actor>>("std::vector<caf::actor>");
  cfg.add_message_type<registry_actor>("meshstore::mesh_registry_actor");
}

// In the process's runtime whatever the process makes first.
[[maybe_unused]] const bool kMeshTypes = internal::register_process_types(add_mesh_types);

}  // namespace

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
  std::uint16_t port = 0;  // rank 0's registry listens on it
  std::set<std::string> names;
  std::map<std::string, int> rendezvous;         // mesh_rendezvous_key's counts
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
    std::vector<caf::actor> stopping;
    registry_actor published;
    {
      std::lock_guard<std::mutex> lock(mu);
      // First: ActorMeshes that outlive the mesh answer shutdown from now on
      // and hold no handle into the system that goes next.
      if (caller) caller->close();
      caller = nullptr;
      stopping = std::move(owned);
      owned.clear();
      if (port != 0) published = registry;
      registry = nullptr;
      doomed = std::move(runtime);
    }
    if (!doomed) return;
    ForeignThreadGuard guard;  // any thread may close the mesh
    // The process's runtime stays up: the listener and this mesh's actors
    // go now, as they went with an own runtime.
    if (published) internal::unpublish_actor(doomed->system(), published, port);
    published = nullptr;
    const auto late = internal::stop_actors(doomed->system(), stopping, options.stop_timeout);
    if (late > 0) {
      log::get("mesh")->warn("close: {} of this mesh's actors did not stop within {} ms", late,
                             options.stop_timeout.count());
    }
    stopping.clear();
    doomed.reset();
  }
};

Result<std::unique_ptr<Mesh::Impl>> Mesh::Impl::start(const MeshOptions& options, bool network) {
  MESHSTORE_RETURN_IF_ERROR(internal::check_mesh_options(options, "MeshOptions"));
  auto rt = internal::process_runtime(
      internal::mesh_runtime_options(options, network, add_mesh_types), "Mesh");
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

// A rank > 0 of a launched job, before it returns from from_env: opens its
// door on the interface that reaches rank 0, names it to rank 0's
// registry, and connects to the doors of the ranks that did so before it,
// so that the ranks' messages to each other do not pass through rank 0
// (docs/architecture.md, "Direct connections"). Before any actor of this
// rank exists, so none of their messages changes route in flight. A door
// that cannot be reached costs a warning: rank 0 still routes.
void reach_other_ranks(internal::ActorRuntime& runtime, const registry_actor& registry, int rank,
                       const MeshOptions& options, const std::string& master_addr) {
  auto& sys = runtime.system();
  std::string door;
  if (auto d = runtime.door(internal::local_address_towards(master_addr)); d.ok()) {
    door = *d;
  } else {
    log::get("mesh")->warn("rank {}: {}; the other ranks reach it through rank 0", rank,
                           d.status().to_string());
  }
  std::vector<std::string> doors;
  {
    caf::scoped_actor self{sys};
    self->request(registry, options.request_timeout, mesh_door_atom::value,
                  static_cast<std::int32_t>(rank), door)
        .receive([&](std::vector<std::string>& ds) { doors = std::move(ds); },
                 [&](caf::error& e) {
                   log::get("mesh")->warn(
                       "rank {}: rank 0 named no peers ({}); they are reached through it", rank,
                       sys.render(e));
                 });
  }
  internal::reach_doors(sys, doors, options.connect_timeout, "rank 0");
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
    impl->port = *bound;
    internal::warn_if_exposed(env->master_addr, *bound, "the mesh's rank 0", impl->runtime->tls());
  } else {
    auto reached = internal::connect_with_retry<registry_actor>(
        sys, env->master_addr, port, options.connect_timeout, "mesh registry");
    if (!reached.ok()) return reached.status().with_context("Mesh::from_env");
    impl->registry = std::move(reached).value();
    reach_other_ranks(*impl->runtime, impl->registry, impl->rank, options, env->master_addr);
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

Result<caf::actor> Mesh::single(const std::string& name, const std::string& type,
                                std::vector<std::string> interface, caf::message args) {
  auto registry = caf::actor_cast<registry_actor>(registry_handle());
  if (!registry) return Status(Errc::shutdown, "singleton '" + name + "': the mesh is closed");
  Result<caf::actor> out = Status(Errc::internal, "no answer");
  ForeignThreadGuard guard;  // before self: it goes after self
  caf::scoped_actor self{system()};
  self->request(registry, impl_->options.request_timeout, mesh_single_atom::value, name, type,
                std::move(interface), std::move(args))
      .receive([&](caf::actor& a) { out = std::move(a); },
               [&](caf::error& e) { out = internal::from_caf_error(e, "get_or_spawn"); });
  return out;
}

Status internal::mesh_set_value(Mesh& mesh, const std::string& key, const std::string& text,
                                const caf::actor& actor) {
  auto registry = caf::actor_cast<registry_actor>(mesh.registry_handle());
  if (!registry) return Status(Errc::shutdown, "rendezvous: the mesh is closed");
  Status out;
  ForeignThreadGuard guard;  // before self: it goes after self
  caf::scoped_actor self{mesh.system()};
  self->request(registry, mesh.timeout(), mesh_set_atom::value, key, text, actor)
      .receive([](bool) {},
               [&](caf::error& e) { out = internal::from_caf_error(e, "rendezvous"); });
  return out;
}

std::string internal::mesh_rendezvous_key(Mesh& mesh, const std::string& what) {
  std::lock_guard<std::mutex> lock(mesh.impl_->mu);
  return what + "#" + std::to_string(mesh.impl_->rendezvous[what]++);
}

Result<std::pair<std::string, caf::actor>> internal::mesh_value(Mesh& mesh,
                                                                const std::string& key) {
  auto registry = caf::actor_cast<registry_actor>(mesh.registry_handle());
  if (!registry) return Status(Errc::shutdown, "rendezvous: the mesh is closed");
  Result<std::pair<std::string, caf::actor>> out = Status(Errc::internal, "no answer");
  ForeignThreadGuard guard;  // before self: it goes after self
  caf::scoped_actor self{mesh.system()};
  self->request(registry, mesh.timeout(), mesh_value_atom::value, key)
      .receive([&](std::string& text,
                   caf::actor& actor) { out = std::make_pair(std::move(text), std::move(actor)); },
               [&](caf::error& e) {
                 out = internal::from_caf_error(e, "rendezvous: waiting for '" + key + "'");
               });
  return out;
}

caf::actor Mesh::registry_handle() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->runtime ? caf::actor_cast<caf::actor>(impl_->registry) : caf::actor();
}

void Mesh::release(const std::string& name, const Status& why) {
  if (!impl_) return;
  registry_actor registry;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->names.erase(name);
    if (is_local() || !impl_->runtime) return;
    registry = impl_->registry;
  }
  // The other ranks learn it at once (best effort: without it they wait
  // for this rank until the registry's timeout).
  ForeignThreadGuard guard;
  caf::anon_send(registry, mesh_fail_atom::value, name, static_cast<std::int32_t>(rank()),
                 internal::to_caf_error(why));
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
