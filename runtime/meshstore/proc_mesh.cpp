#include "meshstore/proc_mesh.hpp"

#include <unistd.h>

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

// The workers joining, and those that exited.
struct Joining {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<proc_actor> procs;
  std::vector<int> pids;            // as each said in its hello
  std::vector<std::string> exited;  // why, by rank; empty while running
  int joined = 0;
  bool stopping = false;
};

controller_actor::behavior_type controller_impl(controller_actor::pointer, std::string token,
                                                std::shared_ptr<Joining> joining) {
  return {
      [=](proc_hello_atom, const std::string& t, std::int32_t rank, std::int32_t pid,
          proc_actor proc) -> caf::result<bool> {
        std::lock_guard<std::mutex> lock(joining->mu);
        if (t != token) {
          return internal::to_caf_error(
              Status(Errc::protocol_error, "this process was not launched by this controller"));
        }
        if (rank < 0 || rank >= static_cast<std::int32_t>(joining->procs.size()) ||
            joining->procs[static_cast<std::size_t>(rank)]) {
          return internal::to_caf_error(
              Status(Errc::invalid_argument,
                     "rank " + std::to_string(rank) + " joined twice or is out of range"));
        }
        joining->procs[static_cast<std::size_t>(rank)] = std::move(proc);
        joining->pids[static_cast<std::size_t>(rank)] = pid;
        ++joining->joined;
        log::get("proc")->debug("rank {} (pid {}) joined", rank, pid);
        joining->cv.notify_all();
        return true;
      },
  };
}

// A process exited: recorded for launch's wait, and a warning once the
// mesh is up (its members' failures reach supervision on their own).
void record_exit(Joining& joining, int rank, const std::string& why) {
  std::lock_guard<std::mutex> lock(joining.mu);
  if (rank < 0 || rank >= static_cast<int>(joining.exited.size())) return;
  joining.exited[static_cast<std::size_t>(rank)] = why;
  joining.cv.notify_all();
  if (!joining.stopping && joining.joined == static_cast<int>(joining.procs.size())) {
    log::get("proc")->warn("rank {} {}", rank, why);
  }
}

using OutputFn = std::function<void(int rank, bool is_stderr, const std::string& line)>;

// The controller's end of the agents' processes.
sink_actor::behavior_type sink_impl(sink_actor::pointer, OutputFn on_output,
                                    std::shared_ptr<Joining> joining) {
  return {
      [=](proc_output_atom, std::int32_t rank, bool is_stderr, const std::string& line) {
        on_output(rank, is_stderr, line);
      },
      [=](proc_exit_atom, std::int32_t rank, const std::string& why) {
        record_exit(*joining, rank, why);
      },
  };
}

// On a mesh's caller: asks `proc` (the process of member `rank`) to spawn
// it; `done` gets the actor or an error naming the rank, at once when the
// process goes away meanwhile (a request to a dead remote actor would only
// time out).
void spawn_on(caf::event_based_actor* self, const proc_actor& proc, int rank,
              std::chrono::milliseconds timeout, const std::string& mesh, const std::string& type,
              const std::vector<std::string>& interface, const caf::message& args,
              std::function<void(Result<caf::actor>)> done) {
  const std::string who = "rank " + std::to_string(rank);
  if (!proc) return done(Status(Errc::unavailable, who + ": its process is gone"));
  internal::watched_request<caf::actor>(self, proc, rank, timeout, who + ": its process ",
                                        std::move(done), proc_spawn_atom::value, mesh, type,
                                        interface, args);
}

// Waits for every member's spawn. On a failure, the members made are
// stopped and the first failure is the answer.
Result<std::vector<caf::actor>> gather_members(std::vector<Future<caf::actor>> replies,
                                               std::chrono::milliseconds timeout) {
  auto all = when_all(std::move(replies)).get(timeout);
  std::vector<caf::actor> members;
  Status failed;
  if (!all.ok()) {
    failed = all.status();
  } else {
    for (auto& r : *all) {
      if (r.ok()) {
        members.push_back(*r);
      } else if (failed.ok()) {
        failed = r.status();
      }
    }
  }
  if (failed.ok()) return members;
  for (auto& a : members) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  return failed;
}

// How supervision restarts member `rank` of a mesh: spawned again in the
// same process, with the same arguments.
internal::MeshCaller::Respawn restarter(std::vector<proc_actor> procs, std::string name,
                                        std::string type, std::vector<std::string> interface,
                                        std::function<caf::message(int)> args,
                                        std::chrono::milliseconds timeout) {
  return [procs = std::move(procs), name = std::move(name), type = std::move(type),
          interface = std::move(interface), args = std::move(args),
          timeout](caf::event_based_actor* self, int rank, std::function<void(caf::actor)> done) {
    spawn_on(self, procs[static_cast<std::size_t>(rank)], rank, timeout, name, type, interface,
             args(rank), [done, name, rank](Result<caf::actor> a) {
               if (!a.ok()) {
                 log::get("proc")->warn("mesh '{}': cannot restart rank {}: {}", name, rank,
                                        a.status().to_string());
                 return done(caf::actor());
               }
               done(std::move(a).value());
             });
  };
}

