// hello_store: the embedded store end to end. Creates a store inside this
// process, puts and gets tensors and an object, lists keys, shows a clear
// error, then moves a large tensor and prints how fast it went next to a
// plain memcpy of the same bytes measured in the same run.
//
//   build/bin/hello_store [--mib N]    (default 256 MiB)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "meshstore/store.hpp"

using namespace std::chrono_literals;
using meshstore::Store;
using meshstore::TensorView;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Aborts the demo with the error's text if a call failed.
template <class T>
T check(meshstore::Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "hello_store: %s failed: %s\n", what, r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}
void check(meshstore::Result<void> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "hello_store: %s failed: %s\n", what, r.status().to_string().c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 256;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mib") == 0 && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: hello_store [--mib N]\n");
      return 2;
    }
  }
  if (mib == 0) {
    std::fprintf(stderr, "hello_store: --mib must be at least 1\n");
    return 2;
  }

  Store store = check(Store::embedded(), "Store::embedded");
  std::printf("meshstore embedded store up (transports: ");
  for (const auto& t : Store::Admin::available_transports()) std::printf("%s ", t.c_str());
  std::printf(")\n\n");

  // 1. put a tensor, get it back as a new Tensor.
  std::vector<float> w(4 * 8);
  std::iota(w.begin(), w.end(), 0.0f);
  check(store.put("model.layers.0.weight", TensorView::of(w.data(), {4, 8})).get(10s), "put");
  meshstore::Tensor t = check(store.get("model.layers.0.weight").get(10s), "get");
  std::printf("get  model.layers.0.weight -> %s %s, t[3][7] = %.0f\n",
              std::string(meshstore::dtype_name(t.dtype())).c_str(),
              meshstore::shape_to_string(t.shape()).c_str(), t.data_as<float>()[31]);

  // 2. get_into a buffer the caller owns: no allocation.
  std::vector<float> mine(32, -1.0f);
  check(store.get_into("model.layers.0.weight", TensorView::of(mine.data(), {4, 8})).get(10s),
        "get_into");
  std::printf("get_into caller buffer -> mine[31] = %.0f\n", mine[31]);

  // 3. a batch: many tensors, one commit.
  std::vector<std::int64_t> ids(16, 7);
  std::vector<double> bias(8, 0.5);
  check(store
            .put_batch({{"model.layers.1.ids", TensorView::of(ids.data(), {16})},
                        {"model.layers.1.bias", TensorView::of(bias.data(), {8})}})
            .get(10s),
        "put_batch");

  // 4. objects and the key space.
  check(store.put_object("run/config", "{\"lr\": 0.001}").get(10s), "put_object");
  std::printf("get_object run/config -> %s\n",
              check(store.get_object("run/config").get(10s), "get_object").c_str());
  auto keys = check(store.keys("model.layers").get(10s), "keys");
  std::printf("keys under 'model.layers': ");
  for (const auto& k : keys) std::printf("%s  ", k.c_str());
  std::printf("\n");

  // 5. errors are values with a code and a message naming the key.
  std::vector<std::int32_t> wrong(32);
  auto err = store.get_into("model.layers.0.weight", TensorView::of(wrong.data(), {4, 8})).get(10s);
  std::printf("expected error -> %s\n\n", err.status().to_string().c_str());

  // 6. throughput next to memcpy of the same bytes, in the same run.
  const std::size_t n = mib << 20;
  std::vector<std::uint8_t> src(n), dst(n), scratch(n);
  for (std::size_t i = 0; i < n; i += 4096) src[i] = static_cast<std::uint8_t>(i / 4096);
  std::memset(dst.data(), 0, n);
  std::memset(scratch.data(), 0, n);
  auto t0 = std::chrono::steady_clock::now();
  std::memcpy(scratch.data(), src.data(), n);
  const double memcpy_s = seconds_since(t0);

  const TensorView big(src.data(), meshstore::DType::uint8, {static_cast<std::int64_t>(n)});
  const TensorView out(dst.data(), meshstore::DType::uint8, {static_cast<std::int64_t>(n)});
  // Two puts warm the volume up: the second version needs new memory while
  // the first is still live; from the third on, versions reuse released memory.
  t0 = std::chrono::steady_clock::now();
  check(store.put("big", big).get(120s), "put big (cold)");
  const double cold_s = seconds_since(t0);
  check(store.put("big", big).get(120s), "put big (warm-up)");
  std::vector<double> put_times, get_times;
  for (int round = 0; round < 5; ++round) {
    t0 = std::chrono::steady_clock::now();
    check(store.put("big", big).get(120s), "put big");
    put_times.push_back(seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    check(store.get_into("big", out).get(120s), "get_into big");
    get_times.push_back(seconds_since(t0));
  }
  std::sort(put_times.begin(), put_times.end());
  std::sort(get_times.begin(), get_times.end());
  const double put_s = put_times[put_times.size() / 2];
  const double get_s = get_times[get_times.size() / 2];
  if (std::memcmp(src.data(), dst.data(), n) != 0) {
    std::fprintf(stderr, "hello_store: the bytes read back differ from the bytes put\n");
    return 1;
  }
  const double gb = static_cast<double>(n) / 1e9;
  const char* forced = std::getenv("MESHSTORE_TRANSPORT");
  std::printf("moved %zu MiB through the %s transport (in-process actors), median of 5 rounds\n",
              mib, forced && *forced ? forced : "shm");
  std::printf("  %-10s %8.3f s  %7.2f GB/s\n", "memcpy", memcpy_s, gb / memcpy_s);
  std::printf("  %-10s %8.3f s  %7.2f GB/s  (%.2f x memcpy; first touch of new memory)\n",
              "cold put", cold_s, gb / cold_s, memcpy_s / cold_s);
  std::printf("  %-10s %8.3f s  %7.2f GB/s  (%.2f x memcpy)\n", "put", put_s, gb / put_s,
              memcpy_s / put_s);
  std::printf("  %-10s %8.3f s  %7.2f GB/s  (%.2f x memcpy)\n", "get_into", get_s, gb / get_s,
              memcpy_s / get_s);

  auto stats = check(store.admin().stats().get(10s), "stats");
  for (const auto& s : stats) {
    std::printf("volume %s holds %llu bytes in %llu objects\n", s.volume_id.c_str(),
                static_cast<unsigned long long>(s.bytes_held),
                static_cast<unsigned long long>(s.objects));
  }
  store.close();
  std::printf("store closed cleanly\n");
  return 0;
}
