#include "meshstore/proc_mesh.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <caf/io/all.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/address.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/internal/mesh_runtime.hpp"
#include "meshstore/internal/proc_protocol.hpp"
#include "meshstore/internal/proc_shared.hpp"
#include "meshstore/internal/process_group.hpp"
#include "meshstore/logging.hpp"

namespace meshstore {
namespace {

using namespace internal::proc;

std::string random_token() {
  std::random_device rd;
  char buf[33];
  for (int i = 0; i < 4; ++i) std::snprintf(buf + 8 * i, 9, "%08x", rd());
  return std::string(buf, 32);
}

controller_actor::behavior_type controller_impl(controller_actor::pointer, std::string token,
                                                std::shared_ptr<Joining> joining) {
  return {
      [=](proc_hello_atom, const std::string& t, std::int32_t rank, std::int32_t pid,
          proc_actor proc, const std::string& door) -> caf::result<std::vector<std::string>> {
        std::unique_lock<std::mutex> lock(joining->mu);
        if (t != token) {
          return internal::to_caf_error(
              Status(Errc::protocol_error, "this process was not launched by this controller"));
        }
        if (joining->stopping) {
          return internal::to_caf_error(
              Status(Errc::shutdown, "the controller is stopping its processes"));
        }
        if (rank < 0 || rank >= static_cast<std::int32_t>(joining->procs.size()) ||
            joining->procs[static_cast<std::size_t>(rank)]) {
          return internal::to_caf_error(
              Status(Errc::invalid_argument,
                     "rank " + std::to_string(rank) + " joined twice or is out of range"));
        }
        const auto r = static_cast<std::size_t>(rank);
        joining->procs[r] = proc;
        joining->pids[r] = pid;
        joining->doors[r] = door;
        // Its peers so far; each that joins later reaches it in turn.
        std::vector<std::string> peers;
        for (std::size_t i = 0; i < joining->doors.size(); ++i) {
          if (i != r && joining->procs[i] && !joining->doors[i].empty()) {
            peers.push_back(joining->doors[i]);
          }
        }
        ++joining->joined;
        ++joining->joins[r];
        if (joining->coming_back[r]) {
          joining->coming_back[r] = false;
          joining->exited[r].clear();
          log::get("proc")->warn("rank {} (pid {}) joined again", rank, pid);
        } else {
          log::get("proc")->debug("rank {} (pid {}) joined", rank, pid);
        }
        auto waiting = std::move(joining->waiters[r]);
        joining->waiters[r].clear();
        joining->cv.notify_all();
        lock.unlock();
        for (auto& w : waiting) w(proc);
        return peers;
      },
  };
}

// A process exited: started again when `may_relaunch` and its rank's
// budget allows (LaunchSpec::max_relaunches; true), else recorded for
// launch's wait, with a warning once the mesh is up (its members' failures
// reach supervision on their own), and whoever waits for it to come back
// told it will not.
bool record_exit(Joining& joining, int rank, const std::string& why, bool may_relaunch) {
  std::vector<std::function<void(proc_actor)>> give_up;
  {
    std::lock_guard<std::mutex> lock(joining.mu);
    if (rank < 0 || rank >= static_cast<int>(joining.exited.size())) return false;
    const auto r = static_cast<std::size_t>(rank);
    const bool was_joined = static_cast<bool>(joining.procs[r]);
    if (may_relaunch && joining.up && !joining.stopping) {
      const auto now = std::chrono::steady_clock::now();
      auto& times = joining.relaunches[r];
      times.erase(std::remove_if(times.begin(), times.end(),
                                 [&](auto t) { return now - t > joining.relaunch_window; }),
                  times.end());
      if (static_cast<int>(times.size()) < joining.max_relaunches) {
        times.push_back(now);
        if (was_joined) --joining.joined;
        joining.procs[r] = proc_actor();
        joining.pids[r] = -1;
        joining.doors[r].clear();
        joining.coming_back[r] = true;
        log::get("proc")->warn("rank {} {}: starting it again ({} of {} within {} ms)", rank, why,
                               times.size(), joining.max_relaunches,
                               joining.relaunch_window.count());
        return true;
      }
    }
    joining.exited[r] = why;
    joining.doors[r].clear();
    joining.coming_back[r] = false;
    give_up = std::move(joining.waiters[r]);
    joining.waiters[r].clear();
    joining.cv.notify_all();
    if (!joining.stopping && joining.up) log::get("proc")->warn("rank {} {}", rank, why);
  }
  for (auto& w : give_up) w(proc_actor());
  return false;
}

// The controller's end of the agents' processes. A rank that exits and
// may be started again (record_exit) is, by the agent that ran it.
sink_actor::behavior_type sink_impl(sink_actor::pointer, OutputFn on_output,
                                    std::shared_ptr<Joining> joining,
                                    std::shared_ptr<AgentJobs> agents) {
  return {
      [=](proc_output_atom, std::int32_t rank, bool is_stderr, const std::string& line) {
        on_output(rank, is_stderr, line);
      },
      [=](proc_exit_atom, std::int32_t rank, const std::string& why) {
        if (!record_exit(*joining, rank, why, true)) return;
        std::lock_guard<std::mutex> lock(agents->mu);
        if (const auto* j = agents->holding(rank)) {
          caf::anon_send(j->agent, agent_relaunch_atom::value, j->job, rank);
        }
      },
  };
}

std::string this_program() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<std::size_t>(n));
}

