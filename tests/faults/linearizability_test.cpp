// The linearizability check (docs/reliability.md): the checker on histories
// whose verdict is known, then concurrent clients putting, reading and
// removing a few keys while the store's server is killed and started again
// at its address, while volumes keeping copies of the keys are killed, and
// while the process of a ProcMesh that runs the store's controller is
// killed and launched again; every key's history must be linearizable.
// The binary is the ProcMesh's worker too (main() below).
#include "faults/linearizability.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "meshstore/proc_mesh.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store_mesh.hpp"
#include "testing/subprocess.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

using namespace std::chrono_literals;
using Kind = RegisterOp::Kind;
using Outcome = RegisterOp::Outcome;

RegisterOp put(std::int64_t v, std::int64_t call, std::int64_t ret, int client = 0) {
  return RegisterOp{Kind::put, Outcome::done, v, call, ret, client};
}
RegisterOp get(std::int64_t v, std::int64_t call, std::int64_t ret, int client = 1) {
  return RegisterOp{Kind::get, Outcome::done, v, call, ret, client};
}
RegisterOp get_absent(std::int64_t call, std::int64_t ret, int client = 1) {
  return RegisterOp{Kind::get, Outcome::absent, 0, call, ret, client};
}

TEST(LinearizabilityChecker, AcceptsSequentialAndOverlappingHistories) {
  EXPECT_TRUE(linearizable({}));
  EXPECT_TRUE(linearizable({get_absent(0, 1), put(1, 2, 3), get(1, 4, 5)}));
  // A read overlapping a write may see either value.
  EXPECT_TRUE(linearizable({put(1, 0, 1), put(2, 2, 10), get(1, 3, 4), get(2, 5, 6)}));
  // Two overlapping writes, read back in the order the reads imply.
  EXPECT_TRUE(linearizable({put(1, 0, 10), put(2, 0, 10), get(2, 11, 12), get(2, 13, 14)}));
  // A remove, then a remove that found nothing.
  EXPECT_TRUE(linearizable({put(1, 0, 1),
                            {Kind::remove, Outcome::done, 0, 2, 3, 0},
                            {Kind::remove, Outcome::absent, 0, 4, 5, 0},
                            get_absent(6, 7)}));
}

TEST(LinearizabilityChecker, RefusesStaleReadsAndValuesNobodyWrote) {
  std::string why;
  // A read after a write returned, of the value it replaced.
  EXPECT_FALSE(linearizable({put(1, 0, 1), put(2, 2, 3), get(1, 4, 5)}, &why));
  EXPECT_NE(why.find("get 1"), std::string::npos) << why;
  // A value no one wrote.
  EXPECT_FALSE(linearizable({put(1, 0, 1), get(3, 2, 3)}));
  // Two reads that see the overlapping writes in opposite orders, one
  // after the other.
  EXPECT_FALSE(
      linearizable({put(1, 0, 10), put(2, 0, 10), get(1, 11, 12), get(2, 13, 14), get(1, 15, 16)}));
  // A key that comes back after it was removed.
  EXPECT_FALSE(
      linearizable({put(1, 0, 1), {Kind::remove, Outcome::done, 0, 2, 3, 0}, get(1, 4, 5)}));
  // A remove that removed what was never there.
  EXPECT_FALSE(linearizable({{Kind::remove, Outcome::done, 0, 0, 1, 0}}));
}

TEST(LinearizabilityChecker, AFailedWriteMayHaveHappenedOrNot) {
  // Made at 2, never answered.
  const RegisterOp lost{Kind::put, Outcome::unknown, 7, 2, RegisterOp::kNever, 0};
  EXPECT_TRUE(linearizable({put(1, 0, 1), lost, get(1, 3, 4)}));  // not (yet)
  EXPECT_TRUE(linearizable({put(1, 0, 1), lost, get(7, 3, 4)}));  // it did
  // Once seen, it cannot be undone.
  EXPECT_FALSE(linearizable({put(1, 0, 1), lost, get(7, 3, 4), get(1, 5, 6)}));
  // But it cannot have happened before it was made.
  EXPECT_FALSE(linearizable(
      {put(1, 0, 1), get(7, 1, 2), {Kind::put, Outcome::unknown, 7, 3, RegisterOp::kNever, 0}}));
}

TEST(LinearizabilityChecker, ManyConcurrentOperationsStayCheapWithMemoisation) {
  // 8 clients, 60 rounds: each round every client writes at once, then
  // one reads what the last write left. Without memoisation this explodes.
  std::vector<RegisterOp> h;
  std::int64_t t = 0;
  for (int round = 0; round < 60; ++round) {
    for (int c = 0; c < 8; ++c) h.push_back(put(round * 8 + c, t, t + 10, c));
    h.push_back(get(round * 8 + 3, t + 11, t + 12, 8));
    t += 20;
  }
  std::size_t states = 0;
  EXPECT_TRUE(linearizable(h, nullptr, &states));
  EXPECT_LT(states, 100000u) << "the search went through " << states << " configurations";
}

