// /metrics, /healthz and /readyz (docs/operations.md): what a store serves
// its operators, read over HTTP on loopback as a scraper would.

#include <gtest/gtest.h>
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

#include "meshstore/store.hpp"
#include "meshstore/store/metrics_server.hpp"
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
const char* const kPrometheus = "/usr/bin/prometheus";

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
TEST(Metrics, EverySeriesIsDocumented) {
  std::ifstream in(std::string(MESHSTORE_SOURCE_DIR) + "/docs/operations.md");
  ASSERT_TRUE(in) << "docs/operations.md";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto store = Store::embedded(with_metrics()).value();
  const auto scrape = http_get(store.admin().metrics_address(), "/metrics").body;
  std::regex type_line("# TYPE (meshstore_[a-z_]+) ");
  int seen = 0;
  for (auto it = std::sregex_iterator(scrape.begin(), scrape.end(), type_line);
       it != std::sregex_iterator(); ++it, ++seen) {
    const std::string name = (*it)[1];
    EXPECT_NE(doc.find("`" + name + "`"), std::string::npos)
        << name << " is not in docs/operations.md";
  }
  EXPECT_GE(seen, 10) << scrape;
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
  if (access(kPrometheus, X_OK) != 0)
    GTEST_SKIP() << kPrometheus << " absent (Debian's prometheus)";
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

  TempDir dir;
  std::ofstream(dir.path() + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "scrape_configs:\n  - job_name: meshstore\n    static_configs:\n"
      << "      - targets: ['" << store.admin().metrics_address() << "']\n";
  const auto port = free_port();
  ASSERT_NE(port, 0);
  const std::string web = "127.0.0.1:" + std::to_string(port);
  Child prometheus({kPrometheus, "--config.file=" + dir.path() + "/prometheus.yml",
                    "--storage.tsdb.path=" + dir.path() + "/data", "--web.listen-address=" + web,
                    "--log.level=warn"});
  // One instant query's single value, or -1 while Prometheus has none.
  auto query = [&](const std::string& q) {
    auto r = http_get(web, "/api/v1/query?query=" + q);
    if (r.status != 200) return -1.0;
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_discarded() || j["data"]["result"].empty()) return -1.0;
    return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
  };
  double keys = -1, gets = -1;
  ASSERT_TRUE(eventually(
      [&] {
        keys = query("meshstore_keys");
        gets = query("meshstore_operation_duration_seconds_count%7Bop%3D%22get%22%7D");
        return keys == 5 && gets == gets_before + 4;
      },
      60s))
      << "keys " << keys << ", gets " << gets << "\n"
      << prometheus.output();
}

}  // namespace
}  // namespace meshstore::testing
