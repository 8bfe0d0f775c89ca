// mesh_bench: what the actor mesh's call styles cost across processes, next
// to a bare CAF request made in the same run to the same actors.
//
//   build/bin/meshrun -n 4 -- build/bin/mesh_bench [--iters N] [--json] [--smoke]
//   build/bin/mesh_bench --launch [-n 4] [--iters N] [--json] [--smoke]
//
// Under meshrun every rank joins the process mesh (ProcMesh::from_env,
// SPMD) and spawns an echo actor;
// rank 0 measures and prints, the others wait for it. With --launch one
// program is the controller: it launches N worker processes itself
// (ProcMesh::launch, this binary in worker mode), times launch + spawn of an
// actor mesh on them next to the floor of starting N processes (fork + exec
// of /bin/true, waited for), then measures the same calls. Figures:
//   - call_one latency: ActorMesh::ask to rank 1 (p50, p99), and a bare
//     request from a caf::scoped_actor to the same actor;
//   - call throughput: ActorMesh::call to every rank, and the bare
//     equivalent (one scoped_actor, one request per rank, every reply);
//   - the ratios ours / bare (1.0 = no overhead; higher = slower);
//   - with --launch: launch + spawn (median of rounds) and the process floor;
//     spawn_store on the launched processes next to Store::embedded alone;
//     and an actor's round trip from worker rank 0 to rank 1 next to the
//     same from rank 0 to the controller (1.0: the workers talk as
//     directly as each talks to the controller).
// Never asserts a timing: a benchmark prints figures.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "meshstore/proc_mesh.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store_mesh.hpp"

using namespace std::chrono_literals;
using meshstore::bench::die;
using meshstore::bench::must;

namespace {

using echo_atom = caf::atom_constant<caf::atom("echo")>;
using echo_actor = caf::typed_actor<caf::replies_to<echo_atom, int>::with<int>>;

echo_actor::behavior_type echo(echo_actor::pointer, int rank) {
  return {[=](echo_atom, int x) { return x + rank; }};
}

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// --launch: a member that asks an echo actor n times, one after another,
// and answers each round trip's time in ns: an actor's round trip from a
// worker process to another process.
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using ping_actor =
    caf::typed_actor<caf::replies_to<ping_atom, echo_actor, int>::with<std::vector<std::uint64_t>>>;

struct Pings {
  ping_actor::pointer self;
  echo_actor to;
  int n = 0;
  std::vector<std::uint64_t> ns;
  caf::typed_response_promise<std::vector<std::uint64_t>> rp;
};

void ping_next(const std::shared_ptr<Pings>& p) {
  if (static_cast<int>(p->ns.size()) == p->n) {
    p->rp.deliver(p->ns);
    return;
  }
  const auto t0 = Clock::now();
  p->self->request(p->to, 10s, echo_atom::value, 0)
      .then(
          [p, t0](int) {
            p->ns.push_back(static_cast<std::uint64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
            ping_next(p);
          },
          [p](caf::error& e) { p->rp.deliver(std::move(e)); });
}

ping_actor::behavior_type pinger(ping_actor::pointer self, int) {
  return {[=](ping_atom, const echo_actor& to, int n) {
    auto p = std::make_shared<Pings>();
    p->self = self;
    p->to = to;
    p->n = n;
    p->rp = self->make_response_promise<std::vector<std::uint64_t>>();
    ping_next(p);
    return p->rp;
  }};
}
double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

struct Args {
  int iters = 2000;
  bool json = false;
  bool launch = false;
  int procs = 4;
  int rounds = 5;  // --launch: launches timed
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      a.iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json")) {
      a.json = true;
    } else if (!std::strcmp(argv[i], "--launch")) {
      a.launch = true;
    } else if (!std::strcmp(argv[i], "-n") && i + 1 < argc) {
      a.procs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--smoke")) {
      a.iters = 50;
      a.rounds = 2;
    } else {
      die(std::string("unknown argument '") + argv[i] +
          "' (usage: meshrun -n N -- mesh_bench [--iters N] [--json] [--smoke], or mesh_bench "
          "--launch [-n N] [--iters N] [--json] [--smoke])");
    }
  }
  if (a.iters < 1) die("--iters must be at least 1");
  if (a.procs < 2 || a.procs > 64) die("-n must be in [2, 64]");
  return a;
}

