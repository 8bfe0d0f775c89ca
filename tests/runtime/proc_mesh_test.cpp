// ProcMesh across real processes: this test binary is also the worker
// (main() serves when ProcMesh::is_worker()) and, for the controller-death
// test, a controller of its own.

#include "meshstore/proc_mesh.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "meshstore/host_agent.hpp"
#include "meshstore/store_mesh.hpp"
#include "testing/ask.hpp"
#include "testing/sockets.hpp"
#include "testing/subprocess.hpp"
#include "testing/temp_dir.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::kWait;

using add_atom = caf::atom_constant<caf::atom("add")>;
using pid_atom = caf::atom_constant<caf::atom("pid")>;
using bump_atom = caf::atom_constant<caf::atom("bump")>;
using count_atom = caf::atom_constant<caf::atom("count")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;
using say_atom = caf::atom_constant<caf::atom("say")>;
using netns_atom = caf::atom_constant<caf::atom("netns")>;
using half_atom = caf::atom_constant<caf::atom("half")>;
using worker_actor = caf::typed_actor<
    caf::replies_to<add_atom, int>::with<int>, caf::replies_to<half_atom, int>::with<int>,
    caf::replies_to<pid_atom>::with<std::int32_t>, caf::reacts_to<bump_atom>,
    caf::replies_to<count_atom>::with<int>, caf::reacts_to<fail_atom>,
    caf::reacts_to<say_atom, std::string>, caf::replies_to<netns_atom>::with<std::string>>;
// Another interface, for the mismatch test.
using other_actor = caf::typed_actor<caf::replies_to<add_atom, int, int>::with<int>>;

// This process's network namespace ("net:[4026531840]").
std::string network_namespace() {
  char buf[128];
  const ssize_t n = ::readlink("/proc/self/ns/net", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("?");
}

struct WorkerState {
  int bumps = 0;
};

// Answers x + base + rank, and x / 2 (an odd x is refused with an error);
// counts bumps; fails (quits with an error) on `fail`; prints what it is
// told to say.
worker_actor::behavior_type worker(worker_actor::stateful_pointer<WorkerState> self, int rank,
                                   int base) {
  return {
      [=](add_atom, int x) { return x + base + rank; },
      [=](half_atom, int x) -> caf::result<int> {
        if (x % 2 != 0) {
          return actor_error(
              Status(Errc::invalid_argument,
                     "rank " + std::to_string(rank) + " cannot halve " + std::to_string(x)));
        }
        return x / 2;
      },
      [](pid_atom) { return static_cast<std::int32_t>(::getpid()); },
      [=](bump_atom) { ++self->state.bumps; },
      [=](count_atom) { return self->state.bumps; },
      [=](fail_atom) { self->quit(caf::make_error(caf::sec::runtime_error, "told to fail")); },
      [=](say_atom, const std::string& s) {
        std::printf("%s\n", s.c_str());
        std::fflush(stdout);
      },
      [](netns_atom) { return network_namespace(); },
  };
}

// A user's own message type.
struct Point {
  std::int32_t x = 0;
  std::int32_t y = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Point& p) {
  return f(caf::meta::type_name("meshstore::test::ProcPoint"), p.x, p.y);
}

}  // namespace
}  // namespace meshstore

