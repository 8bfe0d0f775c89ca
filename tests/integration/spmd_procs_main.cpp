// ProcMesh::from_env under a launcher: every rank of the job runs this
// program, joins the process mesh (SPMD) and checks, from its own side:
//   - the mesh's shape (argv[1], as Extent::to_string writes it) and its
//     rank;
//   - a collective spawn by type name, called from every rank, and a slice
//     of the actor mesh it made;
//   - that each pair of ranks talks over a connection of its own, not
//     through rank 0 (docs/internals/connections.md, "Direct connections");
//   - what only a controller can do is refused with a clear error: a spawn
//     on a slice, signal; a type one rank lacks fails every rank's spawn
//     at once, naming that rank;
//   - a named singleton (get_or_spawn) asked for by every rank at once is
//     one actor;
//   - MeshOptions::setup ran first, with the rank;
//   - a store spawned on the mesh (collective): rank 0 puts, every rank
//     reads.
// The exit code is the verdict: a rank exits 0 only once every check
// passed, and the launcher fails when one rank fails.
//
//   build/bin/meshrun -n 2 -- build/bin/meshstore_spmd_procs "{procs: 2}"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "meshstore/proc_mesh.hpp"
#include "meshstore/store_mesh.hpp"
#include "testing/ask.hpp"
#include "testing/sockets.hpp"

using namespace std::chrono_literals;
using meshstore::Errc;

namespace {

using add_atom = caf::atom_constant<caf::atom("add")>;
using pid_atom = caf::atom_constant<caf::atom("pid")>;
using relay_atom = caf::atom_constant<caf::atom("relay")>;
using worker_actor = caf::typed_actor<caf::replies_to<add_atom, int>::with<int>,
                                      caf::replies_to<pid_atom>::with<std::int32_t>>;
using bump_atom = caf::atom_constant<caf::atom("bump")>;
using count_atom = caf::atom_constant<caf::atom("count")>;
// Counts the bumps it got, from every rank.
using counter_actor =
    caf::typed_actor<caf::replies_to<bump_atom>::with<int>, caf::replies_to<count_atom>::with<int>>;

counter_actor::behavior_type counter(counter_actor::pointer, int) {
  auto n = std::make_shared<int>(0);
  return {[=](bump_atom) { return ++*n; }, [=](count_atom) { return *n; }};
}

// Asks another rank's worker, and answers what it said.
using relay_actor = caf::typed_actor<caf::replies_to<relay_atom, worker_actor, int>::with<int>>;

worker_actor::behavior_type worker(worker_actor::pointer, int rank, int base) {
  return {[=](add_atom, int x) { return x + base + rank; },
          [](pid_atom) { return static_cast<std::int32_t>(::getpid()); }};
}

relay_actor::behavior_type relay(relay_actor::pointer self, int) {
  return {[=](relay_atom, const worker_actor& to, int x) -> caf::result<int> {
    return meshstore::testing::ask_and_answer<int>(self, to, add_atom::value, x);
  }};
}

int g_rank = -1;
int g_setup_rank = -1;  // MeshOptions::setup's

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "spmd_procs: rank %d: %s\n", g_rank, why.c_str());
  std::exit(1);
}

template <class T>
T must(meshstore::Result<T> r, const std::string& what) {
  if (!r.ok()) fail(what + ": " + r.status().to_string());
  return std::move(r).value();
}

void expect_refused(const meshstore::Status& s, Errc code, const std::string& what) {
  if (s.code() != code) fail(what + " was not refused as expected: " + s.to_string());
}

// A collective spawn by type name, called from every rank; each rank's
// member asks every other rank's over a connection of its own.
void check_meshes(meshstore::ProcMesh& procs) {
  const int me = procs.rank(), n = procs.size();
  auto w = must(procs.spawn<worker_actor>("workers", "worker", 100), "spawn workers");
  if (w.extent().to_string() != procs.extent().to_string()) fail("the actor mesh's shape");
  auto relays = must(procs.spawn<relay_actor>("relays", "relay"), "spawn relays");
  auto all = must(w.call<int>(add_atom::value, 1).get(30s), "call");
  auto pids = must(w.call<std::int32_t>(pid_atom::value).get(30s), "call pid");
  for (int r = 0; r < n; ++r) {
    if (all[r].value_or(-1) != 101 + r) fail("call: rank " + std::to_string(r) + " answered wrong");
  }
  for (int to = 0; to < n; ++to) {
    if (to == me) continue;
    const int got = must(relays.ask<int>(me, relay_atom::value, w.at(to), me).get(30s), "relay");
    if (got != me + 100 + to) fail("rank " + std::to_string(to) + " answered wrong");
    const int a = pids[me].value_or(-1), b = pids[to].value_or(-1);
    if (meshstore::testing::connected_ports(a, b).empty() &&
        meshstore::testing::connected_ports(b, a).empty()) {
      fail("no connection of its own to rank " + std::to_string(to) +
           ": their messages go through rank 0");
    }
  }
  if (w.extent().dims().size() == 2) {  // hosts x procs: the second host's members
    const int per = w.extent().dims()[1].second;
    auto second = must(w.slice("hosts", 1, 2), "slice");
    auto some = must(second.call<int>(add_atom::value, 0).get(30s), "call on a slice");
    for (int i = 0; i < some.size(); ++i) {
      if (some[i].value_or(-1) != 100 + per + i) fail("call on the second host answered wrong");
    }
  }
}

