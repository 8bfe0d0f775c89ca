// meshstore_test_peer: a store process that the failure tests kill.
//
//   meshstore_test_peer hold ADDRESS KEY
//     connects as rank 1 (local rank 1) hosting its own volume under the
//     store's strategy, puts KEY (a float), prints "ready", then waits.

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "meshstore/store.hpp"

int main(int argc, char** argv) {
  if (argc != 4 || std::strcmp(argv[1], "hold") != 0) {
    std::fprintf(stderr, "usage: meshstore_test_peer hold ADDRESS KEY\n");
    return 2;
  }
  meshstore::StoreOptions o;
  o.rank = 1;
  o.local_rank = 1;
  auto store = meshstore::Store::connect(argv[2], o);
  if (!store.ok()) {
    std::fprintf(stderr, "peer: %s\n", store.status().to_string().c_str());
    return 1;
  }
  float x = 7;
  auto put = store->put(argv[3], meshstore::TensorView::of(&x, {})).get(std::chrono::seconds(30));
  if (!put.ok()) {
    std::fprintf(stderr, "peer: %s\n", put.status().to_string().c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}
