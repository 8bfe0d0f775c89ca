// /metrics, /healthz and /readyz (docs/operations.md): what a store serves
// its operators, read over HTTP on loopback as a scraper would.

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "meshstore/logging.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store/metrics_server.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"
#include "testing/prometheus.hpp"
#include "testing/sockets.hpp"
#include "testing/subprocess.hpp"
#include "testing/temp_dir.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

using namespace std::chrono_literals;
using store::http_get;
using store::HttpReply;

const char* const kPeer = MESHSTORE_TEST_PEER_PATH;
const char* const kTool = MESHSTORE_TOOL_PATH;
const char* const kPromtool = "/usr/bin/promtool";

// The value of the sample `series` (name and labels exactly as written) in
// a scrape; -1 when it is absent.
double sample(const std::string& scrape, const std::string& series) {
  const auto at = scrape.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(scrape.substr(at + series.size() + 2));
}

StoreOptions with_metrics() {
  StoreOptions o;
  o.metrics = "127.0.0.1:0";
  return o;
}

TEST(Metrics, AStoreServesItsCallsAndVolumesInPrometheusTextFormat) {
  auto store = Store::embedded(with_metrics()).value();
  const auto at = store.admin().metrics_address();
  ASSERT_TRUE(std::regex_match(at, std::regex("127\\.0\\.0\\.1:[1-9][0-9]*"))) << at;
  // The counts are the process's: earlier tests of this process add theirs.
  auto count = [](const std::string& scrape, const std::string& op) {
    return sample(scrape, "meshstore_operation_duration_seconds_count{op=\"" + op + "\"}");
  };
  const auto before = http_get(at, "/metrics").body;
  auto failures = [](const std::string& scrape) {
    return std::max(
        0.0, sample(scrape, "meshstore_operation_failures_total{code=\"not_found\",op=\"get\"}"));
  };
  std::vector<float> w(1024, 2.0f);
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_OK(store.put(key, TensorView::of(w.data(), {1024})).get(kWait));
  }
  ASSERT_OK(store.get("a").get(kWait));
  ASSERT_OK(store.get_into("b", TensorView::of(w.data(), {1024})).get(kWait));
  ASSERT_EQ(store.get("missing").get(kWait).status().code(), Errc::not_found);
  const auto volume = store.admin().stats().get(kWait).value().at(0).volume_id;

  // A call is counted once its future's callbacks ran, which may be just
  // after get() returned on this thread.
  std::string scrape;
  ASSERT_TRUE(eventually([&] {
    scrape = http_get(at, "/metrics").body;
    return count(scrape, "get") == count(before, "get") + 2;
  })) << scrape;
  EXPECT_EQ(count(scrape, "put"), count(before, "put") + 3);
  EXPECT_EQ(count(scrape, "get_into"), count(before, "get_into") + 1);
  EXPECT_EQ(failures(scrape), failures(before) + 1);
  EXPECT_EQ(sample(scrape, "meshstore_keys{volume=\"" + volume + "\"}"), 3);
  EXPECT_EQ(sample(scrape, "meshstore_held_bytes{volume=\"" + volume + "\"}"), 3 * 4096);
  EXPECT_EQ(sample(scrape, "meshstore_volume_up{volume=\"" + volume + "\"}"), 1);
  EXPECT_GE(sample(scrape, "meshstore_controller_commits_total"), 3);
  EXPECT_GE(sample(scrape, "meshstore_client_channel_puts_total"), 3);
  EXPECT_NE(scrape.find("# TYPE meshstore_operation_duration_seconds histogram"),
            std::string::npos);

  const auto health = http_get(at, "/healthz");
  EXPECT_EQ(health.status, 200) << health.error;
  EXPECT_EQ(health.body, "ok\n");
  const auto ready = http_get(at, "/readyz");
  EXPECT_EQ(ready.status, 200) << ready.error;
  EXPECT_EQ(http_get(at, "/nothing").status, 404);
}

