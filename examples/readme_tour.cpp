// readme_tour: the code of README.md's "In C++", compiled and run as a
// smoke test so the README never shows code that does not work
// (style.readme checks that the two are the same).

#include <cstdio>

#include "meshstore/store.hpp"

int main() {
  using namespace std::chrono_literals;
  // --- README snippet begins ---
  meshstore::Store store = meshstore::Store::embedded().value();
  std::vector<float> w(32 * 32, 1.0f);
  auto view = meshstore::TensorView::of(w.data(), {32, 32});
  store.put("model.layers.0.weight", view).get(10s).value();  // Future<void>
  meshstore::Tensor t = store.get("model.layers.0.weight").get(10s).value();
  store.get_into("model.layers.0.weight", view).get(10s).value();  // in place
  auto r = store.get("no.such.key").get(10s);  // not_found: get: no key 'no.such.key'
  // --- README snippet ends ---
  if (t.numel() != 32 * 32 || r.status().to_string() != "not_found: get: no key 'no.such.key'") {
    std::fprintf(stderr, "readme_tour: unexpected result: %s\n", r.status().to_string().c_str());
    return 1;
  }
  std::printf("readme_tour: ok\n");
  return 0;
}