// In the process's runtime whatever the process makes first.
[[maybe_unused]] const bool kProcTypes = internal::register_process_types(add_proc_types);

// Asks each agent to stop this controller's job there. Each answers once
// its processes are gone; one that is gone itself took them with it (their
// lifeline), so the wait is bounded.
void stop_agent_jobs(internal::ActorRuntime& runtime, const std::vector<AgentJob>& remote,
                     std::chrono::milliseconds grace) {
  ForeignThreadGuard guard;
  caf::scoped_actor self{runtime.system()};
  for (auto& j : remote) {
    // An agent known dead (its connection closed: a monitor on it fires
    // at once) took its processes with it: asking would only time out.
    bool down = false;
    self->monitor(j.agent);
    self->receive([&](const caf::down_msg&) { down = true; },
                  caf::after(std::chrono::milliseconds(0)) >> [] {});
    if (down) {
      log::get("proc")->info("agent {} is gone, and its processes with it", j.address);
      continue;
    }
    self->demonitor(j.agent.address());
    self->request(j.agent, grace + std::chrono::seconds(2), agent_stop_atom::value, j.job,
                  static_cast<std::int64_t>(grace.count()))
        .receive([](bool) {},
                 [&](caf::error& e) {
                   log::get("proc")->warn("agent {}: stopping its processes: {}", j.address,
                                          internal::from_caf_error(e, "agent_stop").to_string());
                 });
  }
}

}  // namespace

void ProcMesh::Shared::stop() {
  std::vector<proc_actor> procs;
  std::unique_ptr<Mesh> mesh;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopped) return;
    stopped = true;
    mesh = std::move(spmd);
  }
  if (local) return stop_here();
  if (mesh) {
    // from_env: this rank leaves; the launcher owns the processes.
    mesh->close();
    mesh.reset();
    caller.reset();
    std::shared_ptr<internal::ActorRuntime> last;
    {
      std::lock_guard<std::mutex> lock(mu);  // proc_runtime() reads it
      last = std::move(runtime);
    }
    return;
  }
  // First: the meshes answer shutdown, and the members' going away is
  // no failure.
  if (caller) caller->close();
  if (joining) {
    std::lock_guard<std::mutex> lock(joining->mu);
    joining->stopping = true;
    for (auto& w : joining->waiters) w.clear();  // their caller is closed
    procs = joining->procs;
    joining->procs.assign(joining->procs.size(), proc_actor());
  }
  // Ask every worker to stop; the group (or agent) waits for them to
  // exit, then closes their lifeline and signals those left.
  for (auto& p : procs) {
    if (p) caf::anon_send(p, proc_stop_atom::value);
  }
  procs.clear();
  std::unique_ptr<internal::ProcessGroup> doomed;
  std::vector<AgentJob> remote;
  {
    std::lock_guard<std::mutex> lock(mu);  // pid() and signal() read them
    doomed = std::move(group);
  }
  {
    std::lock_guard<std::mutex> lock(agent_jobs->mu);
    remote = std::move(agent_jobs->jobs);
    agent_jobs->jobs.clear();
  }
  if (doomed) doomed->stop(spec.stop_grace);
  doomed.reset();
  if (!remote.empty() && runtime) stop_agent_jobs(*runtime, remote, spec.stop_grace);
  remote.clear();
  caller.reset();
  std::shared_ptr<internal::ActorRuntime> doomed_runtime;
  {
    std::lock_guard<std::mutex> lock(mu);  // proc_runtime() reads it
    doomed_runtime = std::move(runtime);
  }
  if (doomed_runtime) {
    // The process's runtime stays up: the workers' door and this
    // controller's actors go now, as they went with an own runtime.
    ForeignThreadGuard guard;
    auto& sys = doomed_runtime->system();
    if (controller && port != 0) internal::unpublish_actor(sys, controller, port);
    const std::vector<caf::actor> mine{caf::actor_cast<caf::actor>(controller),
                                       caf::actor_cast<caf::actor>(sink)};
    if (internal::stop_actors(sys, mine, options.stop_timeout) > 0) {
      log::get("proc")->warn("stop: the controller's actors did not stop within {} ms",
                             options.stop_timeout.count());
    }
  }
  controller = nullptr;
  sink = nullptr;
  doomed_runtime.reset();
}