// What needs a controller is refused, naming why.
void check_refusals(meshstore::ProcMesh& procs) {
  const auto& first = procs.extent().dims()[0].first;
  auto part = must(procs.slice(first, 0, 1), "slice the processes");
  expect_refused(part.spawn<worker_actor>("part", "worker", 0).status(), Errc::invalid_argument,
                 "a spawn on a slice");
  expect_refused(procs.signal(0, SIGTERM), Errc::invalid_argument, "signal");
  expect_refused(procs.spawn<worker_actor>("workers", "worker", 0).status(), Errc::invalid_argument,
                 "a second spawn of the same name");
  // A type rank 1 lacks: refused at once there, naming the type, and on
  // every other rank at once too, naming rank 1 (not after a timeout);
  // the name stays refused.
  auto picky = procs.spawn<worker_actor>("picky", "picky", 0);
  expect_refused(picky.status(), Errc::not_found, "a type rank 1 lacks");
  if (picky.status().message().find("rank 1") == std::string::npos ||
      picky.status().message().find("'picky'") == std::string::npos) {
    fail("the refusal does not name rank 1 and the type: " + picky.status().to_string());
  }
  expect_refused(procs.spawn<worker_actor>("picky", "worker", 0).status(), Errc::not_found,
                 "a mesh name whose spawn failed");
  const int other = (procs.rank() + 1) % procs.size();
  if (procs.pid(procs.rank()) != ::getpid() || procs.pid(other) != -1) fail("pid()");
}

// A named singleton: every rank asks for it at once and gets the same
// actor, on rank 0; a second type under its name is refused.
void check_singleton(meshstore::ProcMesh& procs) {
  auto one = must(procs.get_or_spawn<counter_actor>("counter", "counter"), "get_or_spawn");
  if (one.size() != 1 || one.extent().to_string() != "{}") fail("the singleton's shape");
  must(one.call_one<int>(bump_atom::value).get(30s), "bump");
  must(procs.spawn<worker_actor>("bumped", "worker", 0), "spawn bumped");  // every rank bumped
  const int n = must(one.call_one<int>(count_atom::value).get(30s), "count");
  if (n != procs.size()) fail("the singleton counted " + std::to_string(n) + " bumps");
  auto again = must(procs.get_or_spawn<counter_actor>("counter", "counter"), "get_or_spawn again");
  if (again.at(0) != one.at(0)) fail("a second get_or_spawn gave another actor");
  expect_refused(procs.get_or_spawn<worker_actor>("counter", "worker", 0).status(),
                 Errc::invalid_argument, "a singleton of another type");
  expect_refused(procs.get_or_spawn<worker_actor>("workers", "worker", 0).status(),
                 Errc::invalid_argument, "a singleton named as a spawned mesh");
  must(procs.spawn<worker_actor>("counted", "worker", 0), "spawn counted");  // all read n
}

// A store on the mesh: rank 0 puts, then every rank reads it.
void check_store(meshstore::ProcMesh& procs) {
  auto store = must(meshstore::spawn_store(procs), "spawn_store");
  float value = 42.5f;
  if (procs.rank() == 0) {
    if (auto s = store.put("spmd/value", meshstore::TensorView::of(&value, {})).get(30s); !s.ok()) {
      fail("put: " + s.status().to_string());
    }
  }
  // Collective: every rank passes here once rank 0 has put.
  must(procs.spawn<worker_actor>("put-done", "worker", 0), "spawn put-done");
  float got = 0;
  if (auto s = store.get_into("spmd/value", meshstore::TensorView::of(&got, {})).get(30s);
      !s.ok() || got != value) {
    fail("get_into: " + s.status().to_string());
  }
  must(procs.spawn<worker_actor>("read-done", "worker", 0), "spawn read-done");
  store.close();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) fail("usage: meshstore_spmd_procs SHAPE (as \"{procs: 2}\")");
  meshstore::MeshOptions o;
  o.request_timeout = 30s;
  o.add_types = [](caf::actor_system_config& cfg) {
    cfg.add_actor_type("worker", worker);
    cfg.add_actor_type("relay", relay);
    cfg.add_actor_type("counter", counter);
    // Rank 1 lacks it (check_refusals).
    const char* rank = std::getenv("RANK");
    if (!rank || std::string(rank) != "1") cfg.add_actor_type("picky", worker);
    cfg.add_message_type<worker_actor>("spmd_procs::worker_actor");
  };
  o.setup = [](int rank) {
    g_setup_rank = rank;
    return meshstore::Status();
  };
  auto procs = must(meshstore::ProcMesh::from_env(o), "ProcMesh::from_env");
  g_rank = procs.rank();
  if (g_setup_rank != g_rank) fail("setup did not run with this rank");
  const char* rank_env = std::getenv("RANK");
  if (!rank_env || std::to_string(g_rank) != rank_env) fail("rank() is not RANK");
  if (procs.extent().to_string() != argv[1]) {
    fail("shape " + procs.extent().to_string() + ", expected " + argv[1]);
  }
  check_meshes(procs);
  check_refusals(procs);
  check_singleton(procs);
  check_store(procs);
  // Collective: no rank leaves before every rank has checked.
  must(procs.spawn<worker_actor>("done", "worker", 0), "spawn done");
  std::printf("spmd_procs: rank %d: ok\n", g_rank);
  procs.stop();
  return 0;
}
