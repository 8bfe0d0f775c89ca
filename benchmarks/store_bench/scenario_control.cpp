// store_bench --scenario control: the control plane at scale. A peer
// process holds the store (controller, strategy and one volume, its objects
// in process memory: a million tiny objects would be a million
// shared-memory segments); this process connects clients to it, as other
// processes do, over loopback. In one run:
// - commits per second of one client putting a tiny key (4 bytes, carried
//   inline: one round trip to the volume, which commits at the controller
//   in its own process): one call at a time, 64 calls in flight, and 1,000
//   keys a call (put_batch);
// - exists (one round trip to the controller's index) p50/p99, and a tiny
//   get's p50, as the index grows to --keys (default 1,000,000);
// - the peer process's memory per key (its RSS growth over the keys added:
//   the controller's index and the volume's bookkeeping, 4 payload bytes a
//   key);
// - --clients clients (default 64) connected at once, each committing and
//   checking keys of its own: their commits per second together and the
//   p99 of their exists.
// The baseline of the run is the bare round trip: exists on an index of a
// thousand keys.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../bench_util.hpp"
#include "peer.hpp"
#include "scenarios.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {
namespace {

// The resident memory of process `pid`, in bytes (VmRSS).
std::uint64_t rss_bytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  die("no VmRSS for process " + std::to_string(pid));
}

meshstore::Store connect_client(std::uint16_t port, std::int64_t rank) {
  meshstore::StoreOptions o;
  o.placement.host_volumes = false;
  o.placement.local_rank = -1;
  o.placement.rank = static_cast<int>(rank);
  o.limits.request_timeout = 120s;
  return must(meshstore::Store::connect("127.0.0.1:" + std::to_string(port), o), "connect");
}

struct Point {
  std::size_t keys = 0;
  double exists_p50 = 0, exists_p99 = 0, get_p50 = 0;  // microseconds
  std::uint64_t rss = 0;
};

// exists and get of `samples` keys drawn from the first `keys` ("k/I").
Point measure(meshstore::Store& store, std::size_t keys, int samples, pid_t server) {
  std::mt19937_64 gen(keys);
  std::uniform_int_distribution<std::size_t> pick(0, keys - 1);
  std::vector<double> ex, get;
  for (int i = 0; i < samples; ++i) {
    const std::string key = "k/" + std::to_string(pick(gen));
    auto t0 = Clock::now();
    if (!must(store.exists(key).get(60s), "exists")) die("exists: '" + key + "' is missing");
    ex.push_back(secs(t0) * 1e6);
    t0 = Clock::now();
    must(store.get(key).get(60s), "get");
    get.push_back(secs(t0) * 1e6);
  }
  return Point{keys, percentile(ex, 0.5), percentile(ex, 0.99), percentile(get, 0.5),
               rss_bytes(server)};
}

// Puts keys "k/FIRST" up to "k/LAST" (excluded), 1,000 a call.
double fill(meshstore::Store& store, std::size_t first, std::size_t last) {
  static float one = 1.0f;
  const meshstore::TensorView v(&one, meshstore::DType::float32, {});
  const auto t0 = Clock::now();
  for (std::size_t at = first; at < last;) {
    std::vector<std::pair<std::string, meshstore::TensorView>> batch;
    for (; at < last && batch.size() < 1000; ++at) batch.emplace_back("k/" + std::to_string(at), v);
    must(store.put_batch(std::move(batch)).get(120s), "put_batch");
  }
  return secs(t0);
}

}  // namespace

