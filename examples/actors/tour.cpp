// The actor runtime in one program: it launches 4 worker processes (this
// binary again, in worker mode), spawns an actor mesh on them, uses every
// call style on the whole mesh and on slices, a port the members send to
// (and one their replies go to, with send) and a named singleton, then shows supervision: a
// member that fails is restarted, and a process killed with -9 stops one
// mesh, reaches the root handler through another, and is started again
// with a third mesh's member in it.
//
//   build/bin/actor_tour
//
// Every process registers the same actor types by name (options() below);
// the controller spawns them on its processes by that name.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "meshstore/proc_mesh.hpp"

using namespace std::chrono_literals;

namespace {

using add_atom = caf::atom_constant<caf::atom("add")>;
using pid_atom = caf::atom_constant<caf::atom("pid")>;
using note_atom = caf::atom_constant<caf::atom("note")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;
using report_atom = caf::atom_constant<caf::atom("report")>;
// A worker: adds its rank to what it is sent, tells its pid, prints notes,
// sends its rank to a port, fails when asked.
using worker_actor =
    caf::typed_actor<caf::replies_to<add_atom, int>::with<int>,
                     caf::replies_to<pid_atom>::with<std::int32_t>,
                     caf::reacts_to<note_atom, std::string>,
                     caf::reacts_to<report_atom, meshstore::Port<int>>, caf::reacts_to<fail_atom>>;

worker_actor::behavior_type worker(worker_actor::pointer self, int rank) {
  return {
      [=](add_atom, int x) { return x + rank; },
      [](pid_atom) { return static_cast<std::int32_t>(::getpid()); },
      [=](note_atom, const std::string& s) {
        std::printf("member %d got note: %s\n", rank, s.c_str());
        std::fflush(stdout);
      },
      [=](report_atom, const meshstore::Port<int>& port) { port.send(self, rank); },
      [=](fail_atom) { self->quit(caf::make_error(caf::sec::runtime_error, "asked to fail")); },
  };
}

// The same in the controller and in every worker.
meshstore::MeshOptions options() {
  meshstore::MeshOptions o;
  o.request_timeout = 20s;
  o.add_types = [](caf::actor_system_config& cfg) {
    cfg.add_actor_type("worker", worker);
    meshstore::add_port_type<int>(cfg, "tour::Port<int>");
  };
  return o;
}

template <class T>
T must(meshstore::Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "actor_tour: %s: %s\n", what, r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

void check(const meshstore::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "actor_tour: %s: %s\n", what, s.to_string().c_str());
    std::exit(1);
  }
}

// Supervision events, printed as they come; the tour waits for them.
struct Events {
  std::mutex mu;
  std::condition_variable cv;
  int seen = 0;
  std::function<bool(const meshstore::MeshFailure&)> handler(std::string who, bool handled) {
    return [this, who, handled](const meshstore::MeshFailure& f) {
      std::printf("  supervision [%s]: %s\n", who.c_str(), f.to_string().c_str());
      std::fflush(stdout);
      std::lock_guard<std::mutex> lock(mu);
      ++seen;
      cv.notify_all();
      return handled;
    };
  }
  bool wait_for(int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 30s, [&] { return seen >= n; });
  }
};