// Extra JSON fields and table rows (the launch figures), or empty.
struct Extra {
  std::string json;
  std::string rows;
};

void measure(caf::actor_system& sys, const meshstore::ActorMesh<echo_actor>& echoes, const Args& a,
             const Extra& extra = {}) {
  const int world = echoes.size();
  const auto target = echoes.at(1);
  caf::scoped_actor self{sys};
  auto bare_request = [&](const echo_actor& to, int x) {
    int out = -1;
    self->request(to, 10s, echo_atom::value, x)
        .receive([&](int r) { out = r; },
                 [&](caf::error& e) { die("bare request: " + sys.render(e)); });
    return out;
  };
  // Warm-up: connections, caches, the caller actor.
  for (int i = 0; i < 50; ++i) {
    bare_request(target, i);
    must(echoes.ask<int>(1, echo_atom::value, i).get(10s), "ask");
  }
  std::vector<double> bare_us, ours_us;
  for (int i = 0; i < a.iters; ++i) {  // alternating, so drift hits both alike
    auto t0 = Clock::now();
    if (bare_request(target, i) != i + 1) die("bare request: wrong reply");
    bare_us.push_back(us_since(t0));
    t0 = Clock::now();
    if (must(echoes.ask<int>(1, echo_atom::value, i).get(10s), "ask") != i + 1) {
      die("ask: wrong reply");
    }
    ours_us.push_back(us_since(t0));
  }
  // call on every rank: calls per second, bare and ours.
  std::vector<echo_actor> all;
  for (int r = 0; r < world; ++r) all.push_back(echoes.at(r));
  const int rounds = std::max(10, a.iters / 4);
  auto t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) {
    for (const auto& to : all) self->send(to, echo_atom::value, i);  // replies come back to self
    int got = 0;
    self->receive_for(got, world)([&](int) {});
  }
  const double bare_calls = rounds / (us_since(t0) / 1e6);
  t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) {
    auto rs = must(echoes.call<int>(echo_atom::value, i).get(10s), "call");
    for (const auto& r : rs) {
      if (!r.ok()) die("call: " + r.status().to_string());
    }
  }
  const double ours_calls = rounds / (us_since(t0) / 1e6);

  const double bare_p50 = percentile(bare_us, 0.5), ours_p50 = percentile(ours_us, 0.5);
  const double bare_p99 = percentile(bare_us, 0.99), ours_p99 = percentile(ours_us, 0.99);
  if (a.json) {
    std::printf(
        "{\"bench\":\"mesh\",\"processes\":%d,\"iters\":%d,\"bare_request_p50_us\":%.1f,"
        "\"call_one_p50_us\":%.1f,\"call_one_p99_us\":%.1f,\"bare_request_p99_us\":%.1f,"
        "\"call_one_vs_bare\":%.3f,\"bare_calls_per_s\":%.0f,\"call_per_s\":%.0f,"
        "\"call_vs_bare\":%.3f%s}\n",
        world, a.iters, bare_p50, ours_p50, ours_p99, bare_p99, ours_p50 / bare_p50, bare_calls,
        ours_calls, bare_calls / ours_calls, extra.json.c_str());
  } else {
    std::printf("mesh_bench: %d processes, %d iterations (ratios: ours / bare, 1.0 = equal)\n",
                world, a.iters);
    std::printf("| figure | bare CAF | ActorMesh | ratio |\n| --- | --- | --- | --- |\n");
    std::printf("| call_one latency p50 (us) | %.1f | %.1f | %.2f |\n", bare_p50, ours_p50,
                ours_p50 / bare_p50);
    std::printf("| call_one latency p99 (us) | %.1f | %.1f | %.2f |\n", bare_p99, ours_p99,
                ours_p99 / bare_p99);
    std::printf("| call on %d ranks (calls/s) | %.0f | %.0f | %.2f |\n", world, bare_calls,
                ours_calls, bare_calls / ours_calls);
    std::printf("%s", extra.rows.c_str());
  }
}