TEST(Metrics, TheScrapeParsesWithPromtool) {
  if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << kPromtool << " absent (Debian's prometheus)";
  auto store = Store::embedded(with_metrics()).value();
  float x = 1;
  ASSERT_OK(store.put("x", TensorView::of(&x, {})).get(kWait));
  ASSERT_EQ(store.get("nope").get(kWait).status().code(), Errc::not_found);
  TempDir dir;
  const auto file = dir.path() + "/scrape.txt";
  std::ofstream(file) << http_get(store.admin().metrics_address(), "/metrics").body;
  const std::string cmd = std::string(kPromtool) + " check metrics < " + file + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string said;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) said += buf;
  EXPECT_EQ(pclose(p), 0) << said;
}

TEST(Metrics, ABadAddressOrABusyPortIsRefusedWithTheOptionNamed) {
  StoreOptions o;
  o.metrics = "no-port";
  auto bad = Store::embedded(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Errc::invalid_argument);
  EXPECT_NE(bad.status().message().find("metrics"), std::string::npos) << bad.status();

  auto first = Store::embedded(with_metrics()).value();
  o.metrics = first.admin().metrics_address();
  auto busy = Store::embedded(o);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.status().code(), Errc::unavailable);
  EXPECT_NE(busy.status().message().find("cannot serve metrics on " + o.metrics), std::string::npos)
      << busy.status();
}

// Every series a scrape holds (with a controller, volumes and a client) is
// in the reference, docs/operations.md, written as `name`.
// A full volume with eviction "lru" counts what it evicts; the client
// counts its channels by the transport each serves (a ring: shm).
TEST(Metrics, EvictionsAndChannelsByTransportAreCounted) {
  StoreOptions o = with_metrics();
  o.limits.volume_capacity_bytes = std::uint64_t{1} << 20;  // four 256 KiB tensors
  o.limits.eviction = "lru";
  auto store = Store::embedded(o).value();
  std::vector<float> chunk(64 * 1024, 1.0f);  // 256 KiB
  for (int i = 0; i < 6; ++i) {
    ASSERT_OK(
        store.put("k" + std::to_string(i), TensorView::of(chunk.data(), {64 * 1024})).get(kWait));
  }
  const auto volume = store.admin().stats().get(kWait).value().at(0);
  EXPECT_EQ(volume.evictions, 2u);
  EXPECT_EQ(volume.evicted_bytes, 2u * 256 * 1024);
  const auto scrape = http_get(store.admin().metrics_address(), "/metrics").body;
  const std::string l = "{volume=\"" + volume.volume_id + "\"}";
  EXPECT_EQ(sample(scrape, "meshstore_evictions_total" + l), 2) << scrape;
  EXPECT_EQ(sample(scrape, "meshstore_evicted_bytes_total" + l), 2 * 256 * 1024) << scrape;
  const auto channels = store.admin().fast_path_stats().channels;
  ASSERT_EQ(channels.size(), 1u);
  EXPECT_EQ(channels.begin()->first, "shm");
  EXPECT_EQ(sample(scrape, "meshstore_client_channels{transport=\"shm\"}"), 1) << scrape;
}

// A direct publish lends the caller's memory: the process reports the loan
// until the store gives the memory back (the version's reclaim).
TEST(Metrics, AProcessReportsItsDirectPublishLoansUntilReclaimed) {
  auto store = Store::embedded(with_metrics()).value();
  const auto at = store.admin().metrics_address();
  const double before = sample(http_get(at, "/metrics").body, "meshstore_client_loans");
  ASSERT_GE(before, 0);
  std::vector<float> w(64 * 1024, 2.0f);
  StateDict sd;
  ASSERT_OK(sd.insert("w", TensorView::of(w.data(), {64 * 1024})));
  PublishOptions direct;
  direct.mode = PublishMode::direct;
  auto published = store.state_dicts().publish("pub", sd, direct).get(kWait);
  ASSERT_OK(published);
  EXPECT_EQ(sample(http_get(at, "/metrics").body, "meshstore_client_loans"), before + 1);
  ASSERT_OK(published->reclaim().get(kWait));
  ASSERT_TRUE(eventually(
      [&] { return sample(http_get(at, "/metrics").body, "meshstore_client_loans") == before; }));
}