Result<std::shared_ptr<ProcMesh::Shared>> ProcMesh::Shared::open(const char* what, Extent extent,
                                                                 const LaunchSpec& spec,
                                                                 const MeshOptions& options) {
  const std::string ctx = std::string("ProcMesh::") + what;
  const int n = extent.size();
  if (n < 1 || n > 1024) {
    return Status(Errc::invalid_argument,
                  ctx + ": between 1 and 1024 processes, not " + std::to_string(n));
  }
  if (spec.join_timeout.count() <= 0 || spec.stop_grace.count() < 0) {
    return Status(Errc::invalid_argument,
                  ctx + ": join_timeout must be positive, stop_grace not negative");
  }
  if (spec.max_relaunches < 0 || (spec.max_relaunches > 0 && spec.relaunch_window.count() <= 0)) {
    return Status(Errc::invalid_argument,
                  ctx + ": max_relaunches must not be negative, and relaunch_window positive");
  }
  MESHSTORE_RETURN_IF_ERROR(internal::check_mesh_options(options, ctx));
  if (spec.bind_host.empty()) return Status(Errc::invalid_argument, ctx + ": bind_host is empty");
  const std::string& advertised =
      spec.advertise_host.empty() ? spec.bind_host : spec.advertise_host;
  if (advertised == "0.0.0.0" || advertised == "::") {
    return Status(Errc::invalid_argument,
                  ctx + ": workers cannot join the wildcard address " + advertised +
                      ": set LaunchSpec::advertise_host to an address of this host they reach");
  }

  auto shared = std::make_shared<Shared>();
  shared->options = options;
  shared->spec = spec;
  shared->whole = std::move(extent);
  auto rt =
      internal::process_runtime(internal::mesh_runtime_options(options, true, add_proc_types), ctx);
  if (!rt.ok()) return rt.status();
  shared->runtime = std::move(rt).value();
  auto& sys = shared->runtime->system();
  shared->caller = internal::MeshCaller::make(sys, options.on_failure);
  shared->joining = std::make_shared<Joining>(static_cast<std::size_t>(n));
  shared->joining->max_relaunches = spec.max_relaunches;
  shared->joining->relaunch_window = spec.relaunch_window;
  shared->token = random_token();
  shared->controller = sys.spawn(controller_impl, shared->token, shared->joining);
  auto port = internal::publish_actor(sys, shared->controller, 0, spec.bind_host, false);
  if (!port.ok()) return port.status().with_context(ctx + ": cannot listen on " + spec.bind_host);
  shared->port = *port;
  internal::warn_if_exposed(spec.bind_host, *port, "the ProcMesh controller",
                            shared->runtime->tls());
  shared->where = (spec.advertise_host.empty() ? spec.bind_host : spec.advertise_host) + ":" +
                  std::to_string(*port);
  return shared;
}