meshstore::MeshOptions worker_options() {
  meshstore::MeshOptions o;
  o.request_timeout = 60s;
  o.add_types = [](caf::actor_system_config& cfg) {
    cfg.add_actor_type("echo", echo);
    cfg.add_actor_type("pinger", pinger);
    cfg.add_message_type<echo_actor>("mesh_bench::echo_actor");
  };
  return o;
}

double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

// The floors of a launch: n processes of `path` started and waited for,
// with `extra_env` added to this process's environment (built before the
// fork: the child only calls exec).
double process_floor_ms(int n, const char* path, const char* extra_env = nullptr) {
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  std::string extra = extra_env ? extra_env : "";
  if (extra_env) envp.push_back(extra.data());
  envp.push_back(nullptr);
  const auto t0 = Clock::now();
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execle(path, path, static_cast<char*>(nullptr), envp.data());
      ::_exit(127);
    }
    if (pid < 0) die("fork failed");
    pids.push_back(pid);
  }
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  return us_since(t0) / 1000.0;
}

// Set in this program's environment: main() returns at once (the floor of
// starting this program: its loading, relocation and static constructors).
constexpr const char* kExitAtOnce = "MESH_BENCH_EXIT_AT_ONCE";

// An actor's round trip from one worker process: to the controller's
// process (the baseline, a direct connection) and to another worker (rank
// 1), each the median of `iters`, alternating.
struct RoundTrips {
  double to_controller_us = 0;
  double to_worker_us = 0;
};

RoundTrips worker_round_trips(meshstore::ProcMesh& procs,
                              const meshstore::ActorMesh<echo_actor>& echoes, int iters) {
  auto pingers = must(procs.spawn<ping_actor>("pingers", "pinger"), "spawn pingers");
  auto first = must(pingers.slice({{"procs", 0}}), "slice");
  const echo_actor here = procs.system().spawn(echo, -1);
  std::vector<double> to_controller, to_worker;
  const int chunk = 100;
  for (int done = 0; done < iters; done += chunk) {
    for (const auto& [to, into] : {std::pair{here, &to_controller}, {echoes.at(1), &to_worker}}) {
      auto ns = must(
          first.call_one<std::vector<std::uint64_t>>(ping_atom::value, to, chunk).get(60s), "ping");
      for (auto x : ns) into->push_back(static_cast<double>(x) / 1000.0);
    }
  }
  caf::anon_send_exit(here, caf::exit_reason::user_shutdown);
  return {percentile(to_controller, 0.5), percentile(to_worker, 0.5)};
}