namespace meshstore {
namespace {

using mirror_atom = caf::atom_constant<caf::atom("mirror")>;
using mirror_actor = caf::typed_actor<caf::replies_to<mirror_atom, Point>::with<Point>>;

mirror_actor::behavior_type mirror(mirror_actor::pointer, int rank) {
  return {[=](mirror_atom, Point p) {
    return Point{-p.x + rank, static_cast<std::int32_t>(::getpid())};
  }};
}

// Asks another worker's member, and answers what it said: a message from
// one worker process to another.
using relay_atom = caf::atom_constant<caf::atom("relay")>;
using relay_actor = caf::typed_actor<caf::replies_to<relay_atom, worker_actor, int>::with<int>>;

relay_actor::behavior_type relay(relay_actor::pointer self, int) {
  return {[=](relay_atom, const worker_actor& to, int x) -> caf::result<int> {
    return testing::ask_and_answer<int>(self, to, add_atom::value, x);
  }};
}

// A float's or double's bits, and back.
template <class T, class Bits>
T from_bits(Bits bits) {
  static_assert(sizeof(T) == sizeof(Bits));
  T x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}
template <class Bits, class T>
Bits to_bits(T x) {
  Bits bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// A user's message type with floating-point members, as Exact<T> (a bare
// double member does not compile: style.float_in_type_refused).
struct Reading {
  std::string name;
  Exact<double> value;
  std::vector<Exact<float>> samples;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Reading& r) {
  return f(caf::meta::type_name("meshstore::test::Reading"), r.name, r.value, r.samples);
}

// Floating-point values as Exact<T>: echoed back, and the bits the worker
// received, and the value it was spawned with.
using echo_atom = caf::atom_constant<caf::atom("echo")>;
using bits_atom = caf::atom_constant<caf::atom("bits")>;
using base_atom = caf::atom_constant<caf::atom("base")>;
using exact_actor = caf::typed_actor<
    caf::replies_to<echo_atom, std::vector<Exact<double>>>::with<std::vector<Exact<double>>>,
    caf::replies_to<echo_atom, std::vector<Exact<float>>>::with<std::vector<Exact<float>>>,
    caf::replies_to<bits_atom, Exact<double>>::with<std::uint64_t>,
    caf::replies_to<echo_atom, Reading>::with<Reading>,
    caf::replies_to<base_atom>::with<std::vector<std::uint64_t>>>;

exact_actor::behavior_type exact(exact_actor::pointer, int, Exact<double> base,
                                 Exact<float> base32) {
  return {
      [](echo_atom, const std::vector<Exact<double>>& xs) { return xs; },
      [](echo_atom, const std::vector<Exact<float>>& xs) { return xs; },
      [](bits_atom, Exact<double> x) { return to_bits<std::uint64_t>(x.value); },
      [](echo_atom, const Reading& r) { return r; },
      [=](base_atom) {
        return std::vector<std::uint64_t>{to_bits<std::uint64_t>(base.value),
                                          to_bits<std::uint32_t>(base32.value)};
      },
  };
}

// Its own rank and the call's context (CallContext), from another process.
using where_atom = caf::atom_constant<caf::atom("where")>;
using where_actor =
    caf::typed_actor<caf::replies_to<CallContext, where_atom>::with<std::vector<std::int32_t>>>;

where_actor::behavior_type where(where_actor::pointer, int rank) {
  return {
      [=](const CallContext& c, where_atom) {
        return std::vector<std::int32_t>{rank, c.rank, c.size(), c.coordinate("procs")};
      },
  };
}

// What MeshOptions::setup saw in this process: its rank (-1: not run).
int g_setup_rank = -1;
using setup_atom = caf::atom_constant<caf::atom("setup")>;
// Writes why it stopped into `dir`/stopped-RANK from its on_stop hook; with
// `hang`, the hook then never returns.
using stopper_actor = caf::typed_actor<caf::replies_to<setup_atom>::with<int>>;

stopper_actor::behavior_type stopper(stopper_actor::pointer self, int rank, std::string dir,
                                     bool hang) {
  on_stop(self, [=](const Status& why) {
    if (std::FILE* f = std::fopen((dir + "/stopped-" + std::to_string(rank)).c_str(), "w")) {
      std::fputs(why.to_string().c_str(), f);
      std::fclose(f);
    }
    while (hang) std::this_thread::sleep_for(std::chrono::seconds(1));
  });
  return {[](setup_atom) { return g_setup_rank; }};
}

// Sends rank * 100 + x to the port it is given, and answers once the
// port took it, or with why it could not.
using report_atom = caf::atom_constant<caf::atom("report")>;
using reporter_actor = caf::typed_actor<caf::replies_to<report_atom, Port<int>, int>::with<bool>>;

reporter_actor::behavior_type reporter(reporter_actor::pointer self, int rank) {
  return {[=](report_atom, const Port<int>& port, int x) -> caf::result<bool> {
    auto rp = self->make_response_promise<bool>();
    port.send(self, rank * 100 + x, [rp](const Status& s) mutable {
      if (s.ok()) {
        rp.deliver(true);
      } else {
        rp.deliver(actor_error(s));
      }
    });
    return rp;
  }};
}

using store_put_atom = caf::atom_constant<caf::atom("s_put")>;
// Puts an object into the store its process joined.
using store_user_actor =
    caf::typed_actor<caf::replies_to<store_put_atom, std::string, std::string>::with<bool>>;

// The put's future is awaited with on_ready: never get() on an actor's thread.
store_user_actor::behavior_type store_user(store_user_actor::pointer self, int) {
  return {
      [=](store_put_atom, const std::string& key, const std::string& value) -> caf::result<bool> {
        auto store = worker_store();
        if (!store.ok()) return actor_error(store.status());
        auto rp = self->make_response_promise<bool>();
        on_ready(self, (*store)->put_object(key, value), [rp](const Result<void>& done) mutable {
          if (done.ok()) {
            rp.deliver(true);
          } else {
            rp.deliver(actor_error(done.status()));
          }
        });
        return rp;
      },
  };
}

// The shared-memory segments of process `pid` in /dev/shm.
int segments_of(int pid) {
  const std::string prefix = "meshstore." + std::to_string(pid) + "-";
  int n = 0;
  if (auto* d = ::opendir("/dev/shm")) {
    while (auto* e = ::readdir(d)) {
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) ++n;
    }
    ::closedir(d);
  }
  return n;
}

// The same registration in the controller and every worker.
MeshOptions options() {
  MeshOptions o;
  o.request_timeout = 20s;
  o.add_types = [](caf::actor_system_config& cfg) {
    // A worker started with MESHSTORE_TEST_NO_POINT lacks the Point.
    if (!(ProcMesh::is_worker() && std::getenv("MESHSTORE_TEST_NO_POINT"))) {
      cfg.add_message_type<Point>("meshstore::test::ProcPoint");
    }
    cfg.add_actor_type("worker", worker);
    cfg.add_actor_type("mirror", mirror);
    cfg.add_message_type<worker_actor>("meshstore::test::worker_actor");
    cfg.add_actor_type("relay", relay);
    cfg.add_actor_type("store_user", store_user);
    cfg.add_message_type<Reading>("meshstore::test::Reading");
    cfg.add_actor_type("exact", exact);
    cfg.add_message_type<std::vector<std::int32_t>>("std::vector<int32_t>");  // where's reply
    cfg.add_actor_type("where", where);
    cfg.add_actor_type("stopper", stopper);
    cfg.add_actor_type("reporter", reporter);
    add_port_type<int>(cfg, "meshstore::test::Port<int>");
    add_store_actor_types(cfg);
  };
  // Runs in every worker before it joins; a rank named in
  // MESHSTORE_TEST_FAIL_SETUP fails it.
  o.setup = [](int rank) {
    const char* fail = std::getenv("MESHSTORE_TEST_FAIL_SETUP");
    if (fail && std::to_string(rank) == fail) {
      return Status(Errc::unavailable, "no device for rank " + std::to_string(rank));
    }
    g_setup_rank = rank;
    return Status();
  };
  if (const char* ms = std::getenv("MESHSTORE_TEST_STOP_TIMEOUT_MS")) {
    o.stop_timeout = std::chrono::milliseconds(std::atoi(ms));
  }
  return o;
}

// Failures as they reach a handler.
struct Failures {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<MeshFailure> seen;
  std::function<bool(const MeshFailure&)> handler(bool handled) {
    return [this, handled](const MeshFailure& f) {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(f);
      cv.notify_all();
      return handled;
    };
  }
  bool wait_for(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kWait, [&] { return seen.size() >= n; });
  }
  // The restart policy, its failures told here (the handler answers
  // false: no process exits).
  Supervision restarting() {
    Supervision restart;
    restart.policy = FailurePolicy::restart;
    restart.on_failure = handler(false);
    return restart;
  }
};

// A launch whose dead workers are started again once.
LaunchSpec relaunching_once() {
  LaunchSpec spec;
  spec.max_relaunches = 1;
  return spec;
}

TEST(ProcMesh, EveryCallStyleOnTheWholeMeshAndOnSlicesAcrossProcesses) {
  auto procs = ProcMesh::launch({{"hosts", 2}, {"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  ASSERT_EQ(procs->size(), 4);
  auto w = procs->spawn<worker_actor>("workers", "worker", 100);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->extent().to_string(), "{hosts: 2, procs: 2}");

  // Each member lives in its own process.
  auto pids = w->call<std::int32_t>(pid_atom::value).get(kWait);
  ASSERT_TRUE(pids.ok());
  std::set<std::int32_t> distinct;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE((*pids)[i].ok());
    EXPECT_EQ(*(*pids)[i], procs->pid(i));
    distinct.insert(*(*pids)[i]);
  }
  EXPECT_EQ(distinct.size(), 4u);
  EXPECT_EQ(distinct.count(::getpid()), 0u);

  auto all = w->call<int>(add_atom::value, 1).get(kWait);
  ASSERT_TRUE(all.ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(*(*all)[i], 101 + i);

  auto host1 = w->slice("hosts", 1, 2);
  ASSERT_TRUE(host1.ok());
  auto h1 = host1->call<int>(add_atom::value, 0).get(kWait);
  ASSERT_TRUE(h1.ok());
  ASSERT_EQ(h1->size(), 2);
  EXPECT_EQ(*(*h1)[0], 102);
  EXPECT_EQ(*(*h1)[1], 103);
  // The replies are shaped like the slice, and found by coordinates.
  EXPECT_EQ(h1->extent().to_string(), "{hosts: 1, procs: 2}");
  EXPECT_EQ(h1->item({{"procs", 1}, {"hosts", 0}}).value(), 103);
  // Several dimensions in one call; an index drops its dimension.
  auto one = w->slice({{"hosts", 1}, {"procs", 0}});
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(one->extent().to_string(), "{}");
  EXPECT_EQ(one->call_one<int>(add_atom::value, 0).get(kWait).value(), 102);

  auto point = w->at_point({1, 0});
  ASSERT_TRUE(point.ok());
  EXPECT_EQ(point->call_one<int>(add_atom::value, 0).get(kWait).value(), 102);
  EXPECT_EQ(w->call_one<int>(add_atom::value, 0).get(kWait).status().code(),
            Errc::invalid_argument);

  auto chosen = w->choose<int>(add_atom::value, 0).get(kWait);
  ASSERT_TRUE(chosen.ok());
  EXPECT_GE(*chosen, 100);
  EXPECT_LE(*chosen, 103);

  std::mutex mu;
  std::set<int> streamed;
  auto done = w->stream<int>(
                   [&](int rank, const Result<int>& r) {
                     std::lock_guard<std::mutex> lock(mu);
                     if (r.ok()) streamed.insert(rank);
                   },
                   add_atom::value, 0)
                  .get(kWait);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(streamed, (std::set<int>{0, 1, 2, 3}));

  auto sum = w->accumulate<int>(
                  0, [](int a, int r) { return a + r; }, add_atom::value, 0)
                 .get(kWait);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, 100 + 101 + 102 + 103);

  // tell: fire and forget, in order before a later call from the same mesh.
  ASSERT_TRUE(host1->tell(bump_atom::value).ok());
  ASSERT_TRUE(host1->tell(bump_atom::value).ok());
  auto counts = w->call<int>(count_atom::value).get(kWait);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*(*counts)[0], 0);
  EXPECT_EQ(*(*counts)[1], 0);
  EXPECT_EQ(*(*counts)[2], 2);
  EXPECT_EQ(*(*counts)[3], 2);

  // A mesh spawned on a slice of the processes has the slice's shape.
  auto procs1 = procs->slice("procs", 1, 2);
  ASSERT_TRUE(procs1.ok());
  auto column = procs1->spawn<worker_actor>("column", "worker", 0);
  ASSERT_TRUE(column.ok()) << column.status().to_string();
  EXPECT_EQ(column->extent().to_string(), "{hosts: 2, procs: 1}");
  auto cp = column->call<std::int32_t>(pid_atom::value).get(kWait);
  ASSERT_TRUE(cp.ok());
  EXPECT_EQ(*(*cp)[0], procs->pid(1));
  EXPECT_EQ(*(*cp)[1], procs->pid(3));
  // ... and a process slice that drops a dimension gives a mesh without it.
  auto first_procs = procs->slice({{"procs", 0}});
  ASSERT_TRUE(first_procs.ok()) << first_procs.status().to_string();
  auto row = first_procs->spawn<worker_actor>("row", "worker", 0);
  ASSERT_TRUE(row.ok()) << row.status().to_string();
  EXPECT_EQ(row->extent().to_string(), "{hosts: 2}");
  auto rp = row->call<std::int32_t>(pid_atom::value).get(kWait);
  ASSERT_TRUE(rp.ok());
  EXPECT_EQ(rp->item({{"hosts", 1}}).value(), procs->pid(2));
  EXPECT_EQ(procs->slice({{"procs", 2}}).status().code(), Errc::out_of_range);
  procs->stop();
}

// Each pair of workers holds a TCP connection of its own (the later to
// join connects to the earlier's door), so their messages to each other do
// not pass through the controller.
void expect_connected(int a, int b, const std::string& which) {
  EXPECT_FALSE(testing::connected_ports(a, b).empty() && testing::connected_ports(b, a).empty())
      << which << ": no connection of their own; their messages go through the controller";
}

TEST(ProcMesh, WorkersTalkToEachOtherOverTheirOwnConnections) {
  auto procs = ProcMesh::launch({{"procs", 3}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto w = procs->spawn<worker_actor>("workers", "worker", 100);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  auto relays = procs->spawn<relay_actor>("relays", "relay");
  ASSERT_TRUE(relays.ok()) << relays.status().to_string();
  for (int from = 0; from < 3; ++from) {
    for (int to = 0; to < 3; ++to) {
      if (from == to) continue;
      auto r = relays->slice({{"procs", from}})
                   ->call_one<int>(relay_atom::value, w->at(to), from)
                   .get(kWait);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(*r, from + 100 + to) << "rank " << from << " asking rank " << to;
    }
  }
  for (int a = 0; a < 3; ++a) {
    for (int b = a + 1; b < 3; ++b) {
      expect_connected(procs->pid(a), procs->pid(b),
                       "ranks " + std::to_string(a) + " and " + std::to_string(b));
    }
  }
  procs->stop();
}

// A job's certificates (examples/tls/make_certs.sh) in `dir`: one node
// identity every process of the test's job uses.
void job_tls(testing::TempDir& dir, TlsOptions* out) {
  const std::string cmd =
      std::string(MESHSTORE_MAKE_CERTS) + " " + dir.file("job") + " node > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  *out = TlsOptions{dir.file("job/node.pem"), dir.file("job/node.key"), dir.file("job/ca.pem")};
}

// The same over TLS: the workers' doors are published, and reached,
// through CAF's OpenSSL module with the job's certificates.
TEST(ProcMesh, WorkersTalkToEachOtherOverTheirOwnTlsConnections) {
  testing::TempDir dir;
  auto o = options();
  ASSERT_NO_FATAL_FAILURE(job_tls(dir, &o.tls));
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, o);
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto w = procs->spawn<worker_actor>("workers", "worker", 100);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  auto relays = procs->spawn<relay_actor>("relays", "relay");
  ASSERT_TRUE(relays.ok()) << relays.status().to_string();
  auto r = relays->slice({{"procs", 1}})->call_one<int>(relay_atom::value, w->at(0), 1).get(kWait);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, 1 + 100 + 0);
  expect_connected(procs->pid(0), procs->pid(1), "ranks 0 and 1, over TLS");
  procs->stop();
}

// A store across TLS workers: each process joins it over the connection
// it has to the controller (a second connection between two connected
// processes breaks CAF 0.17's TLS links), and a put in one worker is read
// in the controller and in the other worker.
TEST(ProcMesh, AStoreSpawnedAcrossTlsWorkersServesThemAll) {
  testing::TempDir dir;
  auto o = options();
  ASSERT_NO_FATAL_FAILURE(job_tls(dir, &o.tls));
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, o);
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  StoreOptions so;
  so.placement.strategy = "per_local_rank";
  so.security.tls = o.tls;
  auto store = spawn_store(*procs, so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  auto users = procs->spawn<store_user_actor>("users", "store_user");
  ASSERT_TRUE(users.ok()) << users.status().to_string();
  for (int r = 0; r < 2; ++r) {
    const std::string key = "from-rank-" + std::to_string(r);
    auto put = users->slice({{"procs", r}})
                   ->call_one<bool>(store_put_atom::value, key, std::string("tls"))
                   .get(kWait);
    ASSERT_TRUE(put.ok()) << key << ": " << put.status().to_string();
    auto got = store->get_object(key).get(kWait);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().to_string();
    EXPECT_EQ(*got, "tls");
  }
  store->close();
  procs->stop();
}

TEST(ProcMesh, ListeningOnEveryInterfaceWorksWithAnAdvertisedAddress) {
  LaunchSpec spec;
  spec.bind_host = "0.0.0.0";
  spec.advertise_host = "127.0.0.1";
  auto procs = ProcMesh::launch({{"procs", 1}}, spec, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto w = procs->spawn<worker_actor>("w", "worker", 5);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->call_one<int>(add_atom::value, 1).get(kWait).value(), 6);
}

// Every member echoes `bits` as Exact<T> values; each comes back unchanged.
template <class T, class Bits>
void expect_echoed_bit_exact(const ActorMesh<exact_actor>& m, const std::vector<Bits>& bits) {
  std::vector<Exact<T>> xs;
  for (auto b : bits) xs.emplace_back(from_bits<T>(b));
  auto back = m.call<std::vector<Exact<T>>>(echo_atom::value, xs).get(kWait);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  for (const auto& r : *back) {
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) {
      EXPECT_EQ(to_bits<Bits>((*r)[i].value), bits[i]) << sizeof(T) * 8 << "-bit value " << i;
    }
  }
}