// -- the store under failover ----------------------------------------------

const std::string kTool = MESHSTORE_TOOL_PATH;
const std::string kPeer = MESHSTORE_TEST_PEER_PATH;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One client's loop: random puts (values unique to it), gets and removes
// on `keys` until `stop`, each recorded with its call and return times.
// After a write that failed it only reads for 20 calls: a write whose
// outcome is unknown may be placed anywhere after its call, and many of
// them (a client whose volume is dead) make the check search long.
void client_loop(Store& store, int client, const std::vector<std::string>& keys,
                 const std::atomic<bool>& stop, std::mutex& mu,
                 std::map<std::string, std::vector<RegisterOp>>& history) {
  std::mt19937 gen(static_cast<unsigned>(client) * 7919u + 1);
  std::int32_t seq = 0;
  int reads_only = 0;
  while (!stop.load()) {
    const std::string& key = keys[gen() % keys.size()];
    unsigned dice = gen() % 20;
    if (reads_only > 0) {
      --reads_only;
      dice = 9;  // a get
    }
    RegisterOp op;
    op.client = client;
    op.call = now_ns();
    if (dice < 9) {
      std::int32_t v = (client + 1) * 1000000 + ++seq;
      op.kind = Kind::put;
      op.value = v;
      auto s = store.put(key, TensorView::of(&v, {})).get(30s);
      op.outcome = s.ok() ? Outcome::done : Outcome::unknown;
    } else if (dice < 17) {
      op.kind = Kind::get;
      auto r = store.get(key).get(30s);
      if (r.ok()) {
        op.value = *r->data_as<std::int32_t>();
      } else if (r.status().code() == Errc::not_found) {
        op.outcome = Outcome::absent;
      } else {
        continue;  // a failed read says nothing
      }
    } else {
      op.kind = Kind::remove;
      auto s = store.remove(key).get(30s);
      op.outcome = s.ok()                                 ? Outcome::done
                   : s.status().code() == Errc::not_found ? Outcome::absent
                                                          : Outcome::unknown;
    }
    if (op.outcome == Outcome::unknown) reads_only = 20;
    op.ret = op.outcome == Outcome::unknown ? RegisterOp::kNever : now_ns();
    std::lock_guard<std::mutex> lock(mu);
    history[key].push_back(op);
  }
}

// Clients on three keys, each history recorded, checked once they stop.
class Clients {
 public:
  // Four clients, two on each store.
  Clients(Store& a, Store& b) {
    for (int c = 0; c < 4; ++c) {
      clients_.emplace_back(
          [this, c, &a, &b] { client_loop(c % 2 ? b : a, c, keys_, stop_, mu_, history_); });
    }
  }
  ~Clients() { stop(); }

  const std::vector<std::string>& keys() const { return keys_; }

  // Whether the clients made `n` more calls (bounded: 30 s).
  bool more_calls(std::size_t n = 300) {
    const auto before = ops();
    return eventually([&] { return ops() >= before + n; }, 30s);
  }
  // A process is killed now (a call in flight across it is counted).
  void kill_at_now() { kills_.push_back(now_ns()); }

  // Stops the clients and checks every key's history.
  void stop_and_check() {
    stop();
    std::size_t states = 0, across = 0, failed = 0;
    for (const auto& [key, h] : history_) {
      std::string why;
      std::size_t n = 0;
      const bool ok = linearizable(h, &why, &n);
      EXPECT_TRUE(ok) << key << ": " << h.size() << " operations: " << why << "\n"
                      << (ok ? std::string() : around_the_stuck_one(h, why));
      states += n;
      for (const auto& op : h) {
        failed += op.outcome == Outcome::unknown;
        for (auto k : kills_) across += op.call <= k && op.ret > k;
      }
    }
    std::printf(
        "linearizability: %zu operations on %zu keys (%zu across a kill, %zu failed), %zu "
        "configurations searched\n",
        ops(), history_.size(), across, failed, states);
  }

