#pragma once

// What the copies and slices of one ProcMesh share: its processes (joining,
// running, exited), the controller's runtime and actors, and the names of
// the meshes spawned on them. Internal: proc_mesh.cpp launches and stops
// the processes; proc_spawn.cpp spawns on them.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/proc_protocol.hpp"
#include "meshstore/internal/process_group.hpp"
#include "meshstore/proc_mesh.hpp"

namespace meshstore {
namespace internal::proc {

// The workers joining, and those that exited (or were started again).
struct Joining {
  explicit Joining(std::size_t n)
      : procs(n),
        pids(n, -1),
        doors(n),
        exited(n),
        last_stderr(n),
        joins(n, 0),
        relaunches(n),
        coming_back(n, false),
        waiters(n) {}

  std::mutex mu;
  std::condition_variable cv;
  std::vector<proc_actor> procs;
  std::vector<int> pids;                 // as each said in its hello
  std::vector<std::string> doors;        // as each said in its hello: its peers connect there
  std::vector<std::string> exited;       // why, by rank; empty while running
  std::vector<std::string> last_stderr;  // each rank's latest line on stderr
  int joined = 0;
  bool stopping = false;
  // Relaunching (LaunchSpec::max_relaunches): on once every worker
  // joined (wait_joined).
  bool up = false;
  int max_relaunches = 0;
  std::chrono::milliseconds relaunch_window{0};
  std::vector<std::uint64_t> joins;  // by rank: how often it joined
  std::vector<std::vector<std::chrono::steady_clock::time_point>> relaunches;  // in the window
  std::vector<bool> coming_back;  // by rank: started again, not joined yet
  // By rank: told the process's actor when it joins again, or an empty
  // one when it will not (it exited for good, or the mesh stops).
  std::vector<std::vector<std::function<void(proc_actor)>>> waiters;
};

// Processes a host agent started for this controller.
struct AgentJob {
  std::string address;
  agent_actor agent;
  std::uint64_t job = 0;
  int first = 0;
  int count = 0;
};

// The agents' jobs of an attach(): read by the controller's sink, which
// asks an agent to start a rank again.
struct AgentJobs {
  std::mutex mu;
  std::vector<AgentJob> jobs;
  // The job that runs `rank` (null: none), with `mu` held.
  const AgentJob* holding(int rank) const {
    for (const auto& j : jobs) {
      if (rank >= j.first && rank < j.first + j.count) return &j;
    }
    return nullptr;
  }
};

using OutputFn = std::function<void(int rank, bool is_stderr, const std::string& line)>;

// MeshOptions::setup for rank `rank`, before anything else of the process
// (ProcMesh::serve, ProcMesh::from_env); an exception is a failure, and a
// failure's message begins with `what`.
Status run_setup(const MeshOptions& options, int rank, const char* what);

}  // namespace internal::proc

struct ProcMesh::Shared {
  MeshOptions options;
  // from_env: this rank's Mesh (its registry, its caller) and its rank;
  // nothing of a controller's below is used.
  std::unique_ptr<Mesh> spmd;
  int self_rank = -1;
  // local(): every member is this process; nothing of a controller's or
  // of from_env's is used.
  bool local = false;
  LaunchSpec spec;
  Extent whole = Extent::line(0);
  // Shared with the layers built on this ProcMesh (spawn_store's store):
  // the actor system goes when the last of them lets go.
  std::shared_ptr<internal::ActorRuntime> runtime;
  internal::proc::controller_actor controller;
  internal::proc::sink_actor sink;  // attach(): the agents' output and exits
  std::shared_ptr<internal::proc::Joining> joining;
  std::unique_ptr<internal::ProcessGroup> group;           // launch()
  std::shared_ptr<internal::proc::AgentJobs> agent_jobs =  // attach()
      std::make_shared<internal::proc::AgentJobs>();
  std::shared_ptr<internal::MeshCaller> caller;
  std::mutex mu;  // guards names, singletons, stopped, group
  std::set<std::string> names;
  // get_or_spawn's singletons by name (their names are in `names` too),
  // and the lock that makes a name's first spawn the only one.
  struct Singleton {
    std::string type;
    std::vector<std::string> interface;
    Spawned spawned;
  };
  std::map<std::string, Singleton> singletons;
  std::mutex singleton_mu;
  bool stopped = false;
  std::string where;       // host:port the workers join
  std::uint16_t port = 0;  // where's port, on which the controller listens
  std::string token;

  ~Shared() { stop(); }
  // Stops every process and closes the runtime (ProcMesh::stop). Idempotent.
  void stop();
  // stop() under local(): the members here stop, bounded by the options'
  // stop_timeout (proc_local.cpp). Called once, `stopped` set.
  void stop_here();

  // The controller's half of a launch or attach: a runtime, the supervision
  // caller and the published controller actor the workers join.
  static Result<std::shared_ptr<Shared>> open(const char* what, Extent extent,
                                              const LaunchSpec& spec, const MeshOptions& options);
  // Waits until every worker joined (from then on a dead one may be
  // started again: Joining::up), one exited first, or time ran out.
  Status wait_joined(const char* what, const std::string& program);
  // The environment every worker gets: the controller, the token, the world.
  std::vector<std::pair<std::string, std::string>> worker_env() const {
    auto env = spec.env;
    env.emplace_back(internal::proc::kControllerEnv, where);
    env.emplace_back(internal::proc::kTokenEnv, token);
    env.emplace_back(internal::proc::kWorldEnv, std::to_string(whole.size()));
    for (auto& kv : options.tls.env()) env.push_back(std::move(kv));
    return env;
  }
  // Each worker's output, to spec.on_output or this process's stdout and
  // stderr; its latest stderr line is kept for a launch that fails.
  internal::proc::OutputFn output() const {
    internal::proc::OutputFn to = spec.on_output;
    if (!to) {
      to = [](int rank, bool is_stderr, const std::string& line) {
        std::FILE* f = is_stderr ? stderr : stdout;
        std::fprintf(f, "[rank %d] %s\n", rank, line.c_str());
        std::fflush(f);
      };
    }
    return [to, joining = joining](int rank, bool is_stderr, const std::string& line) {
      if (is_stderr && joining) {
        std::lock_guard<std::mutex> lock(joining->mu);
        if (rank >= 0 && rank < static_cast<int>(joining->last_stderr.size())) {
          joining->last_stderr[static_cast<std::size_t>(rank)] = line;
        }
      }
      to(rank, is_stderr, line);
    };
  }
};

}  // namespace meshstore
