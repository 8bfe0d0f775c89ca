// The worker's side of a ProcMesh: ProcMesh::serve() joins the controller
// that launched this process and spawns the members it is asked for, until
// the controller stops it or goes away. The controller's side is
// proc_mesh.cpp.
#include <unistd.h>

#include <caf/io/all.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/address.hpp"
#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/internal/connect.hpp"
#include "meshstore/internal/mesh_runtime.hpp"
#include "meshstore/internal/parse_int.hpp"
#include "meshstore/internal/proc_protocol.hpp"
#include "meshstore/internal/proc_shared.hpp"
#include "meshstore/internal/process_group.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/proc_mesh.hpp"

namespace meshstore {
namespace {

using namespace internal::proc;

// What serve() ends with, set once.
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status why;
  void finish(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return;
    done = true;
    why = std::move(s);
    cv.notify_all();
  }
};

struct ProcState {
  static inline const char* name = "meshstore.proc";
};

// Connects this process to each of `doors`, the processes that joined
// before it, and waits for every connection (awaited: no spawn is served
// before) so that no message to a peer is routed through the controller
// once its members exist (docs/internals/connections.md, "Direct connections"). A
// door that cannot be reached costs a warning: the controller still
// routes to it.
void reach_peers(proc_actor::stateful_pointer<ProcState> self, int rank,
                 const std::vector<std::string>& doors, std::chrono::milliseconds timeout) {
  const auto limit = std::min(timeout, internal::kDoorTimeout);
  for (const auto& door : doors) {
    auto at = internal::parse_address(door);
    if (!at.ok()) {
      log::get("proc")->warn("rank {}: a peer's door is malformed: {}", rank,
                             at.status().to_string());
      continue;
    }
    self->request(internal::connector(self->system()), limit, caf::connect_atom::value, at->host,
                  at->port)
        .await(
            [](const caf::node_id&, const caf::strong_actor_ptr&, const std::set<std::string>&) {},
            [self, rank, door](caf::error& e) {
              log::get("proc")->warn(
                  "rank {}: cannot connect to the peer at {} ({}); its messages go through "
                  "the controller",
                  rank, door, self->system().render(e));
            });
  }
}

// Joins the controller at `where` (hello, offering this process's `door`),
// connects to its peers, then serves it; a controller that goes away,
// before or after the hello is answered, ends it.
proc_actor::behavior_type proc_impl(proc_actor::stateful_pointer<ProcState> self, int rank,
                                    controller_actor controller, std::string where,
                                    std::string token, std::string door,
                                    std::chrono::milliseconds timeout,
                                    std::shared_ptr<Outcome> outcome) {
  self->monitor(controller);
  self->request(controller, timeout, proc_hello_atom::value, token, static_cast<std::int32_t>(rank),
                static_cast<std::int32_t>(::getpid()), caf::actor_cast<proc_actor>(self), door)
      .await(
          [=](const std::vector<std::string>& peers) { reach_peers(self, rank, peers, timeout); },
          [=](caf::error& e) {
            outcome->finish(internal::from_caf_error(e, "ProcMesh::serve: joining " + where));
            self->quit();
          });
  self->set_down_handler([=](caf::down_msg& m) {
    outcome->finish(Status(Errc::unavailable, "the controller at " + where + " went away (" +
                                                  caf::to_string(m.reason) + ")"));
    self->quit();
  });
  // Its members go with it. (Not through self->state: a stateful actor's
  // state is gone when its attached functors run.)
  auto members = std::make_shared<std::vector<caf::actor>>();
  self->attach_functor([members] {
    for (auto& a : *members) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  });
  const std::string me = "rank " + std::to_string(rank);
  return {
      [=](proc_spawn_atom, const std::string& mesh, const std::string& type,
          const std::vector<std::string>& interface,
          caf::message& args) -> caf::result<caf::actor> {
        auto a = internal::spawn_named(self->context(), type, interface, args,
                                       "mesh '" + mesh + "', " + me);
        if (!a.ok()) return internal::to_caf_error(a.status());
        members->push_back(*a);
        return *a;
      },
      // No reply reaches the controller once this process is gone: it
      // sends this without waiting, and watches the process exit.
      [=](proc_stop_atom) {
        outcome->finish(Status());
        self->quit();
        return true;
      },
  };
}

}  // namespace

Status internal::proc::run_setup(const MeshOptions& options, int rank, const char* what) {
  if (!options.setup) return Status();
  Status s;
  try {
    s = options.setup(rank);
  } catch (const std::exception& e) {
    s = Status(Errc::internal, std::string("threw ") + e.what());
  } catch (...) {
    s = Status(Errc::internal, "threw a non-standard exception");
  }
  if (s.ok()) return s;
  return Status(s.code(), std::string(what) + ": setup failed: " + s.message());
}