// An endpoint any host can reach says so when it starts, as every listener
// does (internal::warn_if_exposed); one on loopback says nothing.
TEST(Metrics, BeyondLoopbackTheEndpointWarnsWhatAnyoneCanRead) {
  std::ostringstream seen;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(seen);
  auto logger = log::get("network");
  logger->sinks().push_back(sink);
  {
    auto quiet = Store::embedded(with_metrics()).value();
    EXPECT_EQ(seen.str().find("not loopback"), std::string::npos) << seen.str();
    StoreOptions every;
    every.metrics = "0.0.0.0:0";
    auto exposed = Store::embedded(every).value();
    EXPECT_NE(seen.str().find("the metrics endpoint listens on 0.0.0.0:"), std::string::npos)
        << seen.str();
    EXPECT_NE(seen.str().find("can read the store's series"), std::string::npos) << seen.str();
  }
  logger->sinks().pop_back();
}

// The series of a scrape, each checked to be in the reference as `name`.
int expect_documented(const std::string& scrape) {
  std::ifstream in(std::string(MESHSTORE_SOURCE_DIR) + "/docs/operations.md");
  EXPECT_TRUE(in) << "docs/operations.md";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::regex type_line("# TYPE (meshstore_[a-z_]+) ");
  int seen = 0;
  for (auto it = std::sregex_iterator(scrape.begin(), scrape.end(), type_line);
       it != std::sregex_iterator(); ++it, ++seen) {
    const std::string name = (*it)[1];
    EXPECT_NE(doc.find("`" + name + "`"), std::string::npos)
        << name << " is not in docs/operations.md";
  }
  return seen;
}

TEST(Metrics, EverySeriesIsDocumented) {
  auto store = Store::embedded(with_metrics()).value();
  const auto scrape = http_get(store.admin().metrics_address(), "/metrics").body;
  EXPECT_GE(expect_documented(scrape), 10) << scrape;
}

// `meshstore serve --log-format json`: every line it logs is one JSON
// object with the fields a log shipper reads.
TEST(Metrics, ServeWritesJsonLogLines) {
  Child serve({kTool, "serve", "--port", "0", "--log-format", "json", "--log-level", "info"});
  ASSERT_FALSE(served_address(serve, kWait).empty()) << serve.output();
  serve.signal(SIGTERM);
  ASSERT_TRUE(serve.wait(kWait));
  EXPECT_EQ(serve.exit_code(), 0) << serve.output();
  std::istringstream in(serve.output());
  int logged = 0;
  bool store_up = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("meshstore ", 0) == 0) continue;  // the tool's own lines on stdout
    auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << line;
    for (const char* field : {"time", "level", "logger", "message"}) {
      EXPECT_TRUE(j.contains(field)) << field << " missing: " << line;
    }
    store_up |= j["message"].get<std::string>().rfind("store up", 0) == 0;
    ++logged;
  }
  EXPECT_GE(logged, 1);
  EXPECT_TRUE(store_up) << serve.output();
}

TEST(Metrics, AStoreWithoutMetricsServesNone) {
  auto store = Store::embedded().value();
  EXPECT_EQ(store.admin().metrics_address(), "");
}