TEST(ProcMesh, FloatsAndDoublesCrossProcessesBitExact) {
  // The values CAF 0.17's own float packing alters or hangs on.
  const std::vector<std::uint64_t> doubles = {
      0x8000000000000000,  // -0.0
      0x7ff0000000000000,  // +infinity
      0xfff0000000000000,  // -infinity
      0x7ff8000000000000,  // quiet NaN
      0xfff8dead0000beef,  // a negative NaN with a payload
      0x0000000000000001,  // the smallest denormal
      0x000fffffffffffff,  // the largest denormal
      0x7fefffffffffffff,  // the largest finite
      0x3ff8000000000000,  // 1.5
      0x400921fb54442d18,  // pi
  };
  const std::vector<std::uint32_t> floats = {0x80000000, 0x7f800000, 0xff800000, 0x7fc00000,
                                             0xffc0beef, 0x00000001, 0x007fffff, 0x3fc00000};
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  // Spawn arguments cross too: -0.0 and a float NaN with a payload.
  auto m = procs->spawn<exact_actor>("exact", "exact", Exact<double>(from_bits<double>(doubles[0])),
                                     Exact<float>(from_bits<float>(floats[4])));
  ASSERT_TRUE(m.ok()) << m.status().to_string();

  expect_echoed_bit_exact<double>(*m, doubles);
  expect_echoed_bit_exact<float>(*m, floats);
  auto bases = m->ask<std::vector<std::uint64_t>>(1, base_atom::value).get(kWait);
  ASSERT_TRUE(bases.ok()) << bases.status().to_string();
  EXPECT_EQ(*bases, (std::vector<std::uint64_t>{doubles[0], floats[4]}));
  // One way: what the other process received, as integers.
  for (auto b : doubles) {
    auto seen =
        m->ask<std::uint64_t>(1, bits_atom::value, Exact<double>(from_bits<double>(b))).get(kWait);
    ASSERT_TRUE(seen.ok()) << seen.status().to_string();
    EXPECT_EQ(*seen, b);
  }
  // Inside a message type of the user's own: each member, bit for bit.
  for (auto b : doubles) {
    Reading r{"sensor", from_bits<double>(b), {}};
    for (auto f : floats) r.samples.emplace_back(from_bits<float>(f));
    auto back = m->ask<Reading>(0, echo_atom::value, r).get(kWait);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->name, "sensor");
    EXPECT_EQ(to_bits<std::uint64_t>(back->value.value), b);
    ASSERT_EQ(back->samples.size(), floats.size());
    for (std::size_t i = 0; i < floats.size(); ++i) {
      EXPECT_EQ(to_bits<std::uint32_t>(back->samples[i].value), floats[i]) << "sample " << i;
    }
  }
}

TEST(ProcMesh, WorkersOutputComesBackLineByLineWithTheirRank) {
  LaunchSpec spec;
  std::mutex mu;
  std::vector<std::pair<int, std::string>> lines;
  spec.on_output = [&](int rank, bool, const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.emplace_back(rank, line);
  };
  auto procs = ProcMesh::launch({{"procs", 2}}, spec, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto w = procs->spawn<worker_actor>("talkers", "worker", 0);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->tell(say_atom::value, std::string("hello from a member")).ok());
  auto has = [&](int rank, const std::string& text) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [r, l] : lines) {
      if (r == rank && l == text) return true;
    }
    return false;
  };
  EXPECT_TRUE(
      eventually([&] { return has(0, "hello from a member") && has(1, "hello from a member"); }));
  // main() printed this before serving.
  EXPECT_TRUE(has(0, "worker 0 ready"));
  EXPECT_TRUE(has(1, "worker 1 ready"));
}

TEST(ProcMesh, GetOrSpawnGivesEveryCallerTheSameSingleton) {
  auto procs = ProcMesh::launch({{"hosts", 2}, {"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto host1 = procs->slice({{"hosts", 1}});
  ASSERT_TRUE(host1.ok());
  // Four callers at once: one spawn, one actor, every bump counted.
  std::vector<Result<ActorMesh<worker_actor>>> got(4, Status(Errc::internal, "not run"));
  std::vector<std::thread> callers;
  for (std::size_t t = 0; t < got.size(); ++t) {
    callers.emplace_back([&, t] {
      got[t] = host1->get_or_spawn<worker_actor>("counter", "worker", 0);
      if (got[t].ok()) (void)got[t]->tell(bump_atom::value);
    });
  }
  for (auto& c : callers) c.join();
  for (auto& g : got) {
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(g->extent().to_string(), "{}");
    EXPECT_EQ(g->at(0).address(), got[0]->at(0).address());
  }
  EXPECT_EQ(got[0]->call_one<int>(count_atom::value).get(kWait).value(), 4);
  // On the first process of the view: rank 2.
  EXPECT_EQ(got[3]->call_one<std::int32_t>(pid_atom::value).get(kWait).value(), procs->pid(2));
  // The whole mesh's callers get the same one, wherever they ask from.
  auto again = procs->get_or_spawn<worker_actor>("counter", "worker", 7);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->call_one<int>(count_atom::value).get(kWait).value(), 4);

  EXPECT_EQ(procs->get_or_spawn<worker_actor>("counter", "mirror").status().message(),
            "ProcMesh::get_or_spawn 'counter': it is a singleton of type 'worker', not 'mirror'");
  EXPECT_EQ(procs->get_or_spawn<other_actor>("counter", "worker").status().code(),
            Errc::invalid_argument);
  EXPECT_EQ(procs->spawn<worker_actor>("counter", "worker", 0).status().code(),
            Errc::invalid_argument);
  ASSERT_TRUE(procs->spawn<worker_actor>("plain", "worker", 0).ok());
  auto plain = procs->get_or_spawn<worker_actor>("plain", "worker", 0);
  EXPECT_EQ(plain.status().code(), Errc::invalid_argument);
  EXPECT_NE(plain.status().message().find("spawn() made a mesh of that name"), std::string::npos);
  // A failed first spawn leaves the name free.
  auto ghost = procs->get_or_spawn<worker_actor>("ghost", "no-such-type");
  EXPECT_FALSE(ghost.ok());
  EXPECT_TRUE(procs->get_or_spawn<worker_actor>("ghost", "worker", 0).ok());
  // A mesh spawned on a point of the processes (every dimension dropped).
  auto point = procs->slice({{"hosts", 1}, {"procs", 1}});
  ASSERT_TRUE(point.ok());
  auto one = point->spawn<worker_actor>("one", "worker", 0);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(one->extent().to_string(), "{}");
  EXPECT_EQ(one->call_one<std::int32_t>(pid_atom::value).get(kWait).value(), procs->pid(3));
  procs->stop();
  EXPECT_EQ(procs->get_or_spawn<worker_actor>("counter", "worker", 0).status().code(),
            Errc::shutdown);
}

TEST(ProcMesh, SetupRunsInEveryWorkerBeforeItJoinsAndAFailureNamesTheRank) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto s = procs->spawn<stopper_actor>("probes", "stopper", std::string("/nonexistent"), false);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  auto seen = s->call<int>(setup_atom::value).get(kWait);
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ((*seen)[0].value(), 0);
  EXPECT_EQ((*seen)[1].value(), 1);
  EXPECT_EQ(g_setup_rank, -1);  // the controller does not run it
  procs->stop();

  // Rank 1's setup fails: the launch fails with its rank and its message,
  // and leaves nothing running.
  LaunchSpec spec;
  spec.env = {{"MESHSTORE_TEST_FAIL_SETUP", "1"}};
  spec.on_output = [](int, bool, const std::string&) {};
  auto failed = ProcMesh::launch({{"procs", 2}}, spec, options());
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Errc::unavailable);
  const std::string msg = failed.status().message();
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("setup failed: no device for rank 1"), std::string::npos) << msg;
}

TEST(ProcMesh, StopHooksRunAsTheProcessesStopAndAreBounded) {
  char tmpl[] = "/tmp/meshstore-stophook-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
    ASSERT_TRUE(procs.ok()) << procs.status().to_string();
    ASSERT_TRUE(procs->spawn<stopper_actor>("stoppers", "stopper", dir, false).ok());
    procs->stop();
  }
  // ProcMesh::stop() reaped the workers: their hooks have run.
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(dir + "/stopped-" + std::to_string(r));
    std::string why((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(why, "ok") << "rank " << r;
  }
  // A hook that never returns: the worker exits after its stop_timeout on
  // its own, long before the controller would kill it.
  LaunchSpec spec;
  spec.env = {{"MESHSTORE_TEST_STOP_TIMEOUT_MS", "300"}};
  spec.stop_grace = std::chrono::seconds(120);
  std::mutex mu;
  std::vector<std::string> lines;
  spec.on_output = [&](int, bool, const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  };
  const std::string hung = dir + "/hung";
  ASSERT_EQ(::mkdir(hung.c_str(), 0700), 0);
  auto procs = ProcMesh::launch({{"procs", 1}}, spec, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  ASSERT_TRUE(procs->spawn<stopper_actor>("hung", "stopper", hung, true).ok());
  procs->stop();
  EXPECT_TRUE(std::ifstream(hung + "/stopped-0").good());
  std::lock_guard<std::mutex> lock(mu);
  bool said = false;
  for (const auto& l : lines) {
    said = said || l.find("actors did not stop within 300 ms") != std::string::npos;
  }
  EXPECT_TRUE(said);
  std::filesystem::remove_all(dir);
}

TEST(ProcMesh, APortPassedInAMessageTakesTheMembersValuesUntilClosed) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto reporters = procs->spawn<reporter_actor>("reporters", "reporter");
  ASSERT_TRUE(reporters.ok()) << reporters.status().to_string();
  auto rx = PortReceiver<int>::open(procs->system());
  ASSERT_TRUE(rx.ok()) << rx.status().to_string();
  // A recv() waiting before anything arrives gets the first value.
  auto first = rx->recv();
  auto sent = reporters->call<bool>(report_atom::value, rx->port(), 7).get(kWait);
  ASSERT_TRUE(sent.ok());
  for (const auto& r : *sent) EXPECT_TRUE(r.ok()) << r.status().to_string();
  auto a = first.get(kWait);
  auto b = rx->recv().get(kWait);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((std::set<int>{*a, *b}), (std::set<int>{7, 107}));

  // Closed: a value sent to it is undeliverable, and its sender is told.
  rx->close();
  auto late = reporters->call<bool>(report_atom::value, rx->port(), 8).get(kWait);
  ASSERT_TRUE(late.ok());
  for (const auto& r : *late) EXPECT_ERROR(r, Errc::unavailable, "its receiver is gone");
  EXPECT_EQ(rx->recv().get(kWait).status().code(), Errc::shutdown);

  // A full port refuses what it cannot hold.
  auto small = PortReceiver<int>::open(procs->system(), 1);
  ASSERT_TRUE(small.ok());
  auto both = reporters->call<bool>(report_atom::value, small->port(), 9).get(kWait);
  ASSERT_TRUE(both.ok());
  int taken = 0, full = 0;
  for (const auto& r : *both) {
    if (r.ok()) ++taken;
    if (r.status().code() == Errc::out_of_capacity) ++full;
  }
  EXPECT_EQ(taken, 1);
  EXPECT_EQ(full, 1);
  EXPECT_EQ(PortReceiver<int>::open(procs->system(), 0).status().code(), Errc::invalid_argument);
  small->close();
  procs->stop();
}

// recv()s of `rx` until every value of `want` came; answers what came.
std::multiset<int> recv_until(const PortReceiver<int>& rx, const std::set<int>& want) {
  std::multiset<int> got;
  std::set<int> missing = want;
  while (!missing.empty()) {
    auto r = rx.recv().get(kWait);
    if (!r.ok()) {
      ADD_FAILURE() << "waiting for " << missing.size() << " values: " << r.status().to_string();
      break;
    }
    got.insert(*r);
    missing.erase(*r);
  }
  return got;
}

