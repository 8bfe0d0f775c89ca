#pragma once

// Actor meshes: one actor per rank, spawned collectively, addressed by rank,
// and messaged all at once with the replies gathered into one future. This
// header exposes CAF on purpose: a mesh's actors are the user's own CAF
// actors (typed behaviours).
//
//   auto mesh = meshstore::Mesh::from_env().value();      // under meshrun
//   // adder_impl(adder_actor::pointer self, int rank) -> adder_actor::behavior_type
//   auto adders = mesh.spawn<adder_actor>("adders", adder_impl).value();
//   auto sums = adders.broadcast<int>(add_atom::value, 1).get(10s);   // one reply per rank

#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshstore/actor_mesh.hpp"
#include "meshstore/foreign_thread.hpp"
#include "meshstore/future.hpp"
#include "meshstore/launch_env.hpp"
#include "meshstore/status.hpp"
#include "meshstore/supervision.hpp"
#include "meshstore/tls.hpp"

namespace meshstore {

class Mesh;
namespace internal {
class ActorRuntime;
/// The actor runtime of `mesh` (null once closed): for the layers built
/// on a Mesh (spawn_store), so that they share it.
std::shared_ptr<ActorRuntime> mesh_runtime(const Mesh& mesh);
/// Whether `mesh` is a Mesh::local one (every rank in this process).
bool mesh_is_local(const Mesh& mesh);
/// The job's rendezvous, in rank 0's mesh registry: a value under `key`
/// (a text and an actor handle, which may be null: handles travel over the
/// connections the ranks already have), set once (a second set of the key is
/// Errc::invalid_argument), and read by any rank, waiting for it until the
/// mesh's request timeout (Errc::timeout naming the key). What spawn_store
/// hands its store out through, so that a launched job needs one port.
Status mesh_set_value(Mesh& mesh, const std::string& key, const std::string& text,
                      const caf::actor& actor);
Result<std::pair<std::string, caf::actor>> mesh_value(Mesh& mesh, const std::string& key);
/// A fresh rendezvous key for the next collective call `what` on `mesh`
/// ("what#N"): the same on every rank, which make those calls in the same
/// order.
std::string mesh_rendezvous_key(Mesh& mesh, const std::string& what);
}  // namespace internal

/// How a mesh is joined.
struct MeshOptions {
  /// Deadline of registry requests and of each rank's reply to broadcast().
  std::chrono::milliseconds request_timeout{30000};
  /// Mesh::from_env: keep retrying rank 0's registry this long.
  std::chrono::milliseconds connect_timeout{30000};
  /// Actor scheduler threads; 0 = max(2, the CPUs the process may run on), at most 8.
  int scheduler_threads = 0;
  /// Across processes: how often every connection is probed (BASP
  /// heartbeats), and how long one may stay silent before it is dropped
  /// and the members behind it are down (a host whose network vanished
  /// without closing its sockets). connection_timeout > heartbeat_interval > 0.
  std::chrono::milliseconds heartbeat_interval{1000};
  /// How long a connection may stay silent before it is dropped (see
  /// heartbeat_interval).
  std::chrono::milliseconds connection_timeout{10000};
  /// Mutual TLS on every connection between processes (docs/security.md).
  /// Mesh::from_env and ProcMesh::serve take MESHSTORE_TLS_* when unset;
  /// a ProcMesh hands its own to its workers.
  TlsOptions tls;
  /// Registers your own message types, so they cross processes:
  /// `[](caf::actor_system_config& cfg) { cfg.add_message_type<Point>("my::Point"); }`
  /// (each with an `inspect` overload). Every rank must register the same
  /// types under the same names. A type not registered travels within a
  /// process only; sent to another rank, the call fails. The process's
  /// runtime takes them when this object starts it; a later object's are
  /// checked against the running runtime's, so the function may run more
  /// than once: keep it free of other effects.
  std::function<void(caf::actor_system_config&)> add_types;
  /// How meshes spawned without a Supervision of their own are supervised
  /// (default: propagate).
  Supervision supervision;
  /// ProcMesh::serve: runs first in every worker process, with its rank,
  /// before the process joins its controller, so before any actor
  /// (Monarch's per-process setup): setting environment variables, pinning
  /// devices, loading a library. A failure (or an exception) ends the
  /// worker, and the controller's launch or attach fails naming the rank
  /// and the message. The hook must return: one that hangs holds its
  /// process until the launch's join_timeout. ProcMesh::from_env runs it
  /// too, first, with the launcher's rank: a failure is from_env's
  /// ("ProcMesh::from_env: setup failed: ..."). Mesh does not run it.
  std::function<Status(int rank)> setup;
  /// ProcMesh::serve: how long this process's actors, and their on_stop()
  /// hooks, have to stop once it stops serving; past it the process exits
  /// anyway, saying so on stderr. Keep it below the controller's
  /// LaunchSpec::stop_grace, after which the process is killed.
  std::chrono::milliseconds stop_timeout{4000};
  /// The root of the ownership tree: failures that propagate end here. True
  /// when handled; without it, or when it answers false, the process logs
  /// the failure and exits with status 1.
  std::function<bool(const MeshFailure&)> on_failure;
};

/// Registers message and actor types (as MeshOptions::add_types does) in
/// the process's actor runtime, which every store, mesh and agent of the
/// process shares (docs/actors.md, "One runtime per process"). A running
/// runtime takes no new types, so call it before the first of them: a
/// program that starts a HostAgent or a Store before the ProcMesh whose
/// actors need its types. Errc::invalid_argument, naming the types, when a
/// runtime is running already without them.
Status add_process_types(std::function<void(caf::actor_system_config&)> add);

/// Deprecated in 0.2, gone in 0.3: ProcMesh::from_env and ProcMesh::local
/// do all of this, with spawn() from a function or by type name.
/// The ranks of a launched job as an actor runtime: every rank runs one
/// Mesh; spawn() is collective. Move-only; close() (or the destructor)
/// stops this rank's actors. It runs on the process's actor runtime,
/// which every store, mesh and agent of the process shares (add_process_types).
/// Thread-safe: spawn() may be called from any thread (ranks must call the
/// spawns of one mesh in the same order).
class Mesh {
 public:
  /// Joins the job described by the launch environment (LaunchEnv): rank 0
  /// publishes the mesh registry on MASTER_ADDR at MESHSTORE_MESH_PORT
  /// (default MASTER_PORT + 2), the others connect with retry.
  static Result<Mesh> from_env(MeshOptions options = {});
  /// All `world_size` ranks in this process: spawn() makes every rank's
  /// actor here. For tests and single-process use.
  static Result<Mesh> local(int world_size, MeshOptions options = {});