// /readyz of a server whose only volume lives in another process: 503 with
// the reason while that process is dead, 200 again once one rejoins.
TEST(Metrics, ReadyzSaysWhyWhileTheOnlyVolumesProcessIsDead) {
  StoreOptions o = with_metrics();
  o.listen = "127.0.0.1:0";
  o.placement.strategy = "per_local_rank";
  o.placement.local_rank = -1;  // not a rank: the server holds no volume
  auto server = Store::embedded(o).value();
  const auto at = server.admin().metrics_address();
  auto none = http_get(at, "/readyz");
  EXPECT_EQ(none.status, 503);
  EXPECT_EQ(none.body, "not ready: no volume is serving\n");

  auto peer = std::make_unique<Child>(
      std::vector<std::string>{kPeer, "hold", server.admin().address(), "held"});
  ASSERT_TRUE(peer->wait_for_output("ready", 60s)) << peer->output();
  ASSERT_TRUE(eventually([&] { return http_get(at, "/readyz").status == 200; }));

  peer->signal(SIGKILL);
  ASSERT_TRUE(peer->wait(kWait));
  HttpReply down;
  ASSERT_TRUE(eventually([&] {
    down = http_get(at, "/readyz");
    return down.status == 503;
  })) << down.body;
  EXPECT_NE(down.body.find("not ready: "), std::string::npos) << down.body;

  peer = std::make_unique<Child>(
      std::vector<std::string>{kPeer, "hold", server.admin().address(), "again"});
  ASSERT_TRUE(peer->wait_for_output("ready", 60s)) << peer->output();
  ASSERT_TRUE(eventually([&] { return http_get(at, "/readyz").status == 200; }));
}

// /readyz of a process joined to a `meshstore serve` that is killed: 503
// saying a failover is under way at once (not after a scrape's wait), and
// 200 again once a server is back at the address and the volumes rejoined.
TEST(Metrics, ReadyzSaysAFailoverIsUnderWayUntilTheServerIsBack) {
  Child serve({kTool, "serve", "--port", "0", "--strategy", "per_local_rank"});
  const std::string address = served_address(serve, 60s);
  ASSERT_FALSE(address.empty()) << serve.output();
  StoreOptions o = with_metrics();
  o.limits.request_timeout = 30s;
  auto store = Store::connect(address, o).value();
  const auto at = store.admin().metrics_address();
  float x = 3;
  ASSERT_OK(store.put("x", TensorView::of(&x, {})).get(kWait));
  ASSERT_TRUE(eventually([&] { return http_get(at, "/readyz").status == 200; }));

  serve.signal(SIGKILL);
  ASSERT_TRUE(serve.wait(kWait));
  // (The first answers may say the controller did not answer a scrape's
  // question: the store learns of the death a moment later.)
  HttpReply down;
  ASSERT_TRUE(eventually([&] {
    down = http_get(at, "/readyz", 2000);
    return down.status == 503 && down.body.find("a failover is under way") != std::string::npos;
  })) << down.status
      << " " << down.body << down.error;
  EXPECT_EQ(http_get(at, "/healthz").status, 200);

  const std::string port = address.substr(address.rfind(':') + 1);
  Child again({kTool, "serve", "--port", port, "--strategy", "per_local_rank"});
  ASSERT_FALSE(served_address(again, 60s).empty()) << again.output();
  HttpReply up;
  ASSERT_TRUE(eventually([&] {
    up = http_get(at, "/readyz");
    return up.status == 200;
  })) << up.body;
  EXPECT_EQ(*store.get("x").get(kWait)->data_as<float>(), 3.0f);
  store.close();
  transports::shm::garbage_collect(false, serve.pid());  // what the killed server left
}

// `meshstore agent --metrics`: the agent's health and its (no) workers,
// without the calls' series a store process has.
TEST(Metrics, AnAgentServesItsHealthAndItsProcesses) {
  Child agent({kTool, "agent", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"});
  ASSERT_TRUE(agent.wait_for_output("/metrics\n", 60s)) << agent.output();
  std::smatch m;
  const auto out = agent.output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex("metrics on http://([0-9.:]+)/metrics"))) << out;
  const std::string at = m[1];
  EXPECT_EQ(http_get(at, "/healthz").status, 200);
  const auto ready = http_get(at, "/readyz");
  EXPECT_EQ(ready.status, 200) << ready.body;
  const auto scrape = http_get(at, "/metrics");
  ASSERT_EQ(scrape.status, 200) << scrape.error;
  EXPECT_EQ(sample(scrape.body, "meshstore_agent_processes"), 0) << scrape.body;
  EXPECT_EQ(sample(scrape.body, "meshstore_agent_jobs"), 0) << scrape.body;
  EXPECT_EQ(scrape.body.find("meshstore_operation_duration_seconds"), std::string::npos);
  EXPECT_EQ(expect_documented(scrape.body), 5) << scrape.body;
  agent.signal(SIGTERM);
  ASSERT_TRUE(agent.wait(kWait));
  EXPECT_EQ(agent.exit_code(), 0) << agent.output();
}

