// consumer: a program outside meshstore's tree, built against an installed
// meshstore through find_package (CMakeLists.txt beside this file) or
// pkg-config (docs/install.md). It starts an embedded store, puts a tensor,
// reads it back into its own buffer, checks the bytes, and asks the admin
// facet for the volumes' usage.
#include <cstdio>
#include <numeric>
#include <vector>

#include "meshstore/store.hpp"
#include "meshstore/version.hpp"

static_assert(MESHSTORE_VERSION >= 200, "this consumer uses the 0.2 API (Store's facets)");

int main() {
  using namespace std::chrono_literals;
  auto store = meshstore::Store::embedded();
  if (!store.ok()) {
    std::fprintf(stderr, "consumer: %s\n", store.status().to_string().c_str());
    return 1;
  }
  std::vector<float> w(1024);
  std::iota(w.begin(), w.end(), 0.0f);
  std::vector<float> back(w.size(), -1.0f);
  auto put = store->put("consumer.w", meshstore::TensorView::of(w.data(), {32, 32})).get(10s);
  auto got =
      put.ok()
          ? store->get_into("consumer.w", meshstore::TensorView::of(back.data(), {32, 32})).get(10s)
          : put;
  if (!got.ok() || back != w) {
    std::fprintf(stderr, "consumer: round trip failed: %s\n",
                 got.ok() ? "bytes differ" : got.status().to_string().c_str());
    return 1;
  }
  auto stats = store->admin().stats().get(10s);
  std::uint64_t held = 0;
  for (const auto& v : stats.ok() ? *stats : std::vector<meshstore::VolumeStats>{}) {
    held += v.bytes_held;
  }
  if (held < sizeof(float) * w.size()) {
    std::fprintf(stderr, "consumer: the admin facet's stats are wrong: %s\n",
                 stats.ok() ? "no volume holds the tensor" : stats.status().to_string().c_str());
    return 1;
  }
  std::printf("consumer: ok (meshstore %s)\n", MESHSTORE_VERSION_STRING);
  return 0;
}
