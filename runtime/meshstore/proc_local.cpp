// ProcMesh::local: a process mesh whose every member is this process.
// Nothing is launched: spawn() makes each member here, on the process's
// runtime, and this process supervises them; stop() stops them.
#include "meshstore/internal/mesh_runtime.hpp"
#include "meshstore/internal/proc_protocol.hpp"
#include "meshstore/internal/proc_shared.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/proc_mesh.hpp"

namespace meshstore {

Result<ProcMesh> ProcMesh::local(std::vector<std::pair<std::string, int>> shape,
                                 MeshOptions options) {
  ForeignThreadGuard guard;  // this thread may outlive the mesh
  const std::string ctx = "ProcMesh::local";
  auto extent = Extent::make(std::move(shape));
  if (!extent.ok()) return extent.status().with_context(ctx);
  if (extent->size() < 1 || extent->size() > 4096) {
    return Status(Errc::invalid_argument,
                  ctx + ": between 1 and 4096 members, not " + std::to_string(extent->size()));
  }
  MESHSTORE_RETURN_IF_ERROR(internal::check_mesh_options(options, ctx));
  auto rt = internal::process_runtime(
      internal::mesh_runtime_options(options, false, internal::proc::add_proc_types), ctx);
  if (!rt.ok()) return rt.status();
  auto shared = std::make_shared<Shared>();
  shared->local = true;
  shared->options = options;
  shared->whole = *extent;
  shared->runtime = std::move(rt).value();
  shared->caller = internal::MeshCaller::make(shared->runtime->system(), options.on_failure);
  return ProcMesh(std::move(shared), std::move(extent).value());
}

bool internal::proc_is_local(const ProcMesh& procs) {
  return procs.shared_ && procs.shared_->local;
}

void ProcMesh::Shared::stop_here() {
  // First the meshes answer shutdown, so that their members' going away
  // is no failure; then those members (restarted ones too) stop.
  std::vector<caf::actor> members;
  if (caller) members = caller->close();
  caller.reset();
  std::shared_ptr<internal::ActorRuntime> doomed;
  {
    std::lock_guard<std::mutex> lock(mu);  // proc_runtime() reads it
    doomed = std::move(runtime);
  }
  if (!doomed) return;
  ForeignThreadGuard guard;  // any thread may stop the mesh
  const auto late = internal::stop_actors(doomed->system(), members, options.stop_timeout);
  if (late > 0) {
    log::get("proc")->warn("stop: {} of the local mesh's actors did not stop within {} ms", late,
                           options.stop_timeout.count());
  }
}

Result<ProcMesh::Spawned> ProcMesh::spawn_made(
    Supervision supervision, const std::string& name,
    const std::function<std::vector<std::string>(caf::actor_system&)>& interface_of, Maker make) {
  const std::string ctx = "ProcMesh::spawn '" + name + "'";
  if (!shared_) return Status(Errc::shutdown, "ProcMesh::spawn: an empty ProcMesh");
  if (name.empty()) return Status(Errc::invalid_argument, "ProcMesh::spawn: mesh name is empty");
  if (shared_->joining) {
    return Status(Errc::invalid_argument,
                  ctx +
                      ": a function cannot be sent to another process: register the actor "
                      "type (MeshOptions::add_types) and spawn it by name");
  }
  std::shared_ptr<internal::ActorRuntime> runtime;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->stopped) return Status(Errc::shutdown, ctx + ": the mesh was stopped");
    runtime = shared_->runtime;
  }
  const auto interface = interface_of(runtime->system());
  if (shared_->local) return spawn_here(std::move(supervision), name, interface, make);
  return spawn_collective(std::move(supervision), name, interface, make);
}

Result<ProcMesh::Spawned> ProcMesh::spawn_here(Supervision supervision, const std::string& name,
                                               const std::vector<std::string>& interface,
                                               const Maker& make) {
  const std::string ctx = "ProcMesh::spawn '" + name + "'";
  std::shared_ptr<internal::MeshCaller> caller;
  std::shared_ptr<internal::ActorRuntime> runtime;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->stopped) return Status(Errc::shutdown, ctx + ": the mesh was stopped");
    if (auto s = shared_->caller->check_owner(supervision.owner); !s.ok()) {
      return s.with_context(ctx);
    }
    if (!shared_->names.insert(name).second) {
      return Status(Errc::invalid_argument,
                    "ProcMesh::spawn: mesh '" + name + "' was already spawned here");
    }
    caller = shared_->caller;
    runtime = shared_->runtime;
  }
  std::vector<caf::actor> members;
  Status failed;
  {
    ForeignThreadGuard guard;  // spawn() may be called from any thread
    auto* host = runtime->system().dummy_execution_unit();
    for (int i = 0; i < size() && failed.ok(); ++i) {
      auto made = make(host, i);
      if (made.ok()) {
        members.push_back(std::move(made).value());
      } else {
        failed = made.status();
      }
    }
  }
  if (!failed.ok()) {
    // Nothing half-spawned stays: the members made stop, the name is free.
    for (auto& a : members) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->names.erase(name);
    return failed;
  }
  // Restarts make the member again, here, with the same arguments.
  auto respawn = [make](caf::event_based_actor* self, int r, std::function<void(caf::actor)> done) {
    auto again = make(self->context(), r);
    done(again.ok() ? *again : caf::actor());
  };
  auto shape = member_shape();
  if (!shape.ok()) return shape.status();
  Spawned out;
  out.id =
      caller->add_mesh(name, std::move(members), true, std::move(supervision), std::move(respawn));
  out.caller = std::move(caller);
  out.extent = std::move(shape).value();
  out.timeout = shared_->options.request_timeout;
  return out;
}

}  // namespace meshstore