 private:
  std::size_t ops() {
    std::lock_guard<std::mutex> lock(mu_);
    std::size_t n = 0;
    for (const auto& [k, h] : history_) n += h.size();
    return n;
  }
  // The operations overlapping the 20 ms before the one `why` names, and
  // the kills, in ms from the first call: what a failure needs to be read.
  std::string around_the_stuck_one(const std::vector<RegisterOp>& h, const std::string& why) {
    const RegisterOp* stuck = nullptr;
    for (const auto& op : h) {
      if (why.find(describe(op)) != std::string::npos) stuck = &op;
    }
    if (stuck == nullptr) return {};
    std::int64_t t0 = stuck->call;
    for (const auto& op : h) t0 = std::min(t0, op.call);
    auto ms = [t0](std::int64_t t) {
      return t == RegisterOp::kNever ? std::string("never") : std::to_string((t - t0) / 1e6);
    };
    std::vector<RegisterOp> near;
    for (const auto& op : h) {
      if (op.ret >= stuck->call - 20'000'000 && op.call <= stuck->ret) near.push_back(op);
    }
    std::sort(near.begin(), near.end(),
              [](const RegisterOp& a, const RegisterOp& b) { return a.call < b.call; });
    std::string out = "kills at ms:";
    for (auto k : kills_) out += " " + ms(k);
    out += "\n";
    for (const auto& op : near) {
      const char* kind = op.kind == Kind::put ? "put" : op.kind == Kind::get ? "get" : "remove";
      const char* outcome = op.outcome == Outcome::done     ? ""
                            : op.outcome == Outcome::absent ? " (absent)"
                                                            : " (unknown)";
      out += "  " + ms(op.call) + " .. " + ms(op.ret) + "  client " + std::to_string(op.client) +
             " " + kind + " " + std::to_string(op.value) + outcome + "\n";
    }
    return out;
  }
  void stop() {
    stop_ = true;
    for (auto& t : clients_) {
      if (t.joinable()) t.join();
    }
  }

  const std::vector<std::string> keys_ = {"lin/a", "lin/b", "lin/c"};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, std::vector<RegisterOp>> history_;
  std::vector<std::int64_t> kills_;
  std::vector<std::thread> clients_;
};

// `meshstore serve` at `port` ("0": any) with `extra` arguments; empty
// when it did not start (the test fails with its output).
std::unique_ptr<Child> serve(const std::string& port, const std::vector<std::string>& extra,
                             std::string* address) {
  std::vector<std::string> argv{kTool, "serve", "--port", port, "--strategy", "per_local_rank"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto server = std::make_unique<Child>(argv);
  *address = served_address(*server, 60s);
  EXPECT_FALSE(address->empty()) << server->output();
  return address->empty() ? nullptr : std::move(server);
}

// Kills `child` with SIGKILL and frees the shared memory it held.
void kill_hard(Child& child) {
  child.signal(SIGKILL);
  ASSERT_TRUE(child.wait(10s));
  transports::shm::garbage_collect(false, child.pid());
}

// Four clients in two stores (one hosting the volume every key lives on,
// one hosting none) on three keys; the server is killed with SIGKILL and
// started again at its port twice (MESHSTORE_LINEARIZABILITY_FAILOVERS=N:
// N times), each after 300 more calls. Volumes are not killed here (the
// next test kills them, with copies).
TEST(Linearizability, PutGetAndRemoveStayLinearizableThroughFailovers) {
  std::string address;
  auto server = serve("0", {}, &address);
  ASSERT_TRUE(server);
  const std::string port = address.substr(address.rfind(':') + 1);
  StoreOptions o;
  o.limits.request_timeout = 10s;
  o.placement.local_rank = 0;
  auto holder = Store::connect(address, o).value();
  o.placement.host_volumes = false;
  auto other = Store::connect(address, o).value();
  Clients run(holder, other);
  // Two failovers in CI; MESHSTORE_LINEARIZABILITY_FAILOVERS asks for more
  // (the long form).
  int failovers = 2;
  if (const char* e = std::getenv("MESHSTORE_LINEARIZABILITY_FAILOVERS")) {
    failovers = std::max(1, std::min(1000, std::atoi(e)));
  }
  for (int failover = 0; failover < failovers; ++failover) {
    ASSERT_TRUE(run.more_calls()) << "no progress";
    run.kill_at_now();
    kill_hard(*server);
    server = serve(port, {}, &address);
    ASSERT_TRUE(server);
  }
  ASSERT_TRUE(run.more_calls()) << "no progress";  // calls go on after the last failover
  run.stop_and_check();
  holder.close();
  other.close();
}

// Two copies of each key (serve --replicas 2) on the volumes of three peer
// processes (local ranks 1 to 3); four clients in two stores hosting no
// volume, placed on the volumes of local ranks 1 and 2. After 300 calls
// each, the volume of rank 3 (copies only), then rank 1's (one store's
// writes), then the server are killed with SIGKILL and started again.
// Before a volume is killed every key has its two copies (the controller
// made them again after the last kill), so no committed key may be lost.
TEST(Linearizability, PutGetAndRemoveStayLinearizableThroughVolumeKillsWithCopies) {
  std::string address;
  const std::vector<std::string> copies{"--replicas", "2"};
  auto server = serve("0", copies, &address);
  ASSERT_TRUE(server);
  const std::string port = address.substr(address.rfind(':') + 1);
  auto volume = [&](int rank) {
    auto peer = std::make_unique<Child>(std::vector<std::string>{
        kPeer, "hold", address, "peer/" + std::to_string(rank), std::to_string(rank)});
    EXPECT_TRUE(peer->wait_for_output("ready", 60s)) << peer->output();
    return peer;
  };
  std::vector<std::unique_ptr<Child>> volumes;
  for (int rank = 1; rank <= 3; ++rank) volumes.push_back(volume(rank));
  StoreOptions o;
  o.limits.request_timeout = 5s;
  o.placement.host_volumes = false;
  o.placement.local_rank = 1;
  auto first = Store::connect(address, o).value();
  o.placement.local_rank = 2;
  auto second = Store::connect(address, o).value();
  Clients run(first, second);
  // Every key that is held has both its copies.
  auto whole = [&] {
    auto listed = first.list("lin/").get(kWait);
    if (!listed.ok()) return false;
    return std::all_of(listed->begin(), listed->end(),
                       [](const KeyInfo& k) { return k.copies == 2; });
  };
  for (int rank : {3, 1}) {
    ASSERT_TRUE(run.more_calls()) << "no progress";
    ASSERT_TRUE(eventually(whole, 30s)) << "keys short of copies";
    run.kill_at_now();
    kill_hard(*volumes[rank - 1]);
    ASSERT_TRUE(run.more_calls()) << "no progress with volume " << rank << " dead";
    volumes[rank - 1] = volume(rank);
  }
  ASSERT_TRUE(run.more_calls()) << "no progress";
  run.kill_at_now();
  kill_hard(*server);
  server = serve(port, copies, &address);
  ASSERT_TRUE(server);
  ASSERT_TRUE(run.more_calls()) << "no progress after the failover";
  run.stop_and_check();
  first.close();
  second.close();
  for (auto& v : volumes) kill_hard(*v);
}

// The store on a ProcMesh of two processes with its controller in process
// 1 (placement.controller_process), under the restart policy: process 1 is
// killed with SIGKILL twice (MESHSTORE_LINEARIZABILITY_FAILOVERS=N: N
// times), and the ProcMesh launches it again, where the controller starts
// again and rebuilds its index from the volumes. Four clients in this
// process (local rank -1 writes to process 0's volume, which lives on)
// call throughout, through the relay that finds the new controller.
TEST(Linearizability, PutGetAndRemoveStayLinearizableThroughControllerProcessRestarts) {
  int failovers = 2;
  if (const char* e = std::getenv("MESHSTORE_LINEARIZABILITY_FAILOVERS")) {
    failovers = std::max(1, std::min(50, std::atoi(e)));
  }
  LaunchSpec spec;
  spec.max_relaunches = failovers;
  spec.relaunch_window = std::chrono::hours(1);
  auto procs = ProcMesh::launch({{"procs", 2}}, spec, MeshOptions{});
  ASSERT_TRUE(procs.ok()) << procs.status().to_string();
  Supervision restart;
  restart.policy = FailurePolicy::restart;
  restart.max_restarts = failovers;
  restart.window = std::chrono::hours(1);
  StoreOptions o;
  o.limits.request_timeout = 10s;
  o.placement.strategy = "per_local_rank";
  o.placement.controller_process = 1;
  auto store = spawn_store(*procs, o, restart);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  Clients run(*store, *store);
  for (int failover = 0; failover < failovers; ++failover) {
    ASSERT_TRUE(run.more_calls()) << "no progress";
    const int old_pid = procs->pid(1);
    run.kill_at_now();
    ASSERT_OK(procs->signal(1, SIGKILL));
    // Launched again (a new pid), then calls go on through its controller.
    ASSERT_TRUE(eventually([&] { return procs->pid(1) > 0 && procs->pid(1) != old_pid; }, 30s))
        << "process 1 was not launched again";
    transports::shm::garbage_collect(false, old_pid);
  }
  ASSERT_TRUE(run.more_calls()) << "no progress after the last failover";
  run.stop_and_check();
  store->close();
  procs->stop();
}

}  // namespace
}  // namespace meshstore::testing

// The ProcMesh's workers are this binary.
int main(int argc, char** argv) {
  if (meshstore::ProcMesh::is_worker()) {
    return meshstore::ProcMesh::serve(meshstore::MeshOptions{}).ok() ? 0 : 3;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