  /// Moves the handle; the moved-from mesh is empty.
  Mesh(Mesh&&) noexcept;
  /// Closes the mesh this one held (as close() does), then takes over the other.
  Mesh& operator=(Mesh&&) noexcept;
  ~Mesh();

  /// This process's rank in the job (0 for a local mesh or a moved-from one).
  int rank() const noexcept;
  /// Number of ranks in the job (0 for a moved-from mesh).
  int world_size() const noexcept;
  /// This rank's actor system (to spawn more of your own actors).
  caf::actor_system& system();

  /// Collective: spawns `fun(self, rank, xs...)` as this rank's member of mesh
  /// `name` (every rank of a local mesh, here), registers it, and waits
  /// until every rank has done the same. Errc::invalid_argument if `name`
  /// is empty or already used here, or if ranks spawned `name` with
  /// different actor interfaces (naming both); Errc::timeout naming the
  /// ranks still missing after the request timeout.
  template <class Handle, class F, class... Ts>
  Result<ActorMesh<Handle>> spawn(const std::string& name, F fun, Ts&&... xs) {
    return spawn<Handle>(default_supervision(), name, std::move(fun), std::forward<Ts>(xs)...);
  }

  /// spawn() under `supervision` (supervision.hpp) instead of the default
  /// (MeshOptions::supervision). The owner (rank 0, or this process for a
  /// local mesh) supervises; other ranks' copies of `supervision` are not
  /// used.
  template <class Handle, class F, class... Ts>
  Result<ActorMesh<Handle>> spawn(Supervision supervision, const std::string& name, F fun,
                                  Ts&&... xs) {
    using Spawned = decltype(std::declval<caf::actor_system&>().spawn(fun, 0, xs...));
    static_assert(std::is_same<Spawned, Handle>::value || std::is_same<Handle, caf::actor>::value,
                  "Mesh::spawn<Handle>: `fun` makes an actor of another type than Handle");
    internal::refuse_floats_in_interface<Handle>();  // its messages cross processes
    // Checked before any actor exists: an open mesh, a fresh name.
    if (auto c = caller()) {
      if (auto s = c->check_owner(supervision.owner); !s.ok()) {
        return s.with_context("Mesh::spawn '" + name + "'");
      }
    }
    if (auto s = reserve(name); !s.ok()) return s;
    std::vector<caf::actor> mine;
    const int copies = is_local() ? world_size() : 1;
    {
      ForeignThreadGuard guard;  // spawn() may be called from any thread
      for (int i = 0; i < copies; ++i) {
        const int member_rank = is_local() ? i : rank();
        mine.push_back(caf::actor_cast<caf::actor>(system().spawn(fun, member_rank, xs...)));
      }
    }
    // Every rank's members must have this interface: a rank that spawned
    // `name` with another Handle is refused, not cast.
    const auto sigs = system().message_types<Handle>();
    auto all = join(name, std::move(mine), std::vector<std::string>(sigs.begin(), sigs.end()));
    if (!all.ok()) return all.status();
    const int n = static_cast<int>(all->size());
    auto c = caller();
    if (!c) return Status(Errc::shutdown, "Mesh::spawn '" + name + "': the mesh is closed");
    // Restarts spawn this process's members again, with the same arguments.
    caf::actor_system* sys = &system();
    const bool local = is_local();
    const int me = rank();
    auto respawn = [sys, local, me, fun, xs...](caf::event_based_actor*, int r,
                                                std::function<void(caf::actor)> done) {
      if (!local && r != me) return done(caf::actor());
      done(caf::actor_cast<caf::actor>(sys->spawn(fun, r, xs...)));
    };
    const std::size_t id = c->add_mesh(name, std::move(all).value(), local || me == 0,
                                       std::move(supervision), std::move(respawn));
    return ActorMesh<Handle>(std::move(c), id, Extent::line(n), timeout());
  }

