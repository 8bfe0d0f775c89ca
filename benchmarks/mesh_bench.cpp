// mesh_bench: what the actor mesh's call styles cost across processes, next
// to a bare CAF request made in the same run to the same actors.
//
//   build/bin/meshrun -n 4 -- build/bin/mesh_bench [--iters N] [--json] [--smoke]
//
// Every rank joins the mesh and spawns an echo actor; rank 0 measures and
// prints, the others wait for it. Figures:
//   - call_one latency: ActorMesh::ask to rank 1 (p50, p99), and a bare
//     request from a caf::scoped_actor to the same actor;
//   - call throughput: ActorMesh::call to every rank, and the bare
//     equivalent (one scoped_actor, one request per rank, every reply);
//   - the ratios ours / bare (1.0 = no overhead; higher = slower).
// Never asserts a timing: a benchmark prints figures.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "meshstore/mesh.hpp"

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
double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

struct Args {
  int iters = 2000;
  bool json = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      a.iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json")) {
      a.json = true;
    } else if (!std::strcmp(argv[i], "--smoke")) {
      a.iters = 50;
    } else {
      die(std::string("unknown argument '") + argv[i] +
          "' (usage: meshrun -n N -- mesh_bench [--iters N] [--json] [--smoke])");
    }
  }
  if (a.iters < 1) die("--iters must be at least 1");
  return a;
}

void measure(meshstore::Mesh& mesh, const meshstore::ActorMesh<echo_actor>& echoes, const Args& a) {
  const int world = echoes.size();
  const auto target = echoes.at(1);
  caf::scoped_actor self{mesh.system()};
  auto bare_request = [&](const echo_actor& to, int x) {
    int out = -1;
    self->request(to, 10s, echo_atom::value, x)
        .receive([&](int r) { out = r; },
                 [&](caf::error& e) { die("bare request: " + mesh.system().render(e)); });
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
        "\"call_vs_bare\":%.3f}\n",
        world, a.iters, bare_p50, ours_p50, ours_p99, bare_p99, ours_p50 / bare_p50, bare_calls,
        ours_calls, bare_calls / ours_calls);
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
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  meshstore::MeshOptions o;
  o.request_timeout = 60s;
  auto mesh = must(meshstore::Mesh::from_env(o), "Mesh::from_env");
  if (mesh.world_size() < 2) die("run it under meshrun with at least 2 ranks (-n 4)");
  auto echoes = must(mesh.spawn<echo_actor>("echoes", echo), "spawn echoes");
  if (mesh.rank() == 0) measure(mesh, echoes, a);
  // Collective: the others wait here until rank 0 has measured.
  must(mesh.spawn<echo_actor>("done", echo), "spawn done");
  return 0;
}