// --launch: this program is the controller of its own worker processes.
int launch_mode(const Args& a) {
  meshstore::LaunchSpec spec;  // this program again, in worker mode
  std::vector<double> launch_ms, floor_ms, program_ms;
  std::vector<double> store_ms, embedded_ms;
  const std::string exit_at_once = std::string(kExitAtOnce) + "=1";
  for (int r = 0; r < a.rounds; ++r) {
    floor_ms.push_back(process_floor_ms(a.procs, "/bin/true"));
    program_ms.push_back(process_floor_ms(a.procs, "/proc/self/exe", exit_at_once.c_str()));
    auto t0 = Clock::now();
    auto procs = must(meshstore::ProcMesh::launch({{"procs", a.procs}}, spec, worker_options()),
                      "ProcMesh::launch");
    must(procs.spawn<echo_actor>("echoes", "echo"), "spawn");
    launch_ms.push_back(us_since(t0) / 1000.0);
    // A store across the processes, next to one in this process alone.
    t0 = Clock::now();
    auto store = must(meshstore::spawn_store(procs), "spawn_store");
    store_ms.push_back(us_since(t0) / 1000.0);
    store.close();
    procs.stop();
    t0 = Clock::now();
    auto alone = must(meshstore::Store::embedded(), "Store::embedded");
    embedded_ms.push_back(us_since(t0) / 1000.0);
    alone.close();
  }
  auto procs = must(meshstore::ProcMesh::launch({{"procs", a.procs}}, spec, worker_options()),
                    "ProcMesh::launch");
  auto echoes = must(procs.spawn<echo_actor>("echoes", "echo"), "spawn");
  const auto trips = worker_round_trips(procs, echoes, a.iters);
  Extra extra;
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                ",\"mode\":\"launch\",\"launch_spawn_ms\":%.2f,\"process_floor_ms\":%.2f,"
                "\"launch_vs_floor\":%.2f,\"program_floor_ms\":%.2f,\"launch_vs_program\":%.2f,"
                "\"worker_to_controller_p50_us\":%.1f,"
                "\"worker_to_worker_p50_us\":%.1f,\"worker_pair_vs_controller\":%.3f,"
                "\"spawn_store_ms\":%.2f,\"embedded_store_ms\":%.2f,"
                "\"spawn_store_vs_embedded\":%.2f",
                median(launch_ms), median(floor_ms), median(launch_ms) / median(floor_ms),
                median(program_ms), median(launch_ms) / median(program_ms), trips.to_controller_us,
                trips.to_worker_us, trips.to_worker_us / trips.to_controller_us, median(store_ms),
                median(embedded_ms), median(store_ms) / median(embedded_ms));
  extra.json = buf;
  std::snprintf(buf, sizeof(buf),
                "| launch %d processes + spawn a mesh (ms, median of %d) | %.2f (fork+exec+wait "
                "of /bin/true) | %.2f | %.2f |\n"
                "| launch + spawn over starting this program %d times (ms) | %.2f (fork+exec+wait, "
                "main returns at once) | %.2f | %.2f |\n"
                "| round trip from rank 0 (us, p50) | %.1f (to the controller) | %.1f (to rank 1) "
                "| %.2f |\n"
                "| spawn_store on %d processes (ms, median of %d) | %.2f (Store::embedded alone) "
                "| %.2f | %.2f |\n",
                a.procs, a.rounds, median(floor_ms), median(launch_ms),
                median(launch_ms) / median(floor_ms), a.procs, median(program_ms),
                median(launch_ms), median(launch_ms) / median(program_ms), trips.to_controller_us,
                trips.to_worker_us, trips.to_worker_us / trips.to_controller_us, a.procs, a.rounds,
                median(embedded_ms), median(store_ms), median(store_ms) / median(embedded_ms));
  extra.rows = buf;
  measure(procs.system(), echoes, a, extra);
  procs.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv(kExitAtOnce) != nullptr) return 0;  // process_floor_ms's run of this program
  if (meshstore::ProcMesh::is_worker()) {
    return meshstore::ProcMesh::serve(worker_options()).ok() ? 0 : 1;
  }
  const Args a = parse(argc, argv);
  if (a.launch) return launch_mode(a);
  auto procs = must(meshstore::ProcMesh::from_env(worker_options()), "ProcMesh::from_env");
  if (procs.size() < 2) die("run it under meshrun with at least 2 ranks (-n 4)");
  auto echoes = must(procs.spawn<echo_actor>("echoes", "echo"), "spawn echoes");
  if (procs.rank() == 0) measure(procs.system(), echoes, a);
  // Collective: the others wait here until rank 0 has measured.
  must(procs.spawn<echo_actor>("done", "echo"), "spawn done");
  procs.stop();
  return 0;
}