TEST(ProcMesh, SendWithAPortHasEachMembersReplyGoThere) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto w = procs->spawn<worker_actor>("workers", "worker", 100);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  auto rx = PortReceiver<int>::open(procs->system());
  ASSERT_TRUE(rx.ok()) << rx.status().to_string();

  // Every member's reply, from the worker processes straight to the port.
  ASSERT_OK(w->send(rx->port(), add_atom::value, 1));
  EXPECT_EQ(recv_until(*rx, {101, 102}), (std::multiset<int>{101, 102}));

  // A slice sends to its members only: rank 0 would have answered 101
  // before its 110 (one sender's messages arrive in order).
  auto second = w->slice({{"procs", {1, 2}}});
  ASSERT_OK(second);
  ASSERT_OK(second->send(rx->port(), add_atom::value, 1));
  ASSERT_OK(w->send(rx->port(), add_atom::value, 10));
  EXPECT_EQ(recv_until(*rx, {110, 111}), (std::multiset<int>{102, 110, 111}));

  // A member's error arrives in its place, and the port goes on.
  ASSERT_OK(w->send(rx->port(), half_atom::value, 3));
  for (int i = 0; i < 2; ++i) {
    auto r = rx->recv().get(kWait);
    EXPECT_ERROR(r, Errc::invalid_argument, "port: a member's call failed");
    EXPECT_NE(r.status().message().find("cannot halve 3"), std::string::npos)
        << r.status().to_string();
  }
  ASSERT_OK(w->send(rx->port(), half_atom::value, 8));
  for (int i = 0; i < 2; ++i) EXPECT_EQ(rx->recv().get(kWait).value(), 4);

  // An empty port, and a stopped mesh, are refused.
  EXPECT_ERROR(w->send(Port<int>(), add_atom::value, 1), Errc::invalid_argument, "empty Port");
  rx->close();
  procs->stop();
  EXPECT_EQ(w->send(rx->port(), add_atom::value, 1).code(), Errc::shutdown);
}

TEST(ProcMesh, SendWithAPortGivesAHandlerThatTakesItTheCallContext) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto m = procs->spawn<where_actor>("where", "where");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto rx = PortReceiver<std::vector<std::int32_t>>::open(procs->system());
  ASSERT_TRUE(rx.ok()) << rx.status().to_string();
  // Rank 1 alone: the first (and only) of a view of one.
  ASSERT_OK(m->slice({{"procs", {1, 2}}})->send(rx->port(), where_atom::value));
  EXPECT_EQ(rx->recv().get(kWait).value(), (std::vector<std::int32_t>{1, 0, 1, 0}));
  rx->close();
  procs->stop();
}

TEST(ProcMesh, AUserMessageTypeCrossesProcesses) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto m = procs->spawn<mirror_actor>("mirrors", "mirror");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto r = m->call<Point>(mirror_atom::value, Point{5, 0}).get(kWait);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0]->x, -5);
  EXPECT_EQ((*r)[1]->x, -4);
  EXPECT_EQ((*r)[1]->y, procs->pid(1));  // computed in the other process
}

TEST(ProcMesh, AUserTypeAWorkerLacksIsRefusedAtSpawnNamingTheRank) {
  // Without its registration the worker's actor has another interface:
  // the spawn is refused naming the rank and the type, instead of a call
  // that hangs.
  LaunchSpec spec;
  spec.env = {{"MESHSTORE_TEST_NO_POINT", "1"}};
  auto procs = ProcMesh::launch({{"procs", 1}}, spec, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto m = procs->spawn<mirror_actor>("mirrors", "mirror");
  EXPECT_ERROR(m, Errc::invalid_argument, "rank 0");
  EXPECT_NE(m.status().message().find("meshstore::test::ProcPoint"), std::string::npos)
      << m.status().to_string();
  procs->stop();
}

// A type no runtime of this process registered.
struct LateType {
  std::int32_t x = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LateType& t) {
  return f(caf::meta::type_name("test::Late"), t.x);
}

TEST(ProcMesh, AStoreAProcMeshAndAnAgentShareOneRuntime) {
  auto agent = HostAgent::start();
  ASSERT_TRUE(agent.ok()) << agent.status().to_string();
  auto procs = ProcMesh::launch({{"procs", 1}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  StoreOptions so;
  so.listen = "127.0.0.1:0";
  auto store = Store::embedded(so);
  ASSERT_OK(store);
  // One actor system: one clock thread (each system runs one).
  EXPECT_EQ(testing::threads_named("caf.clock"), 1);
  // Types cannot join a running runtime: refused naming them.
  auto late = add_process_types(
      [](caf::actor_system_config& cfg) { cfg.add_message_type<LateType>("test::Late"); });
  EXPECT_EQ(late.code(), Errc::invalid_argument);
  EXPECT_NE(late.message().find("'test::Late'"), std::string::npos) << late.to_string();
  // Closing one stops only its own actors: the others keep working.
  ASSERT_OK(store->put_object("k", "v").get(kWait));
  store->close();
  agent->stop();
  auto w = procs->spawn<worker_actor>("after", "worker", 1);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_TRUE(w->call<std::int32_t>(pid_atom::value).get(kWait).ok());
  auto again = Store::embedded();
  ASSERT_OK(again);
  EXPECT_EQ(testing::threads_named("caf.clock"), 1);
  again->close();
  procs->stop();
  // The last one out takes the runtime with it.
  EXPECT_EQ(testing::threads_named("caf.clock"), 0);
}

TEST(ProcMesh, TheCallContextCrossesProcessesWithTheMessagesRankInTheView) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto m = procs->spawn<where_actor>("where", "where");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto all = m->call<std::vector<std::int32_t>>(where_atom::value).get(kWait);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ(*(*all)[0], (std::vector<std::int32_t>{0, 0, 2, 0}));
  EXPECT_EQ(*(*all)[1], (std::vector<std::int32_t>{1, 1, 2, 1}));
  // Rank 1 alone: the first (and only) of a view of one.
  auto second = m->slice({{"procs", {1, 2}}}).value();
  EXPECT_EQ(*second.call_one<std::vector<std::int32_t>>(where_atom::value).get(kWait),
            (std::vector<std::int32_t>{1, 0, 1, 0}));
  procs->stop();
}

TEST(ProcMesh, BadSpawnsAreRefusedNamingTheRankAndLeaveNothingBehind) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();

  auto unknown = procs->spawn<worker_actor>("a", "no-such-type", 1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), Errc::not_found);
  EXPECT_NE(unknown.status().message().find("rank 0"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("no-such-type"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("registered: "), std::string::npos);

  auto args = procs->spawn<worker_actor>("b", "worker", std::string("not an int"));
  ASSERT_FALSE(args.ok());
  EXPECT_EQ(args.status().code(), Errc::invalid_argument);
  EXPECT_NE(args.status().message().find("does not take the arguments"), std::string::npos);

  auto mismatched = procs->spawn<other_actor>("c", "worker", 1);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_EQ(mismatched.status().code(), Errc::invalid_argument);
  EXPECT_NE(mismatched.status().message().find("interface"), std::string::npos);
  EXPECT_NE(mismatched.status().message().find("rank"), std::string::npos);

  EXPECT_EQ(procs->spawn<worker_actor>("", "worker", 1).status().code(), Errc::invalid_argument);
  // A function does not travel to another process.
  auto from_function = procs->spawn<mirror_actor>("d", mirror);
  ASSERT_FALSE(from_function.ok());
  EXPECT_EQ(from_function.status().code(), Errc::invalid_argument);
  EXPECT_NE(from_function.status().message().find("spawn it by name"), std::string::npos);
  // The refused names are free again; a used one is not.
  ASSERT_TRUE(procs->spawn<worker_actor>("c", "worker", 1).ok());
  EXPECT_EQ(procs->spawn<worker_actor>("c", "worker", 1).status().code(), Errc::invalid_argument);
}

TEST(ProcMesh, ServeRefusesABadLaunchEnvironmentByName) {
  // Checked before anything starts: no runtime, no connection.
  ::unsetenv("MESHSTORE_PROC_CONTROLLER");
  EXPECT_ERROR(ProcMesh::serve(options()), Errc::invalid_argument,
               "MESHSTORE_PROC_CONTROLLER is not set");
  ::setenv("MESHSTORE_PROC_CONTROLLER", "127.0.0.1:1", 1);
  ::setenv("MESHSTORE_PROC_TOKEN", "t", 1);
  ::unsetenv("MESHSTORE_PROC_RANK");
  EXPECT_ERROR(ProcMesh::serve(options()), Errc::invalid_argument,
               "MESHSTORE_PROC_RANK is not set");
  for (const char* bad : {"x", "1x", "-1", "1048577", ""}) {
    ::setenv("MESHSTORE_PROC_RANK", bad, 1);
    EXPECT_ERROR(ProcMesh::serve(options()), Errc::invalid_argument, "MESHSTORE_PROC_RANK")
        << "'" << bad << "'";
  }
  ::unsetenv("MESHSTORE_PROC_RANK");
  ::unsetenv("MESHSTORE_PROC_TOKEN");
  ::unsetenv("MESHSTORE_PROC_CONTROLLER");
}

TEST(ProcMesh, LaunchFailuresSayWhy) {
  LaunchSpec missing;
  missing.program = "/nonexistent/worker";
  auto a = ProcMesh::launch({{"procs", 1}}, missing, options());
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Errc::not_found);

  LaunchSpec quits;
  quits.program = "true";  // exits at once, never joins
  quits.on_output = [](int, bool, const std::string&) {};
  auto b = ProcMesh::launch({{"procs", 2}}, quits, options());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Errc::unavailable);
  EXPECT_NE(b.status().message().find("exited with status 0 before joining"), std::string::npos)
      << b.status().to_string();

  LaunchSpec sleeps;
  sleeps.program = "sleep";
  sleeps.args = {"30"};
  sleeps.join_timeout = 300ms;
  sleeps.stop_grace = 100ms;
  auto c = ProcMesh::launch({{"procs", 2}}, sleeps, options());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Errc::timeout);
  EXPECT_NE(c.status().message().find("ranks 0, 1 did not join"), std::string::npos)
      << c.status().to_string();

  EXPECT_EQ(ProcMesh::launch({{"procs", 0}}, {}, options()).status().code(),
            Errc::invalid_argument);
  LaunchSpec wildcard;
  wildcard.bind_host = "0.0.0.0";  // no address a worker can dial
  EXPECT_EQ(ProcMesh::launch({{"procs", 1}}, wildcard, options()).status().code(),
            Errc::invalid_argument);
  auto bad_timeouts = options();
  bad_timeouts.connection_timeout = bad_timeouts.heartbeat_interval;
  EXPECT_EQ(ProcMesh::launch({{"procs", 1}}, {}, bad_timeouts).status().code(),
            Errc::invalid_argument);
}

