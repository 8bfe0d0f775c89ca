// store_bench --scenario replicas: what keeping a second copy of each key
// costs a put (StoreOptions::placement.replicas = 2). Two embedded stores
// of two volumes each on this host, one keeping one copy and one keeping
// two, take the same puts alternately in one run:
// - one tensor of --bytes (default 1 GiB; 64 MiB with --smoke), --iters times
//   after two untimed rounds (first touches of the stores' shared memory);
// - put_batch of 1,000 tensors of 4 KiB.
// Each figure is a throughput and its ratio to replicas = 1. The copy
// moves through the shm transport (one memcpy from one volume's segment
// into the other's), so the baseline beside them is memcpy of the tensor
// on one core.
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

meshstore::Store store_keeping(int replicas) {
  meshstore::StoreOptions o;
  o.placement.strategy = "controller_colocated";
  o.placement.num_volumes = 2;
  o.placement.replicas = replicas;
  o.limits.request_timeout = 300s;
  return must(meshstore::Store::embedded(o), "embedded store");
}

}  // namespace

void run_replicas(const Args& a) {
  const std::size_t mib =
      a.bytes_given ? std::max<std::size_t>(1, a.bytes >> 20) : (a.smoke ? 64 : 1024);
  const int iters = a.iters ? a.iters : (a.smoke ? 2 : 5);
  const int batches = a.smoke ? 3 : 20;
  std::vector<float> big(mib << 18, 1.0f);  // mib MiB of floats
  const meshstore::TensorView big_view(big.data(), meshstore::DType::float32,
                                       {static_cast<std::int64_t>(big.size())});
  std::vector<std::vector<float>> small(1000, std::vector<float>(1024, 2.0f));
  auto one = store_keeping(1);
  auto two = store_keeping(2);
  std::vector<double> t_big[2], t_batch[2];
  std::vector<float> copy(big.size());
  std::vector<double> t_memcpy;
  // Untimed rounds first: the first puts of each store touch their shared
  // memory for the first time, which costs this VM seconds a GiB.
  for (int i = -2; i < iters; ++i) {
    for (int r = 0; r < 2; ++r) {
      auto& s = r == 0 ? one : two;
      const auto t0 = Clock::now();
      must(s.put("big", big_view).get(300s), "put");
      if (i >= 0) t_big[r].push_back(secs(t0));
    }
    if (i < 0) continue;
    const auto t0 = Clock::now();
    std::memcpy(copy.data(), big.data(), big.size() * sizeof(float));
    t_memcpy.push_back(secs(t0));
    std::fprintf(stderr, "store_bench replicas: %zu MiB put %d of %d\n", mib, i + 1, iters);
  }
  for (int i = 0; i < batches; ++i) {
    for (int r = 0; r < 2; ++r) {
      auto& s = r == 0 ? one : two;
      std::vector<std::pair<std::string, meshstore::TensorView>> batch;
      for (std::size_t k = 0; k < small.size(); ++k) {
        batch.emplace_back(
            "s/" + std::to_string(k),
            meshstore::TensorView(small[k].data(), meshstore::DType::float32, {1024}));
      }
      const auto t0 = Clock::now();
      must(s.put_batch(std::move(batch)).get(300s), "put_batch");
      t_batch[r].push_back(secs(t0));
    }
  }
  // What was measured kept its copies.
  for (const std::string key : {"big", "s/999"}) {
    auto listed = must(two.list(key).get(60s), "list");
    if (listed.empty() || listed.front().copies != 2) {
      die("replicas: '" + key + "' is not kept on 2 volumes");
    }
  }
  const double gib = static_cast<double>(mib) / 1024.0;
  const double big1 = gib / median(t_big[0]), big2 = gib / median(t_big[1]);
  const double mem = gib / median(t_memcpy);
  const double b1 = 1000.0 / median(t_batch[0]), b2 = 1000.0 / median(t_batch[1]);
  if (a.json) {
    std::printf(
        "{\"scenario\":\"replicas\",\"mib\":%zu,\"put_gib_s_1\":%.3f,\"put_gib_s_2\":%.3f,"
        "\"memcpy_gib_s\":%.3f,\"ratio_big\":%.3f,\"batch_keys_s_1\":%.0f,\"batch_keys_s_2\":%.0f,"
        "\"ratio_batch\":%.3f}\n",
        mib, big1, big2, mem, big2 / big1, b1, b2, b2 / b1);
    return;
  }
  std::printf("replicas: put throughput keeping 2 copies against 1 (medians, same run)\n");
  std::printf("%-26s %14s %14s %10s\n", "put", "replicas=1", "replicas=2", "2 / 1");
  std::printf("%-26s %11.2f GiB/s %9.2f GiB/s %10.2f\n",
              (std::to_string(mib) + " MiB tensor").c_str(), big1, big2, big2 / big1);
  std::printf("%-26s %10.0f keys/s %8.0f keys/s %10.2f\n", "put_batch 1,000 x 4 KiB", b1, b2,
              b2 / b1);
  std::printf("baseline: memcpy of the tensor on one core %.2f GiB/s\n", mem);
}

}  // namespace meshstore::bench