namespace {

// serve()'s runtime, while it runs (weak: serve owns it).
std::mutex g_worker_mu;
std::weak_ptr<internal::ActorRuntime> g_worker_runtime;
std::vector<std::function<void()>> g_worker_exit_hooks;

// What the launching controller put in this process's environment.
struct LaunchedBy {
  std::string where;  // host:port
  std::string host;
  std::uint16_t port = 0;
  std::string token;
  int rank = 0;
};

Result<LaunchedBy> launched_by() {
  const char* where_env = std::getenv(kControllerEnv);
  if (!where_env) {
    return Status(Errc::invalid_argument, std::string("ProcMesh::serve: ") + kControllerEnv +
                                              " is not set: this process was not started by "
                                              "ProcMesh::launch");
  }
  LaunchedBy by;
  by.where = where_env;
  const auto colon = by.where.rfind(':');
  auto parsed_rank = internal::parse_int(kRankEnv, std::getenv(kRankEnv), 0, 1 << 20);
  if (!parsed_rank.ok()) return parsed_rank.status().with_context("ProcMesh::serve");
  by.rank = static_cast<int>(*parsed_rank);
  const char* token = std::getenv(kTokenEnv);
  if (colon == std::string::npos || !token) {
    return Status(Errc::invalid_argument,
                  "ProcMesh::serve: malformed launch environment (" + by.where + ")");
  }
  by.host = by.where.substr(0, colon);
  by.token = token;
  const long port = std::strtol(by.where.c_str() + colon + 1, nullptr, 10);
  if (port <= 0 || port > 65535) {
    return Status(Errc::invalid_argument, "ProcMesh::serve: bad controller port in " + by.where);
  }
  by.port = static_cast<std::uint16_t>(port);
  return by;
}

// The layers built on the worker's runtime (a store closes) go first.
void run_exit_hooks() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(g_worker_mu);
    hooks.swap(g_worker_exit_hooks);
  }
  for (auto& h : hooks) h();
}

// Lets the worker's runtime go. A member that never returns must not keep
// this process alive (the actor system waits for its actors when it goes):
// after `limit` (MeshOptions::stop_timeout) the process exits.
void close_runtime(std::shared_ptr<internal::ActorRuntime> runtime, int rank, bool ok,
                   std::chrono::milliseconds limit) {
  std::mutex mu;
  std::condition_variable cv;
  bool closed = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, limit, [&] { return closed; })) {
      std::fprintf(stderr,
                   "meshstore: rank %d: actors did not stop within %lld ms "
                   "(MeshOptions::stop_timeout); exiting\n",
                   rank, static_cast<long long>(limit.count()));
      std::fflush(stderr);
      std::_Exit(ok ? 0 : 1);
    }
  });
  {
    std::lock_guard<std::mutex> lock(g_worker_mu);
    g_worker_runtime.reset();
  }
  runtime.reset();
  {
    std::lock_guard<std::mutex> lock(mu);
    closed = true;
  }
  cv.notify_all();
  watchdog.join();
}

// In the process's runtime whatever the process makes first.
[[maybe_unused]] const bool kProcTypes = internal::register_process_types(add_proc_types);

}  // namespace

void internal::at_worker_exit(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(g_worker_mu);
  g_worker_exit_hooks.push_back(std::move(hook));
}

std::shared_ptr<internal::ActorRuntime> internal::worker_runtime() {
  std::lock_guard<std::mutex> lock(g_worker_mu);
  return g_worker_runtime.lock();
}

bool ProcMesh::is_worker() { return std::getenv(kControllerEnv) != nullptr; }

Status ProcMesh::serve(MeshOptions options) {
  auto by = launched_by();
  if (!by.ok()) return by.status();
  if (!options.tls.enabled()) options.tls = TlsOptions::from_env();
  if (options.stop_timeout.count() <= 0) {
    return Status(Errc::invalid_argument, "ProcMesh::serve: stop_timeout must be positive");
  }
  if (auto s = run_setup(options, by->rank, "ProcMesh::serve"); !s.ok()) {
    // On stderr, where the controller's launch finds it.
    std::fprintf(stderr, "meshstore: rank %d: %s\n", by->rank, s.to_string().c_str());
    std::fflush(stderr);
    return s;
  }
  ForeignThreadGuard guard;
  auto outcome = std::make_shared<Outcome>();
  internal::LifelineWatch lifeline;
  lifeline.start([outcome, where = by->where] {
    outcome->finish(Status(Errc::unavailable,
                           "the controller at " + where + " went away (its lifeline closed)"));
  });
  auto rt = internal::process_runtime(internal::mesh_runtime_options(options, true, add_proc_types),
                                      "ProcMesh::serve");
  if (!rt.ok()) return rt.status();
  std::shared_ptr<internal::ActorRuntime> runtime = std::move(rt).value();
  auto& sys = runtime->system();
  {
    std::lock_guard<std::mutex> lock(g_worker_mu);
    g_worker_runtime = runtime;
  }
  {
    auto controller = internal::connect_with_retry<controller_actor>(
        sys, by->host, by->port, options.connect_timeout, "controller");
    if (!controller.ok()) return controller.status().with_context("ProcMesh::serve");
    // Where the other workers connect to this one: on the interface that
    // reaches the controller. Without one, their messages to it go
    // through the controller.
    std::string door;
    if (auto d = runtime->door(internal::local_address_towards(by->host)); d.ok()) {
      door = *d;
    } else {
      log::get("proc")->warn("rank {}: {}; the other workers reach it through the controller",
                             by->rank, d.status().to_string());
    }
    auto proc = sys.spawn(proc_impl, by->rank, *controller, by->where, by->token, door,
                          options.request_timeout, outcome);
    {
      std::unique_lock<std::mutex> lock(outcome->mu);
      outcome->cv.wait(lock, [&] { return outcome->done; });
    }
    run_exit_hooks();
    // Its members go with it.
    caf::anon_send_exit(proc, caf::exit_reason::user_shutdown);
  }
  Status why;
  {
    std::lock_guard<std::mutex> lock(outcome->mu);
    why = outcome->why;
  }
  if (!why.ok()) log::get("proc")->warn("rank {}: {}; stopping", by->rank, why.to_string());
  close_runtime(std::move(runtime), by->rank, why.ok(), options.stop_timeout);
  return why;
}

}  // namespace meshstore
