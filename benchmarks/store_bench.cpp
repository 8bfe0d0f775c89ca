// store_bench: user-level figures of the store, each next to a baseline
// measured in the same run (never a bare absolute time).
//
//   store_bench --scenario single --transport rpc --bytes 1GiB [--iters 5] [--json]
//       put / get_into / get of one tensor, warm (the same key reused) and
//       cold (first put), against memcpy of the same bytes.
//   store_bench --scenario small [--iters 2000] [--json]
//       p50/p99 of a 4 KiB put + get, against the round trip of a bare
//       request (exists) through the same store.
//   store_bench --smoke      both scenarios, tiny, for CI (checks they run)
//
// Scenarios run on an embedded store (one process); cross-process scenarios
// join with the meshes and data-plane transports.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "meshstore/store.hpp"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string scenario = "single";
  std::string transport = "rpc";
  std::size_t bytes = std::size_t{256} << 20;
  int iters = 0;  // 0 = scenario default
  bool json = false;
  bool smoke = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(
      stderr,
      "store_bench: %s\n"
      "usage: store_bench [--scenario single|small] [--transport NAME] [--bytes N[KiB|MiB|GiB]]\n"
      "                   [--iters N] [--json] [--smoke]\n",
      why);
  std::exit(2);
}

std::size_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit(end);
  double mul = 1;
  if (unit == "KiB" || unit == "K")
    mul = 1024.0;
  else if (unit == "MiB" || unit == "M")
    mul = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G")
    mul = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "B")
    usage(("bad size unit in '" + s + "'").c_str());
  if (!(v > 0)) usage(("bad size '" + s + "'").c_str());
  return static_cast<std::size_t>(v * mul);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage((arg + " needs a value").c_str());
      return argv[++i];
    };
    if (arg == "--scenario")
      a.scenario = next();
    else if (arg == "--transport")
      a.transport = next();
    else if (arg == "--bytes")
      a.bytes = parse_bytes(next());
    else if (arg == "--iters")
      a.iters = std::atoi(next().c_str());
    else if (arg == "--json")
      a.json = true;
    else if (arg == "--smoke")
      a.smoke = true;
    else if (arg == "--help" || arg == "-h")
      usage("help");
    else
      usage(("unknown argument '" + arg + "'").c_str());
  }
  if (a.scenario != "single" && a.scenario != "small")
    usage(("unknown scenario '" + a.scenario + "'").c_str());
  if (a.iters < 0) usage("--iters must be positive");
  return a;
}

template <class T>
T must(meshstore::Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "store_bench: %s: %s\n", what, r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}
void must(meshstore::Result<void> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "store_bench: %s: %s\n", what, r.status().to_string().c_str());
    std::exit(1);
  }
}

