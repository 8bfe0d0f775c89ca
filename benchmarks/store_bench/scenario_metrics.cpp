// store_bench --scenario metrics: what serving metrics costs the calls
// (StoreOptions::metrics: each call's latency observed in a histogram,
// docs/operations.md). Two embedded stores on this host, one serving
// metrics and one not, take the same calls alternately in one run, in
// rounds of 100 so that drift hits both alike:
// - a 4 KiB put + get_into (p50 and p99), --iters pairs (default 4,000;
//   400 with --smoke);
// - put and get_into of one 64 MiB tensor (8 MiB with --smoke), 7 times.
// Each figure is given with its ratio on / off (goal: within 3 %); the
// baseline beside the bulk rows is memcpy of the tensor on one core.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../bench_util.hpp"
#include "meshstore/store.hpp"
#include "scenarios.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {
namespace {

meshstore::Store store_with(bool metrics) {
  meshstore::StoreOptions o;
  if (metrics) o.metrics = "127.0.0.1:0";
  o.limits.request_timeout = 300s;
  return must(meshstore::Store::embedded(o), "embedded store");
}

struct Figures {
  std::vector<double> small;  // one put + get_into of 4 KiB, seconds
  std::vector<double> put, get;
};

void small_round(meshstore::Store& s, std::vector<float>& w, int n, Figures* f) {
  const meshstore::TensorView v(w.data(), meshstore::DType::float32, {1024});
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    must(s.put("small", v).get(60s), "put");
    must(s.get_into("small", v).get(60s), "get_into");
    if (f) f->small.push_back(secs(t0));
  }
}

}  // namespace

void run_metrics(const Args& a) {
  const int pairs = a.iters ? a.iters : (a.smoke ? 400 : 4000);
  const std::size_t mib = a.smoke ? 8 : 64;
  Store stores[2] = {store_with(false), store_with(true)};
  Figures fig[2];
  std::vector<float> w(1024, 1.0f);
  for (auto& s : stores) small_round(s, w, 100, nullptr);  // warm: channels, locations
  for (int done = 0; done < pairs; done += 100) {
    for (int r = 0; r < 2; ++r) small_round(stores[r], w, std::min(100, pairs - done), &fig[r]);
  }
  std::vector<float> big(mib << 18, 1.0f), back(big.size());
  const meshstore::TensorView in(big.data(), meshstore::DType::float32,
                                 {static_cast<std::int64_t>(big.size())});
  const meshstore::TensorView out(back.data(), meshstore::DType::float32,
                                  {static_cast<std::int64_t>(back.size())});
  std::vector<double> t_memcpy;
  for (int i = -1; i < 7; ++i) {  // one untimed round: first touches
    for (int r = 0; r < 2; ++r) {
      auto t0 = Clock::now();
      must(stores[r].put("big", in).get(300s), "put");
      if (i >= 0) fig[r].put.push_back(secs(t0));
      t0 = Clock::now();
      must(stores[r].get_into("big", out).get(300s), "get_into");
      if (i >= 0) fig[r].get.push_back(secs(t0));
    }
    const auto t0 = Clock::now();
    std::memcpy(back.data(), big.data(), big.size() * sizeof(float));
    if (i >= 0) t_memcpy.push_back(secs(t0));
  }
  const double us = 1e6, gib = static_cast<double>(mib) / 1024.0;
  const double p50[2] = {median(fig[0].small) * us, median(fig[1].small) * us};
  const double p99[2] = {percentile(fig[0].small, 0.99) * us, percentile(fig[1].small, 0.99) * us};
  const double put[2] = {gib / median(fig[0].put), gib / median(fig[1].put)};
  const double get[2] = {gib / median(fig[0].get), gib / median(fig[1].get)};
  const double mem = gib / median(t_memcpy);
  if (a.json) {
    std::printf(
        "{\"scenario\":\"metrics\",\"pairs\":%d,\"small_p50_us_off\":%.2f,"
        "\"small_p50_us_on\":%.2f,\"small_p99_us_off\":%.2f,\"small_p99_us_on\":%.2f,"
        "\"put_gib_s_off\":%.3f,\"put_gib_s_on\":%.3f,\"get_gib_s_off\":%.3f,"
        "\"get_gib_s_on\":%.3f,\"memcpy_gib_s\":%.3f}\n",
        pairs, p50[0], p50[1], p99[0], p99[1], put[0], put[1], get[0], get[1], mem);
    return;
  }
  std::printf("metrics: the calls with metrics served against without (same run, alternating)\n");
  std::printf("%-30s %12s %12s %8s\n", "", "off", "on", "on / off");
  std::printf("%-30s %9.2f us %9.2f us %8.3f\n", "4 KiB put + get_into p50", p50[0], p50[1],
              p50[1] / p50[0]);
  std::printf("%-30s %9.2f us %9.2f us %8.3f\n", "4 KiB put + get_into p99", p99[0], p99[1],
              p99[1] / p99[0]);
  const std::string tensor = std::to_string(mib) + " MiB";
  std::printf("%-30s %6.2f GiB/s %6.2f GiB/s %8.3f\n", (tensor + " put").c_str(), put[0], put[1],
              put[1] / put[0]);
  std::printf("%-30s %6.2f GiB/s %6.2f GiB/s %8.3f\n", (tensor + " get_into").c_str(), get[0],
              get[1], get[1] / get[0]);
  std::printf("baseline: memcpy of the tensor on one core %.2f GiB/s (put %.2fx, get_into %.2fx)\n",
              mem, put[1] / mem, get[1] / mem);
}

}  // namespace meshstore::bench
