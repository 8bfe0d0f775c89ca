#pragma once

// Process meshes under one controller: a program launches N processes (its
// own binary in worker mode, or another), each joins back, and the program
// spawns actor meshes of a type registered by name on any slice of them.
// The workers' output comes back line by line with a rank prefix; a worker
// whose controller dies (even by SIGKILL) stops itself. Like mesh.hpp, this
// header exposes CAF on purpose: the actors are the user's own.
//
//   // The same registration in every process, controller and workers alike:
//   meshstore::MeshOptions opts;
//   opts.add_types = [](caf::actor_system_config& cfg) {
//     cfg.add_actor_type("adder", adder);   // adder(adder_actor::pointer, int rank, int base)
//   };
//   if (meshstore::ProcMesh::is_worker()) return meshstore::ProcMesh::serve(opts).ok() ? 0 : 1;
//   auto procs = meshstore::ProcMesh::launch({{"hosts", 2}, {"procs", 2}}, {}, opts).value();
//   auto adders = procs.spawn<adder_actor>("adders", "adder", 100).value();
//   auto host1 = adders.slice("hosts", 1, 2).value();
//   auto sums = host1.call<int>(add_atom::value, 1).get(10s);

#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshstore/actor_mesh.hpp"
#include "meshstore/extent.hpp"
#include "meshstore/mesh.hpp"
#include "meshstore/status.hpp"
#include "meshstore/supervision.hpp"

namespace meshstore {

class ProcMesh;
namespace internal {
class ActorRuntime;
/// The controller's actor runtime of `procs` (null once stopped): for the
/// layers built on a ProcMesh (spawn_store), so that they share it.
std::shared_ptr<ActorRuntime> proc_runtime(const ProcMesh& procs);
/// The rank's Mesh of a ProcMesh::from_env (null for launch and attach, or
/// once stopped): what spawn_store builds the store of a launched job on.
Mesh* proc_spmd_mesh(const ProcMesh& procs);
/// Whether `procs` is a ProcMesh::local (every member this process).
bool proc_is_local(const ProcMesh& procs);
/// Makes member `rank` of a mesh in this process (on `host`'s system):
/// from a registered type and its arguments, or from a function.
using MemberMaker = std::function<Result<caf::actor>(caf::execution_unit* host, int rank)>;
/// In a worker, while ProcMesh::serve runs: its actor runtime; else null.
std::shared_ptr<ActorRuntime> worker_runtime();
/// In a worker: `hook` runs on serve()'s own thread when it stops serving,
/// before its actors and runtime go (what spawn_store's store uses to
/// close: never on an actor thread, never after the runtime).
void at_worker_exit(std::function<void()> hook);
}  // namespace internal

/// What ProcMesh::launch starts, and how.
struct LaunchSpec {
  /// The worker program: a path, or a name on PATH. Empty (the default):
  /// this program again (/proc/self/exe), which must call
  /// ProcMesh::serve() when ProcMesh::is_worker().
  std::string program;
  /// The worker's arguments (argv[1..]).
  std::vector<std::string> args;
  /// Set in every worker on top of this process's environment.
  std::vector<std::pair<std::string, std::string>> env;
  /// Each line a worker writes. Default: "[rank R] line" to this process's
  /// stdout or stderr. Called one line at a time (on a thread of the
  /// launch's own, or, for attach(), on an actor's).
  std::function<void(int rank, bool is_stderr, const std::string& line)> on_output;
  /// Where this process listens for its workers to join.
  std::string bind_host = "127.0.0.1";
  /// The address the workers are told to join: empty = bind_host. Set it
  /// when bind_host is a wildcard (0.0.0.0), which workers cannot dial.
  std::string advertise_host;
  /// How long every worker has to join after it was started.
  std::chrono::milliseconds join_timeout{30000};
  /// stop(): how long workers have to exit before they are killed.
  std::chrono::milliseconds stop_grace{5000};
  /// A worker that dies after launch() or attach() returned is started
  /// again (same rank, program, arguments and environment, by this
  /// process or by the agent that ran it; its setup hook runs again) at
  /// most this many times within `relaunch_window`, per rank. Once it
  /// joins, the members it held come back under FailurePolicy::restart;
  /// other meshes keep their failure. 0 (the default): a dead worker
  /// stays dead.
  int max_relaunches = 0;
  /// The sliding window over which max_relaunches counts a rank's relaunches
  /// (positive when max_relaunches is).
  std::chrono::milliseconds relaunch_window{60000};
};

/// Processes with a shape (named dimensions), started and owned by this
/// program: the single controller. Copies and slices share the processes;
/// they stop when stop() is called or the last copy goes (call stop(), or
/// drop the last copy, on a thread of your own: not inside one of its
/// actors, whose system it waits for). Meshes spawned on them are
/// supervised here (MeshOptions::supervision, on_failure). Thread-safe.
class ProcMesh {
 public:
  /// True in a process that ProcMesh::launch started (its environment
  /// names a controller).
  static bool is_worker();
  /// In a worker: joins the controller with `options` (add_types must
  /// register the same message and actor types as the controller's) and
  /// serves it: spawns what it asks for, until it calls stop() (an ok
  /// Status) or goes away (Errc::unavailable, "the controller ... went
  /// away"). Errc::invalid_argument when this process is not a worker.
  static Status serve(MeshOptions options = {});

  /// Starts shape.size() processes of `spec` on this host and waits until
  /// every one joined. Errc::invalid_argument for a bad shape or option,
  /// Errc::not_found for a program that is not there, Errc::unavailable
  /// naming the rank that exited before joining (with its exit status),
  /// Errc::timeout naming the ranks missing after spec.join_timeout.
  /// Nothing is left running after a failure.
  static Result<ProcMesh> launch(std::vector<std::pair<std::string, int>> shape,
                                 LaunchSpec spec = {}, MeshOptions options = {});

  /// Starts shape.size() processes of `spec` through host agents
  /// (`meshstore agent --listen HOST:PORT`, HostAgent), "host:port" each,
  /// in equal contiguous blocks of ranks: with shape {{"hosts", 2},
  /// {"procs", 4}} and two agents, ranks 0-3 run on the first. The program
  /// path must exist on every agent's host (empty: this program's path).
  /// spec.bind_host (or advertise_host) must be an address of this host
  /// the workers can reach.
  /// Each agent stops its processes when this controller goes away. Errors
  /// as launch(), and Errc::unavailable naming an agent that cannot be
  /// reached; nothing is left running after a failure.
  static Result<ProcMesh> attach(const std::vector<std::string>& agents,
                                 std::vector<std::pair<std::string, int>> shape,
                                 LaunchSpec spec = {}, MeshOptions options = {});

  /// The ranks of a job a launcher started (meshrun, torchrun, mpirun,
  /// srun: LaunchEnv), each running this same program, as one process
  /// mesh: SPMD, with no controller. Its shape is {hosts: WORLD_SIZE /
  /// LOCAL_WORLD_SIZE, procs: LOCAL_WORLD_SIZE} ({procs: WORLD_SIZE} when
  /// LOCAL_WORLD_SIZE does not divide WORLD_SIZE), rank r being member r
  /// (ranks numbered host by host, as those launchers do). spawn() is
  /// collective: every rank calls it, in the same order, on the whole
  /// mesh, and makes its own member of the registered type; it returns
  /// once every rank's is in. Rank 0 holds the registry (on MASTER_ADDR at
  /// MESHSTORE_MESH_PORT, default MASTER_PORT + 2) and supervises; the
  /// ranks connect to each other directly. Errors: the launch
  /// environment's, and Errc::unavailable when rank 0 cannot listen or the
  /// others cannot reach it within MeshOptions::connect_timeout. (It
  /// replaces Mesh::from_env.)
  static Result<ProcMesh> from_env(MeshOptions options = {});

  /// A process mesh of `shape` whose every member is this process (no
  /// process is started: Monarch's this_proc, and what Mesh::local was):
  /// spawn() makes each member here, on this process's runtime, by type
  /// name or from a function, supervised here; slices, get_or_spawn and
  /// spawn_store work as on launched processes. MeshOptions::setup is not
  /// run (no process starts). For tests, single-process programs, and a
  /// store embedded beside its own actors. Errc::invalid_argument for a
  /// bad shape (1 to 4096 members) or option.
  static Result<ProcMesh> local(std::vector<std::pair<std::string, int>> shape,
                                MeshOptions options = {});

  ProcMesh() = default;

  /// This process's member index in the whole mesh: its rank under
  /// from_env; -1 in the controller of launch() or attach(), which is no
  /// member, and under local(), where this process is every member.
  int rank() const noexcept;

  /// The shape of this view; member i is process extent().rank(i).
  const Extent& extent() const noexcept { return extent_; }
  /// Number of processes in this view.
  int size() const noexcept { return extent_.size(); }
  /// The processes with begin <= coordinate(dim) < end.
  Result<ProcMesh> slice(const std::string& dim, int begin, int end) const;
  /// Several dimensions in one call; an index drops its dimension
  /// (Extent::slice).
  Result<ProcMesh> slice(const std::vector<std::pair<std::string, Select>>& selects) const;
  /// The pid of member `i` of this view (on its own host); -1 when out of
  /// range, and under from_env for every rank but this process's.
  int pid(int i) const;
  /// Sends `sig` to member `i`'s process (tests, demos: SIGKILL).
  /// Errc::invalid_argument under from_env (the launcher owns the
  /// processes) and under local() (it would be this process).
  Status signal(int i, int sig) const;
  /// The controller's actor system (to spawn your own local actors); not
  /// after stop().
  caf::actor_system& system();

  /// Spawns an actor of the registered type `type` on every process of
  /// this view, as fun(self, int rank, xs...) with rank = its index in the
  /// new mesh (0..size()-1); the mesh has this view's shape. Every argument
  /// type must be registered (or be one of CAF's own). Errors name the
  /// rank: an unknown type, arguments the type does not take, an actor
  /// interface other than Handle's (both named), a process gone. A failed
  /// spawn leaves no member behind.
  template <class Handle, class... Ts>
  Result<ActorMesh<Handle>> spawn(const std::string& name, const std::string& type, Ts... xs) {
    return spawn<Handle>(default_supervision(), name, type, std::move(xs)...);
  }
  /// spawn() supervised by `supervision` (supervision.hpp): restart spawns
  /// the member again on its process, with the same arguments.
  template <class Handle, class... Ts>
  Result<ActorMesh<Handle>> spawn(Supervision supervision, const std::string& name,
                                  const std::string& type, Ts... xs) {
    internal::refuse_bare_floats<Ts...>();
    auto args = [xs...](int rank) { return caf::make_message(rank, xs...); };
    return mesh_of<Handle>(
        spawn_members(std::move(supervision), name, type, interface_of<Handle>(), std::move(args)));
  }

  /// Spawns `fun(self, int rank, xs...)` as every member of this view,
  /// rank being its index in the new mesh, as Mesh::spawn did. A function
  /// does not travel between processes, so this is for local() (each
  /// member made here) and from_env() (collective: every rank makes its
  /// own, on the whole mesh); on launched or attached processes it is
  /// Errc::invalid_argument (register the type and spawn it by name).
  /// Errors otherwise as spawn() by type name.
  template <class Handle, class F, class... Ts>
  auto spawn(const std::string& name, F fun, Ts... xs)
      -> std::enable_if_t<!std::is_convertible<F, std::string>::value, Result<ActorMesh<Handle>>> {
    return spawn<Handle>(default_supervision(), name, std::move(fun), std::move(xs)...);
  }
  /// The same, supervised by `supervision`: restart calls `fun` again.
  template <class Handle, class F, class... Ts>
  auto spawn(Supervision supervision, const std::string& name, F fun, Ts... xs)
      -> std::enable_if_t<!std::is_convertible<F, std::string>::value, Result<ActorMesh<Handle>>> {
    using Made = decltype(std::declval<caf::actor_system&>().spawn(fun, 0, xs...));
    static_assert(std::is_same<Made, Handle>::value || std::is_same<Handle, caf::actor>::value,
                  "ProcMesh::spawn<Handle>: `fun` makes an actor of another type than Handle");
    Maker make = [fun, xs...](caf::execution_unit* host, int rank) -> Result<caf::actor> {
      return caf::actor_cast<caf::actor>(host->system().spawn(fun, rank, xs...));
    };
    return mesh_of<Handle>(
        spawn_made(std::move(supervision), name, interface_of<Handle>(), std::move(make)));
  }