TEST(ProcMesh, KillNineUnderStopPolicyStopsTheMeshAndTellsTheHandler) {
  auto procs = ProcMesh::launch({{"procs", 3}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  Failures failures;
  Supervision s;
  s.policy = FailurePolicy::stop;
  s.on_failure = failures.handler(false);
  auto w = procs->spawn<worker_actor>(s, "stopped", "worker", 0);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->call<int>(add_atom::value, 0).get(kWait).ok());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(procs->signal(1, SIGKILL).ok());
  ASSERT_TRUE(failures.wait_for(1));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 10s);  // a closed connection is seen at once, not after a heartbeat
  EXPECT_EQ(failures.seen[0].mesh, "stopped");
  EXPECT_EQ(failures.seen[0].rank, 1);
  EXPECT_EQ(failures.seen[0].why.code(), Errc::unavailable);
  auto after = w->call<int>(add_atom::value, 0).get(kWait);
  ASSERT_TRUE(after.ok());
  for (const auto& r : *after) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Errc::unavailable);
    EXPECT_NE(r.status().message().find("was stopped after rank 1"), std::string::npos)
        << r.status().to_string();
  }
}

// On 2 processes started with max_relaunches 1: rank 1 killed with -9 is
// started again with a fresh member of a mesh under `restart`, a mesh
// under `stop` stays stopped; killed again, past its budget, it stays dead.
void a_dead_worker_comes_back_once(Result<ProcMesh>& procs) {
  Failures restarted_failures, stopped_failures;
  Supervision restart;
  restart.policy = FailurePolicy::restart;
  restart.on_failure = restarted_failures.handler(false);
  auto w = procs->spawn<worker_actor>(restart, "comes-back", "worker", 10);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  Supervision stop;
  stop.policy = FailurePolicy::stop;
  stop.on_failure = stopped_failures.handler(false);
  auto kept = procs->spawn<worker_actor>(stop, "stays-stopped", "worker", 0);
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  auto one = w->slice("procs", 1, 2).value();
  ASSERT_TRUE(one.tell(bump_atom::value).ok());
  ASSERT_EQ(one.call_one<int>(count_atom::value).get(kWait).value(), 1);
  const int old_pid = procs->pid(1);

  ASSERT_TRUE(procs->signal(1, SIGKILL).ok());
  ASSERT_TRUE(restarted_failures.wait_for(1));
  EXPECT_EQ(restarted_failures.seen[0].rank, 1);
  // A new process in rank 1's place, and the member spawned in it afresh.
  ASSERT_TRUE(eventually([&] {
    auto c = one.call_one<int>(count_atom::value).get(kWait);
    return c.ok() && *c == 0;
  }));
  const auto pid = one.call_one<std::int32_t>(pid_atom::value).get(kWait);
  ASSERT_TRUE(pid.ok()) << pid.status().to_string();
  EXPECT_NE(*pid, old_pid);
  EXPECT_EQ(*pid, procs->pid(1));
  EXPECT_EQ(one.call_one<int>(add_atom::value, 1).get(kWait).value(), 12);
  // The new process connects to its peer as the first did.
  expect_connected(procs->pid(1), procs->pid(0), "the restarted rank 1 and rank 0");
  // Rank 0 never stopped; the mesh under `stop` stays stopped.
  EXPECT_EQ(w->slice("procs", 0, 1)->call_one<int>(count_atom::value).get(kWait).value(), 0);
  ASSERT_TRUE(stopped_failures.wait_for(1));
  EXPECT_EQ(kept->slice("procs", 1, 2)->call_one<int>(count_atom::value).get(kWait).status().code(),
            Errc::unavailable);

  // The budget is one start per rank: killed again, rank 1 stays dead and
  // the restarting mesh stops.
  ASSERT_TRUE(procs->signal(1, SIGKILL).ok());
  ASSERT_TRUE(restarted_failures.wait_for(2));
  EXPECT_TRUE(eventually([&] {
    return one.call_one<int>(count_atom::value).get(kWait).status().code() == Errc::unavailable &&
           w->slice("procs", 0, 1)->call_one<int>(count_atom::value).get(kWait).status().code() ==
               Errc::unavailable;
  }));
  EXPECT_EQ(procs->pid(1), *pid);  // the last one it had
}

TEST(ProcMesh, ADeadWorkerIsStartedAgainAndItsRestartedMembersComeBackInIt) {
  LaunchSpec spec;
  spec.max_relaunches = 1;
  auto procs = ProcMesh::launch({{"procs", 2}}, spec, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  a_dead_worker_comes_back_once(procs);
}

TEST(ProcMesh, AnAgentStartsADeadWorkerAgainWhenTheControllerSays) {
  auto agent = HostAgent::start();
  ASSERT_TRUE(agent.ok()) << agent.status().to_string();
  LaunchSpec spec;
  spec.max_relaunches = 1;
  auto procs = ProcMesh::attach({"127.0.0.1:" + std::to_string(agent->port())}, {{"procs", 2}},
                                spec, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  a_dead_worker_comes_back_once(procs);
}

TEST(ProcMesh, RelaunchSettingsAreChecked) {
  LaunchSpec negative;
  negative.max_relaunches = -1;
  EXPECT_EQ(ProcMesh::launch({{"procs", 1}}, negative, options()).status().code(),
            Errc::invalid_argument);
  LaunchSpec no_window;
  no_window.max_relaunches = 2;
  no_window.relaunch_window = 0ms;
  EXPECT_EQ(ProcMesh::launch({{"procs", 1}}, no_window, options()).status().code(),
            Errc::invalid_argument);
}

TEST(ProcMesh, RestartPolicySpawnsTheMemberAgainOnItsProcess) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  Failures failures;
  Supervision s;
  s.policy = FailurePolicy::restart;
  s.max_restarts = 1;
  s.on_failure = failures.handler(false);
  auto w = procs->spawn<worker_actor>(s, "restarted", "worker", 10);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->tell(bump_atom::value).ok());
  ASSERT_TRUE(w->slice("procs", 1, 2)->tell(fail_atom::value).ok());
  ASSERT_TRUE(failures.wait_for(1));
  EXPECT_EQ(failures.seen[0].rank, 1);
  EXPECT_NE(failures.seen[0].why.message().find("told to fail"), std::string::npos);
  // The new member: same arguments, same process, fresh state.
  auto one = w->slice("procs", 1, 2).value();
  ASSERT_TRUE(eventually([&] {
    auto c = one.call_one<int>(count_atom::value).get(kWait);
    return c.ok() && *c == 0;
  }));
  EXPECT_EQ(one.call_one<int>(add_atom::value, 1).get(kWait).value(), 12);
  EXPECT_EQ(one.call_one<std::int32_t>(pid_atom::value).get(kWait).value(), procs->pid(1));
  EXPECT_EQ(w->slice("procs", 0, 1)->call_one<int>(count_atom::value).get(kWait).value(), 1);
  // Past max_restarts the mesh stops.
  ASSERT_TRUE(one.tell(fail_atom::value).ok());
  ASSERT_TRUE(failures.wait_for(2));
  EXPECT_TRUE(eventually([&] {
    return w->call_one<int>(count_atom::value).get(kWait).status().code() != Errc::ok &&
           one.call_one<int>(count_atom::value).get(kWait).status().code() == Errc::unavailable;
  }));
}

TEST(ProcMesh, PropagatedFailuresReachTheRootHandler) {
  Failures root;
  auto o = options();
  o.on_failure = root.handler(true);
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, o);
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto w = procs->spawn<worker_actor>("propagated", "worker", 0);  // default policy
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(procs->signal(0, SIGKILL).ok());
  ASSERT_TRUE(root.wait_for(1));
  EXPECT_EQ(root.seen[0].mesh, "propagated");
  EXPECT_EQ(root.seen[0].rank, 0);
  // The other member still answers.
  EXPECT_EQ(w->slice("procs", 1, 2)->call_one<int>(add_atom::value, 0).get(kWait).value(), 1);
}

TEST(ProcMesh, AfterStopEveryCallAnswersShutdownAndNoWorkerIsLeft) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto w = procs->spawn<worker_actor>("w", "worker", 0);
  ASSERT_TRUE(w.ok());
  const int p0 = procs->pid(0), p1 = procs->pid(1);
  procs->stop();
  EXPECT_NE(::kill(p0, 0), 0);  // reaped by stop()
  EXPECT_NE(::kill(p1, 0), 0);
  auto r = w->call<int>(add_atom::value, 0).get(kWait);
  ASSERT_TRUE(r.ok());
  for (const auto& x : *r) EXPECT_EQ(x.status().code(), Errc::shutdown);
  EXPECT_EQ(w->tell(bump_atom::value).code(), Errc::shutdown);
  EXPECT_EQ(procs->spawn<worker_actor>("again", "worker", 0).status().code(), Errc::shutdown);
  EXPECT_EQ(procs->signal(0, SIGKILL).code(), Errc::shutdown);
  procs->stop();  // idempotent
}

// The "State:" line of /proc/PID/status, for diagnostics.
std::string state(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "r");
  if (!f) return "gone";
  char line[256];
  std::string out;
  while (std::fgets(line, sizeof(line), f)) {
    if (std::strncmp(line, "State:", 6) == 0) out = line;
  }
  std::fclose(f);
  return out;
}

// Waits up to `bound` until processes `a` and `b` have exited: reaped here
// (this process is their subreaper) or gone. For orphaned workers.
bool both_exit(pid_t a, pid_t b, std::chrono::milliseconds bound) {
  auto exited = [](pid_t p) {
    return ::waitpid(p, nullptr, WNOHANG) == p || (::kill(p, 0) != 0 && errno == ESRCH);
  };
  bool a_gone = false, b_gone = false;
  return eventually(
      [&] {
        a_gone = a_gone || exited(a);
        b_gone = b_gone || exited(b);
        return a_gone && b_gone;
      },
      bound);
}

// The pids of the two workers a test controller (below) launched, from
// its "pids: A B" line.
void worker_pids(testing::Child& controller, pid_t& a, pid_t& b) {
  ASSERT_TRUE(controller.wait_for_output("pids:", kWait)) << controller.output();
  ASSERT_TRUE(controller.wait_for_output("\n", kWait));
  std::istringstream in(controller.output().substr(controller.output().find("pids:") + 5));
  in >> a >> b;
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
}

TEST(ProcMesh, WorkersStopThemselvesWhenTheirControllerIsKilled) {
  // Orphans come to this process (not to an init that may reap late), so
  // the test sees them exit.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  // A controller of our own (this binary again), killed with -9.
  testing::Child controller({"/proc/self/exe"}, {"MESHSTORE_TEST_ROLE=controller"});
  pid_t a = 0, b = 0;
  ASSERT_NO_FATAL_FAILURE(worker_pids(controller, a, b));
  ASSERT_EQ(::kill(a, 0), 0);
  controller.signal(SIGKILL);
  ASSERT_TRUE(controller.wait(kWait));
  // The workers' lifeline closed with the controller: they exit (and are
  // reaped by whoever adopted them).
  EXPECT_TRUE(both_exit(a, b, 20s))
      << "workers " << a << " and " << b << " outlived their controller: " << state(a) << ", "
      << state(b) << "\n"
      << controller.output();
}

