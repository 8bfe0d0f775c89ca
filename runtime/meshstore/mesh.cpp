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
#include "meshstore/internal/mesh_registry.hpp"
#include "meshstore/internal/mesh_runtime.hpp"
#include "meshstore/logging.hpp"

namespace meshstore {
namespace {

using internal::mesh_door_atom;
using internal::mesh_fail_atom;
using internal::mesh_join_atom;
using internal::mesh_leave_atom;
using internal::mesh_set_atom;
using internal::mesh_single_atom;
using internal::mesh_value_atom;
using internal::registry_actor;
using internal::registry_impl;

void add_mesh_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<std::vector<caf::actor>>("std::vector<caf::actor>");
  cfg.add_message_type<registry_actor>("meshstore::mesh_registry_actor");
  internal::refuse_floats_in_interface<registry_actor>();  // it crosses processes
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
// (docs/internals/connections.md, "Direct connections"). Before any actor of this
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
