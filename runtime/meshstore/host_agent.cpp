#include "meshstore/host_agent.hpp"

#include <algorithm>
#include <atomic>
#include <caf/io/all.hpp>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "meshstore/foreign_thread.hpp"
#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/address.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/internal/proc_protocol.hpp"
#include "meshstore/internal/process_group.hpp"
#include "meshstore/logging.hpp"

namespace meshstore {
namespace {

using namespace internal::proc;

// The longest grace a stop request may ask for.
constexpr std::int64_t kMaxGraceMs = 3600 * 1000;

// One controller's processes on this host.
struct Job {
  std::unique_ptr<internal::ProcessGroup> group;
  sink_actor sink;
  std::int32_t first = 0;
};

using Jobs = std::map<std::uint64_t, Job>;

// What HostAgent::stats reports, counted where it happens (the actor, and
// the process groups' exit callbacks on their own threads).
struct AgentCounters {
  std::atomic<std::uint64_t> jobs{0};
  std::atomic<std::uint64_t> started{0};
  std::atomic<std::uint64_t> exits{0};
};

struct AgentState {
  static inline const char* name = "meshstore.agent";
  std::uint64_t next = 1;
  // Shared with the exit functor: a stateful actor's state is gone when its
  // attached functors run.
  std::shared_ptr<Jobs> jobs = std::make_shared<Jobs>();
  std::shared_ptr<AgentCounters> counters;
};

using agent_pointer = agent_actor::stateful_pointer<AgentState>;

// Stops process groups off the actor's thread (a stop waits up to the
// grace period); HostAgent::stop joins them.
struct Reaper {
  struct Stopper {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mu;
  std::vector<Stopper> stoppers;
  void stop(std::unique_ptr<internal::ProcessGroup> group, std::chrono::milliseconds grace,
            std::function<void()> then = nullptr) {
    std::lock_guard<std::mutex> lock(mu);
    // Those that finished are joined now: a long-running agent keeps no
    // thread per job it ever stopped.
    for (auto it = stoppers.begin(); it != stoppers.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = stoppers.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread t([g = std::move(group), grace, then = std::move(then), done]() mutable {
      if (g) g->stop(grace);
      g.reset();
      if (then) then();
      done->store(true);
    });
    stoppers.push_back(Stopper{std::move(t), std::move(done)});
  }
  void join() {
    std::vector<Stopper> all;
    {
      std::lock_guard<std::mutex> lock(mu);
      all.swap(stoppers);
    }
    for (auto& s : all) s.thread.join();
  }
};

// Job `id`'s processes and the index of `rank` among them.
// Errc::not_found for no such job, Errc::out_of_range for a rank outside it.
Result<std::pair<internal::ProcessGroup*, int>> process_of(agent_pointer self, std::uint64_t id,
                                                           std::int32_t rank) {
  auto it = self->state.jobs->find(id);
  if (it == self->state.jobs->end()) {
    return Status(Errc::not_found, "agent: no job " + std::to_string(id));
  }
  // In 64 bits: a peer's rank may be any int32.
  const std::int64_t index = std::int64_t{rank} - it->second.first;
  if (index < 0 || index >= it->second.group->size()) {
    return Status(Errc::out_of_range,
                  "agent: job " + std::to_string(id) + " has no rank " + std::to_string(rank));
  }
  return std::make_pair(it->second.group.get(), static_cast<int>(index));
}

// Stops job `id`; `then` runs once its processes are gone.
void stop_job(agent_pointer self, Reaper& reaper, std::uint64_t id, std::chrono::milliseconds grace,
              std::function<void()> then = nullptr) {
  auto& jobs = *self->state.jobs;
  auto it = jobs.find(id);
  if (it == jobs.end()) {
    if (then) then();
    return;
  }
  auto group = std::move(it->second.group);
  jobs.erase(it);
  self->state.counters->jobs.fetch_sub(1);
  reaper.stop(std::move(group), grace, std::move(then));
}

// A launch's processes: ranks [first, first + count) of `program`, each
// with `env` ("NAME=value" entries) and its rank.
Result<std::vector<internal::ProcessSpec>> launch_specs(const std::string& program,
                                                        const std::vector<std::string>& args,
                                                        const std::vector<std::string>& env,
                                                        std::int32_t first, std::int32_t count) {
  if (count < 1 || count > 1024 || first < 0 ||
      first > std::numeric_limits<std::int32_t>::max() - count) {
    return Status(Errc::invalid_argument,
                  "agent: a launch wants 1 to 1024 ranks from a first rank in [0, 2^31 - 1 - "
                  "count], got " +
                      std::to_string(count) + " from " + std::to_string(first));
  }
  std::vector<std::pair<std::string, std::string>> vars;
  for (const auto& kv : env) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status(Errc::invalid_argument, "agent: malformed environment entry '" + kv + "'");
    }
    vars.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  std::vector<internal::ProcessSpec> specs;
  for (std::int32_t i = 0; i < count; ++i) {
    internal::ProcessSpec p;
    p.program = program;
    p.args = args;
    p.env = vars;
    p.env.emplace_back(kRankEnv, std::to_string(first + i));
    specs.push_back(std::move(p));
  }
  return specs;
}

// Starts ranks [first, first + count) of `program` for the controller whose
// `sink` hears their output and exits: the new job's id.
Result<std::uint64_t> launch(agent_pointer self, sink_actor sink, const std::string& program,
                             const std::vector<std::string>& args,
                             const std::vector<std::string>& env, std::int32_t first,
                             std::int32_t count) {
  if (!sink) return Status(Errc::invalid_argument, "agent: a launch wants a controller");
  auto specs = launch_specs(program, args, env, first, count);
  if (!specs.ok()) return specs.status();
  auto counters = self->state.counters;
  auto group = internal::ProcessGroup::start(
      *specs,
      [sink, first](int i, bool is_stderr, const std::string& line) {
        caf::anon_send(sink, proc_output_atom::value, first + i, is_stderr, line);
      },
      [sink, first, counters](int i, int status) {
        counters->exits.fetch_add(1);
        caf::anon_send(sink, proc_exit_atom::value, first + i,
                       internal::ProcessGroup::describe(status));
      });
  if (!group.ok()) return group.status().with_context("agent");
  counters->jobs.fetch_add(1);
  counters->started.fetch_add(static_cast<std::uint64_t>(count));
  const std::uint64_t id = self->state.next++;
  self->monitor(sink);
  Job job;
  job.group = std::move(group).value();
  job.sink = std::move(sink);
  job.first = first;
  self->state.jobs->emplace(id, std::move(job));
  log::get("agent")->info("job {}: started ranks {}..{} of {}", id, first, first + count - 1,
                          program);
  return id;
}

agent_actor::behavior_type agent_impl(agent_pointer self, std::chrono::milliseconds grace,
                                      std::shared_ptr<Reaper> reaper,
                                      std::shared_ptr<AgentCounters> counters) {
  self->state.counters = counters;
  // A controller that goes away takes its processes with it.
  self->set_down_handler([=](caf::down_msg& m) {
    std::vector<std::uint64_t> doomed;
    for (const auto& [id, job] : *self->state.jobs) {
      if (job.sink.address() == m.source) doomed.push_back(id);
    }
    for (auto id : doomed) {
      log::get("agent")->warn("job {}: its controller went away ({}); stopping its processes", id,
                              caf::to_string(m.reason));
      stop_job(self, *reaper, id, grace);
    }
  });
  self->attach_functor([jobs = self->state.jobs, reaper, grace, counters] {
    for (auto& [id, job] : *jobs) reaper->stop(std::move(job.group), grace);
    jobs->clear();
    counters->jobs = 0;
  });
  return {
      [=](agent_launch_atom, sink_actor sink, const std::string& program,
          const std::vector<std::string>& args, const std::vector<std::string>& env,
          std::int32_t first, std::int32_t count) -> caf::result<std::uint64_t> {
        auto id = launch(self, std::move(sink), program, args, env, first, count);
        if (!id.ok()) return internal::to_caf_error(id.status());
        return *id;
      },
      [=](agent_signal_atom, std::uint64_t id, std::int32_t rank,
          std::int32_t sig) -> caf::result<bool> {
        auto at = process_of(self, id, rank);
        if (!at.ok()) return internal::to_caf_error(at.status());
        auto s = at->first->signal(at->second, sig);
        if (!s.ok()) return internal::to_caf_error(s.with_context("agent"));
        return true;
      },
      // Sent by the controller once it decided (its budget per rank).
      [=](agent_relaunch_atom, std::uint64_t id, std::int32_t rank) {
        auto at = process_of(self, id, rank);
        auto s = at.ok() ? at->first->relaunch(at->second) : at.status();
        if (!s.ok()) {
          log::get("agent")->warn("job {}: rank {} not started again: {}", id, rank, s.to_string());
          return;
        }
        counters->started.fetch_add(1);
        log::get("agent")->info("job {}: starting rank {} again", id, rank);
      },
      // Answers once the job's processes are gone.
      [=](agent_stop_atom, std::uint64_t id, std::int64_t grace_ms) -> caf::result<bool> {
        auto rp = self->make_response_promise<bool>();
        // At most an hour: a peer's grace must not overflow the clock.
        const std::int64_t grace = std::clamp<std::int64_t>(grace_ms, 0, kMaxGraceMs);
        stop_job(self, *reaper, id, std::chrono::milliseconds(grace),
                 [rp]() mutable { rp.deliver(true); });
        return rp;
      },
  };
}

// In the process's runtime whatever the process makes first.
[[maybe_unused]] const bool kProcTypes = internal::register_process_types(add_proc_types);

}  // namespace

struct HostAgent::Impl {
  std::shared_ptr<internal::ActorRuntime> runtime;  // the process's
  agent_actor agent;
  std::shared_ptr<Reaper> reaper = std::make_shared<Reaper>();
  std::shared_ptr<AgentCounters> counters = std::make_shared<AgentCounters>();
  std::uint16_t port = 0;
  std::mutex mu;

