// consumer: a program outside meshstore's tree, built against an installed
// meshstore through find_package (CMakeLists.txt beside this file) or
// pkg-config (docs/install.md). It starts an embedded store, puts a tensor,
// reads it back into its own buffer and checks the bytes.
#include <cstdio>
#include <numeric>
#include <vector>

#include "meshstore/store.hpp"
#include "meshstore/version.hpp"

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
  std::printf("consumer: ok (meshstore %s)\n", MESHSTORE_VERSION_STRING);
  return 0;
}