double secs(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

meshstore::Store open_store(const Args& a) {
  meshstore::StoreOptions o;
  o.transport = a.transport;
  return must(meshstore::Store::embedded(o), "Store::embedded");
}

void run_single(const Args& a) {
  const std::size_t n = a.smoke ? (std::size_t{4} << 20) : a.bytes;
  const int iters = a.iters ? a.iters : (a.smoke ? 2 : 5);
  auto store = open_store(a);
  std::vector<std::uint8_t> src(n), dst(n), scratch(n);
  for (std::size_t i = 0; i < n; i += 4096) src[i] = static_cast<std::uint8_t>(i >> 12);
  std::memset(dst.data(), 0, n);
  std::memset(scratch.data(), 0, n);
  const auto len = static_cast<std::int64_t>(n);
  const meshstore::TensorView in(src.data(), meshstore::DType::uint8, {len});
  const meshstore::TensorView out(dst.data(), meshstore::DType::uint8, {len});

  std::vector<double> memcpy_t, put_t, get_into_t, get_t;
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    std::memcpy(scratch.data(), src.data(), n);
    memcpy_t.push_back(secs(t0));
  }
  auto t0 = Clock::now();
  must(store.put("bench", in).get(600s), "cold put");
  const double cold = secs(t0);
  must(store.put("bench", in).get(600s), "warm-up put");  // the next version needs new memory once
  for (int i = 0; i < iters; ++i) {
    if (!a.json) std::fprintf(stderr, "\rstore_bench single: round %d/%d", i + 1, iters);
    t0 = Clock::now();
    must(store.put("bench", in).get(600s), "put");
    put_t.push_back(secs(t0));
    t0 = Clock::now();
    must(store.get_into("bench", out).get(600s), "get_into");
    get_into_t.push_back(secs(t0));
    t0 = Clock::now();
    auto t = must(store.get("bench").get(600s), "get");
    get_t.push_back(secs(t0));
  }
  if (!a.json) std::fprintf(stderr, "\n");
  if (std::memcmp(src.data(), dst.data(), n) != 0) {
    std::fprintf(stderr, "store_bench: get_into returned different bytes\n");
    std::exit(1);
  }
  const double gb = static_cast<double>(n) / 1e9;
  const double m = median(memcpy_t), p = median(put_t), gi = median(get_into_t), g = median(get_t);
  if (a.json) {
    std::printf(
        "{\"scenario\":\"single\",\"transport\":\"%s\",\"bytes\":%zu,\"iters\":%d,\"processes\":1,"
        "\"memcpy_gbps\":%.3f,\"put_gbps\":%.3f,\"put_cold_gbps\":%.3f,\"get_into_gbps\":%.3f,"
        "\"get_gbps\":%.3f,"
        "\"put_vs_memcpy\":%.3f,\"get_into_vs_memcpy\":%.3f,\"get_vs_memcpy\":%.3f,\"put_cold_vs_"
        "memcpy\":%.3f}\n",
        a.transport.c_str(), n, iters, gb / m, gb / p, gb / cold, gb / gi, gb / g, m / p, m / gi,
        m / g, m / cold);
    return;
  }
  std::printf(
      "scenario single: %zu bytes, transport %s, embedded store (1 process), median of %d\n", n,
      a.transport.c_str(), iters);
  std::printf("  %-14s %10s %10s %12s\n", "operation", "seconds", "GB/s", "vs memcpy");
  std::printf("  %-14s %10.4f %10.2f %12s\n", "memcpy", m, gb / m, "1.00");
  std::printf("  %-14s %10.4f %10.2f %12.2f\n", "put (cold)", cold, gb / cold, m / cold);
  std::printf("  %-14s %10.4f %10.2f %12.2f\n", "put (warm)", p, gb / p, m / p);
  std::printf("  %-14s %10.4f %10.2f %12.2f\n", "get_into", gi, gb / gi, m / gi);
  std::printf("  %-14s %10.4f %10.2f %12.2f\n", "get (allocates)", g, gb / g, m / g);
}

void run_small(const Args& a) {
  const int iters = a.iters ? a.iters : (a.smoke ? 50 : 2000);
  auto store = open_store(a);
  std::vector<std::uint8_t> src(4096, 7), dst(4096);
  const meshstore::TensorView in(src.data(), meshstore::DType::uint8, {4096});
  const meshstore::TensorView out(dst.data(), meshstore::DType::uint8, {4096});
  must(store.put("small", in).get(60s), "put");
  std::vector<double> rtt, put_get;
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    must(store.exists("small").get(60s), "exists");
    rtt.push_back(secs(t0) * 1e6);
    t0 = Clock::now();
    must(store.put("small", in).get(60s), "put");
    must(store.get_into("small", out).get(60s), "get_into");
    put_get.push_back(secs(t0) * 1e6);
  }
  const double rtt50 = percentile(rtt, 0.5), pg50 = percentile(put_get, 0.5),
               pg99 = percentile(put_get, 0.99);
  if (a.json) {
    std::printf(
        "{\"scenario\":\"small\",\"transport\":\"%s\",\"bytes\":4096,\"iters\":%d,\"processes\":1,"
        "\"rtt_p50_us\":%.2f,\"put_get_p50_us\":%.2f,\"put_get_p99_us\":%.2f,\"small_put_get_vs_"
        "rtt\":%.2f}\n",
        a.transport.c_str(), iters, rtt50, pg50, pg99, pg50 / rtt50);
    return;
  }
  std::printf(
      "scenario small: 4 KiB put + get_into, transport %s, embedded store (1 process), %d rounds\n",
      a.transport.c_str(), iters);
  std::printf("  bare round trip (exists) p50 %8.1f us\n", rtt50);
  std::printf("  put + get_into           p50 %8.1f us   p99 %8.1f us   (%.1f round trips)\n", pg50,
              pg99, pg50 / rtt50);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.smoke) {
    Args s = a;
    s.scenario = "single";
    run_single(s);
    s.scenario = "small";
    run_small(s);
    return 0;
  }
  if (a.scenario == "single")
    run_single(a);
  else
    run_small(a);
  return 0;
}