  void stop() {
    std::shared_ptr<internal::ActorRuntime> doomed;
    caf::actor stopping;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (agent && runtime) {
        ForeignThreadGuard guard;
        internal::unpublish_actor(runtime->system(), agent, port);
      }
      stopping = caf::actor_cast<caf::actor>(agent);
      agent = nullptr;
      doomed = std::move(runtime);
    }
    if (doomed) {
      // The agent hands its processes to the reaper as it exits; the
      // process's runtime stays up for the store or mesh beside it.
      if (internal::stop_actors(doomed->system(), {stopping}, std::chrono::seconds(30)) > 0) {
        log::get("agent")->warn("stop: the agent's actor did not stop within 30 s");
      }
    }
    stopping = nullptr;
    doomed.reset();
    reaper->join();
  }
  ~Impl() { stop(); }
};

Result<HostAgent> HostAgent::start(AgentOptions options) {
  ForeignThreadGuard guard;
  if (options.host.empty()) {
    return Status(Errc::invalid_argument, "HostAgent::start: the host is empty");
  }
  if (options.stop_grace.count() < 0) {
    return Status(Errc::invalid_argument, "HostAgent::start: stop_grace is negative");
  }
  internal::RuntimeOptions ro;
  ro.with_middleman = true;
  ro.add_types = add_proc_types;
  ro.tls = options.tls;
  auto rt = internal::process_runtime(ro, "HostAgent::start");
  if (!rt.ok()) return rt.status();
  auto impl = std::make_unique<Impl>();
  impl->runtime = std::move(rt).value();
  auto& sys = impl->runtime->system();
  impl->agent = sys.spawn(agent_impl, options.stop_grace, impl->reaper, impl->counters);
  auto port = internal::publish_actor(sys, impl->agent, options.port, options.host, true);
  if (!port.ok()) {
    return port.status().with_context("HostAgent::start: cannot listen on " + options.host + ":" +
                                      std::to_string(options.port));
  }
  impl->port = *port;
  internal::warn_if_exposed(options.host, *port, "the host agent", impl->runtime->tls());
  return HostAgent(std::move(impl));
}

HostAgent::HostAgent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HostAgent::HostAgent(HostAgent&&) noexcept = default;
HostAgent& HostAgent::operator=(HostAgent&&) noexcept = default;
HostAgent::~HostAgent() = default;

std::uint16_t HostAgent::port() const noexcept { return impl_ ? impl_->port : 0; }

void HostAgent::stop() {
  if (impl_) impl_->stop();
}

AgentStats HostAgent::stats() const {
  AgentStats s;
  if (!impl_) return s;
  const auto& c = *impl_->counters;
  s.jobs = c.jobs.load();
  s.process_exits = c.exits.load();
  s.processes_started = c.started.load();
  // Exits counted before their start (a process that ended at once) do not
  // make it negative.
  s.processes = s.processes_started > s.process_exits ? s.processes_started - s.process_exits : 0;
  return s;
}

}  // namespace meshstore