TEST(ProcMesh, AttachStartsWorkersThroughHostAgents) {
  auto a = HostAgent::start();
  auto b = HostAgent::start();
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  LaunchSpec spec;
  std::mutex mu;
  std::set<int> ready;
  spec.on_output = [&](int rank, bool, const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    if (line.find("ready") != std::string::npos) ready.insert(rank);
  };
  const std::vector<std::string> agents{"127.0.0.1:" + std::to_string(a->port()),
                                        "127.0.0.1:" + std::to_string(b->port())};
  Failures failures;
  auto o = options();
  o.on_failure = failures.handler(true);  // the root: "remote" propagates here
  auto procs = ProcMesh::attach(agents, {{"hosts", 2}, {"procs", 2}}, spec, o);
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto w = procs->spawn<worker_actor>("remote", "worker", 7);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  auto pids = w->call<std::int32_t>(pid_atom::value).get(kWait);
  ASSERT_TRUE(pids.ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(*(*pids)[i], procs->pid(i));
  auto sums = w->slice("hosts", 1, 2)->call<int>(add_atom::value, 0).get(kWait);
  ASSERT_TRUE(sums.ok());
  EXPECT_EQ(*(*sums)[0], 9);
  EXPECT_EQ(*(*sums)[1], 10);
  // Output travels back through the agents, with each worker's rank.
  EXPECT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return ready.size() == 4u;
  }));
  // A process killed through its agent reaches supervision: "watched"
  // stops, "remote" propagates to the root.
  Supervision s;
  s.policy = FailurePolicy::stop;
  s.on_failure = failures.handler(false);
  auto watched = procs->spawn<worker_actor>(s, "watched", "worker", 0);
  ASSERT_TRUE(watched.ok());
  const int victim = procs->pid(3);
  ASSERT_TRUE(procs->signal(3, SIGKILL).ok());
  ASSERT_TRUE(failures.wait_for(2));
  std::set<std::string> meshes;
  for (const auto& f : failures.seen) {
    EXPECT_EQ(f.rank, 3);
    meshes.insert(f.mesh);
  }
  EXPECT_EQ(meshes, (std::set<std::string>{"remote", "watched"}));
  EXPECT_EQ(watched->call_one<int>(add_atom::value, 0).get(kWait).status().code(),
            Errc::invalid_argument);  // four members: call_one refuses
  EXPECT_EQ(watched->slice("hosts", 0, 1)
                ->slice("procs", 0, 1)
                ->call_one<int>(add_atom::value, 0)
                .get(kWait)
                .status()
                .code(),
            Errc::unavailable);                                     // the mesh was stopped
  EXPECT_TRUE(eventually([&] { return ::kill(victim, 0) != 0; }));  // the agent reaped it
  const int survivor = procs->pid(0);
  procs->stop();
  EXPECT_NE(::kill(survivor, 0), 0);  // stop() waits for the agents
}

TEST(ProcMesh, AttachFailuresSayWhich) {
  MeshOptions o = options();
  o.connect_timeout = 300ms;
  auto none = ProcMesh::attach({"127.0.0.1:1"}, {{"procs", 1}}, {}, o);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Errc::unavailable);
  EXPECT_NE(none.status().message().find("no agent answered at 127.0.0.1:1"), std::string::npos)
      << none.status().to_string();
  EXPECT_EQ(ProcMesh::attach({"127.0.0.1"}, {{"procs", 1}}, {}, o).status().code(),
            Errc::invalid_argument);
  EXPECT_EQ(ProcMesh::attach({"127.0.0.1:5", "127.0.0.1:6"}, {{"procs", 3}}, {}, o).status().code(),
            Errc::invalid_argument);
  auto agent = HostAgent::start();
  ASSERT_TRUE(agent.ok());
  LaunchSpec missing;
  missing.program = "/nonexistent/worker";
  auto bad =
      ProcMesh::attach({"127.0.0.1:" + std::to_string(agent->port())}, {{"procs", 1}}, missing, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Errc::not_found);
  EXPECT_NE(bad.status().message().find("/nonexistent/worker"), std::string::npos);
}

TEST(HostAgent, BadOptionsAndATakenPortAreRefused) {
  AgentOptions empty;
  empty.host = "";
  EXPECT_EQ(HostAgent::start(empty).status().code(), Errc::invalid_argument);
  AgentOptions negative;
  negative.stop_grace = -1ms;
  EXPECT_EQ(HostAgent::start(negative).status().code(), Errc::invalid_argument);
  auto first = HostAgent::start();
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  AgentOptions same;
  same.port = first->port();
  auto second = HostAgent::start(same);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Errc::unavailable);
  EXPECT_NE(
      second.status().message().find("cannot listen on 127.0.0.1:" + std::to_string(first->port())),
      std::string::npos)
      << second.status().to_string();
}

TEST(ProcMesh, AnAgentStopsTheProcessesOfAControllerThatWentAway) {
  auto agent = HostAgent::start();
  ASSERT_TRUE(agent.ok());
  testing::Child controller({"/proc/self/exe"},
                            {"MESHSTORE_TEST_ROLE=attach-controller",
                             "MESHSTORE_TEST_AGENT=127.0.0.1:" + std::to_string(agent->port())});
  pid_t a = 0, b = 0;
  ASSERT_NO_FATAL_FAILURE(worker_pids(controller, a, b));
  controller.signal(SIGKILL);
  ASSERT_TRUE(controller.wait(kWait));
  // The workers are the agent's children (in this process): it stops and
  // reaps them once it sees their controller gone.
  EXPECT_TRUE(eventually([&] { return ::kill(a, 0) != 0 && ::kill(b, 0) != 0; }, 30s))
      << controller.output();
}

// The fault matrix's agent row (docs/reliability.md): a host agent killed
// with -9 takes the workers it started with it (their lifeline to it
// closes), and the controller that attached them learns which ranks went.
TEST(ProcMesh, AnAgentKilledTakesItsWorkersAndTheControllerLearnsWhich) {
  // Orphaned workers come to this process, so the test sees them exit.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  testing::Child agent({MESHSTORE_TOOL_PATH, "agent", "--listen", "127.0.0.1:0"});
  ASSERT_TRUE(agent.wait_for_output("; stop with", kWait)) << agent.output();
  const auto at = agent.output().find("listening on 127.0.0.1:") + 23;
  const std::string port = agent.output().substr(at, agent.output().find(';', at) - at);
  Failures failures;
  auto o = options();
  o.on_failure = failures.handler(true);
  auto procs = ProcMesh::attach({"127.0.0.1:" + port}, {{"procs", 2}}, {}, o);
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  auto w = procs->spawn<worker_actor>("remote", "worker", 7);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const pid_t a = procs->pid(0), b = procs->pid(1);
  ASSERT_EQ(::kill(a, 0), 0);
  agent.signal(SIGKILL);
  ASSERT_TRUE(agent.wait(kWait));
  EXPECT_TRUE(both_exit(a, b, 30s)) << "workers " << a << " and " << b
                                    << " outlived their agent: " << state(a) << ", " << state(b);
  // Both members of "remote" are reported down, by rank.
  ASSERT_TRUE(failures.wait_for(2));
  std::set<int> ranks;
  for (const auto& f : failures.seen) {
    EXPECT_EQ(f.mesh, "remote");
    EXPECT_EQ(f.why.code(), Errc::unavailable) << f.to_string();
    ranks.insert(f.rank);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  EXPECT_EQ(w->call_one<int>(add_atom::value, 0).get(kWait).status().code(),
            Errc::invalid_argument);  // two members: call_one refuses
  procs->stop();                      // returns: nothing left to wait for
}

TEST(ProcMesh, AStoreSpawnedAcrossTheProcessesServesTheirActorsAndLeavesNothingBehind) {
  Failures failures;
  auto o = options();
  o.on_failure = failures.handler(true);
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, o);
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  const int before0 = testing::thread_count(procs->pid(0)),
            before1 = testing::thread_count(procs->pid(1));
  const int before_here = testing::thread_count(::getpid());
  StoreOptions so;
  so.placement.strategy = "per_local_rank";  // a volume in each worker process
  so.limits.scheduler_threads = 4;           // what the controller's store's own system would start
  auto store = spawn_store(*procs, so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  // Not in this process: it is the controller, not a worker.
  EXPECT_EQ(worker_store().status().code(), Errc::not_found);
  auto users = procs->spawn<store_user_actor>("users", "store_user");
  ASSERT_TRUE(users.ok()) << users.status().to_string();
  auto put =
      users->slice("procs", 1, 2)
          ->call_one<bool>(store_put_atom::value, std::string("from-rank-1"), std::string("hello"))
          .get(kWait);
  ASSERT_TRUE(put.ok()) << put.status().to_string();
  auto got = store->get_object("from-rank-1").get(kWait);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "hello");
  EXPECT_GT(segments_of(procs->pid(1)), 0);  // the object lives in rank 1's volume
  // One runtime per process: the stores run on the actor systems the
  // meshes run on. An actor system of their own would start at least two
  // scheduler threads (four in this process) and a multiplexer, and a
  // worker's volume its transports' threads besides; a shared one adds
  // only the latter (one measured), plus, in rank 1, the thread serving
  // this process's fast-path ring to its volume (one per same-host client
  // that read there).
  EXPECT_LT(testing::thread_count(procs->pid(0)) - before0, 3);
  EXPECT_LT(testing::thread_count(procs->pid(1)) - before1, 4);
  EXPECT_LT(testing::thread_count(::getpid()) - before_here, 3);
  // A store process killed: supervision names the store's two meshes,
  // its volumes and its client, with the rank (and the users' mesh).
  const int p0 = procs->pid(0), p1 = procs->pid(1);
  ASSERT_TRUE(procs->signal(0, SIGKILL).ok());
  ASSERT_TRUE(failures.wait_for(3));
  std::set<std::string> meshes;
  {
    std::lock_guard<std::mutex> lock(failures.mu);
    for (const auto& f : failures.seen) {
      EXPECT_EQ(f.rank, 0);
      meshes.insert(f.mesh);
    }
  }
  EXPECT_EQ(meshes, (std::set<std::string>{"meshstore.store", "meshstore.volumes", "users"}));
  // The surviving worker closes its store when the mesh stops: no segment
  // of it is left.
  procs->stop();
  EXPECT_EQ(segments_of(p1), 0);
  store->close();
  ::waitpid(p0, nullptr, WNOHANG);
  transports::shm::garbage_collect(false, p0);  // the killed one could not
}