Status ProcMesh::Shared::wait_joined(const char* what, const std::string& program) {
  const int n = whole.size();
  std::unique_lock<std::mutex> lock(joining->mu);
  const auto deadline = std::chrono::steady_clock::now() + spec.join_timeout;
  for (;;) {
    for (int r = 0; r < n; ++r) {
      const auto rank = static_cast<std::size_t>(r);
      if (!joining->exited[rank].empty() && !joining->procs[rank]) {
        const std::string& last = joining->last_stderr[rank];
        return Status(Errc::unavailable,
                      std::string("ProcMesh::") + what + ": rank " + std::to_string(r) + " (" +
                          program + ") " + joining->exited[rank] + " before joining" +
                          (last.empty() ? " (does it call ProcMesh::serve() when "
                                          "ProcMesh::is_worker()?)"
                                        : "; its last line on stderr: " + last));
      }
    }
    if (joining->joined == n) {
      joining->up = true;  // a worker that dies from now on may be started again
      return Status();
    }
    if (joining->cv.wait_until(lock, deadline) == std::cv_status::timeout && joining->joined < n) {
      std::string missing;
      for (int r = 0; r < n; ++r) {
        if (!joining->procs[static_cast<std::size_t>(r)])
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      return Status(Errc::timeout, std::string("ProcMesh::") + what + ": ranks " + missing +
                                       " did not join " + where + " within " +
                                       std::to_string(spec.join_timeout.count()) + " ms");
    }
  }
}

std::shared_ptr<internal::ActorRuntime> internal::proc_runtime(const ProcMesh& procs) {
  if (!procs.shared_) return nullptr;
  std::lock_guard<std::mutex> lock(procs.shared_->mu);
  return procs.shared_->stopped ? nullptr : procs.shared_->runtime;
}

Result<ProcMesh> ProcMesh::launch(std::vector<std::pair<std::string, int>> shape, LaunchSpec spec,
                                  MeshOptions options) {
  ForeignThreadGuard guard;  // this thread may outlive the mesh
  auto extent = Extent::make(std::move(shape));
  if (!extent.ok()) return extent.status().with_context("ProcMesh::launch");
  auto opened = Shared::open("launch", *extent, spec, options);
  if (!opened.ok()) return opened.status();
  auto shared = std::move(opened).value();
  const int n = extent->size();
  const std::string program = spec.program.empty() ? this_program() : spec.program;
  std::vector<internal::ProcessSpec> specs;
  for (int r = 0; r < n; ++r) {
    internal::ProcessSpec p;
    p.program = program;
    p.args = spec.args;
    p.env = shared->worker_env();
    p.env.emplace_back(kRankEnv, std::to_string(r));
    specs.push_back(std::move(p));
  }
  auto joining = shared->joining;
  // The group, for its own exits' relaunch (set before any may happen:
  // only once every worker joined; the pump ends before the group goes).
  auto self_group = std::make_shared<std::atomic<internal::ProcessGroup*>>(nullptr);
  auto group = internal::ProcessGroup::start(
      specs, shared->output(), [joining, self_group](int rank, int status) {
        if (record_exit(*joining, rank, internal::ProcessGroup::describe(status), true)) {
          if (auto* g = self_group->load()) (void)g->relaunch(rank);
        }
      });
  if (!group.ok()) return group.status().with_context("ProcMesh::launch");
  self_group->store(group->get());
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->group = std::move(group).value();
  }
  if (auto s = shared->wait_joined("launch", program); !s.ok()) {
    shared->stop();
    return s;
  }
  Extent whole = shared->whole;
  return ProcMesh(std::move(shared), std::move(whole));
}

