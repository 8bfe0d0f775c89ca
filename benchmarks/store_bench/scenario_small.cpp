// store_bench --scenario small: p50/p99 of a 4 KiB put + get_into, against
// the round trip of a bare request (exists) to the same store.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../bench_util.hpp"
#include "peer.hpp"
#include "scenarios.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {

void run_small(const Args& a) {
  const int iters = a.iters ? a.iters : (a.smoke ? 50 : 2000);
  auto session = open_session(a);
  auto& store = session.store;
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
        "{\"scenario\":\"small\",\"transport\":\"%s\",\"bytes\":4096,\"iters\":%d,\"processes\":%d,"
        "\"rtt_p50_us\":%.2f,\"put_get_p50_us\":%.2f,\"put_get_p99_us\":%.2f,\"small_put_get_vs_"
        "rtt\":%.2f}\n",
        a.transport.c_str(), iters, a.processes, rtt50, pg50, pg99, pg50 / rtt50);
    return;
  }
  std::printf(
      "scenario small: 4 KiB put + get_into, transport %s, %s, %d rounds\n", a.transport.c_str(),
      a.processes == 2 ? "client process -> store in a peer process" : "embedded store", iters);
  std::printf("  bare round trip (exists) p50 %8.1f us\n", rtt50);
  std::printf("  put + get_into           p50 %8.1f us   p99 %8.1f us   (%.1f round trips)\n", pg50,
              pg99, pg50 / rtt50);
}

}  // namespace meshstore::bench