std::string this_program() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace

// Processes a host agent started for this controller.
struct AgentJob {
  std::string address;
  agent_actor agent;
  std::uint64_t job = 0;
  int first = 0;
  int count = 0;
};

struct ProcMesh::Shared {
  MeshOptions options;
  LaunchSpec spec;
  Extent whole = Extent::line(0);
  // Shared with the layers built on this ProcMesh (spawn_store's store):
  // the actor system goes when the last of them lets go.
  std::shared_ptr<internal::ActorRuntime> runtime;
  controller_actor controller;
  sink_actor sink;  // attach(): the agents' output and exits
  std::shared_ptr<Joining> joining;
  std::unique_ptr<internal::ProcessGroup> group;  // launch()
  std::vector<AgentJob> jobs;                     // attach()
  std::shared_ptr<internal::MeshCaller> caller;
  std::mutex mu;  // guards names, stopped, group, jobs
  std::set<std::string> names;
  bool stopped = false;
  std::string where;  // host:port the workers join
  std::string token;

  ~Shared() { stop(); }

  void stop() {
    std::vector<proc_actor> procs;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopped) return;
      stopped = true;
    }
    // First: the meshes answer shutdown, and the members' going away is
    // no failure.
    if (caller) caller->close();
    if (joining) {
      std::lock_guard<std::mutex> lock(joining->mu);
      joining->stopping = true;
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
      remote = std::move(jobs);
    }
    if (doomed) doomed->stop(spec.stop_grace);
    doomed.reset();
    if (!remote.empty() && runtime) {
      // Each agent answers once its processes are gone; one that is gone
      // itself took them with it (their lifeline), so the wait is bounded.
      ForeignThreadGuard guard;
      caf::scoped_actor self{runtime->system()};
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
        self->request(j.agent, spec.stop_grace + std::chrono::seconds(2), agent_stop_atom::value,
                      j.job, static_cast<std::int64_t>(spec.stop_grace.count()))
            .receive([](bool) {},
                     [&](caf::error& e) {
                       log::get("proc")->warn(
                           "agent {}: stopping its processes: {}", j.address,
                           internal::from_caf_error(e, "agent_stop").to_string());
                     });
      }
    }
    remote.clear();
    caller.reset();
    if (controller) caf::anon_send_exit(controller, caf::exit_reason::user_shutdown);
    controller = nullptr;
    if (sink) caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
    sink = nullptr;
    std::shared_ptr<internal::ActorRuntime> doomed_runtime;
    {
      std::lock_guard<std::mutex> lock(mu);  // proc_runtime() reads it
      doomed_runtime = std::move(runtime);
    }
    doomed_runtime.reset();
  }

  // The controller's half of a launch or attach: a runtime, the supervision
  // caller and the published controller actor the workers join.
  static Result<std::shared_ptr<Shared>> open(const char* what, Extent extent,
                                              const LaunchSpec& spec, const MeshOptions& options);
  // Waits until every worker joined, one exited first, or time ran out.
  Status wait_joined(const char* what, const std::string& program);
  // The environment every worker gets: the controller, the token, the world.
  std::vector<std::pair<std::string, std::string>> worker_env() const {
    auto env = spec.env;
    env.emplace_back(kControllerEnv, where);
    env.emplace_back(kTokenEnv, token);
    env.emplace_back(kWorldEnv, std::to_string(whole.size()));
    for (auto& kv : options.tls.env()) env.push_back(std::move(kv));
    return env;
  }
  OutputFn output() const {
    if (spec.on_output) return spec.on_output;
    return [](int rank, bool is_stderr, const std::string& line) {
      std::FILE* to = is_stderr ? stderr : stdout;
      std::fprintf(to, "[rank %d] %s\n", rank, line.c_str());
      std::fflush(to);
    };
  }
};

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
      internal::ActorRuntime::create(internal::mesh_runtime_options(options, true, add_proc_types));
  if (!rt.ok()) return rt.status().with_context(ctx);
  shared->runtime = std::move(rt).value();
  auto& sys = shared->runtime->system();
  shared->caller = internal::MeshCaller::make(sys, options.on_failure);
  shared->joining = std::make_shared<Joining>();
  shared->joining->procs.resize(static_cast<std::size_t>(n));
  shared->joining->pids.resize(static_cast<std::size_t>(n), -1);
  shared->joining->exited.resize(static_cast<std::size_t>(n));
  shared->token = random_token();
  shared->controller = sys.spawn(controller_impl, shared->token, shared->joining);
  auto port = internal::publish_actor(sys, shared->controller, 0, spec.bind_host, false);
  if (!port.ok()) return port.status().with_context(ctx + ": cannot listen on " + spec.bind_host);
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
      if (!joining->exited[static_cast<std::size_t>(r)].empty() &&
          !joining->procs[static_cast<std::size_t>(r)]) {
        return Status(Errc::unavailable, std::string("ProcMesh::") + what + ": rank " +
                                             std::to_string(r) + " (" + program + ") " +
                                             joining->exited[static_cast<std::size_t>(r)] +
                                             " before joining (does it call ProcMesh::serve() "
                                             "when ProcMesh::is_worker()?)");
      }
    }
    if (joining->joined == n) return Status();
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
  auto group =
      internal::ProcessGroup::start(specs, shared->output(), [joining](int rank, int status) {
        record_exit(*joining, rank, internal::ProcessGroup::describe(status));
      });
  if (!group.ok()) return group.status().with_context("ProcMesh::launch");
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
  shared->sink = sys.spawn(sink_impl, shared->output(), shared->joining);
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
              std::lock_guard<std::mutex> lock(shared->mu);
              shared->jobs.push_back(
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
  if (shared_->group) return shared_->group->signal(rank, sig);
  for (const auto& j : shared_->jobs) {
    if (rank >= j.first && rank < j.first + j.count) {
      // The agent does it; a rank that is gone answers through supervision.
      caf::anon_send(j.agent, agent_signal_atom::value, j.job, static_cast<std::int32_t>(rank),
                     static_cast<std::int32_t>(sig));
      return Status();
    }
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

Result<ProcMesh::Spawned> ProcMesh::spawn_members(
    Supervision supervision, const std::string& name, const std::string& type,
    std::function<std::vector<std::string>(caf::actor_system&)> interface_of,
    std::function<caf::message(int)> args) {
  if (!shared_) return Status(Errc::shutdown, "ProcMesh::spawn: an empty ProcMesh");
  if (name.empty()) return Status(Errc::invalid_argument, "ProcMesh::spawn: mesh name is empty");
  if (type.empty()) {
    return Status(Errc::invalid_argument, "ProcMesh::spawn '" + name + "': actor type is empty");
  }
  std::vector<proc_actor> procs;
  std::shared_ptr<internal::MeshCaller> caller;
  std::vector<std::string> interface;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->stopped) {
      return Status(Errc::shutdown, "ProcMesh::spawn '" + name + "': the processes were stopped");
    }
    if (auto s = shared_->caller->check_owner(supervision.owner); !s.ok()) {
      return s.with_context("ProcMesh::spawn '" + name + "'");
    }
    if (!shared_->names.insert(name).second) {
      return Status(Errc::invalid_argument,
                    "ProcMesh::spawn: mesh '" + name + "' was already spawned here");
    }
    caller = shared_->caller;
    interface = interface_of(shared_->runtime->system());
    std::lock_guard<std::mutex> jl(shared_->joining->mu);
    for (int r : extent_.ranks())
      procs.push_back(shared_->joining->procs[static_cast<std::size_t>(r)]);
  }
  const auto timeout = shared_->options.request_timeout;
  const int n = size();
  // Every process spawns its member at once, from the mesh's caller.
  std::vector<Future<caf::actor>> replies;
  for (int i = 0; i < n; ++i) {
    auto p = std::make_shared<Promise<caf::actor>>();
    replies.push_back(p->future());
    auto proc = procs[static_cast<std::size_t>(i)];
    auto msg = args(i);
    auto posted = caller->post(
        [=](caf::event_based_actor* self) {
          spawn_on(self, proc, i, timeout, name, type, interface, msg,
                   [p](Result<caf::actor> a) { p->set(std::move(a)); });
        },
        "spawn");
    if (!posted.ok()) p->set_error(posted);
  }
  auto members = gather_members(std::move(replies), timeout + std::chrono::seconds(5));
  if (!members.ok()) {
    // Nothing half-spawned stays: the name is free again.
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->names.erase(name);
    return Status(members.status().code(),
                  "ProcMesh::spawn '" + name + "': " + members.status().message());
  }
  auto respawn = restarter(std::move(procs), name, type, interface, args, timeout);
  auto shape = Extent::make(extent_.dims());
  if (!shape.ok()) return shape.status();
  Spawned out;
  out.id = caller->add_mesh(name, std::move(members).value(), true, std::move(supervision),
                            std::move(respawn));
  out.caller = std::move(caller);
  out.extent = std::move(shape).value();
  out.timeout = timeout;
  return out;
}

}  // namespace meshstore
