// meshstore_test_peer: store processes for the failure and two-host tests.
//
//   meshstore_test_peer hold ADDRESS KEY [LOCAL_RANK]
//     connects as a rank (local rank 1 unless given) hosting the volume the
//     store's strategy places here, puts KEY (a float 7), prints "ready",
//     then waits to be killed.
//   meshstore_test_peer read ADDRESS KEY
//     connects as a tool (no volume), reads KEY, checks it is the float 7,
//     prints "read ok" and exits 0 (1 with the error otherwise).

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "meshstore/store.hpp"

using namespace std::chrono_literals;

int main(int argc, char** argv) {
  const bool hold = argc >= 4 && std::strcmp(argv[1], "hold") == 0;
  const bool read = argc == 4 && std::strcmp(argv[1], "read") == 0;
  if (!hold && !read) {
    std::fprintf(stderr,
                 "usage: meshstore_test_peer hold ADDRESS KEY [LOCAL_RANK] | read ADDRESS KEY\n");
    return 2;
  }
  meshstore::StoreOptions o;
  o.rank = 1;
  o.local_rank = hold ? (argc > 4 ? std::atoi(argv[4]) : 1) : -1;
  o.host_volumes = hold;
  o.connect_timeout = 30s;
  auto store = meshstore::Store::connect(argv[2], o);
  if (!store.ok()) {
    std::fprintf(stderr, "peer: %s\n", store.status().to_string().c_str());
    return 1;
  }
  if (read) {
    auto t = store->get(argv[3]).get(30s);
    if (!t.ok() || t->numel() != 1 || *t->data_as<float>() != 7.0f) {
      std::fprintf(stderr, "peer: read %s: %s\n", argv[3],
                   t.ok() ? "wrong value" : t.status().to_string().c_str());
      return 1;
    }
    std::printf("read ok\n");
    return 0;
  }
  float x = 7;
  auto put = store->put(argv[3], meshstore::TensorView::of(&x, {})).get(30s);
  if (!put.ok()) {
    std::fprintf(stderr, "peer: %s\n", put.status().to_string().c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}