// Under the restart policy, with the process started again: the store's
// member in rank 1 comes back in the new process and its volume rejoins
// the store empty. The key it held is gone (the controller dropped it and
// said so); new puts land in it again.
TEST(ProcMesh, AStoreProcessStartedAgainRejoinsTheStoreEmpty) {
  Failures failures;
  const Supervision restart = failures.restarting();
  auto procs = ProcMesh::launch({{"procs", 2}}, relaunching_once(), options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  StoreOptions so;
  so.placement.strategy = "per_local_rank";  // a volume in each worker process
  auto store = spawn_store(*procs, so, restart);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  auto users = procs->spawn<store_user_actor>(restart, "users", "store_user");
  ASSERT_TRUE(users.ok()) << users.status().to_string();
  auto rank1 = users->slice({{"procs", 1}}).value();
  ASSERT_TRUE(rank1.call_one<bool>(store_put_atom::value, std::string("old"), std::string("v1"))
                  .get(kWait)
                  .ok());
  ASSERT_EQ(store->get_object("old").get(kWait).value(), "v1");

  const int old_pid = procs->pid(1);
  ASSERT_TRUE(procs->signal(1, SIGKILL).ok());
  ASSERT_TRUE(failures.wait_for(3));  // the store's volumes, its client, the user
  std::set<std::string> failed;
  {
    std::lock_guard<std::mutex> lock(failures.mu);
    for (const auto& f : failures.seen) {
      EXPECT_EQ(f.rank, 1);
      failed.insert(f.mesh);
    }
  }
  EXPECT_EQ(failed, (std::set<std::string>{"meshstore.store", "meshstore.volumes", "users"}));
  // A new process, whose volume registers again under its old name.
  ASSERT_TRUE(eventually([&] {
    return procs->pid(1) != old_pid &&
           rank1.call_one<bool>(store_put_atom::value, std::string("new"), std::string("v2"))
               .get(kWait)
               .ok();
  }));
  EXPECT_EQ(store->get_object("new").get(kWait).value(), "v2");
  // What the old volume held is gone, and a read of it says so: this
  // client saw the volume go ("... which went down; put it again"), one
  // that did not finds no such key.
  auto old = store->get_object("old").get(kWait);
  ASSERT_FALSE(old.ok());
  const auto& why = old.status();
  EXPECT_TRUE((why.code() == Errc::unavailable &&
               why.message().find("which went down") != std::string::npos) ||
              why.code() == Errc::not_found)
      << why.to_string();
  auto stats = store->admin().stats().get(kWait);
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  for (const auto& v : *stats) {
    if (v.volume_id.substr(v.volume_id.rfind('/') + 1) == "lr1") {
      EXPECT_EQ(v.objects, 1u);  // "new" alone
    }
  }
  store->close();
  procs->stop();
}

// Under the stop policy a store process killed stops the store's meshes:
// every volume goes (the survivors' with them) and the controller says
// which keys were lost; the store itself answers with the reason, it does
// not hang.
TEST(ProcMesh, KillNineOfAStoreProcessUnderStopPolicyStopsTheStoresMeshes) {
  Failures failures;
  Supervision stop;
  stop.policy = FailurePolicy::stop;
  stop.on_failure = failures.handler(false);
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  StoreOptions so;
  so.placement.strategy = "per_local_rank";
  auto store = spawn_store(*procs, so, stop);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ASSERT_TRUE(store->put_object("on-rank-0", "v").get(kWait).ok());  // the controller's: lr0
  const int p1 = procs->pid(1);
  ASSERT_TRUE(procs->signal(1, SIGKILL).ok());
  ASSERT_TRUE(failures.wait_for(2));
  std::set<std::string> failed;
  {
    std::lock_guard<std::mutex> lock(failures.mu);
    for (const auto& f : failures.seen) {
      EXPECT_EQ(f.rank, 1);
      failed.insert(f.mesh);
    }
  }
  EXPECT_EQ(failed, (std::set<std::string>{"meshstore.store", "meshstore.volumes"}));
  // Rank 0's volume was stopped with its mesh: its key is gone too.
  ASSERT_TRUE(eventually([&] {
    auto got = store->get_object("on-rank-0").get(kWait);
    return !got.ok() &&
           (got.status().code() == Errc::unavailable || got.status().code() == Errc::not_found);
  }));
  store->close();
  procs->stop();
  ::waitpid(p1, nullptr, WNOHANG);
  transports::shm::garbage_collect(false, p1);  // the killed one could not
}

// What spawn_store's options say of volumes reaches the volumes it makes
// in the processes: their capacity, and a put that does not fit is
// refused there.
TEST(ProcMesh, TheStoresVolumeOptionsReachTheVolumesInItsProcesses) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  StoreOptions so;
  so.placement.strategy = "per_local_rank";
  so.limits.volume_capacity_bytes = 4096;
  auto store = spawn_store(*procs, so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  auto stats = store->admin().stats().get(kWait);
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  ASSERT_EQ(stats->size(), 2u);
  for (const auto& v : *stats) EXPECT_EQ(v.capacity_bytes, 4096u) << v.volume_id;
  EXPECT_ERROR(store->put_object("too-big", std::string(8192, 'x')).get(kWait),
               Errc::out_of_capacity, "too-big");
  EXPECT_TRUE(store->put_object("fits", std::string(1024, 'x')).get(kWait).ok());
  store->close();
  procs->stop();
}

// The controller of a single-controller program is often the one that
// publishes. It is not one of the mesh's ranks (local rank -1), so under
// per_local_rank it hosts no volume: it writes to its host's volume of the
// lowest local rank (worker 0's), which every worker reads.
TEST(ProcMesh, TheControllerPutsToTheStoreItSpawnedUnderPerLocalRank) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  StoreOptions so;
  so.placement.strategy = "per_local_rank";
  auto store = spawn_store(*procs, so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  auto put = store->put_object("from-controller", "weights v1").get(kWait);
  ASSERT_TRUE(put.ok()) << put.status().to_string();
  auto got = store->get_object("from-controller").get(kWait);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "weights v1");
  auto stats = store->admin().stats().get(kWait);
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  std::map<std::string, std::uint64_t> objects;
  for (const auto& v : *stats) objects[v.volume_id.substr(v.volume_id.rfind('/') + 1)] = v.objects;
  EXPECT_EQ(objects, (std::map<std::string, std::uint64_t>{{"lr0", 1}, {"lr1", 0}}));
  // A worker's own put still lands in its own volume.
  auto users = procs->spawn<store_user_actor>("users", "store_user");
  ASSERT_TRUE(users.ok()) << users.status().to_string();
  auto from_worker =
      users->slice("procs", 1, 2)
          ->call_one<bool>(store_put_atom::value, std::string("from-rank-1"), std::string("hi"))
          .get(kWait);
  ASSERT_TRUE(from_worker.ok()) << from_worker.status().to_string();
  stats = store->admin().stats().get(kWait);
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  for (const auto& v : *stats) objects[v.volume_id.substr(v.volume_id.rfind('/') + 1)] = v.objects;
  EXPECT_EQ(objects, (std::map<std::string, std::uint64_t>{{"lr0", 1}, {"lr1", 1}}));
  store->close();
  procs->stop();
}

// Once every process has joined, the strategy's "no volume for this
// client" cannot change: the controller's put fails at once, naming why,
// instead of asking again until its request timeout.
TEST(ProcMesh, AControllerPutTheStrategyCannotPlaceFailsAtOnce) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  StoreOptions so;
  so.placement.custom_strategy.placement = "per_local_rank";
  // Each rank writes to its own volume; the controller (local rank -1) to none.
  so.placement.custom_strategy.select =
      [](const ClientDesc& c, const std::vector<VolumeDesc>& volumes) -> Result<std::string> {
    for (const auto& v : volumes) {
      if (c.local_rank >= 0 && v.local_rank == c.local_rank) return v.volume_id;
    }
    return Status(Errc::unavailable, "no volume for local rank " + std::to_string(c.local_rank));
  };
  so.limits.request_timeout = std::chrono::seconds(300);
  auto store = spawn_store(*procs, so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  auto put = store->put_object("nowhere", "bytes");
  // Well inside the 300 s request timeout it waited out before.
  ASSERT_TRUE(put.wait_for(std::chrono::seconds(30)));
  EXPECT_ERROR(put.get(), Errc::unavailable,
               "no volume for local rank -1; every process of the store has joined");
  EXPECT_EQ(store->get_object("nowhere").get(kWait).status().code(), Errc::not_found);
  store->close();
  procs->stop();
}

// With placement.controller_process, the store's controller and strategy
// run in a process of the mesh, as the one-member mesh
// "meshstore.controller". kill -9 of that process under the restart
// policy: the ProcMesh launches it again, the controller starts again
// there and rebuilds its index from the volumes that survived, and the
// calls made meanwhile wait for it instead of failing.
TEST(ProcMesh, AControllerWhoseProcessIsKilledStartsAgainWithEveryKeyOfTheSurvivors) {
  Failures failures;
  const Supervision restart = failures.restarting();
  auto procs = ProcMesh::launch({{"procs", 3}}, relaunching_once(), options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  StoreOptions so;
  so.placement.strategy = "per_local_rank";  // a volume in each worker process
  so.placement.controller_process = 2;
  auto store = spawn_store(*procs, so, restart);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  auto users = procs->spawn<store_user_actor>(restart, "users", "store_user");
  ASSERT_TRUE(users.ok()) << users.status().to_string();
  auto rank1 = users->slice({{"procs", 1}}).value();
  const std::string weights(100000, 'w');
  ASSERT_TRUE(store->put_object("from-controller", weights).get(kWait).ok());  // lr0
  ASSERT_TRUE(
      rank1.call_one<bool>(store_put_atom::value, std::string("from-rank-1"),
                           std::string("v1"))
          .get(kWait)
          .ok());  // lr1
  ASSERT_TRUE(
      rank1.call_one<bool>(store_put_atom::value, std::string("overwritten"), std::string("old"))
          .get(kWait)
          .ok());
  ASSERT_TRUE(store->put_object("overwritten", "new").get(kWait).ok());

  const int old_pid = procs->pid(2);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(procs->signal(2, SIGKILL).ok());
  // Made while the controller is gone: it waits for the new one.
  auto first = store->get_object("from-rank-1");
  ASSERT_TRUE(failures.wait_for(4));  // the controller, its volumes, its client, the user
  std::set<std::string> failed;
  {
    std::lock_guard<std::mutex> lock(failures.mu);
    for (const auto& f : failures.seen) failed.insert(f.mesh);
  }
  EXPECT_EQ(failed, (std::set<std::string>{"meshstore.controller", "meshstore.store",
                                           "meshstore.volumes", "users"}));
  auto got = first.get(kWait);
  const auto back = std::chrono::steady_clock::now() - killed;
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "v1");
  std::printf(
      "first read back %lld ms after the kill\n",
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(back).count()));
  EXPECT_NE(procs->pid(2), old_pid);
  auto big = store->get_object("from-controller").get(kWait);
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  EXPECT_TRUE(*big == weights);
  EXPECT_EQ(store->get_object("overwritten").get(kWait).value(), "new");
  // The store takes writes again, from here and from the workers.
  ASSERT_TRUE(store->put_object("after", "a").get(kWait).ok());
  ASSERT_TRUE(eventually([&] {
    return rank1.call_one<bool>(store_put_atom::value, std::string("after-1"), std::string("b"))
        .get(kWait)
        .ok();
  }));
  // The relaunched process joined the store again, once its controller
  // was up: its worker puts too.
  auto rank2 = users->slice({{"procs", 2}}).value();
  ASSERT_TRUE(eventually([&] {
    return rank2.call_one<bool>(store_put_atom::value, std::string("after-2"), std::string("c"))
        .get(kWait)
        .ok();
  }));
  EXPECT_EQ(store->get_object("after").get(kWait).value(), "a");
  EXPECT_EQ(store->get_object("after-1").get(kWait).value(), "b");
  EXPECT_EQ(store->get_object("after-2").get(kWait).value(), "c");
  // Closing the store stops its controller's mesh: no failure for that.
  const std::size_t before = failures.seen.size();
  store->close();
  procs->stop();
  std::lock_guard<std::mutex> lock(failures.mu);
  EXPECT_EQ(failures.seen.size(), before);
}

// One writer's puts, sequential, while the controller is killed: each
// outcome, and whether it was in flight at the kill.
struct PutLog {
  struct Put {
    int i = 0;
    Status outcome;
    bool spanned_kill = false;
  };
  std::vector<Put> puts;  // read once the loop ended
  std::atomic<int> done{0};
  std::atomic<int> ok_after_kill{0};
};

