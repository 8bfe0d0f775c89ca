#include "meshstore/mesh.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "meshstore/internal/caf_glue.hpp"
#include "meshstore/proc_mesh.hpp"
#include "meshstore/store_mesh.hpp"
#include "testing/sockets.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::free_port;
using testing::kWait;

using add_atom = caf::atom_constant<caf::atom("add")>;
using die_atom = caf::atom_constant<caf::atom("die")>;
using adder_actor =
    caf::typed_actor<caf::replies_to<add_atom, int>::with<int>, caf::reacts_to<die_atom>>;

// Answers x + its rank; rank `bad_rank` refuses.
adder_actor::behavior_type adder(adder_actor::pointer self, int rank, int bad_rank) {
  return {
      [=](add_atom, int x) -> caf::result<int> {
        if (rank == bad_rank) {
          return actor_error(Status(Errc::out_of_capacity, "this rank is full"));
        }
        return x + rank;
      },
      [=](die_atom) { self->quit(); },
  };
}

// A user's own message type, registered through MeshOptions::add_types.
struct Point {
  std::int32_t x = 0;
  std::int32_t y = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Point& p) {
  return f(caf::meta::type_name("meshstore::test::Point"), p.x, p.y);
}

}  // namespace
}  // namespace meshstore

namespace meshstore {
namespace {

using mirror_atom = caf::atom_constant<caf::atom("mirror")>;
using mirror_actor = caf::typed_actor<caf::replies_to<mirror_atom, Point>::with<Point>>;

// Answers the point mirrored, shifted by its rank.
mirror_actor::behavior_type mirror(mirror_actor::pointer, int rank) {
  return {[=](mirror_atom, Point p) { return Point{-p.x + rank, -p.y}; }};
}

// Rank `rank` of a two-rank job whose registry is on 127.0.0.1:`port`, as
// a launcher would describe it; rank 0 must come first (it publishes).
Result<Mesh> join_as(int rank, std::uint16_t port, MeshOptions o) {
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  ::setenv("MESHSTORE_MESH_PORT", std::to_string(port).c_str(), 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  return Mesh::from_env(o);
}

// Both ranks of a two-rank job on a fresh port, rank 0 first; with
// `register_point`, each registers the Point type.
std::pair<Result<Mesh>, Result<Mesh>> join_two(bool register_point) {
  MeshOptions o;
  o.request_timeout = 20s;
  if (register_point) {
    o.add_types = [](caf::actor_system_config& cfg) {
      cfg.add_message_type<Point>("meshstore::test::Point");
    };
  }
  const auto port = free_port();
  auto r0 = join_as(0, port, o);
  auto r1 = join_as(1, port, o);
  return {std::move(r0), std::move(r1)};
}

// Runs both ranks' collective spawn at once (each waits for the other).
template <class H0, class H1, class F0, class F1>
std::pair<Result<ActorMesh<H0>>, Result<ActorMesh<H1>>> spawn_both(Mesh& r0, Mesh& r1,
                                                                   const std::string& name, F0 f0,
                                                                   F1 f1) {
  Result<ActorMesh<H1>> second = Status(Errc::internal, "not run");
  std::thread t([&] { second = r1.spawn<H1>(name, f1); });
  auto first = r0.spawn<H0>(name, f0);
  t.join();
  return {std::move(first), std::move(second)};
}

// A job of one rank, as a launcher would describe it, on a fresh port.
void launched_alone() {
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  ::setenv("MESHSTORE_MESH_PORT", std::to_string(free_port()).c_str(), 1);
  ::setenv("WORLD_SIZE", "1", 1);
  ::setenv("LOCAL_WORLD_SIZE", "1", 1);
  ::setenv("RANK", "0", 1);
  ::setenv("LOCAL_RANK", "0", 1);
}

TEST(ProcMeshFromEnv, ALaunchedJobIsAProcMeshWithCollectiveSpawnsAndSingletons) {
  launched_alone();
  MeshOptions o;
  o.request_timeout = 20s;
  o.add_types = [](caf::actor_system_config& cfg) { cfg.add_actor_type("adder", adder); };
  int setup_rank = -1;
  o.setup = [&](int rank) {
    setup_rank = rank;
    return Status();
  };
  auto procs = ProcMesh::from_env(o);
  ASSERT_OK(procs);
  EXPECT_EQ(setup_rank, 0);
  EXPECT_EQ(procs->rank(), 0);
  EXPECT_EQ(procs->extent().to_string(), "{procs: 1}");
  EXPECT_EQ(procs->pid(0), ::getpid());
  auto adders = procs->spawn<adder_actor>("adders", "adder", -1);
  ASSERT_OK(adders);
  EXPECT_EQ(adders->extent().to_string(), "{procs: 1}");
  EXPECT_EQ(*adders->ask<int>(0, add_atom::value, 1).get(kWait), 1);
  auto one = procs->get_or_spawn<adder_actor>("one", "adder", -1);
  ASSERT_OK(one);
  EXPECT_EQ(one->extent().to_string(), "{}");
  EXPECT_EQ(*one->call_one<int>(add_atom::value, 2).get(kWait), 2);
  // The same actor for a later caller; its arguments are not used.
  EXPECT_EQ(procs->get_or_spawn<adder_actor>("one", "adder", 0)->at(0), one->at(0));
  EXPECT_ERROR(procs->get_or_spawn<adder_actor>("adders", "adder", -1), Errc::invalid_argument,
               "spawn() made a mesh of that name");
  EXPECT_ERROR(procs->spawn<adder_actor>("adders", "adder", 1), Errc::invalid_argument,
               "mesh 'adders' was already spawned here");
  EXPECT_ERROR(procs->spawn<adder_actor>("ghost", "no-such-type", -1), Errc::not_found,
               "no actor type 'no-such-type'");
  // The job's registry keeps the failed mesh refused under its name.
  EXPECT_ERROR(procs->spawn<adder_actor>("ghost", "adder", -1), Errc::not_found,
               "mesh 'ghost': rank 0 could not spawn its member");
  EXPECT_ERROR(procs->signal(0, SIGTERM), Errc::invalid_argument, "launcher owns");
  procs->stop();
  EXPECT_ERROR(adders->ask<int>(0, add_atom::value, 1).get(kWait), Errc::shutdown, "");
  EXPECT_ERROR(procs->spawn<adder_actor>("late", "adder", -1), Errc::shutdown, "stopped");
}

TEST(ProcMeshFromEnv, ASetupThatFailsFailsTheJoinWithItsMessage) {
  launched_alone();
  MeshOptions o;
  o.setup = [](int rank) {
    return Status(Errc::unavailable, "no device for rank " + std::to_string(rank));
  };
  EXPECT_ERROR(ProcMesh::from_env(o), Errc::unavailable,
               "ProcMesh::from_env: setup failed: no device for rank 0");
  ::unsetenv("WORLD_SIZE");
  EXPECT_ERROR(ProcMesh::from_env(), Errc::invalid_argument, "ProcMesh::from_env");
}

TEST(Mesh, LocalMeshSpawnsOneActorPerRank) {
  auto mesh = Mesh::local(4);
  ASSERT_OK(mesh);
  EXPECT_EQ(mesh->world_size(), 4);
  auto adders = mesh->spawn<adder_actor>("adders", adder, -1);
  ASSERT_OK(adders);
  EXPECT_EQ(adders->size(), 4);
  EXPECT_EQ(*adders->broadcast<int>(add_atom::value, 10).get(kWait),
            (std::vector<int>{10, 11, 12, 13}));
  EXPECT_EQ(*adders->ask<int>(2, add_atom::value, 1).get(kWait), 3);
}

TEST(ProcMeshLocal, ThreadsThatSpawnAndAskMayOutliveTheMesh) {
  // spawn() and ask() from a thread that lives on after the mesh closes (a
  // caller's pool thread): CAF leaves a reference to the actor system in
  // each thread that spawns, and the mesh must not leave one behind, or
  // close() waits for that thread forever (the test would end by timeout).
  auto mesh = ProcMesh::local({{"ranks", 2}}).value();
  std::mutex mu;
  std::condition_variable cv;
  int step = 0;  // 1: the thread asked; 2: the mesh is closed
  Result<int> answer = Status(Errc::internal, "not asked");
  std::thread worker([&] {
    auto adders = mesh.spawn<adder_actor>("adders", adder, -1);
    Result<int> r = adders.ok() ? adders->ask<int>(1, add_atom::value, 5).get(kWait)
                                : Result<int>(adders.status());
    std::unique_lock<std::mutex> lock(mu);
    answer = std::move(r);
    step = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return step == 2; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kWait, [&] { return step == 1; }));
  }
  EXPECT_EQ(*answer, 6);
  mesh.stop();
  {
    std::lock_guard<std::mutex> lock(mu);
    step = 2;
  }
  cv.notify_all();
  worker.join();
}

// A member that asks for the call's context (CallContext first) next to
// handlers that do not.
using where_atom = caf::atom_constant<caf::atom("where")>;
using note_atom = caf::atom_constant<caf::atom("note")>;
using noted_atom = caf::atom_constant<caf::atom("noted")>;
using where_actor =
    caf::typed_actor<caf::replies_to<CallContext, where_atom>::with<std::vector<std::int32_t>>,
                     caf::reacts_to<CallContext, note_atom>,
                     caf::replies_to<noted_atom>::with<std::int32_t>,
                     caf::replies_to<add_atom, int>::with<int>>;

where_actor::behavior_type where(where_actor::pointer self, int rank) {
  auto noted = std::make_shared<std::int32_t>(-1);
  return {
      // Its own rank, and the message's: rank, size and coordinates in the view.
      [=](const CallContext& c, where_atom) {
        return std::vector<std::int32_t>{rank, c.rank, c.size(), c.coordinate("hosts"),
                                         c.coordinate("gpus")};
      },
      [=](const CallContext& c, note_atom) { *noted = c.rank; },
      [=](noted_atom) { return *noted; },
      [=](add_atom, int x) { return x + rank; },
  };
}

TEST(ProcMeshLocal, AHandlerThatTakesTheCallContextGetsTheMessagesRankInTheView) {
  auto mesh = ProcMesh::local({{"ranks", 4}}).value();
  auto flat = mesh.spawn<where_actor>("where", where).value();
  auto grid = flat.reshape({{"hosts", 2}, {"gpus", 2}}).value();
  // The whole grid: the message's rank is the member's.
  auto all = grid.call<std::vector<std::int32_t>>(where_atom::value).get(kWait);
  ASSERT_OK(all);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(*(*all)[i], (std::vector<std::int32_t>{i, i, 4, i / 2, i % 2}));
  }
  // Host 1 (an index drops "hosts"): members 2 and 3 see ranks 0 and 1 of 2.
  auto host1 = grid.slice({{"hosts", 1}}).value();
  auto in_host1 = host1.call<std::vector<std::int32_t>>(where_atom::value).get(kWait);
  ASSERT_OK(in_host1);
  EXPECT_EQ(*(*in_host1)[0], (std::vector<std::int32_t>{2, 0, 2, -1, 0}));
  EXPECT_EQ(*(*in_host1)[1], (std::vector<std::int32_t>{3, 1, 2, -1, 1}));
  // One member asked alone: the view of one it was sent to.
  auto one = grid.slice({{"hosts", 1}, {"gpus", 1}}).value();
  EXPECT_EQ(*one.call_one<std::vector<std::int32_t>>(where_atom::value).get(kWait),
            (std::vector<std::int32_t>{3, 0, 1, -1, -1}));
  EXPECT_EQ(*host1.ask<std::vector<std::int32_t>>(1, where_atom::value).get(kWait),
            (std::vector<std::int32_t>{3, 1, 2, -1, 1}));
  auto chosen = host1.choose<std::vector<std::int32_t>>(where_atom::value).get(kWait);
  ASSERT_OK(chosen);
  EXPECT_EQ((*chosen)[1], (*chosen)[0] - 2) << "the view's rank of the member chosen";
  // tell too; and a handler without the context gets none.
  auto gpu1 = grid.slice({{"gpus", 1}}).value();  // members 1 and 3
  ASSERT_OK(gpu1.tell(note_atom::value));
  // The asks leave the mesh's caller after the tells: each member has its note.
  EXPECT_EQ(*flat.ask<std::int32_t>(3, noted_atom::value).get(kWait), 1);
  EXPECT_EQ(*flat.ask<std::int32_t>(1, noted_atom::value).get(kWait), 0);
  EXPECT_EQ(*flat.ask<std::int32_t>(0, noted_atom::value).get(kWait), -1);
  EXPECT_EQ(*gpu1.call<int>(add_atom::value, 10).get(kWait)->item({{"hosts", 1}}), 13);
}

TEST(ProcMeshLocal, ErrorOfOneRankSurfacesWithTheRankNamed) {
  auto mesh = ProcMesh::local({{"ranks", 3}}).value();
  auto adders = mesh.spawn<adder_actor>("adders", adder, 2).value();
  EXPECT_ERROR(adders.broadcast<int>(add_atom::value, 1).get(kWait), Errc::out_of_capacity,
               "rank 2: this rank is full");
  EXPECT_ERROR(adders.ask<int>(7, add_atom::value, 1).get(kWait), Errc::out_of_range,
               "rank 7 outside [0, 3)");
}

TEST(ProcMeshLocal, DeadRankIsReportedNotAwaited) {
  MeshOptions o;
  o.request_timeout = 60s;  // far above what the test waits: the error must not be a timeout
  auto mesh = ProcMesh::local({{"ranks", 2}}, o).value();
  auto adders = mesh.spawn<adder_actor>("adders", adder, -1).value();
  caf::anon_send(adders.at(1), die_atom::value);
  // Locally CAF answers at once (receiver down); a remote rank is caught by
  // the monitor ("rank 1 went down"). Either way: unavailable, rank named.
  EXPECT_ERROR(adders.ask<int>(1, add_atom::value, 1).get(10s), Errc::unavailable, "rank 1");
}

TEST(ProcMeshLocal, AnActorMeshUsedAfterStopAnswersShutdown) {
  // An ActorMesh may outlive its ProcMesh (a copy kept by a service):
  // after stop() its calls answer shutdown, its handles are empty, and
  // holding it does not keep the stopped mesh's actors alive.
  auto mesh = ProcMesh::local({{"ranks", 3}}).value();
  auto adders = mesh.spawn<adder_actor>("adders", adder, -1).value();
  auto copy = adders;
  EXPECT_EQ(*copy.ask<int>(2, add_atom::value, 1).get(kWait), 3);
  mesh.stop();
  EXPECT_ERROR(copy.ask<int>(1, add_atom::value, 1).get(kWait), Errc::shutdown, "closed");
  EXPECT_ERROR(adders.broadcast<int>(add_atom::value, 1).get(kWait), Errc::shutdown, "closed");
  EXPECT_FALSE(adders.at(0));
  EXPECT_EQ(adders.size(), 3);
  ActorMesh<adder_actor> empty;
  EXPECT_ERROR(empty.ask<int>(0, add_atom::value, 1).get(kWait), Errc::out_of_range, "outside");
}

TEST(ProcMeshLocal, ManyCallsInFlightFromManyThreads) {
  // Every call goes out from its own thread through the mesh's one
  // companion: many at once, from several threads, each gets its own
  // answer.
  auto mesh = ProcMesh::local({{"ranks", 4}}).value();
  auto adders = mesh.spawn<adder_actor>("adders", adder, -1).value();
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Future<int>> replies;
      for (int i = 0; i < 200; ++i) replies.push_back(adders.ask<int>(i % 4, add_atom::value, i));
      for (int i = 0; i < 200; ++i) {
        auto r = replies[static_cast<std::size_t>(i)].get(kWait);
        if (!r.ok() || *r != i + i % 4) ++wrong[static_cast<std::size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, (std::vector<int>{0, 0, 0, 0}));
}

// Keeps every call waiting: it never answers.
using hold_atom = caf::atom_constant<caf::atom("hold")>;
using holder_actor = caf::typed_actor<caf::replies_to<hold_atom>::with<int>>;
holder_actor::behavior_type holder(holder_actor::pointer self, int) {
  auto held = std::make_shared<std::vector<caf::typed_response_promise<int>>>();
  return {[=](hold_atom) {
    held->push_back(self->make_response_promise<int>());
    return held->back();
  }};
}

TEST(ProcMeshLocal, ACallStillWaitingWhenTheMeshStopsAnswersShutdown) {
  MeshOptions o;
  o.request_timeout = 60s;  // far above what the test waits: the error must not be a timeout
  auto mesh = ProcMesh::local({{"ranks", 1}}, o).value();
  auto holders = mesh.spawn<holder_actor>("holders", holder).value();
  auto waiting = holders.ask<int>(0, hold_atom::value);
  mesh.stop();
  EXPECT_ERROR(waiting.get(kWait), Errc::shutdown,
               "rank 0 had not answered when the mesh was closed");
}

TEST(ProcMeshLocal, AnAnswerMayCallTheMeshAgain) {
  // A reply's continuation runs on the thread that delivered it (here the
  // member's scheduler thread), outside the mesh's locks: it may ask the
  // mesh again.
  auto mesh = ProcMesh::local({{"ranks", 2}}).value();
  auto adders = mesh.spawn<adder_actor>("adders", adder, -1).value();
  // Held by the callbacks: set() may still run when get() returns.
  auto chained = std::make_shared<Promise<int>>();
  auto second = chained->future();
  adders.ask<int>(0, add_atom::value, 1).on_complete([chained, adders](const Result<int>& r) {
    if (!r.ok()) {
      chained->set(r);
      return;
    }
    adders.ask<int>(1, add_atom::value, *r).on_complete([chained](const Result<int>& r2) {
      chained->set(r2);
    });
  });
  EXPECT_EQ(*second.get(kWait), 2);  // (1 + rank 0) + rank 1
}

TEST(Mesh, AUserMessageTypeCrossesProcessesOnceRegistered) {
  // Two ranks with their own actor systems, joined over loopback: a Point
  // sent from rank 1 to rank 0's member is serialized by CAF.
  auto [r0, r1] = join_two(/*register_point=*/true);
  ASSERT_OK(r0);
  ASSERT_OK(r1);
  auto [m0, m1] = spawn_both<mirror_actor, mirror_actor>(*r0, *r1, "mirrors", mirror, mirror);
  ASSERT_OK(m0);
  ASSERT_OK(m1);
  auto p = m1->ask<Point>(0, mirror_atom::value, Point{3, 4}).get(kWait);
  ASSERT_OK(p);
  EXPECT_EQ(p->x, -3);
  EXPECT_EQ(p->y, -4);
  auto all = m1->broadcast<Point>(mirror_atom::value, Point{1, 1}).get(kWait);
  ASSERT_OK(all);
  EXPECT_EQ((*all)[1].x, 0);  // rank 1's own member: -1 + 1
}

TEST(Mesh, AStoreSpawnedOnLaunchedRanksSharesTheirActorSystems) {
  auto [r0, r1] = join_two(false);
  ASSERT_OK(r0);
  ASSERT_OK(r1);
  const int before = testing::thread_count();  // every thread of this process
  ::setenv("MESHSTORE_PORT", std::to_string(free_port()).c_str(), 1);
  ::setenv("RANK", "0", 1);  // one process plays both ranks: each reads its own
  ::setenv("LOCAL_RANK", "0", 1);
  StoreOptions so;
  so.placement.strategy = "per_local_rank";
  so.limits.scheduler_threads = 4;  // what a store's own actor system would start
  auto s0 = spawn_store(*r0, so);
  ASSERT_OK(s0);
  ::setenv("RANK", "1", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  auto s1 = spawn_store(*r1, so);
  ASSERT_OK(s1);
  // No actor system of their own: two would have started at least 4
  // scheduler threads, a clock and a multiplexer each (12); the stores
  // add only their transports' threads.
  EXPECT_LT(testing::thread_count() - before, 8);
  ASSERT_OK(s1->put_object("from-rank-1", "hello").get(kWait));
  auto got = s0->get_object("from-rank-1").get(kWait);
  ASSERT_OK(got);
  EXPECT_EQ(*got, "hello");
  s1->close();
  s0->close();
  r1->close();
  r0->close();
}

TEST(Mesh, AStoreSpawnedOnLaunchedRanksNeedsOnlyTheMeshsPort) {
  auto [r0, r1] = join_two(false);
  ASSERT_OK(r0);
  ASSERT_OK(r1);
  ::unsetenv("MESHSTORE_PORT");
  // Twice: each collective spawn_store gets its own store, in order.
  for (int round = 0; round < 2; ++round) {
    ::setenv("RANK", "0", 1);  // one process plays both ranks: each reads its own
    ::setenv("LOCAL_RANK", "0", 1);
    auto s0 = spawn_store(*r0);
    ASSERT_OK(s0);
    // Rank 0's store took a free port, not MASTER_PORT + 1, and the others
    // learn it from the mesh's registry.
    EXPECT_NE(s0->admin().port(), 29501);
    ::setenv("RANK", "1", 1);
    ::setenv("LOCAL_RANK", "1", 1);
    auto s1 = spawn_store(*r1);
    ASSERT_OK(s1);
    ASSERT_OK(s1->put_object("round", std::to_string(round)).get(kWait));
    EXPECT_EQ(s0->get_object("round").get(kWait).value(), std::to_string(round));
    s1->close();
    s0->close();
  }
  r1->close();
  r0->close();
}

TEST(ProcMeshLocal, SpawnStoreNeedsNoRegistrationOfYours) {
  // The store's types are in every process runtime of a program that
  // links it.
  auto mesh = ProcMesh::local({{"ranks", 1}});
  ASSERT_OK(mesh);
  auto store = spawn_store(*mesh);
  ASSERT_OK(store);
  ASSERT_OK(store->put_object("k", "v").get(kWait));
  store->close();
  mesh->stop();
  EXPECT_ERROR(spawn_store(*mesh), Errc::shutdown, "stopped");
}

TEST(Mesh, RanksThatSpawnAMeshWithDifferentInterfacesAreRefused) {
  auto [r0, r1] = join_two(/*register_point=*/true);
  ASSERT_OK(r0);
  ASSERT_OK(r1);
  auto [m0, m1] = spawn_both<adder_actor, mirror_actor>(
      *r0, *r1, "confused",
      [](adder_actor::pointer self, int rank) { return adder(self, rank, -1); }, mirror);
  // Whichever joined second is refused at once; the first is told too,
  // instead of waiting for the timeout.
  EXPECT_ERROR(m0, Errc::invalid_argument, "spawned it with another actor interface than rank");
  EXPECT_ERROR(m1, Errc::invalid_argument, "spawned it with another actor interface than rank");
  // The failed spawn left its name free here: a new one under another name
  // works, and the failed name is refused by the registry, not as taken here.
  auto [n0, n1] = spawn_both<mirror_actor, mirror_actor>(*r0, *r1, "agreed", mirror, mirror);
  ASSERT_OK(n0);
  ASSERT_OK(n1);
  EXPECT_ERROR(r0->spawn<mirror_actor>("confused", mirror), Errc::invalid_argument,
               "spawned it with another actor interface");
}

// -- shapes, slices and call styles ------------------------------------------

using open_atom = caf::atom_constant<caf::atom("open")>;
using gate_actor =
    caf::typed_actor<caf::replies_to<add_atom, int>::with<int>, caf::reacts_to<open_atom>>;
struct GateState {
  std::vector<std::pair<caf::typed_response_promise<int>, int>> held;
  bool open = false;
};

// Answers x + rank, but only once opened: requests wait until then.
gate_actor::behavior_type gate(gate_actor::stateful_pointer<GateState> self, int rank) {
  return {
      [=](add_atom, int x) -> caf::result<int> {
        if (self->state.open) return x + rank;
        auto rp = self->make_response_promise<int>();
        self->state.held.emplace_back(rp, x + rank);
        return rp;
      },
      [=](open_atom) {
        self->state.open = true;
        for (auto& [rp, v] : self->state.held) rp.deliver(v);
        self->state.held.clear();
      },
  };
}

TEST(ActorMeshShape, SlicesAndPointsPickTheRightMembers) {
  auto mesh = ProcMesh::local({{"ranks", 8}}).value();
  auto adders = mesh.spawn<adder_actor>("adders", adder, 5).value();
  EXPECT_EQ(adders.extent().to_string(), "{ranks: 8}");
  auto grid = adders.reshape({{"hosts", 2}, {"procs", 4}});
  ASSERT_OK(grid);
  EXPECT_ERROR(adders.reshape({{"hosts", 3}, {"procs", 3}}), Errc::invalid_argument, "8 members");
  auto host1 = grid->slice("hosts", 1, 2);
  ASSERT_OK(host1);
  EXPECT_EQ(host1->extent().ranks(), (std::vector<int>{4, 5, 6, 7}));
  auto middle = grid->slice("procs", 1, 3);
  ASSERT_OK(middle);
  EXPECT_EQ(middle->extent().ranks(), (std::vector<int>{1, 2, 5, 6}));
  EXPECT_EQ(middle->slice("hosts", 0, 1)->extent().ranks(), (std::vector<int>{1, 2}));
  EXPECT_ERROR(grid->slice("gpus", 0, 1), Errc::invalid_argument, "no dimension 'gpus'");
  EXPECT_ERROR(grid->slice("procs", 2, 5), Errc::out_of_range, "outside [0, 4)");
  EXPECT_ERROR(grid->slice("procs", 2, 2), Errc::out_of_range, "empty");
  auto point = grid->at_point({1, 2});
  ASSERT_OK(point);
  EXPECT_EQ(*point->call_one<int>(add_atom::value, 1).get(kWait), 7);  // rank 6
  EXPECT_ERROR(grid->at_point({2, 0}), Errc::out_of_range, "hosts 2 outside [0, 2)");
  EXPECT_ERROR(host1->call_one<int>(add_atom::value, 1).get(kWait), Errc::invalid_argument,
               "has 4 members, not 1");
}

using await_atom = caf::atom_constant<caf::atom("await")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;

// Answers await with the future's value + 1, through on_ready; answers
// ping at once, even while an await waits.
caf::behavior awaiting(caf::event_based_actor* self, Future<int> future,
                       std::chrono::milliseconds timeout) {
  return {
      [=](await_atom) {
        auto rp = self->make_response_promise();
        on_ready(
            self, future,
            [rp](const Result<int>& r) mutable {
              if (r.ok()) {
                rp.deliver(*r + 1);
              } else {
                rp.deliver(actor_error(r.status()));
              }
            },
            timeout);
      },
      [](ping_atom) { return true; },
  };
}

TEST(OnReady, AnActorAwaitsAFutureWithoutBlockingItsThread) {
  auto mesh = ProcMesh::local({{"ranks", 1}}).value();
  auto& sys = mesh.system();
  Promise<int> later;
  Promise<int> unfulfilled;  // kept, so its future never completes
  caf::actor waiting, ready, never;
  {
    ForeignThreadGuard guard;
    waiting = sys.spawn(awaiting, later.future(), std::chrono::milliseconds(30000));
    ready = sys.spawn(awaiting, make_ready_future<int>(9), std::chrono::milliseconds(30000));
    never = sys.spawn(awaiting, unfulfilled.future(), std::chrono::milliseconds(200));
  }
  {
    caf::scoped_actor self{sys};
    // The await is pending; the actor still answers other messages.
    auto pending = self->request(waiting, std::chrono::seconds(30), await_atom::value);
    bool pinged = false;
    self->request(waiting, kWait, ping_atom::value)
        .receive([&](bool b) { pinged = b; }, [&](caf::error&) {});
    EXPECT_TRUE(pinged);
    later.set_value(41);
    int got = 0;
    std::move(pending).receive([&](int v) { got = v; },
                               [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    EXPECT_EQ(got, 42);
    // A future already complete answers at once.
    self->request(ready, kWait, await_atom::value)
        .receive([&](int v) { got = v; },
                 [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    EXPECT_EQ(got, 10);
    // One that never completes gives a timeout error after its timeout.
    std::string why;
    self->request(never, kWait, await_atom::value)
        .receive([&](int) { why = "answered"; }, [&](caf::error& e) { why = caf::to_string(e); });
    EXPECT_NE(why.find("on_ready: no result within the timeout"), std::string::npos) << why;
  }
  for (auto& a : {waiting, ready, never}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  waiting = ready = never = nullptr;
}

TEST(ActorMeshShape, OneSliceCutsSeveralDimensionsAndAnIndexDropsOne) {
  auto mesh = ProcMesh::local({{"ranks", 8}}).value();
  auto adders = mesh.spawn<adder_actor>("adders", adder, 5).value();
  auto grid = adders.reshape({{"hosts", 2}, {"procs", 4}}).value();
  auto cut = grid.slice({{"hosts", 1}, {"procs", {1, 3}}});
  ASSERT_OK(cut);
  EXPECT_EQ(cut->extent().to_string(), "{procs: 2}");
  EXPECT_EQ(cut->extent().ranks(), (std::vector<int>{5, 6}));
  auto column = grid.slice({{"procs", 2}});
  ASSERT_OK(column);
  EXPECT_EQ(column->extent().to_string(), "{hosts: 2}");
  EXPECT_EQ(column->extent().ranks(), (std::vector<int>{2, 6}));
  // Dropping every dimension leaves a point: one member, callable alone.
  auto point = grid.slice({{"procs", 3}, {"hosts", 0}});
  ASSERT_OK(point);
  EXPECT_EQ(point->extent().to_string(), "{}");
  EXPECT_EQ(point->extent().ranks(), (std::vector<int>{3}));
  EXPECT_EQ(*point->call_one<int>(add_atom::value, 1).get(kWait), 4);
  // Three dimensions: the middle one dropped.
  auto cube = adders.reshape({{"a", 2}, {"b", 2}, {"c", 2}}).value();
  auto ac = cube.slice({{"b", 1}});
  ASSERT_OK(ac);
  EXPECT_EQ(ac->extent().to_string(), "{a: 2, c: 2}");
  EXPECT_EQ(ac->extent().ranks(), (std::vector<int>{2, 3, 6, 7}));
  // Bad selections name what was wrong.
  EXPECT_ERROR(grid.slice(std::vector<std::pair<std::string, Select>>{}), Errc::invalid_argument,
               "no dimension selected");
  EXPECT_ERROR(grid.slice({{"gpus", 0}}), Errc::invalid_argument, "no dimension 'gpus'");
  EXPECT_ERROR(grid.slice({{"procs", 0}, {"procs", 1}}), Errc::invalid_argument,
               "'procs' selected twice");
  EXPECT_ERROR(grid.slice({{"procs", 4}}), Errc::out_of_range, "procs index 4 outside [0, 4)");
  EXPECT_ERROR(grid.slice({{"procs", -1}}), Errc::out_of_range, "procs index -1 outside [0, 4)");
  EXPECT_ERROR(grid.slice({{"hosts", {1, 1}}}), Errc::out_of_range, "empty");
  EXPECT_ERROR(point->slice({{"hosts", 0}}), Errc::invalid_argument, "no dimension 'hosts'");
}

TEST(ActorMeshShape, AStepKeepsEveryNthCoordinate) {
  auto mesh = ProcMesh::local({{"ranks", 8}}).value();
  auto adders = mesh.spawn<adder_actor>("adders", adder, 5).value();
  auto grid = adders.reshape({{"hosts", 2}, {"procs", 4}}).value();
  // Every other proc on every host, as Python's slice(0, 4, 2).
  auto even = grid.slice({{"procs", {0, 4, 2}}});
  ASSERT_OK(even);
  EXPECT_EQ(even->extent().to_string(), "{hosts: 2, procs: 2}");
  EXPECT_EQ(even->extent().ranks(), (std::vector<int>{0, 2, 4, 6}));
  auto sums = even->call<int>(add_atom::value, 0).get(kWait);
  ASSERT_OK(sums);
  EXPECT_EQ(sums->item({{"hosts", 1}, {"procs", 1}}).value(), 6);  // rank 6 answers 0 + 6
  // A step that does not divide the range keeps the last coordinate it
  // reaches below the end; with an index on another dimension.
  auto odd = grid.slice({{"hosts", 1}, {"procs", {1, 4, 2}}});
  ASSERT_OK(odd);
  EXPECT_EQ(odd->extent().to_string(), "{procs: 2}");
  EXPECT_EQ(odd->extent().ranks(), (std::vector<int>{5, 7}));
  auto one = grid.slice({{"procs", {3, 4, 100}}});
  ASSERT_OK(one);
  EXPECT_EQ(one->extent().ranks(), (std::vector<int>{3, 7}));
  // Steps of a slice compose: every other of every other.
  auto line = adders.slice({{"ranks", {0, 8, 2}}}).value();
  EXPECT_EQ(line.slice({{"ranks", {0, 4, 2}}})->extent().ranks(), (std::vector<int>{0, 4}));
  EXPECT_ERROR(grid.slice({{"procs", {0, 4, 0}}}), Errc::invalid_argument, "procs step 0");
  EXPECT_ERROR(grid.slice({{"procs", {0, 4, -1}}}), Errc::invalid_argument, "below 1");
  EXPECT_ERROR(grid.slice({{"procs", {2, 2, 1}}}), Errc::out_of_range, "empty");
}

TEST(ActorMeshCalls, CallAnswersAValueMeshFoundByCoordinates) {
  auto mesh = ProcMesh::local({{"ranks", 8}}).value();
  auto grid =
      mesh.spawn<adder_actor>("adders", adder, 5).value().reshape({{"hosts", 2}, {"procs", 4}});
  ASSERT_OK(grid);
  auto sums = grid->call<int>(add_atom::value, 10).get(kWait);
  ASSERT_OK(sums);
  EXPECT_EQ(sums->extent().to_string(), "{hosts: 2, procs: 4}");
  EXPECT_EQ(sums->item({{"procs", 2}, {"hosts", 1}}).value(), 16);  // rank 6, in any order
  EXPECT_ERROR(sums->item({{"hosts", 1}, {"procs", 1}}), Errc::out_of_capacity, "rank 5");
  EXPECT_ERROR(sums->item({{"hosts", 1}}), Errc::invalid_argument, "no coordinate for 'procs'");
  EXPECT_ERROR(sums->item({{"hosts", 1}, {"gpus", 0}}), Errc::invalid_argument,
               "no dimension 'gpus'");
  EXPECT_ERROR(sums->item({{"hosts", 0}, {"hosts", 1}}), Errc::invalid_argument,
               "'hosts' named twice");
  EXPECT_ERROR(sums->item({{"hosts", 2}, {"procs", 0}}), Errc::out_of_range,
               "hosts 2 outside [0, 2)");
  int seen = 0;
  for (const Result<int>& r : *sums) seen += r.ok() ? 1 : 0;
  EXPECT_EQ(seen, 7);
  // A slice's values keep the slice's shape and the whole mesh's ranks.
  auto column = grid->slice({{"procs", 2}}).value().call<int>(add_atom::value, 0).get(kWait);
  ASSERT_OK(column);
  EXPECT_EQ(column->extent().to_string(), "{hosts: 2}");
  EXPECT_EQ(column->rank(1), 6);
  EXPECT_EQ(column->item({{"hosts", 1}}).value(), 6);
}

TEST(ActorMeshCalls, CallGathersEveryReplyAndEveryErrorByRank) {
  auto mesh = ProcMesh::local({{"ranks", 8}}).value();
  auto grid =
      mesh.spawn<adder_actor>("adders", adder, 5).value().reshape({{"hosts", 2}, {"procs", 4}});
  ASSERT_OK(grid);
  auto all = grid->call<int>(add_atom::value, 10).get(kWait);
  ASSERT_OK(all);
  ASSERT_EQ(all->size(), 8);
  EXPECT_EQ(all->extent().to_string(), "{hosts: 2, procs: 4}");
  for (int r = 0; r < 8; ++r) {
    if (r == 5) {
      EXPECT_ERROR((*all)[5], Errc::out_of_capacity, "rank 5: this rank is full");
    } else {
      EXPECT_EQ(*(*all)[r], 10 + r);
    }
  }
  auto host1 = grid->slice("hosts", 1, 2).value();
  auto some = host1.call<int>(add_atom::value, 0).get(kWait);
  ASSERT_OK(some);
  EXPECT_EQ(*(*some)[0], 4);
  EXPECT_FALSE((*some)[1].ok());  // rank 5
  EXPECT_ERROR(host1.broadcast<int>(add_atom::value, 0).get(kWait), Errc::out_of_capacity,
               "rank 5");
}

TEST(ActorMeshCalls, StreamAccumulateAndTell) {
  auto mesh = ProcMesh::local({{"ranks", 8}}).value();
  auto grid =
      mesh.spawn<adder_actor>("adders", adder, 5).value().reshape({{"hosts", 2}, {"procs", 4}});
  ASSERT_OK(grid);
  // stream: each reply as it lands, with its rank; then the first error.
  std::vector<std::pair<int, int>> seen;
  int errors = 0;
  auto streamed = grid->stream<int>(
      [&](int rank, const Result<int>& r) {
        if (r.ok()) {
          seen.emplace_back(rank, *r);
        } else {
          ++errors;
        }
      },
      add_atom::value, 100);
  EXPECT_ERROR(streamed.get(kWait), Errc::out_of_capacity, "rank 5");
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::pair<int, int>>{
                      {0, 100}, {1, 101}, {2, 102}, {3, 103}, {4, 104}, {6, 106}, {7, 107}}));
  EXPECT_EQ(errors, 1);
  // accumulate: a fold over one host's replies (1 + 2 + 3 + 4).
  auto host0 = grid->slice("hosts", 0, 1).value();
  auto sum = host0.accumulate<int>(
      0, [](int acc, int x) { return acc + x; }, add_atom::value, 1);
  EXPECT_EQ(*sum.get(kWait), 10);
  // tell to a handler that answers: the answers are dropped, and the
  // members stay up (an answer sent back to the mesh's caller, which
  // expects none, would come back to them as an error that stops them).
  ASSERT_OK(grid->tell(add_atom::value, 1));
  auto alive = grid->call<int>(add_atom::value, 0).get(kWait);
  ASSERT_OK(alive);
  for (int r = 0; r < 8; ++r) {
    if (r == 5) {  // up, and refusing as before
      EXPECT_ERROR((*alive)[static_cast<std::size_t>(r)], Errc::out_of_capacity, "rank 5");
    } else {
      EXPECT_OK((*alive)[static_cast<std::size_t>(r)]);
    }
  }
  // tell: fire and forget. Host 1's members stop; host 0's still answer.
  ASSERT_OK(grid->slice("hosts", 1, 2)->tell(die_atom::value));
  auto after = grid->call<int>(add_atom::value, 0).get(kWait);
  ASSERT_OK(after);
  for (int r = 0; r < 4; ++r) EXPECT_OK((*after)[static_cast<std::size_t>(r)]);
  for (int r = 4; r < 8; ++r) {
    EXPECT_ERROR((*after)[static_cast<std::size_t>(r)], Errc::unavailable,
                 "rank " + std::to_string(r));
  }
}

TEST(ActorMeshCalls, ChooseGoesRoundIdleMembersInTurn) {
  // One call at a time: every member is as busy as the others, and each
  // takes its turn (not member 0 every time).
  auto mesh = ProcMesh::local({{"ranks", 3}}).value();
  auto adders = mesh.spawn<adder_actor>("adders", adder, -1).value();
  std::vector<int> ranks;
  for (int i = 0; i < 6; ++i) ranks.push_back(*adders.choose<int>(add_atom::value, 0).get(kWait));
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  // A slice takes turns among its own members.
  auto tail = adders.slice("ranks", 1, 3).value();
  std::set<int> seen;
  for (int i = 0; i < 2; ++i) seen.insert(*tail.choose<int>(add_atom::value, 0).get(kWait));
  EXPECT_EQ(seen, (std::set<int>{1, 2}));
}

TEST(ActorMeshCalls, ChooseSendsToTheLeastBusyMember) {
  // Gates hold every request until opened: four chooses in flight land on
  // four different members, then a fifth on one of them again.
  auto mesh = ProcMesh::local({{"ranks", 4}}).value();
  auto gates = mesh.spawn<gate_actor>("gates", gate).value();
  std::vector<Future<int>> replies;
  for (int i = 0; i < 5; ++i) replies.push_back(gates.choose<int>(add_atom::value, 0));
  ASSERT_OK(gates.tell(open_atom::value));
  std::vector<int> ranks;
  for (auto& f : replies) {
    auto r = f.get(kWait);
    ASSERT_OK(r);
    ranks.push_back(*r);
  }
  std::vector<int> first_four(ranks.begin(), ranks.begin() + 4);
  std::sort(first_four.begin(), first_four.end());
  EXPECT_EQ(first_four, (std::vector<int>{0, 1, 2, 3}));
  mesh.stop();
  EXPECT_ERROR(gates.choose<int>(add_atom::value, 0).get(kWait), Errc::shutdown, "closed");
  EXPECT_ERROR(gates.tell(open_atom::value), Errc::shutdown, "closed");
}

// -- supervision ---------------------------------------------------------------

using fail_atom = caf::atom_constant<caf::atom("fail")>;
using faulty_actor =
    caf::typed_actor<caf::replies_to<add_atom, int>::with<int>, caf::reacts_to<fail_atom>>;

// Answers x + rank + 100 * generation; on fail, stops with an error.
faulty_actor::behavior_type faulty(faulty_actor::pointer self, int rank,
                                   std::shared_ptr<std::atomic<int>> generation) {
  const int gen = generation->fetch_add(1);
  return {
      [=](add_atom, int x) { return x + rank + 100 * gen; },
      [=](fail_atom) { self->quit(caf::sec::runtime_error); },
  };
}

// Failures seen by a handler, waited for with a bound.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<MeshFailure> failures;
  std::function<bool(const MeshFailure&)> handler(bool handled) {
    return [this, handled](const MeshFailure& f) {
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back(f);
      cv.notify_all();
      return handled;
    };
  }
  bool wait_for(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kWait, [&] { return failures.size() >= n; });
  }
};

TEST(Supervision, AFailedMemberReachesTheHandlerWithItsRank) {
  auto mesh = ProcMesh::local({{"ranks", 4}}).value();
  Seen seen;
  Supervision s;
  s.on_failure = seen.handler(true);
  auto gen = std::make_shared<std::atomic<int>>(0);
  auto m = mesh.spawn<faulty_actor>(s, "faulty", faulty, gen).value();
  ASSERT_OK(m.slice("ranks", 2, 3)->tell(fail_atom::value));
  ASSERT_TRUE(seen.wait_for(1));
  EXPECT_EQ(seen.failures[0].mesh, "faulty");
  EXPECT_EQ(seen.failures[0].rank, 2);
  EXPECT_ERROR(seen.failures[0].why, Errc::unavailable, "rank 2 of mesh 'faulty' went down");
  // Handled: the others go on.
  EXPECT_EQ(*m.ask<int>(3, add_atom::value, 1).get(kWait) % 100, 4);
}

TEST(Supervision, StopPolicyStopsTheMeshAndCallsSayWhy) {
  auto mesh = ProcMesh::local({{"ranks", 3}}).value();
  Seen seen;
  Supervision s;
  s.policy = FailurePolicy::stop;
  s.on_failure = seen.handler(false);  // seen, not handled: the policy applies
  auto m =
      mesh.spawn<faulty_actor>(s, "faulty", faulty, std::make_shared<std::atomic<int>>(0)).value();
  ASSERT_OK(m.slice("ranks", 1, 2)->tell(fail_atom::value));
  ASSERT_TRUE(seen.wait_for(1));
  EXPECT_ERROR(m.ask<int>(0, add_atom::value, 1).get(kWait), Errc::unavailable,
               "mesh 'faulty' was stopped after rank 1 of mesh 'faulty' went down");
  // A tell is refused the same way, not dropped in silence (the ask above
  // ran on the caller after the stop, so the stop is seen here).
  EXPECT_ERROR(m.tell(add_atom::value, 1), Errc::unavailable,
               "mesh 'faulty' was stopped after rank 1 of mesh 'faulty' went down");
}

// Rank 0 keeps every add's answer pending (a call in flight until it
// stops); the others answer x.
faulty_actor::behavior_type holding(faulty_actor::pointer self, int rank) {
  auto held = std::make_shared<std::vector<caf::typed_response_promise<int>>>();
  return {
      [=](add_atom, int x) {
        auto rp = self->make_response_promise<int>();
        if (rank == 0) {
          held->push_back(rp);
        } else {
          rp.deliver(x);
        }
        return rp;
      },
      [=](fail_atom) { self->quit(caf::sec::runtime_error); },
  };
}

TEST(Supervision, ACallInFlightWhenTheStopPolicyStopsItsMemberSaysWhy) {
  auto mesh = ProcMesh::local({{"ranks", 2}}).value();
  Supervision s;
  s.policy = FailurePolicy::stop;
  auto m = mesh.spawn<faulty_actor>(s, "holding", holding).value();
  auto in_flight = m.ask<int>(0, add_atom::value, 1);
  ASSERT_EQ(*m.ask<int>(1, add_atom::value, 7).get(kWait), 7);
  ASSERT_OK(m.slice("ranks", 1, 2)->tell(fail_atom::value));
  // Rank 0 went down because the policy stopped it: the call says so, as
  // a call made after the stop does, not "went down (user_shutdown)".
  EXPECT_ERROR(in_flight.get(kWait), Errc::unavailable,
               "rank 0: mesh 'holding' was stopped after rank 1 of mesh 'holding' went down");
}

TEST(Supervision, RestartPolicySpawnsTheMemberAgainThenStops) {
  auto mesh = ProcMesh::local({{"ranks", 2}}).value();
  Seen seen;
  Supervision s;
  s.policy = FailurePolicy::restart;
  s.max_restarts = 2;
  s.on_failure = seen.handler(false);
  auto gen = std::make_shared<std::atomic<int>>(0);  // each member made takes the next
  auto m = mesh.spawn<faulty_actor>(s, "faulty", faulty, gen).value();
  auto one = m.slice("ranks", 1, 2).value();
  int before = *one.call_one<int>(add_atom::value, 0).get(kWait);
  for (int round = 1; round <= 2; ++round) {
    ASSERT_OK(one.tell(fail_atom::value));
    ASSERT_TRUE(seen.wait_for(static_cast<std::size_t>(round)));
    // The same arguments (rank 1, the shared counter), in a new member.
    const int after = *one.call_one<int>(add_atom::value, 0).get(kWait);
    EXPECT_EQ(after % 100, 1);
    EXPECT_GT(after / 100, before / 100);
    before = after;
  }
  ASSERT_OK(one.tell(fail_atom::value));  // a third failure in the window: stop
  ASSERT_TRUE(seen.wait_for(3));
  EXPECT_ERROR(m.ask<int>(0, add_atom::value, 0).get(kWait), Errc::unavailable, "was stopped");
}

TEST(Supervision, UnhandledFailuresPropagateToTheRootHandler) {
  Seen root;
  MeshOptions o;
  o.on_failure = root.handler(true);
  auto mesh = ProcMesh::local({{"ranks", 2}}, o).value();
  auto m =
      mesh.spawn<faulty_actor>("faulty", faulty, std::make_shared<std::atomic<int>>(0)).value();
  ASSERT_OK(m.tell(fail_atom::value));
  ASSERT_TRUE(root.wait_for(2));
  std::set<int> ranks{root.failures[0].rank, root.failures[1].rank};
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
}

TEST(Supervision, AnUnhandledFailureClimbsToTheOwnersHandler) {
  MeshOptions o;
  Seen root;
  o.on_failure = root.handler(true);
  auto mesh = ProcMesh::local({{"ranks", 2}}, o).value();
  Seen parent_seen;
  Supervision parent;
  parent.on_failure = parent_seen.handler(true);  // the owner takes it
  auto p = mesh.spawn<faulty_actor>(parent, "parent", faulty, std::make_shared<std::atomic<int>>(0))
               .value();
  Supervision child;
  child.owner = "parent";  // propagate (the default) goes to "parent", not the root
  auto c = mesh.spawn<faulty_actor>(child, "child", faulty, std::make_shared<std::atomic<int>>(0))
               .value();
  ASSERT_OK(c.slice("ranks", 1, 2)->tell(fail_atom::value));
  ASSERT_TRUE(parent_seen.wait_for(1));
  EXPECT_EQ(parent_seen.failures[0].mesh, "child");
  EXPECT_EQ(parent_seen.failures[0].rank, 1);
  EXPECT_TRUE(root.failures.empty());
  // Both meshes go on.
  EXPECT_OK(p.ask<int>(0, add_atom::value, 0).get(kWait));
  EXPECT_OK(c.ask<int>(0, add_atom::value, 0).get(kWait));
}

TEST(Supervision, AnOwnerThatStopsTakesWhatItOwnsWithIt) {
  MeshOptions o;
  Seen root;
  o.on_failure = root.handler(true);
  auto mesh = ProcMesh::local({{"ranks", 2}}, o).value();
  Supervision top;
  top.policy = FailurePolicy::stop;
  auto t =
      mesh.spawn<faulty_actor>(top, "top", faulty, std::make_shared<std::atomic<int>>(0)).value();
  Supervision mid;
  mid.owner = "top";  // propagate: passes failures on
  auto m =
      mesh.spawn<faulty_actor>(mid, "mid", faulty, std::make_shared<std::atomic<int>>(0)).value();
  Supervision leaf;
  leaf.owner = "mid";
  auto l =
      mesh.spawn<faulty_actor>(leaf, "leaf", faulty, std::make_shared<std::atomic<int>>(0)).value();
  // A leaf member fails: "mid" passes it on, "top" stops, and with it "mid"
  // and "leaf"; the root never hears of it.
  ASSERT_OK(l.slice("ranks", 0, 1)->tell(fail_atom::value));
  EXPECT_TRUE(eventually([&] { return !t.ask<int>(1, add_atom::value, 0).get(kWait).ok(); }));
  EXPECT_ERROR(t.ask<int>(1, add_atom::value, 0).get(kWait), Errc::unavailable,
               "mesh 'top' was stopped after rank 0 of mesh 'leaf' went down");
  EXPECT_ERROR(m.ask<int>(0, add_atom::value, 0).get(kWait), Errc::unavailable,
               "its owner 'top' stopped");
  EXPECT_ERROR(l.ask<int>(1, add_atom::value, 0).get(kWait), Errc::unavailable,
               "its owner 'mid' stopped");
  EXPECT_TRUE(root.failures.empty());
  // A mesh spawned under a stopped owner stops at once.
  Supervision late;
  late.owner = "top";
  auto z = mesh.spawn<faulty_actor>(late, "late", faulty, std::make_shared<std::atomic<int>>(0));
  ASSERT_OK(z);
  EXPECT_ERROR(z->ask<int>(0, add_atom::value, 0).get(kWait), Errc::unavailable,
               "its owner 'top' stopped");
}

TEST(Supervision, AnUnknownOwnerIsRefusedBeforeAnyActorExists) {
  auto mesh = ProcMesh::local({{"ranks", 2}}).value();
  Supervision s;
  s.owner = "nobody";
  EXPECT_ERROR(mesh.spawn<faulty_actor>(s, "orphan", faulty, std::make_shared<std::atomic<int>>(0)),
               Errc::invalid_argument, "no mesh 'nobody' was spawned here before");
  // The name was not taken.
  EXPECT_OK(mesh.spawn<faulty_actor>("orphan", faulty, std::make_shared<std::atomic<int>>(0)));
}

TEST(Supervision, AMemberThatStopsNormallyIsNoFailure) {
  Seen root;
  MeshOptions o;
  o.on_failure = root.handler(true);
  auto mesh = ProcMesh::local({{"ranks", 2}}, o).value();
  auto adders = mesh.spawn<adder_actor>("adders", adder, -1).value();
  ASSERT_OK(adders.tell(die_atom::value));  // quits with exit reason "normal"
  EXPECT_ERROR(adders.ask<int>(1, add_atom::value, 1).get(kWait), Errc::unavailable, "rank 1");
  mesh.stop();
  std::lock_guard<std::mutex> lock(root.mu);
  EXPECT_TRUE(root.failures.empty());
}

TEST(SupervisionDeathTest, WithoutARootHandlerAnUnhandledFailureExitsNonZero) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto mesh = ProcMesh::local({{"ranks", 2}}).value();
        auto m = mesh.spawn<faulty_actor>("faulty", faulty, std::make_shared<std::atomic<int>>(0))
                     .value();
        (void)m.slice("ranks", 1, 2)->tell(fail_atom::value);
        Promise<void> never;  // the failure's exit ends this wait
        (void)never.future().get(60s);
        std::exit(0);
      },
      ::testing::ExitedWithCode(1), "unhandled mesh failure, exiting: .*rank 1 of mesh 'faulty'");
}

TEST(ProcMeshLocal, NamesAreUniqueAndChecked) {
  auto mesh = ProcMesh::local({{"ranks", 2}}).value();
  ASSERT_OK(mesh.spawn<adder_actor>("a", adder, -1));
  EXPECT_ERROR(mesh.spawn<adder_actor>("a", adder, -1), Errc::invalid_argument, "already spawned");
  EXPECT_ERROR(mesh.spawn<adder_actor>("", adder, -1), Errc::invalid_argument, "name is empty");
  EXPECT_ERROR(ProcMesh::local({{"ranks", 0}}), Errc::invalid_argument, "ProcMesh::local");
  EXPECT_ERROR(ProcMesh::local({{"ranks", 4097}}), Errc::invalid_argument,
               "between 1 and 4096 members, not 4097");
  mesh.stop();
  EXPECT_ERROR(mesh.spawn<adder_actor>("b", adder, -1), Errc::shutdown, "stopped");
  EXPECT_ERROR(mesh.spawn<adder_actor>("c", "adder", -1), Errc::shutdown, "stopped");
}

// A member that counts the members alive (made minus stopped) and fails on
// request.
using live_actor =
    caf::typed_actor<caf::replies_to<add_atom, int>::with<int>, caf::reacts_to<fail_atom>>;
live_actor::behavior_type live(live_actor::pointer self, int rank,
                               std::shared_ptr<std::atomic<int>> alive) {
  alive->fetch_add(1);
  on_stop(self, [alive](const Status&) { alive->fetch_sub(1); });
  return {
      [=](add_atom, int x) { return x + rank; },
      [=](fail_atom) { self->quit(caf::sec::runtime_error); },
  };
}

TEST(ProcMeshLocal, SpawnsByTypeNameAndFromAFunctionOnTheMeshOrASlice) {
  MeshOptions o;
  o.add_types = [](caf::actor_system_config& cfg) { cfg.add_actor_type("adder", adder); };
  auto procs = ProcMesh::local({{"hosts", 2}, {"gpus", 2}}, o).value();
  EXPECT_EQ(procs.size(), 4);
  EXPECT_EQ(procs.rank(), -1) << "this process is every member, not one";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(procs.pid(i), ::getpid());
  EXPECT_ERROR(procs.signal(0, SIGTERM), Errc::invalid_argument, "this process");
  // By type name: the mesh has the view's shape.
  auto named = procs.spawn<adder_actor>("named", "adder", -1).value();
  EXPECT_EQ(named.extent().dims(), procs.extent().dims());
  auto sums = named.call<int>(add_atom::value, 10).get(kWait).value();
  EXPECT_EQ(*sums.item({{"hosts", 1}, {"gpus", 0}}), 12);
  // On a slice: its members, ranked 0..n-1 in the new mesh.
  auto host1 = procs.slice({{"hosts", 1}}).value();
  auto small = host1.spawn<adder_actor>("small", "adder", -1).value();
  EXPECT_EQ(small.size(), 2);
  EXPECT_EQ(small.broadcast<int>(add_atom::value, 0).get(kWait).value(), (std::vector<int>{0, 1}));
  // From a function, with its arguments.
  auto made = procs.spawn<adder_actor>("made", adder, 3).value();
  EXPECT_ERROR(made.ask<int>(3, add_atom::value, 1).get(kWait), Errc::out_of_capacity,
               "rank 3: this rank is full");
  EXPECT_EQ(*made.ask<int>(2, add_atom::value, 1).get(kWait), 3);
  // A singleton: one actor, however often asked for.
  auto one = procs.get_or_spawn<adder_actor>("one", "adder", -1).value();
  auto again = procs.get_or_spawn<adder_actor>("one", "adder", -1).value();
  EXPECT_EQ(one.at(0), again.at(0));
  // Refused before any actor exists: an unknown type, another interface.
  EXPECT_ERROR(procs.spawn<adder_actor>("ghost", "no-such-type", -1), Errc::not_found,
               "no actor type 'no-such-type'");
  EXPECT_ERROR(procs.spawn<live_actor>("other", "adder", -1), Errc::invalid_argument,
               "has the interface");
  EXPECT_OK(procs.spawn<adder_actor>("ghost", "adder", -1)) << "a failed spawn frees its name";
}

TEST(ProcMeshLocal, StopStopsEveryMemberRestartedOnesToo) {
  auto alive = std::make_shared<std::atomic<int>>(0);
  auto procs = ProcMesh::local({{"ranks", 3}}).value();
  Seen seen;
  Supervision s;
  s.policy = FailurePolicy::restart;
  s.on_failure = seen.handler(false);
  auto m = procs.spawn<live_actor>(s, "live", live, alive).value();
  EXPECT_TRUE(eventually([&] { return alive->load() == 3; }));  // each starts on its own
  ASSERT_OK(m.slice("ranks", 1, 2)->tell(fail_atom::value));
  ASSERT_TRUE(seen.wait_for(1));
  // Restarted: the new member answers, and three are alive again.
  EXPECT_EQ(*m.ask<int>(1, add_atom::value, 5).get(kWait), 6);
  EXPECT_TRUE(eventually([&] { return alive->load() == 3; }));
  procs.stop();  // waits for them, within MeshOptions::stop_timeout
  EXPECT_EQ(alive->load(), 0);
  EXPECT_ERROR(m.ask<int>(0, add_atom::value, 1).get(kWait), Errc::shutdown, "closed");
}

}  // namespace
}  // namespace meshstore