// `meshstore top --once` against a store whose calls this process makes
// while the tool's window is open: the volume, the calls with their rates
// and percentiles, and the largest key first.
TEST(Metrics, TopShowsTheVolumesTheCallsAndTheLargestKeys) {
  StoreOptions o = with_metrics();
  o.listen = "127.0.0.1:0";
  auto store = Store::embedded(o).value();
  std::vector<float> big(64 * 1024, 1.0f), small(16, 1.0f);
  ASSERT_OK(store.put("big", TensorView::of(big.data(), {64 * 1024})).get(kWait));
  ASSERT_OK(store.put("small", TensorView::of(small.data(), {16})).get(kWait));
  const auto volume = store.admin().stats().get(kWait).value().at(0).volume_id;
  Child top({kTool, "top", "--once", "--store", store.admin().address(), "--metrics",
             store.admin().metrics_address(), "--interval-ms", "1500", "--keys", "1"});
  // Calls until the tool has printed its frame (bounded by kWait).
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (!top.wait(0ms) && std::chrono::steady_clock::now() < until) {
    ASSERT_OK(store.put("small", TensorView::of(small.data(), {16})).get(kWait));
    ASSERT_OK(store.get_into("small", TensorView::of(small.data(), {16})).get(kWait));
  }
  ASSERT_TRUE(top.wait(kWait));
  const auto out = top.output();
  EXPECT_EQ(top.exit_code(), 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(volume + " +serving +[0-9.]+ KiB +unlimited +2 ")))
      << out;
  EXPECT_TRUE(
      std::regex_search(out, std::regex("\nput +[0-9.]+ +[0-9.]+ (us|ms) +[0-9.]+ (us|ms)")))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\nget_into +[0-9.]+ "))) << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex("2 keys; the 1 holding the most bytes:\n +big +256\\.0 KiB")))
      << out;
}

// Debian's real Prometheus scrapes a store on loopback; its HTTP API then
// answers the keys the test put and the count of its gets.
TEST(Metrics, ARealPrometheusScrapesTheStore) {
  if (access(Prometheus::kPath, X_OK) != 0)
    GTEST_SKIP() << Prometheus::kPath << " absent (Debian's prometheus)";
  auto store = Store::embedded(with_metrics()).value();
  std::vector<float> w(256, 1.0f);
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK(store.put("k" + std::to_string(i), TensorView::of(w.data(), {256})).get(kWait));
  }
  // The process's counts so far (earlier tests of this process included).
  const auto gets_before = sample(http_get(store.admin().metrics_address(), "/metrics").body,
                                  "meshstore_operation_duration_seconds_count{op=\"get\"}");
  ASSERT_GE(gets_before, 0);
  for (int i = 0; i < 4; ++i) ASSERT_OK(store.get("k0").get(kWait));

  Prometheus prometheus("  - job_name: meshstore\n    static_configs:\n      - targets: ['" +
                        store.admin().metrics_address() + "']\n");
  ASSERT_TRUE(prometheus.ok());
  double keys = -1, gets = -1;
  ASSERT_TRUE(eventually(
      [&] {
        keys = prometheus.query("meshstore_keys");
        gets = prometheus.query("meshstore_operation_duration_seconds_count%7Bop%3D%22get%22%7D");
        return keys == 5 && gets == gets_before + 4;
      },
      60s))
      << "keys " << keys << ", gets " << gets << "\n"
      << prometheus.output();
}

}  // namespace
}  // namespace meshstore::testing