// Puts `key_of(i)` = `value_of(i)` for i = 0, 1, ... one after another
// until `stop`, noting which were in flight at `killed_at` (0: not yet).
void put_in_a_loop(Store& store, const std::function<std::string(int)>& key_of,
                   const std::function<std::string(int)>& value_of,
                   const std::atomic<std::int64_t>& killed_at, const std::atomic<bool>& stop,
                   PutLog& log) {
  auto now = [] { return std::chrono::steady_clock::now().time_since_epoch().count(); };
  for (int i = 0; !stop.load(); ++i) {
    const auto began = now();
    auto put = store.put_object(key_of(i), value_of(i)).get(kWait);
    const auto kill = killed_at.load();
    PutLog::Put p{i, put.ok() ? Status() : put.status(), kill != 0 && began < kill};
    if (kill != 0 && !p.spanned_kill && put.ok()) ++log.ok_after_kill;
    log.puts.push_back(std::move(p));
    ++log.done;
  }
}

// Puts in flight when the controller's process is killed (its ProcMesh
// restarts it): each either commits, and reads back bit-exact, or fails
// with a clear error and leaves its key absent or whole; a key written
// over and over reads back its last acknowledged value (a commit replayed
// across the failover never lands over a later one).
TEST(ProcMesh, PutsInFlightWhenTheControllerIsKilledCommitOnceOrFailClearly) {
  Failures failures;
  const Supervision restart = failures.restarting();
  auto procs = ProcMesh::launch({{"procs", 3}}, relaunching_once(), options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  StoreOptions so;
  so.placement.strategy = "per_local_rank";
  so.placement.controller_process = 2;
  auto store = spawn_store(*procs, so, restart);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  auto payload = [](int i) { return std::string(64 * 1024, static_cast<char>('a' + i % 26)); };
  auto key = [](int i) { return "inflight." + std::to_string(i); };
  std::atomic<std::int64_t> killed_at{0};
  std::atomic<bool> stop{false};
  PutLog many, one;
  std::thread many_keys([&] { put_in_a_loop(*store, key, payload, killed_at, stop, many); });
  std::thread one_key([&] {
    put_in_a_loop(
        *store, [](int) { return std::string("seq"); }, [](int i) { return std::to_string(i); },
        killed_at, stop, one);
  });
  // Both loops run, then the kill, then both go on past the failover.
  ASSERT_TRUE(eventually([&] { return many.done >= 10 && one.done >= 10; }));
  killed_at = std::chrono::steady_clock::now().time_since_epoch().count();
  ASSERT_TRUE(procs->signal(2, SIGKILL).ok());
  const bool went_on =
      eventually([&] { return many.ok_after_kill >= 5 && one.ok_after_kill >= 5; });
  stop = true;
  many_keys.join();
  one_key.join();
  ASSERT_TRUE(went_on) << "the writers did not go on after the failover";

  int spanned = 0, failed = 0;
  for (const auto& p : many.puts) {
    spanned += p.spanned_kill ? 1 : 0;
    auto got = store->get_object(key(p.i)).get(kWait);
    if (p.outcome.ok()) {
      ASSERT_TRUE(got.ok()) << key(p.i)
                            << " was acknowledged, then lost: " << got.status().to_string();
      EXPECT_TRUE(*got == payload(p.i)) << key(p.i) << " reads back other bytes";
      continue;
    }
    ++failed;
    EXPECT_TRUE(p.outcome.code() == Errc::unavailable || p.outcome.code() == Errc::timeout)
        << key(p.i) << ": " << p.outcome.to_string();
    if (got.ok()) {
      EXPECT_TRUE(*got == payload(p.i)) << key(p.i) << " failed, yet reads back other bytes";
    } else {
      EXPECT_EQ(got.status().code(), Errc::not_found) << got.status().to_string();
    }
  }
  // The one key: its last acknowledged value, or that of a later put that
  // failed after committing; never an older one.
  int last_ok = -1;
  std::set<int> failed_later;
  for (const auto& p : one.puts) {
    spanned += p.spanned_kill ? 1 : 0;
    if (p.outcome.ok()) {
      last_ok = p.i;
      failed_later.clear();
    } else {
      ++failed;
      failed_later.insert(p.i);
    }
  }
  auto seq = store->get_object("seq").get(kWait);
  ASSERT_TRUE(seq.ok()) << seq.status().to_string();
  const int v = std::stoi(*seq);
  EXPECT_TRUE(v == last_ok || failed_later.count(v) == 1)
      << "seq reads back " << v << "; its last acknowledged put was " << last_ok;
  // Each loop always has a put out: the kill caught at least one.
  EXPECT_GE(spanned, 1);
  std::printf("%zu + %zu puts, %d in flight at the kill, %d failed\n", many.puts.size(),
              one.puts.size(), spanned, failed);
  store->close();
  procs->stop();
}

TEST(ProcMesh, AControllerProcessOutsideTheMeshOrWithAFunctionIsRefused) {
  auto procs = ProcMesh::launch({{"procs", 2}}, {}, options());
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  StoreOptions so;
  so.placement.strategy = "per_local_rank";
  so.placement.controller_process = 2;
  EXPECT_ERROR(spawn_store(*procs, so), Errc::invalid_argument,
               "placement.controller_process 2 is not a member of the ProcMesh, which has 2");
  so.placement.controller_process = -2;
  EXPECT_ERROR(spawn_store(*procs, so), Errc::invalid_argument,
               "placement.controller_process must be >= -1, got -2");
  so.placement.controller_process = 0;
  so.placement.custom_strategy.placement = "per_local_rank";
  so.placement.custom_strategy.select =
      [](const ClientDesc&, const std::vector<VolumeDesc>& v) -> Result<std::string> {
    return v.front().volume_id;
  };
  EXPECT_ERROR(spawn_store(*procs, so), Errc::invalid_argument,
               "a function cannot cross processes");
  // Nothing was left behind: the mesh takes a store on process 0.
  so.placement.custom_strategy = {};
  auto store = spawn_store(*procs, so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ASSERT_TRUE(store->put_object("k", "v").get(kWait).ok());
  EXPECT_EQ(store->get_object("k").get(kWait).value(), "v");
  store->close();
  procs->stop();
}

// The controller of the tests above: launches two workers (or has an agent
// start them), prints their pids, and waits to be killed.
int controller_main(const char* agent) {
  LaunchSpec spec;
  if (const char* bind = std::getenv("MESHSTORE_TEST_BIND")) spec.bind_host = bind;
  auto procs = agent ? ProcMesh::attach({agent}, {{"procs", 2}}, spec, options())
                     : ProcMesh::launch({{"procs", 2}}, spec, options());
  if (!procs.ok()) {
    std::printf("launch failed: %s\n", procs.status().to_string().c_str());
    return 1;
  }
  std::printf("pids: %d %d\n", procs->pid(0), procs->pid(1));
  std::fflush(stdout);
  for (;;) ::pause();
}

// The controller of the network-namespace test (proc_mesh_hosts.sh): in
// its own namespace, it attaches to the agent in another one and checks
// that the members run there.
int netns_controller_main() {
  const char* agent = std::getenv("MESHSTORE_TEST_AGENT");
  const char* bind = std::getenv("MESHSTORE_TEST_BIND");
  if (!agent || !bind) {
    std::printf("MESHSTORE_TEST_AGENT and MESHSTORE_TEST_BIND must be set\n");
    return 2;
  }
  LaunchSpec spec;
  spec.bind_host = bind;
  auto procs = ProcMesh::attach({agent}, {{"hosts", 1}, {"procs", 2}}, spec, options());
  if (!procs.ok()) {
    std::printf("attach failed: %s\n", procs.status().to_string().c_str());
    return 1;
  }
  auto w = procs->spawn<worker_actor>("far", "worker", 1000);
  if (!w.ok()) {
    std::printf("spawn failed: %s\n", w.status().to_string().c_str());
    return 1;
  }
  auto ns = w->call<std::string>(netns_atom::value).get(kWait);
  auto sums = w->call<int>(add_atom::value, 1).get(kWait);
  if (!ns.ok() || !sums.ok()) {
    std::printf("calls failed\n");
    return 1;
  }
  for (int i = 0; i < 2; ++i) {
    if (!(*ns)[i].ok() || !(*sums)[i].ok()) {
      std::printf("rank %d failed\n", i);
      return 1;
    }
    std::printf("rank %d: namespace %s (controller: %s), add(1) = %d\n", i, (*ns)[i]->c_str(),
                network_namespace().c_str(), *(*sums)[i]);
    if (*(*ns)[i] == network_namespace() || *(*sums)[i] != 1001 + i) return 1;
  }
  procs->stop();
  std::printf("netns attach: ok\n");
  return 0;
}

// The controller of the vanishing-host phase of proc_mesh_hosts.sh: it
// attaches to the agent in another namespace, spawns a mesh and prints
// "spawned"; the script then cuts that host's link without a word (no FIN,
// no RST), and the failure must reach the root handler within the
// heartbeat timeout.
int netns_vanish_main() {
  const char* agent = std::getenv("MESHSTORE_TEST_AGENT");
  const char* bind = std::getenv("MESHSTORE_TEST_BIND");
  if (!agent || !bind) return 2;
  Failures failures;
  auto o = options();
  o.on_failure = failures.handler(true);
  o.heartbeat_interval = 500ms;  // a silent host is down after 3 s, not 10
  o.connection_timeout = 3s;
  LaunchSpec spec;
  spec.bind_host = bind;
  spec.stop_grace = 500ms;
  auto procs = ProcMesh::attach({agent}, {{"procs", 1}}, spec, o);
  if (!procs.ok()) {
    std::printf("attach failed: %s\n", procs.status().to_string().c_str());
    return 1;
  }
  auto w = procs->spawn<worker_actor>("far", "worker", 0);
  if (!w.ok()) return 1;
  std::printf("spawned\n");
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  if (!failures.wait_for(1)) {
    std::printf("no failure reached the root handler\n");
    return 1;
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  std::printf("vanished host detected after %lld ms: %s\n", static_cast<long long>(ms),
              failures.seen[0].to_string().c_str());
  std::fflush(stdout);
  std::_Exit(0);  // its agent is unreachable: no orderly stop
}

}  // namespace
}  // namespace meshstore

int main(int argc, char** argv) {
  using meshstore::ProcMesh;
  if (ProcMesh::is_worker()) {
    std::printf("worker %s ready\n", std::getenv("MESHSTORE_PROC_RANK"));
    std::fflush(stdout);
    auto s = ProcMesh::serve(meshstore::options());
    return s.ok() ? 0 : 3;
  }
  const std::string role =
      std::getenv("MESHSTORE_TEST_ROLE") ? std::getenv("MESHSTORE_TEST_ROLE") : "";
  if (role == "controller") return meshstore::controller_main(nullptr);
  if (role == "attach-controller") {
    return meshstore::controller_main(std::getenv("MESHSTORE_TEST_AGENT"));
  }
  if (role == "netns-controller") return meshstore::netns_controller_main();
  if (role == "netns-vanish-controller") return meshstore::netns_vanish_main();
  // The agents some tests start in this process share its runtime with
  // the ProcMeshes: the tests' types are there from the start.
  if (auto s = meshstore::add_process_types(meshstore::options().add_types); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