  /// The named singleton actor `name`, as a mesh of one member (extent
  /// {}): the first call spawns it, of the registered type `type` with
  /// (rank 0, xs...), on the first process of this view; every later call,
  /// from any thread, and one made while the first is still spawning, gets
  /// that same actor (its arguments are then unused). Monarch's
  /// get_or_spawn_controller. Under from_env any rank may call it: the
  /// singleton lives on rank 0, made by the first caller of any rank. Errc::invalid_argument when
  /// spawn() made a mesh of that name, or the singleton is of another type or interface; spawn()'s
  /// errors otherwise, after which the name is free again.
  template <class Handle, class... Ts>
  Result<ActorMesh<Handle>> get_or_spawn(const std::string& name, const std::string& type,
                                         Ts... xs) {
    internal::refuse_bare_floats<Ts...>();
    auto args = [xs...](int rank) { return caf::make_message(rank, xs...); };
    return mesh_of<Handle>(singleton(name, type, interface_of<Handle>(), std::move(args)));
  }

  /// Stops every process (of the whole mesh, not only this view): asks
  /// each to exit, kills those left after LaunchSpec::stop_grace, stops
  /// the controller's own actors and lets go of the process's runtime
  /// (shared with its stores and agents). Actor meshes spawned here answer
  /// Errc::shutdown afterwards. Idempotent.
  void stop();

  struct Shared;  // the processes and the controller's runtime

 private:
  friend std::shared_ptr<internal::ActorRuntime> internal::proc_runtime(const ProcMesh& procs);
  friend Mesh* internal::proc_spmd_mesh(const ProcMesh& procs);
  friend bool internal::proc_is_local(const ProcMesh& procs);
  using Maker = internal::MemberMaker;
  struct Spawned {
    std::shared_ptr<internal::MeshCaller> caller;
    std::size_t id = 0;
    Extent extent = Extent::line(0);
    std::chrono::milliseconds timeout{30000};
  };
  ProcMesh(std::shared_ptr<Shared> shared, Extent extent);
  // spawn() and get_or_spawn(): Handle's message signatures, which each
  // process checks against the actor type it makes, and the mesh made.
  template <class Handle>
  static std::function<std::vector<std::string>(caf::actor_system&)> interface_of() {
    return [](caf::actor_system& sys) {
      const auto sigs = sys.message_types<Handle>();
      return std::vector<std::string>(sigs.begin(), sigs.end());
    };
  }
  template <class Handle>
  static Result<ActorMesh<Handle>> mesh_of(Result<Spawned> made) {
    internal::refuse_floats_in_interface<Handle>();  // its messages cross processes
    if (!made.ok()) return made.status();
    return ActorMesh<Handle>(std::move(made->caller), made->id, made->extent, made->timeout);
  }
  Result<Spawned> singleton(
      const std::string& name, const std::string& type,
      std::function<std::vector<std::string>(caf::actor_system&)> interface_of,
      std::function<caf::message(int)> args);
  Supervision default_supervision() const;
  // The shape of a mesh spawned on this view: its dims, members 0..n-1
  // (a point: {}).
  Result<Extent> member_shape() const;
  Result<Spawned> spawn_members(
      Supervision supervision, const std::string& name, const std::string& type,
      std::function<std::vector<std::string>(caf::actor_system&)> interface_of,
      std::function<caf::message(int)> args);
  // Under from_env: the rank's Mesh and its caller; Errc::shutdown (after
  // `ctx`) once stopped.
  Result<std::pair<Mesh*, std::shared_ptr<internal::MeshCaller>>> spmd_parts(
      const std::string& ctx) const;
  // singleton() under from_env: made by rank 0's registry.
  Result<Spawned> singleton_spmd(const std::string& name, const std::string& type,
                                 const std::vector<std::string>& interface,
                                 const std::function<caf::message(int)>& args);
  // Spawns with `make` where a member is made in this process: every
  // member under local() (spawn_here), this rank's under from_env
  // (spawn_collective); refused on launched processes.
  Result<Spawned> spawn_made(
      Supervision supervision, const std::string& name,
      const std::function<std::vector<std::string>(caf::actor_system&)>& interface_of, Maker make);
  // Under from_env: this rank's member, then every rank's.
  Result<Spawned> spawn_collective(Supervision supervision, const std::string& name,
                                   const std::vector<std::string>& interface, const Maker& make);
  // Under local(): every member of this view, here.
  Result<Spawned> spawn_here(Supervision supervision, const std::string& name,
                             const std::vector<std::string>& interface, const Maker& make);

  std::shared_ptr<Shared> shared_;
  Extent extent_ = Extent::line(0);
};

}  // namespace meshstore