  /// Stops this rank's actors and its listener, and lets go of the
  /// process's runtime (which stops with its last user). Idempotent.
  void close();

 private:
  friend class ProcMesh;  // from_env: a ProcMesh over this rank's Mesh
  friend std::shared_ptr<internal::ActorRuntime> internal::mesh_runtime(const Mesh& mesh);
  friend bool internal::mesh_is_local(const Mesh& mesh);
  friend Status internal::mesh_set_value(Mesh& mesh, const std::string& key,
                                         const std::string& text, const caf::actor& actor);
  friend Result<std::pair<std::string, caf::actor>> internal::mesh_value(Mesh& mesh,
                                                                         const std::string& key);
  friend std::string internal::mesh_rendezvous_key(Mesh& mesh, const std::string& what);
  struct Impl;
  explicit Mesh(std::unique_ptr<Impl> impl);
  bool is_local() const noexcept;
  // Errc::shutdown when closed or moved from; Errc::invalid_argument for an
  // empty or already used name; else records the name.
  Status reserve(const std::string& name);
  // Rank 0's registry (here or remote); null once closed.
  caf::actor registry_handle() const;
  // Frees a reserved name whose spawn failed before it joined (`why`),
  // and fails the other ranks' spawns of it at once.
  void release(const std::string& name, const Status& why);
  // The named singleton `name` of the registered type `type`, made on
  // rank 0's registry by its first caller (ProcMesh::get_or_spawn).
  Result<caf::actor> single(const std::string& name, const std::string& type,
                            std::vector<std::string> interface, caf::message args);
  std::chrono::milliseconds timeout() const noexcept;
  Supervision default_supervision() const;
  // The caller shared with this mesh's ActorMeshes; null once closed.
  std::shared_ptr<internal::MeshCaller> caller() const;
  // Registers this rank's actors of mesh `name`; answers every rank's.
  Result<std::vector<caf::actor>> join(const std::string& name, std::vector<caf::actor> mine,
                                       std::vector<std::string> interface);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshstore
