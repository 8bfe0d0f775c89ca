// kill -9 of a process in a running store: the others get clear errors
// within a bound, nothing hangs.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

#include "meshstore/store.hpp"
#include "testing/subprocess.hpp"
#include "testing/temp_dir.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

using namespace std::chrono_literals;

const std::string kPeer = MESHSTORE_TEST_PEER_PATH;
const std::string kTool = MESHSTORE_TOOL_PATH;
const std::string kMeshrun = MESHRUN_PATH;

// The bound within which a dead peer must turn into an error.
constexpr auto kBound = 10s;

TEST(Failure, AStreamingReaderLearnsThatItsWriterDied) {
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  o.limits.request_timeout = 60s;  // far above the bound: the error must not come from a timeout
  auto server = Store::embedded(o).value();
  constexpr std::int64_t kPer = (std::int64_t{256} << 20) / 8 / 4;
  std::vector<std::vector<float>> bufs(8, std::vector<float>(kPer, 0.0f));
  StateDict dst;
  for (std::size_t t = 0; t < bufs.size(); ++t) {
    ASSERT_OK(dst.insert("w" + std::to_string(t), TensorView::of(bufs[t].data(), {kPer})));
  }
  auto read = server.state_dicts().stream_into("sd", dst, 60s);
  // The writer: 256 MiB over rpc, 1 MiB at a time, in another process.
  Child writer({kPeer, "write-state-dict", server.admin().address(), "sd", "256"});
  // Bounded wait until its put is announced, then freeze it mid-put.
  for (int i = 0; i < 60000 && server.admin().controller_counters().get(kWait)->streams < 1; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  writer.signal(SIGSTOP);
  ASSERT_GE(server.admin().controller_counters().get(kWait)->streams, 1u);
  ASSERT_EQ(server.admin().controller_counters().get(kWait)->stream_readers, 1u);
  if (writer.wait_for_output("committed", 10ms) || read.ready()) {
    GTEST_SKIP() << "the writer committed before it could be stopped";
  }
  const auto t0 = std::chrono::steady_clock::now();
  writer.signal(SIGKILL);
  ASSERT_TRUE(writer.wait(kWait));
  auto r = read.get(kBound);
  EXPECT_NE(r.status().code(), Errc::timeout) << "the read hung until its timeout";
  EXPECT_ERROR(r, Errc::unavailable,
               "stream_state_dict_into 'sd': the writer aborted before its commit: its writer went "
               "down");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, kBound);
  // Nothing of the dead writer's version is visible; the store still works.
  EXPECT_FALSE(*server.exists("sd").get(kBound));
  float y = 1;
  ASSERT_OK(server.put("fresh", TensorView::of(&y, {})).get(kBound));
}

// A store whose volumes live in the processes that join it (a peer's key
// lives in the peer), with a request timeout far above the bound: an error
// within the bound cannot come from a timeout.
StoreOptions volume_per_process() {
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  o.placement.strategy = "per_local_rank";
  o.limits.request_timeout = 60s;
  return o;
}

TEST(Failure, KilledVolumeProcessGivesClearErrorsAtOnce) {
  auto server = Store::embedded(volume_per_process()).value();
  Child peer({kPeer, "hold", server.admin().address(), "held"});
  ASSERT_TRUE(peer.wait_for_output("ready", 60s)) << peer.output();
  ASSERT_EQ(*server.get("held").get(kWait)->data_as<float>(), 7.0f);

  peer.signal(SIGKILL);
  ASSERT_TRUE(peer.wait(kWait));
  auto r = server.get("held").get(kBound);
  EXPECT_NE(r.status().code(), Errc::timeout) << "the get hung until its timeout";
  EXPECT_ERROR(r, Errc::unavailable, "went down");
  // The controller learns of the death through its own monitor, which may
  // come after the client's: wait (bounded) until it has dropped the key.
  // Then reads say the key was lost with its volume; the rest still works.
  const auto deadline = std::chrono::steady_clock::now() + kBound;
  while (*server.exists("held").get(kBound) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_FALSE(*server.exists("held").get(kBound));
  EXPECT_ERROR(server.get("held").get(kBound), Errc::unavailable, "was stored on volume");
  float y = 1;
  ASSERT_OK(server.put("fresh", TensorView::of(&y, {})).get(kBound));
  EXPECT_EQ(*server.get("fresh").get(kBound)->data_as<float>(), 1.0f);
  ASSERT_OK(server.remove("held").get(kBound));         // acknowledges the loss
  transports::shm::garbage_collect(false, peer.pid());  // what the killed peer left
}

// Reads over the fast path (the shm ring, or with `transport` "tcp" the tcp
// transport's small operations) to a peer's volume while the peer is killed:
// they end with unavailable within the bound, the channel goes, nothing leaks.
void killed_volume_ends_fast_reads(const std::string& transport) {
  StoreOptions o = volume_per_process();
  o.transport.name = transport;
  auto server = Store::embedded(o).value();
  Child peer({kPeer, "hold", server.admin().address(), "held"});
  ASSERT_TRUE(peer.wait_for_output("ready", 60s)) << peer.output();
  ASSERT_EQ(*server.get("held").get(kWait)->data_as<float>(), 7.0f);  // learns where it is
  ASSERT_TRUE(eventually([&] { return server.admin().fast_path_stats().rings >= 1; }, kBound));
  // Reads on the fast path from the peer's volume (straight from its shared
  // memory where the process watch allows, else over the ring; over its
  // tcp channel with "tcp"), one after another, until one fails.
  std::atomic<bool> stop{false}, failed{false};
  Status last;
  std::chrono::steady_clock::time_point failed_at;
  std::thread reader([&] {
    float v = 0;
    while (!stop.load()) {
      auto s = server.get_into("held", TensorView::of(&v, {})).get(kWait);
      if (!s.ok()) {
        last = s.status();
        failed_at = std::chrono::steady_clock::now();
        failed.store(true);
        return;
      }
      if (v != 7.0f) {
        last = Status(Errc::internal, "read " + std::to_string(v));
        failed_at = std::chrono::steady_clock::now();
        failed.store(true);
        return;
      }
    }
  });
  ASSERT_TRUE(eventually([&] { return server.admin().fast_path_stats().hits >= 20; }, kBound));
  const auto t0 = std::chrono::steady_clock::now();
  peer.signal(SIGKILL);
  ASSERT_TRUE(peer.wait(kWait));
  const bool ended = eventually([&] { return failed.load(); }, kBound);
  stop.store(true);
  reader.join();
  ASSERT_TRUE(ended) << "fast-path reads went on after the volume died";
  EXPECT_NE(last.code(), Errc::timeout) << "the read hung until its timeout";
  EXPECT_ERROR(last, Errc::unavailable, "");
  EXPECT_LT(failed_at - t0, kBound);
  // The ring is gone with its volume; closing the store leaves none of this
  // process's segments (the ring is one).
  EXPECT_EQ(server.admin().fast_path_stats().rings, 0u);
  server.close();
  EXPECT_TRUE(transports::shm::own_segments().empty());
  transports::shm::garbage_collect(false, peer.pid());  // what the killed peer left
}

TEST(Failure, KilledVolumeProcessEndsFastPathReadsInFlight) { killed_volume_ends_fast_reads(""); }

TEST(Failure, KilledVolumeProcessEndsTcpFastPathReadsInFlight) {
  killed_volume_ends_fast_reads("tcp");
}

// Without reconnecting (limits.reconnect_timeout 0), a dead server's
// calls fail at once.
TEST(Failure, KilledServerGivesClearErrorsAtOnce) {
  Child serve({kTool, "serve", "--port", "0"});
  const std::string address = served_address(serve, 60s);
  ASSERT_FALSE(address.empty()) << serve.output();
  StoreOptions o;
  o.limits.request_timeout = 60s;
  o.limits.reconnect_timeout = 0ms;
  auto client = Store::connect(address, o).value();
  float x = 3;
  ASSERT_OK(client.put("k", TensorView::of(&x, {})).get(kWait));

  serve.signal(SIGKILL);
  ASSERT_TRUE(serve.wait(kWait));
  auto r = client.get("k").get(kBound);
  EXPECT_NE(r.status().code(), Errc::timeout) << "the get hung until its timeout";
  EXPECT_ERROR(r, Errc::unavailable, "");
  // Every later call fails at once, naming the cause.
  // The controller and the strategy die together; either may be named first.
  EXPECT_ERROR(client.keys().get(kBound), Errc::unavailable, "went down");
  EXPECT_ERROR(client.put("k2", TensorView::of(&x, {})).get(kBound), Errc::unavailable,
               "unreachable");
  transports::shm::garbage_collect(false, serve.pid());  // what the killed server left
}

// The store's server killed, then started again at the same address (as a
// supervisor would): this process reconnects, its volume registers with the
// new controller, which rebuilds its index from the records the volume kept.
// Every key comes back bit-exact at its last version, a state dict whole, and
// puts go on.
TEST(Failure, AServerRestartedAtItsAddressGetsItsKeysBackFromTheVolumes) {
  Child serve({kTool, "serve", "--port", "0", "--strategy", "per_local_rank"});
  const std::string address = served_address(serve, 60s);
  ASSERT_FALSE(address.empty()) << serve.output();
  StoreOptions o;
  o.limits.request_timeout = 60s;
  auto client = Store::connect(address, o).value();
  std::vector<float> w(1000);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f;
  ASSERT_OK(client.put("w", TensorView::of(w.data(), {1000})).get(kWait));
  float x = 3, x2 = 4;
  ASSERT_OK(client.put("x", TensorView::of(&x, {})).get(kWait));
  ASSERT_OK(client.put("x", TensorView::of(&x2, {})).get(kWait));  // the version to come back
  std::vector<std::int32_t> ids(7, 3);
  StateDict sd;
  ASSERT_OK(sd.insert("layer.weight", TensorView::of(w.data(), {10, 100})));
  ASSERT_OK(sd.insert("ids", TensorView::of(ids.data(), {7})));
  ASSERT_OK(sd.insert("step", Value::int64(1234)));
  ASSERT_OK(client.state_dicts().put("ckpt", sd).get(kWait));
  ASSERT_OK(client.state_dicts().publish("pub", sd).get(kWait));
  ASSERT_OK(client.state_dicts().publish("pub", sd).get(kWait));

  serve.signal(SIGKILL);
  ASSERT_TRUE(serve.wait(kWait));
  transports::shm::garbage_collect(false, serve.pid());  // what the killed server left
  // While no server answers, calls wait for one (up to their own timeout).
  // One in flight when the client heard of the death fails at once: asked
  // again until this process knows (a call that waits).
  auto listed = client.keys();
  for (int i = 0; i < 100 && listed.wait_for(100ms); ++i) {
    EXPECT_ERROR(listed.get(kWait), Errc::unavailable, "went down");
    listed = client.keys();
  }
  ASSERT_FALSE(listed.ready()) << "keys() failed at once during the gap: "
                               << listed.get(kWait).status().to_string();
  auto read = client.get("x");
  // A small put over the ring answers on the caller's thread: from one of
  // its own. This process's volume holds it.
  float g = 6;
  auto put = std::async(std::launch::async,
                        [&] { return client.put("gap", TensorView::of(&g, {})).get(kBound); });
  EXPECT_FALSE(read.wait_for(100ms)) << read.get(kWait).status().to_string();
  EXPECT_EQ(put.wait_for(0ms), std::future_status::timeout) << put.get().status().to_string();

  const std::string port = address.substr(address.rfind(':') + 1);
  Child again({kTool, "serve", "--port", port, "--strategy", "per_local_rank"});
  ASSERT_FALSE(served_address(again, 60s).empty()) << again.output();
  // What waited goes on: the read and the listing see the old keys, the
  // put commits once.
  auto x_then = read.get(kBound);
  ASSERT_OK(x_then);
  EXPECT_EQ(*x_then->data_as<float>(), 4.0f);
  auto names = listed.get(kBound);
  ASSERT_OK(names);
  EXPECT_NE(std::find(names->begin(), names->end(), "w"), names->end());
  ASSERT_OK(put.get());
  EXPECT_EQ(*client.get("gap").get(kBound)->data_as<float>(), 6.0f);
  EXPECT_EQ(*client.get("x").get(kBound)->data_as<float>(), 4.0f);
  auto back = client.get("w").get(kBound);
  ASSERT_OK(back);
  EXPECT_EQ(std::memcmp(back->data(), w.data(), w.size() * sizeof(float)), 0);
  auto got = client.state_dicts().get("ckpt").get(kBound);
  ASSERT_OK(got);
  ASSERT_EQ(got->size(), sd.size());
  for (std::size_t i = 0; i < sd.size(); ++i) {
    const auto& a = sd.entries()[i];
    const auto& b = got->entries()[i];
    ASSERT_EQ(a.is_tensor(), b.is_tensor()) << a.name;
    if (a.is_tensor()) {
      EXPECT_EQ(std::memcmp(b.view.data(), a.view.data(), a.view.nbytes()), 0) << a.name;
    } else {
      EXPECT_EQ(*b.value, *a.value) << a.name;
    }
  }
  EXPECT_EQ(*client.state_dicts().latest("pub").get(kBound), 2u);
  StateDict latest;
  std::vector<float> w2(1000);
  std::vector<std::int32_t> ids2(7);
  ASSERT_OK(latest.insert("layer.weight", TensorView::of(w2.data(), {10, 100})));
  ASSERT_OK(latest.insert("ids", TensorView::of(ids2.data(), {7})));
  ASSERT_OK(latest.insert("step", Value::int64(0)));
  EXPECT_EQ(*client.state_dicts().get_latest_into("pub", latest).get(kBound), 2u);
  EXPECT_EQ(w2, w);
  EXPECT_EQ(ids2, ids);
  // Writes go on, at versions above the old ones.
  float y = 5;
  ASSERT_OK(client.put("after", TensorView::of(&y, {})).get(kBound));
  EXPECT_EQ(*client.get("after").get(kBound)->data_as<float>(), 5.0f);
  ASSERT_OK(client.put("x", TensorView::of(&y, {})).get(kBound));
  EXPECT_EQ(*client.get("x").get(kBound)->data_as<float>(), 5.0f);
  client.close();
}

// A server started again from its state directory knows it restarts a
// store: a process that never knew the store, asking right after the
// restart, before the store's volume rejoined, waits for it and reads its
// key (a server that cannot tell a restart from a fresh start answers
// "not found" there). One live server per directory; a clean close leaves
// none of its state, and the next server answers a miss at once.
TEST(Failure, AServerRestartedFromItsStateDirWaitsForItsVolumesBeforeAMiss) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  auto serve_from = [&](const std::string& port) {
    return std::make_unique<Child>(
        std::vector<std::string>{kTool, "serve", "--port", port, "--strategy", "per_local_rank",
                                 "--state-dir", dir.path(), "--rebuild-timeout-ms", "120000"});
  };
  auto serve = serve_from("0");
  const std::string address = served_address(*serve, 60s);
  ASSERT_FALSE(address.empty()) << serve->output();
  const std::string port = address.substr(address.rfind(':') + 1);
  Child holder({kPeer, "hold", address, "k"});  // its volume keeps "k"
  ASSERT_TRUE(holder.wait_for_output("ready", 60s)) << holder.output();

  Child twin({kTool, "serve", "--port", "0", "--state-dir", dir.path()});
  ASSERT_TRUE(twin.wait(kWait)) << twin.output();
  EXPECT_EQ(twin.exit_code(), 1);
  EXPECT_NE(twin.output().find("another live server holds it (serving at " + address + ")"),
            std::string::npos)
      << twin.output();

  holder.signal(SIGSTOP);  // its volume cannot rejoin until it goes on
  serve->signal(SIGKILL);
  ASSERT_TRUE(serve->wait(kWait));
  transports::shm::garbage_collect(false, serve->pid());
  serve = serve_from(port);
  ASSERT_EQ(served_address(*serve, 60s), address) << serve->output();
  StoreOptions o;
  o.placement.host_volumes = false;
  o.limits.request_timeout = 120s;
  auto fresh = Store::connect(address, o).value();
  auto read = fresh.get("k");
  EXPECT_FALSE(read.wait_for(200ms))
      << "answered before the store's volume rejoined: " << read.get(kWait).status().to_string();
  holder.signal(SIGCONT);
  auto k = read.get(kBound);
  ASSERT_OK(k);
  EXPECT_EQ(*k->data_as<float>(), 7.0f);
  EXPECT_NE(serve->output().find("restarting its store"), std::string::npos) << serve->output();
  fresh.close();

  serve->signal(SIGTERM);
  ASSERT_TRUE(serve->wait(kWait));
  EXPECT_EQ(serve->exit_code(), 0) << serve->output();
  holder.signal(SIGKILL);
  ASSERT_TRUE(holder.wait(kWait));
  transports::shm::garbage_collect(false, holder.pid());
  serve = serve_from(port);
  ASSERT_EQ(served_address(*serve, 60s), address) << serve->output();
  auto afresh = Store::connect(address, o).value();
  // Not after the 120 s the server would wait for a volume of a restarted store.
  EXPECT_ERROR(afresh.get("k").get(kBound), Errc::not_found, "");
  afresh.close();
}

// A state directory is one live server's; bad ones are refused, naming
// the option. A server closed cleanly leaves it to the next one.
TEST(Failure, AStateDirIsOneLiveServersAndBadOnesAreRefused) {
  TempDir dir;
  StoreOptions o;
  o.state_dir = dir.path();
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument,
               "state_dir '" + dir.path() + "' needs listen");
  o.listen = "127.0.0.1:0";
  o.limits.rebuild_timeout = 0ms;
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument,
               "limits.rebuild_timeout must be positive");
  o.limits.rebuild_timeout = 2s;
  o.state_dir = dir.file("none");
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument,
               "state_dir '" + dir.file("none") + "': not a directory");
  o.state_dir = dir.path();
  auto first = Store::embedded(o);
  ASSERT_OK(first);
  EXPECT_ERROR(Store::embedded(o), Errc::unavailable,
               "state_dir '" + dir.path() + "': another live server holds it (serving at " +
                   first->admin().address() + ")");
  first->close();
  auto next = Store::embedded(o);
  ASSERT_OK(next);
  EXPECT_ERROR(next->get("k").get(kBound), Errc::not_found, "");
  next->close();
}

// A client whose volume lives in its own process (per_local_rank) puts
// small values over the ring to it; the volume commits them at the
// controller in the server's process. When the server dies, such puts fail
// at once (the volume watches the controller the ring named), they do not
// wait out the request timeout for an answer that never comes.
// Puts over the fast path (the ring, or with `transport` "tcp" the tcp
// transport's small operations) to this process's volume, whose controller
// lives in a server that is killed: the next put is unavailable at once.
void killed_controller_ends_fast_puts(const std::string& transport) {
  Child serve({kTool, "serve", "--port", "0", "--strategy", "per_local_rank"});
  const std::string address = served_address(serve, 60s);
  ASSERT_FALSE(address.empty()) << serve.output();
  StoreOptions o;
  o.limits.request_timeout = 60s;
  o.limits.reconnect_timeout = 0ms;  // no failover to wait for
  o.transport.name = transport;
  auto client = Store::connect(address, o).value();
  float x = 3;
  ASSERT_OK(client.put("k", TensorView::of(&x, {})).get(kWait));
  ASSERT_TRUE(eventually([&] { return client.admin().fast_path_stats().rings >= 1; }, kBound));
  ASSERT_TRUE(eventually(
      [&] {
        EXPECT_OK(client.put("k", TensorView::of(&x, {})).get(kWait));
        return client.admin().fast_path_stats().puts >= 1;
      },
      kBound))
      << "no put went over the ring to this process's volume";

  serve.signal(SIGKILL);
  ASSERT_TRUE(serve.wait(kWait));
  const auto t0 = std::chrono::steady_clock::now();
  auto s = client.put("k2", TensorView::of(&x, {})).get(kWait);
  EXPECT_NE(s.status().code(), Errc::timeout) << "the put hung until its timeout";
  EXPECT_ERROR(s, Errc::unavailable, "");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, kBound);
  client.close();
  transports::shm::garbage_collect(false, serve.pid());  // what the killed server left
}