int controller() {
  Events events;
  auto opts = options();
  opts.on_failure = events.handler("root handler", true);  // the top of the ownership tree

  const auto t0 = std::chrono::steady_clock::now();
  meshstore::LaunchSpec spec;
  spec.max_relaunches = 1;  // a worker that dies is started again, once
  auto procs =
      must(meshstore::ProcMesh::launch({{"hosts", 2}, {"procs", 2}}, spec, opts), "launch");
  auto mesh = must(procs.spawn<worker_actor>("workers", "worker"), "spawn");
  std::printf(
      "launched %d processes %s and spawned a mesh on them in %.0f ms\n", procs.size(),
      procs.extent().to_string().c_str(),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());

  // call: every member, in order.
  auto sums = mesh.call<int>(add_atom::value, 100).get(20s);
  std::printf("call(add 100) on %s:", mesh.extent().to_string().c_str());
  for (const auto& r : *sums) std::printf(" %d", r.ok() ? *r : -1);
  std::printf("\n");
  // A slice: the members on host 1. An index drops the dimension.
  auto host1 = must(mesh.slice({{"hosts", 1}}), "slice");
  auto pids = must(host1.call<std::int32_t>(pid_atom::value).get(20s), "call(pid)");
  // call's ValueMesh has the slice's shape, and is read by coordinates.
  std::printf("call(pid) on hosts=1 %s: pids %d %d (processes %d %d)\n",
              pids.extent().to_string().c_str(), pids.item({{"procs", 0}}).value(),
              pids.item({{"procs", 1}}).value(), procs.pid(2), procs.pid(3));
  // call_one: a point.
  auto p = must(mesh.at_point({0, 1}), "at_point");
  std::printf("call_one(add 1) at {hosts 0, procs 1}: %d\n",
              p.call_one<int>(add_atom::value, 1).get(20s).value());
  // choose: the least busy member.
  std::printf("choose(add 0): answered by rank %d\n",
              mesh.choose<int>(add_atom::value, 0).get(20s).value());
  // stream: each reply as it lands.
  std::mutex mu;
  check(mesh.stream<int>(
                [&](int rank, const meshstore::Result<int>& r) {
                  std::lock_guard<std::mutex> lock(mu);
                  std::printf("stream: rank %d answered %d\n", rank, r.ok() ? *r : -1);
                },
                add_atom::value, 0)
            .get(20s)
            .status(),
        "stream");
  // accumulate: a fold over every reply.
  std::printf("accumulate(add 10, +): %d\n",
              mesh.accumulate<int>(
                      0, [](int a, int r) { return a + r; }, add_atom::value, 10)
                  .get(20s)
                  .value());
  // tell: fire and forget; the members print, and their output comes back
  // here with their rank.
  check(host1.tell(note_atom::value, std::string("hello host 1")), "tell");
  check(mesh.call<int>(add_atom::value, 0).get(20s).status(), "call");  // after the notes, in order
  // A port: passed in a message, every member sends its rank to it.
  auto rx = must(meshstore::PortReceiver<int>::open(procs.system()), "port");
  check(mesh.tell(report_atom::value, rx.port()), "tell");
  int ranks = 0;
  for (int i = 0; i < mesh.size(); ++i) ranks += must(rx.recv().get(20s), "recv");
  std::printf("port: %d values received, ranks summing to %d\n", mesh.size(), ranks);
  // send with a port: each member's reply goes to the port, not to us.
  check(mesh.send(rx.port(), add_atom::value, 1000), "send");
  int replies = 0;
  for (int i = 0; i < mesh.size(); ++i) replies += must(rx.recv().get(20s), "recv");
  std::printf("send: %d replies at the port, summing to %d\n", mesh.size(), replies);
  if (replies != 1000 * mesh.size() + ranks) {
    check(meshstore::Status(meshstore::Errc::internal, "the replies' sum is wrong"), "send");
  }
  rx.close();  // before procs.stop(): an open port would hold its system
  // A named singleton: whoever asks first spawns it, every caller shares it.
  auto one = must(procs.get_or_spawn<worker_actor>("coordinator", "worker"), "get_or_spawn");
  auto same = must(procs.get_or_spawn<worker_actor>("coordinator", "worker"), "get_or_spawn");
  std::printf("get_or_spawn twice: one actor, in process %d and %d\n",
              one.call_one<std::int32_t>(pid_atom::value).get(20s).value(),
              same.call_one<std::int32_t>(pid_atom::value).get(20s).value());

  // Supervision. restart: a member that fails is spawned again.
  std::printf("\nsupervision\n");
  meshstore::Supervision restart;
  restart.policy = meshstore::FailurePolicy::restart;
  restart.on_failure = events.handler("restart mesh", false);
  auto restarted = must(procs.spawn<worker_actor>(restart, "restarted", "worker"), "spawn");
  auto member1 = must(restarted.slice("hosts", 0, 1), "slice").slice("procs", 1, 2).value();
  check(member1.tell(fail_atom::value), "tell");
  if (!events.wait_for(1))
    check(meshstore::Status(meshstore::Errc::timeout, "no event"), "restart");
  for (int i = 0; i < 100; ++i) {  // the restart is asynchronous
    if (member1.call_one<int>(add_atom::value, 0).get(20s).ok()) break;
    std::this_thread::sleep_for(20ms);
  }
  std::printf("  after the restart, rank 1 answers add(5) = %d\n",
              member1.call_one<int>(add_atom::value, 5).get(20s).value());

  // stop: a process killed with -9 stops its mesh.
  meshstore::Supervision stop;
  stop.policy = meshstore::FailurePolicy::stop;
  stop.on_failure = events.handler("stop mesh", false);
  auto stopped = must(procs.spawn<worker_actor>(stop, "stopped", "worker"), "spawn");
  // propagate (the default): the failure climbs to the root handler.
  // "workers" (above) and "restarted" have members on that process too.
  std::printf("  killing process 3 (pid %d) with SIGKILL\n", procs.pid(3));
  check(procs.signal(3, SIGKILL), "signal");
  // Three events: "stopped" stops, "workers" reaches the root handler,
  // "restarted" is told, then restarts its member in the process started
  // in place of the dead one.
  if (!events.wait_for(4)) check(meshstore::Status(meshstore::Errc::timeout, "no event"), "kill");
  auto member3 = must(restarted.slice({{"hosts", 1}, {"procs", 1}}), "slice");
  for (int i = 0; i < 250; ++i) {  // the relaunch and the restart are asynchronous
    if (member3.call_one<std::int32_t>(pid_atom::value).get(20s).ok()) break;
    std::this_thread::sleep_for(20ms);
  }
  std::printf("  process 3 started again (pid %d): 'restarted' answers add(5) = %d there\n",
              member3.call_one<std::int32_t>(pid_atom::value).get(20s).value(),
              member3.call_one<int>(add_atom::value, 5).get(20s).value());
  auto after = stopped.call<int>(add_atom::value, 0).get(20s);
  std::printf("  a call to the stopped mesh: %s\n", (*after)[0].status().to_string().c_str());
  auto alive = mesh.slice("hosts", 0, 1).value().call<int>(add_atom::value, 0).get(20s);
  std::printf("  'workers' on host 0 still answer: %d %d\n", *(*alive)[0], *(*alive)[1]);

  procs.stop();
  std::printf("actor_tour: ok\n");
  return 0;
}

}  // namespace

int main() {
  if (meshstore::ProcMesh::is_worker()) return meshstore::ProcMesh::serve(options()).ok() ? 0 : 1;
  return controller();
}
