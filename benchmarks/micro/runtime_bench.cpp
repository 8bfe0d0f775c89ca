// Micro figures of the runtime's hot pieces (Google Benchmark): future
// plumbing, strided copies against memcpy of the same bytes, and the store's
// wire codec. Run with --benchmark_min_time=0.01 for a smoke pass.

#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "meshstore/future.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/wire/records.hpp"

namespace {

using namespace meshstore;

void BM_PromiseSetThenGet(benchmark::State& state) {
  for (auto _ : state) {
    Promise<int> p;
    auto f = p.future();
    p.set_value(1);
    benchmark::DoNotOptimize(f.get().value());
  }
}
BENCHMARK(BM_PromiseSetThenGet);

void BM_ThenChainOfFour(benchmark::State& state) {
  for (auto _ : state) {
    Promise<int> p;
    auto f = p.future()
                 .then([](const int& x) { return x + 1; })
                 .then([](const int& x) { return x + 1; })
                 .then([](const int& x) { return x + 1; })
                 .then([](const int& x) { return x + 1; });
    p.set_value(0);
    benchmark::DoNotOptimize(f.get().value());
  }
}
BENCHMARK(BM_ThenChainOfFour);

void BM_Memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<char> a(n, 1), b(n, 0);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_Memcpy)->Arg(16 << 20);

// Half the columns of a 4096-row float32 matrix: rows of contiguous runs.
void BM_PackColumns(benchmark::State& state) {
  const std::int64_t rows = 4096, cols = 2048;
  std::vector<float> a(rows * cols, 1.0f), b(rows * cols / 2);
  auto view = TensorView::of(a.data(), {rows, cols}).narrow(1, 0, cols / 2).value();
  for (auto _ : state) {
    pack_to(view, b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * b.size() * sizeof(float)));
}
BENCHMARK(BM_PackColumns);

void BM_EncodeDecodeKeyRecord(benchmark::State& state) {
  wire::KeyRecord r;
  r.key = "model.layers.17.self_attn.q_proj.weight";
  r.dtype = DType::bfloat16;
  r.shape = {4096, 4096};
  r.version = 3;
  r.shards.push_back({TensorSlice::full(r.shape), "volume-0", 42, 4096ull * 4096 * 2});
  for (auto _ : state) {
    wire::KeyRecord back;
    benchmark::DoNotOptimize(wire::decode(wire::encode(r), back));
  }
}
BENCHMARK(BM_EncodeDecodeKeyRecord);

}  // namespace

BENCHMARK_MAIN();