void run_control(const Args& a) {
  const std::size_t max_keys = a.keys ? a.keys : (a.smoke ? 4000 : 1000000);
  const int clients = a.clients ? a.clients : (a.smoke ? 4 : 64);
  const int samples = a.smoke ? 50 : 1000;
  if (max_keys < 1000) usage("--keys must be at least 1000");
  auto peer = start_peer(0, false, true);
  const pid_t server = peer->cma_pid;
  auto store = connect_client(peer->store_port, 1);
  float one = 1.0f;
  const meshstore::TensorView v(&one, meshstore::DType::float32, {});

  // Commits, one key a call: one at a time, then 64 in flight.
  std::fprintf(stderr, "store_bench control: single commits\n");
  const int singles = a.smoke ? 200 : 5000;
  auto t0 = Clock::now();
  for (int i = 0; i < singles; ++i) must(store.put("s/" + std::to_string(i), v).get(60s), "put");
  const double single_rate = singles / secs(t0);
  const int pipelined = a.smoke ? 1000 : 50000;
  std::vector<meshstore::Future<void>> window;
  t0 = Clock::now();
  for (int i = 0; i < pipelined; ++i) {
    if (window.size() == 64) {
      must(window.front().get(60s), "put");
      window.erase(window.begin());
    }
    window.push_back(store.put("p/" + std::to_string(i), v));
  }
  for (auto& f : window) must(f.get(60s), "put");
  const double pipelined_rate = pipelined / secs(t0);
  must(store
           .remove_batch([&] {
             std::vector<std::string> keys;
             for (int i = 0; i < singles; ++i) keys.push_back("s/" + std::to_string(i));
             for (int i = 0; i < pipelined; ++i) keys.push_back("p/" + std::to_string(i));
             return keys;
           }())
           .get(120s),
       "remove");

  // The index grows, 1,000 keys a call; measured at each decade.
  std::vector<Point> points;
  double fill_secs = 0;
  std::size_t filled = 0;
  const std::uint64_t rss0 = rss_bytes(server);
  for (std::size_t at : {std::size_t{1000}, std::size_t{10000}, std::size_t{100000},
                         std::size_t{1000000}, max_keys}) {
    if (at > max_keys || at <= filled) continue;
    std::fprintf(stderr, "store_bench control: index of %zu keys\n", at);
    fill_secs += fill(store, filled, at);
    filled = at;
    points.push_back(measure(store, filled, samples, server));
  }
  const double batch_rate = static_cast<double>(filled) / fill_secs;
  const double per_key =
      static_cast<double>(points.back().rss - rss0) / static_cast<double>(points.back().keys);

  // Many clients at once, each on keys of its own.
  std::fprintf(stderr, "store_bench control: %d clients\n", clients);
  std::vector<meshstore::Store> many;
  for (int c = 0; c < clients; ++c) many.push_back(connect_client(peer->store_port, 2 + c));
  const int per_client = a.smoke ? 20 : 200;
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(clients));
  std::vector<std::thread> threads;
  t0 = Clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto& s = many[static_cast<std::size_t>(c)];
      for (int i = 0; i < per_client; ++i) {
        const std::string key = "c" + std::to_string(c) + "/" + std::to_string(i);
        must(s.put(key, v).get(120s), "put");
        const auto t1 = Clock::now();
        if (!must(s.exists(key).get(120s), "exists")) die("a client's key is missing");
        lat[static_cast<std::size_t>(c)].push_back(secs(t1) * 1e6);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double many_rate = static_cast<double>(clients) * per_client / secs(t0);
  std::vector<double> all;
  for (const auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  const double many_p50 = percentile(all, 0.5), many_p99 = percentile(all, 0.99);
  for (auto& s : many) s.close();
  many.clear();
  store.close();

  const Point& low = points.front();
  const Point& high = points.back();
  const double flat = high.exists_p50 / low.exists_p50;
  if (a.json) {
    std::printf(
        "{\"scenario\":\"control\",\"single_commits_per_s\":%.0f,\"pipelined_commits_per_s\":%.0f,"
        "\"batched_commits_per_s\":%.0f,\"server_bytes_per_key\":%.0f,\"points\":[",
        single_rate, pipelined_rate, batch_rate, per_key);
    for (std::size_t i = 0; i < points.size(); ++i) {
      std::printf(
          "%s{\"keys\":%zu,\"exists_p50_us\":%.1f,\"exists_p99_us\":%.1f,"
          "\"get_p50_us\":%.1f,\"server_rss\":%llu}",
          i ? "," : "", points[i].keys, points[i].exists_p50, points[i].exists_p99,
          points[i].get_p50, static_cast<unsigned long long>(points[i].rss));
    }
    std::printf(
        "],\"exists_p50_growth\":%.2f,\"clients\":%d,\"clients_commits_per_s\":%.0f,"
        "\"clients_exists_p50_us\":%.1f,\"clients_exists_p99_us\":%.1f}\n",
        flat, clients, many_rate, many_p50, many_p99);
    return;
  }
  std::printf("scenario control: a store in a peer process, clients over loopback\n");
  std::printf("  commits, one key a call, one at a time  %9.0f /s  (%.1f us each)\n", single_rate,
              1e6 / single_rate);
  std::printf("  commits, one key a call, 64 in flight   %9.0f /s\n", pipelined_rate);
  std::printf("  commits, 1,000 keys a call (put_batch)  %9.0f /s  (goal 100,000)\n", batch_rate);
  std::printf("  %10s %14s %14s %12s %14s\n", "index keys", "exists p50 us", "exists p99 us",
              "get p50 us", "server RSS MB");
  for (const auto& p : points) {
    std::printf("  %10zu %14.1f %14.1f %12.1f %14.1f\n", p.keys, p.exists_p50, p.exists_p99,
                p.get_p50, static_cast<double>(p.rss) / 1e6);
  }
  std::printf("  exists p50 at %zu keys / at %zu keys: %.2f x  (goal: within 1.5 x)\n", high.keys,
              low.keys, flat);
  std::printf("  server memory per key: %.0f bytes  (goal: at most 1,024)\n", per_key);
  std::printf(
      "  %d clients at once: %.0f commits/s together, exists p50 %.1f us, p99 %.1f us "
      "(%.1f x and %.1f x the bare round trip)\n",
      clients, many_rate, many_p50, many_p99, many_p50 / low.exists_p50, many_p99 / low.exists_p50);
}

}  // namespace meshstore::bench