// A server closed in order (its store's close(), SIGTERM): calls fail at
// once; they do not wait for a failover (the store still reconnects, should
// a server come back).
TEST(Failure, AServerClosedInOrderFailsCallsAtOnce) {
  StoreOptions so;
  so.listen = "127.0.0.1:0";
  auto server = Store::embedded(so).value();
  StoreOptions o;
  o.limits.request_timeout = 60s;  // far above the bound: a wait would show
  auto client = Store::connect(server.admin().address(), o).value();
  float x = 3;
  ASSERT_OK(client.put("k", TensorView::of(&x, {})).get(kWait));
  server.close();
  auto r = client.keys().get(kBound);
  EXPECT_NE(r.status().code(), Errc::timeout) << "keys() waited for a failover";
  EXPECT_ERROR(r, Errc::unavailable, "went down");
  auto p = client.put("k2", TensorView::of(&x, {})).get(kBound);
  EXPECT_NE(p.status().code(), Errc::timeout) << "the put waited for a failover";
  EXPECT_ERROR(p, Errc::unavailable, "");
  client.close();
}

// A server that never comes back: calls that waited for it fail once the
// store gives up reconnecting, and a put held by this process's volume
// once its wait is over, each saying why.
TEST(Failure, CallsWaitingForAServerThatNeverComesBackFailNamingTheFailover) {
  Child serve({kTool, "serve", "--port", "0", "--strategy", "per_local_rank"});
  const std::string address = served_address(serve, 60s);
  ASSERT_FALSE(address.empty()) << serve.output();
  StoreOptions o;
  o.limits.request_timeout = 60s;
  o.limits.reconnect_timeout = 1s;
  auto client = Store::connect(address, o).value();
  float x = 3;
  ASSERT_OK(client.put("k", TensorView::of(&x, {})).get(kWait));

  serve.signal(SIGKILL);
  ASSERT_TRUE(serve.wait(kWait));
  const auto t0 = std::chrono::steady_clock::now();
  auto put = client.put("k2", TensorView::of(&x, {}));
  auto read = client.get("k");
  auto s = put.get(kBound);
  EXPECT_NE(s.status().code(), Errc::timeout) << "the put hung until its timeout";
  EXPECT_ERROR(s, Errc::unavailable, "a failover is in progress; no new controller within 1000 ms");
  auto r = read.get(kBound);
  EXPECT_ERROR(r, Errc::unavailable, "");
  // In flight when the death was heard of ("went down"), or waited for the
  // server and gave up.
  const auto& msg = r.status().message();
  EXPECT_TRUE(msg.find("no store came back") != std::string::npos ||
              msg.find("went down") != std::string::npos)
      << msg;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, kBound);
  // From now on, calls fail at once.
  EXPECT_ERROR(client.keys().get(kBound), Errc::unavailable, "no store came back");
  client.close();
  transports::shm::garbage_collect(false, serve.pid());  // what the killed server left
}

