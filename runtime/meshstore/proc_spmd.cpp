// ProcMesh::from_env: the ranks of a launched job as one process mesh
// (SPMD). Each rank holds a Mesh (mesh.cpp: rank 0's registry, the
// connections between ranks, the supervising caller); spawn() is
// collective: each rank makes its own member of the registered type and
// the registry hands every rank all of them.
#include <unistd.h>

#include "meshstore/internal/mesh_runtime.hpp"
#include "meshstore/internal/proc_shared.hpp"
#include "meshstore/launch_env.hpp"
#include "meshstore/proc_mesh.hpp"

namespace meshstore {
namespace {

// The launcher's shape: hosts by local ranks when the local world size
// divides the world, else one line of ranks.
Result<Extent> launch_shape(const LaunchEnv& env) {
  const int world = env.world_size, local = env.local_world_size;
  if (local > 0 && local < world && world % local == 0) {
    return Extent::make({{"hosts", world / local}, {"procs", local}});
  }
  return Extent::make({{"procs", world}});
}

}  // namespace

Result<ProcMesh> ProcMesh::from_env(MeshOptions options) {
  auto env = LaunchEnv::from_env();
  if (!env.ok()) return env.status().with_context("ProcMesh::from_env");
  auto shape = launch_shape(*env);
  if (!shape.ok()) return shape.status().with_context("ProcMesh::from_env");
  // First, before this rank joins and so before any actor of it.
  MESHSTORE_RETURN_IF_ERROR(internal::proc::run_setup(options, env->rank, "ProcMesh::from_env"));
  auto mesh = Mesh::from_env(options);
  if (!mesh.ok()) {
    // Its own context gives way to this one.
    std::string why = mesh.status().message();
    const std::string inner = "Mesh::from_env: ";
    if (why.rfind(inner, 0) == 0) why = why.substr(inner.size());
    return Status(mesh.status().code(), "ProcMesh::from_env: " + why);
  }
  auto shared = std::make_shared<Shared>();
  shared->options = options;
  shared->whole = *shape;
  shared->self_rank = mesh->rank();
  shared->runtime = internal::mesh_runtime(*mesh);
  shared->caller = mesh->caller();
  shared->spmd = std::make_unique<Mesh>(std::move(mesh).value());
  return ProcMesh(std::move(shared), std::move(shape).value());
}

Mesh* internal::proc_spmd_mesh(const ProcMesh& procs) {
  if (!procs.shared_) return nullptr;
  std::lock_guard<std::mutex> lock(procs.shared_->mu);
  return procs.shared_->stopped ? nullptr : procs.shared_->spmd.get();
}

int ProcMesh::rank() const noexcept { return shared_ ? shared_->self_rank : -1; }

Result<std::pair<Mesh*, std::shared_ptr<internal::MeshCaller>>> ProcMesh::spmd_parts(
    const std::string& ctx) const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (shared_->stopped) {
    return Status(Errc::shutdown, (ctx.empty() ? "" : ctx + ": ") + "the mesh was stopped");
  }
  return std::make_pair(shared_->spmd.get(), shared_->caller);
}

Result<ProcMesh::Spawned> ProcMesh::spawn_collective(Supervision supervision,
                                                     const std::string& name,
                                                     const std::vector<std::string>& interface,
                                                     const Maker& make) {
  const std::string ctx = "ProcMesh::spawn '" + name + "'";
  if (extent_.size() != shared_->whole.size()) {
    return Status(Errc::invalid_argument,
                  ctx +
                      ": under from_env, spawn is collective: every rank spawns on the whole "
                      "mesh, not on a slice (slice the actor mesh it makes instead)");
  }
  auto parts = spmd_parts(ctx);
  if (!parts.ok()) return parts.status();
  auto [mesh, caller] = std::move(parts).value();
  if (auto s = caller->check_owner(supervision.owner); !s.ok()) return s.with_context(ctx);
  if (auto s = mesh->reserve(name); !s.ok()) {
    if (s.code() == Errc::shutdown) return Status(Errc::shutdown, ctx + ": the mesh was stopped");
    return Status(s.code(), "ProcMesh::spawn: mesh '" + name + "' was already spawned here");
  }
  auto& sys = shared_->runtime->system();
  const int me = shared_->self_rank;
  Result<caf::actor> mine = Status(Errc::internal, "not made");
  {
    ForeignThreadGuard guard;  // spawn() may be called from any thread
    mine = make(sys.dummy_execution_unit(), me);
  }
  if (!mine.ok()) {
    // Nothing is left here and the name is free again here; the other
    // ranks' spawns of it fail at once, naming this rank.
    mesh->release(name, mine.status());
    return mine.status();
  }
  auto all = mesh->join(name, {*mine}, interface);
  if (!all.ok()) return all.status();
  // Restarts make this rank's member again, with the same arguments; the
  // owner (rank 0) restarts only its own.
  auto respawn = [make, me](caf::event_based_actor* self, int r,
                            std::function<void(caf::actor)> done) {
    if (r != me) return done(caf::actor());
    auto again = make(self->context(), r);
    done(again.ok() ? *again : caf::actor());
  };
  Spawned out;
  out.id = caller->add_mesh(name, std::move(all).value(), me == 0, std::move(supervision),
                            std::move(respawn));
  out.caller = std::move(caller);
  out.extent = shared_->whole;
  out.timeout = shared_->options.request_timeout;
  return out;
}

Result<ProcMesh::Spawned> ProcMesh::singleton_spmd(const std::string& name, const std::string& type,
                                                   const std::vector<std::string>& interface,
                                                   const std::function<caf::message(int)>& args) {
  auto parts = spmd_parts("");
  if (!parts.ok()) return parts.status();
  auto [mesh, caller] = std::move(parts).value();
  auto one = mesh->single(name, type, interface, args(0));
  if (!one.ok()) return one.status();
  // Supervised by its owner, rank 0, where it lives; it is not made again.
  auto respawn = [](caf::event_based_actor*, int, std::function<void(caf::actor)> done) {
    done(caf::actor());
  };
  auto point = Extent::line(1).slice({{"ranks", 0}});
  if (!point.ok()) return point.status();
  Spawned out;
  out.id = caller->add_mesh(name, {*one}, shared_->self_rank == 0, default_supervision(),
                            std::move(respawn));
  out.caller = std::move(caller);
  out.extent = std::move(point).value();
  out.timeout = shared_->options.request_timeout;
  return out;
}

}  // namespace meshstore