Result<ProcMesh> ProcMesh::attach(const std::vector<std::string>& agents,
                                  std::vector<std::pair<std::string, int>> shape, LaunchSpec spec,
                                  MeshOptions options) {
  ForeignThreadGuard guard;  // this thread may outlive the mesh
  auto extent = Extent::make(std::move(shape));
  if (!extent.ok()) return extent.status().with_context("ProcMesh::attach");
  const int n = extent->size();
  const int hosts = static_cast<int>(agents.size());
  if (hosts < 1 || n % hosts != 0) {
    return Status(Errc::invalid_argument, "ProcMesh::attach: " + std::to_string(n) +
                                              " processes do not split evenly over " +
                                              std::to_string(hosts) + " agents");
  }
  std::vector<std::pair<std::string, std::uint16_t>> addresses;
  for (const auto& a : agents) {
    const auto colon = a.rfind(':');
    char* end = nullptr;
    const long port = colon == std::string::npos ? 0 : std::strtol(a.c_str() + colon + 1, &end, 10);
    if (colon == std::string::npos || colon == 0 || port <= 0 || port > 65535 || *end != '\0') {
      return Status(Errc::invalid_argument,
                    "ProcMesh::attach: agent address '" + a + "' is not HOST:PORT");
    }
    addresses.emplace_back(a.substr(0, colon), static_cast<std::uint16_t>(port));
  }
  auto opened = Shared::open("attach", *extent, spec, options);
  if (!opened.ok()) return opened.status();
  auto shared = std::move(opened).value();
  auto& sys = shared->runtime->system();
  shared->sink = sys.spawn(sink_impl, shared->output(), shared->joining, shared->agent_jobs);
  const std::string program = spec.program.empty() ? this_program() : spec.program;
  std::vector<std::string> env;
  for (const auto& [k, v] : shared->worker_env()) env.push_back(k + "=" + v);
  const int per = n / hosts;
  Status failed;
  for (int h = 0; h < hosts && failed.ok(); ++h) {
    auto agent = internal::connect_with_retry<agent_actor>(
        sys, addresses[static_cast<std::size_t>(h)].first,
        addresses[static_cast<std::size_t>(h)].second, options.connect_timeout, "agent");
    if (!agent.ok()) {
      failed = agent.status().with_context("ProcMesh::attach");
      break;
    }
    caf::scoped_actor self{sys};
    self->request(*agent, options.request_timeout, agent_launch_atom::value, shared->sink, program,
                  spec.args, env, static_cast<std::int32_t>(h * per),
                  static_cast<std::int32_t>(per))
        .receive(
            [&](std::uint64_t job) {
              std::lock_guard<std::mutex> lock(shared->agent_jobs->mu);
              shared->agent_jobs->jobs.push_back(
                  AgentJob{agents[static_cast<std::size_t>(h)], *agent, job, h * per, per});
            },
            [&](caf::error& e) {
              failed = internal::from_caf_error(
                  e, "ProcMesh::attach: agent " + agents[static_cast<std::size_t>(h)]);
            });
  }
  if (failed.ok()) failed = shared->wait_joined("attach", program);
  if (!failed.ok()) {
    shared->stop();
    return failed;
  }
  Extent whole = shared->whole;
  return ProcMesh(std::move(shared), std::move(whole));
}

ProcMesh::ProcMesh(std::shared_ptr<Shared> shared, Extent extent)
    : shared_(std::move(shared)), extent_(std::move(extent)) {}

Result<ProcMesh> ProcMesh::slice(const std::string& dim, int begin, int end) const {
  return slice({{dim, Select(begin, end)}});
}

Result<ProcMesh> ProcMesh::slice(const std::vector<std::pair<std::string, Select>>& selects) const {
  auto e = extent_.slice(selects);
  if (!e.ok()) return e.status().with_context("ProcMesh::slice");
  return ProcMesh(shared_, std::move(e).value());
}

int ProcMesh::pid(int i) const {
  if (!shared_ || i < 0 || i >= size()) return -1;
  if (shared_->local) return ::getpid();
  if (!shared_->joining) return extent_.rank(i) == shared_->self_rank ? ::getpid() : -1;
  std::lock_guard<std::mutex> lock(shared_->joining->mu);
  return shared_->joining->pids[static_cast<std::size_t>(extent_.rank(i))];
}

Status ProcMesh::signal(int i, int sig) const {
  if (!shared_) return Status(Errc::shutdown, "ProcMesh: an empty ProcMesh");
  if (i < 0 || i >= size()) {
    return Status(Errc::out_of_range, "ProcMesh::signal: member " + std::to_string(i) +
                                          " outside [0, " + std::to_string(size()) + ")");
  }
  const int rank = extent_.rank(i);
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (shared_->stopped) {
    return Status(Errc::shutdown, "ProcMesh::signal: the processes were stopped");
  }
  if (shared_->local) {
    return Status(Errc::invalid_argument,
                  "ProcMesh::signal: every member of a local mesh is this process");
  }
  if (!shared_->joining) {
    return Status(Errc::invalid_argument,
                  "ProcMesh::signal: under from_env the launcher owns the processes");
  }
  if (shared_->group) return shared_->group->signal(rank, sig);
  std::lock_guard<std::mutex> jobs_lock(shared_->agent_jobs->mu);
  if (const auto* j = shared_->agent_jobs->holding(rank)) {
    // The agent does it; a rank that is gone answers through supervision.
    caf::anon_send(j->agent, agent_signal_atom::value, j->job, static_cast<std::int32_t>(rank),
                   static_cast<std::int32_t>(sig));
    return Status();
  }
  return Status(Errc::not_found, "ProcMesh::signal: no process for rank " + std::to_string(rank));
}

caf::actor_system& ProcMesh::system() { return shared_->runtime->system(); }

Supervision ProcMesh::default_supervision() const {
  return shared_ ? shared_->options.supervision : Supervision();
}

void ProcMesh::stop() {
  if (shared_) shared_->stop();
}

}  // namespace meshstore