TEST(Failure, KilledControllerEndsFastPutsAtOnce) { killed_controller_ends_fast_puts(""); }

TEST(Failure, KilledControllerEndsTcpFastPutsAtOnce) { killed_controller_ends_fast_puts("tcp"); }

// A put whose commit is on its way over tcp when the connection stops
// answering (the server's process frozen, as a network that drops a link
// would leave it): past the request timeout the client cannot tell
// whether the commit landed, so it sends the same commit again, with its
// id, over a new connection; the volume does it once and answers both
// (docs/internals/data-path.md, "A commit sent again"). The put succeeds, and
// the controller committed one put, not two.
TEST(Failure, ACommitWhoseConnectionFailedIsSentAgainAndDoneOnce) {
  Child serve({kTool, "serve", "--port", "0"});
  const std::string address = served_address(serve, 60s);
  ASSERT_FALSE(address.empty()) << serve.output();
  StoreOptions o;
  o.transport.name = "tcp";
  o.limits.request_timeout = 2s;  // each wait for the frozen server, then the resend's
  auto client = Store::connect(address, o).value();
  float x = 1;
  ASSERT_OK(client.put("k", TensorView::of(&x, {})).get(kWait));  // opens the channel
  ASSERT_TRUE(eventually([&] { return client.admin().fast_path_stats().rings >= 1; }, kBound));
  const auto before = client.admin().controller_counters().get(kWait);
  ASSERT_OK(before);
  ASSERT_EQ(client.admin().fast_path_stats().resent_commits, 0u);

  serve.signal(SIGSTOP);
  ASSERT_TRUE(eventually([&] { return all_threads_stopped(serve.pid()); }, kBound));
  x = 2;
  auto put = std::async(std::launch::async,
                        [&] { return client.put("k", TensorView::of(&x, {})).get(kWait); });
  // The first connection timed out with the commit on its way; the same
  // commit is being sent again. Then the server runs again.
  const bool resent =
      eventually([&] { return client.admin().fast_path_stats().resent_commits >= 1; }, 30s);
  serve.signal(SIGCONT);
  const auto done = put.get();
  const auto stats = client.admin().fast_path_stats();
  ASSERT_TRUE(resent) << "the commit was not sent again; the put: " << done.status().to_string()
                      << "; channels " << stats.rings << ", puts " << stats.puts;
  ASSERT_OK(done);
  EXPECT_EQ(*client.get("k").get(kWait)->data_as<float>(), 2.0f);
  const auto after = client.admin().controller_counters().get(kWait);
  ASSERT_OK(after);
  EXPECT_EQ(after->notify_put_batch, before->notify_put_batch + 1) << "the put was committed twice";
  EXPECT_EQ(client.admin().fast_path_stats().resent_commits, 1u);
  // The new connection is the channel from now on.
  x = 3;
  ASSERT_OK(client.put("k", TensorView::of(&x, {})).get(kWait));
  EXPECT_EQ(*client.get("k").get(kWait)->data_as<float>(), 3.0f);
  EXPECT_EQ(client.admin().fast_path_stats().resent_commits, 1u);
}

TEST(Failure, MeshrunExitsNonZeroWhenARankIsKilled) {
  Child c({kMeshrun, "-n", "3", "--", "sh", "-c",
           "if [ $RANK = 2 ]; then kill -9 $$; fi; exec sleep 300"});
  ASSERT_TRUE(c.wait(kWait)) << "meshrun hung after a rank was killed";
  EXPECT_EQ(c.exit_code(), 128 + SIGKILL);
  EXPECT_NE(c.output().find("rank 2 was killed by signal 9"), std::string::npos) << c.output();
}

}  // namespace
}  // namespace meshstore::testing
