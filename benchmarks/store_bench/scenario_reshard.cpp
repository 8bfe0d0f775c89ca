// store_bench --scenario reshard: a [rows, 4096] bf16 tensor put as 2 row
// shards and read back as 4 column shards, against memcpy of its bytes.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../bench_util.hpp"
#include "meshstore/tensor_slice.hpp"
#include "peer.hpp"
#include "scenarios.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {

void run_reshard(const Args& a) {
  // bf16, 4096 columns; rows from the size (1 GiB unless --bytes says).
  const std::int64_t cols = 4096;
  const std::size_t want =
      a.smoke ? (std::size_t{8} << 20) : (a.bytes_given ? a.bytes : (std::size_t{1} << 30));
  const std::int64_t rows =
      std::max<std::int64_t>(4, static_cast<std::int64_t>(want / (cols * 2)) / 4 * 4);
  const std::size_t n = static_cast<std::size_t>(rows * cols) * 2;
  const int iters = a.iters ? a.iters : (a.smoke ? 2 : 5);
  auto session = open_session(a);
  auto& store = session.store;
  std::vector<std::uint16_t> whole(static_cast<std::size_t>(rows * cols)), scratch(whole.size());
  for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<std::uint16_t>(i * 7 + 3);
  const meshstore::Shape global{rows, cols};
  auto put_rows = meshstore::Placement::make({2}, {meshstore::DimPlacement::shard(0)}).value();
  auto get_cols = meshstore::Placement::make({4}, {meshstore::DimPlacement::shard(1)}).value();
  std::vector<std::vector<std::uint16_t>> parts(4, std::vector<std::uint16_t>(whole.size() / 4));
  std::vector<double> memcpy_t, put_t, get_t;
  for (int i = 0; i < iters + 2; ++i) {  // two warm-up rounds: fresh segments
    if (!a.json) std::fprintf(stderr, "\rstore_bench reshard: round %d/%d", i + 1, iters + 2);
    // The baseline in every round: this VM's memory bandwidth drifts.
    auto t0 = Clock::now();
    std::memcpy(scratch.data(), whole.data(), n);
    if (i >= 2) memcpy_t.push_back(secs(t0));
    t0 = Clock::now();
    std::vector<meshstore::Future<void>> puts;
    for (std::int64_t r = 0; r < 2; ++r) {
      auto box = put_rows.slice_for(global, r).value();
      puts.push_back(store.put("reshard",
                               meshstore::TensorView(whole.data() + box.offsets()[0] * cols,
                                                     meshstore::DType::bfloat16, box.local_shape()),
                               PutOptions::box(box)));
    }
    for (auto& f : puts) must(f.get(600s), "put shard");
    const double put_s = secs(t0);
    t0 = Clock::now();
    std::vector<meshstore::Future<void>> gets;
    for (std::int64_t r = 0; r < 4; ++r) {
      auto box = get_cols.slice_for(global, r).value();
      gets.push_back(
          store.get_into("reshard",
                         meshstore::TensorView(parts[static_cast<std::size_t>(r)].data(),
                                               meshstore::DType::bfloat16, box.local_shape()),
                         ReadOptions::box(box)));
    }
    for (auto& f : gets) must(f.get(600s), "get_into column shard");
    const double get_s = secs(t0);
    if (i >= 2) {
      put_t.push_back(put_s);
      get_t.push_back(get_s);
    }
  }
  if (!a.json) std::fprintf(stderr, "\n");
  for (std::int64_t r = 0; r < 4; ++r) {
    const auto& part = parts[static_cast<std::size_t>(r)];
    const std::int64_t w = cols / 4;
    for (std::int64_t row = 0; row < rows; row += 97) {
      for (std::int64_t c = 0; c < w; c += 131) {
        if (part[static_cast<std::size_t>(row * w + c)] !=
            whole[static_cast<std::size_t>(row * cols + r * w + c)]) {
          std::fprintf(stderr, "store_bench: column shard %lld holds the wrong bytes\n",
                       static_cast<long long>(r));
          std::exit(1);
        }
      }
    }
  }
  must(store.remove("reshard").get(60s), "cleanup");
  const double m = median(memcpy_t), p = median(put_t), g = median(get_t);
  const double gb = static_cast<double>(n) / 1e9;
  if (a.json) {
    std::printf(
        "{\"scenario\":\"reshard\",\"transport\":\"%s\",\"processes\":%d,\"bytes\":%zu,"
        "\"shape\":[%lld,%lld],\"dtype\":\"bfloat16\",\"put\":\"2 row shards\","
        "\"get\":\"4 column shards\",\"iters\":%d,\"memcpy_gbps\":%.3f,\"put_gbps\":%.3f,"
        "\"reshard_gbps\":%.3f,\"put_vs_memcpy\":%.3f,\"reshard_vs_memcpy\":%.3f}\n",
        a.transport.c_str(), a.processes, n, static_cast<long long>(rows),
        static_cast<long long>(cols), iters, gb / m, gb / p, gb / g, m / p, m / g);
    return;
  }
  std::printf(
      "scenario reshard: [%lld, %lld] bf16 (%.2f GB), 2 row shards -> 4 column shards, "
      "transport %s, %s, median of %d\n",
      static_cast<long long>(rows), static_cast<long long>(cols), gb, a.transport.c_str(),
      a.processes == 2 ? "client process -> store in a peer process" : "embedded store", iters);
  std::printf("  %-24s %10s %10s %10s\n", "operation", "seconds", "GB/s", "vs memcpy");
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "memcpy", m, gb / m, 1.0);
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "put 2 row shards", p, gb / p, m / p);
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "get 4 column shards", g, gb / g, m / g);
}

}  // namespace meshstore::bench
