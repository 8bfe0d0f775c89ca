// meshstore_test_peer: store processes for the failure and two-host tests.
//
//   meshstore_test_peer hold ADDRESS KEY [LOCAL_RANK [ELEMENTS]]
//     connects as a rank (local rank 1 unless given) hosting the volume the
//     store's strategy places here, puts KEY (a float 7, or ELEMENTS floats
//     of 7: large enough and it moves through a transport, not inline),
//     prints "ready", then waits to be killed.
//   meshstore_test_peer write-state-dict ADDRESS KEY MIB
//     connects as a tool over the rpc transport (slow on purpose: a wide
//     window while the put is in flight), puts a state dict of 8 float
//     tensors of MIB MiB in all under KEY, prints "committed" and exits.
//   meshstore_test_peer read ADDRESS KEY
//     connects as a tool (no volume), reads KEY, checks every element is the
//     float 7, prints "read ok" and exits 0 (1 with the error otherwise).

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "meshstore/store.hpp"

using namespace std::chrono_literals;

int main(int argc, char** argv) {
  const bool hold = argc >= 4 && std::strcmp(argv[1], "hold") == 0;
  const bool read = argc == 4 && std::strcmp(argv[1], "read") == 0;
  const bool write_sd = argc == 5 && std::strcmp(argv[1], "write-state-dict") == 0;
  const long elements = hold && argc > 5 ? std::atol(argv[5]) : 0;
  if (!hold && !read && !write_sd) {
    std::fprintf(stderr,
                 "usage: meshstore_test_peer hold ADDRESS KEY [LOCAL_RANK [ELEMENTS]] | read "
                 "ADDRESS KEY | write-state-dict ADDRESS KEY MIB\n");
    return 2;
  }
  meshstore::StoreOptions o;
  if (write_sd) {
    o.transport = "rpc";
    o.rpc_chunk_bytes = std::size_t{1} << 20;
    o.rpc_chunks_in_flight = 1;
  }
  o.rank = 1;
  o.local_rank = hold ? (argc > 4 ? std::atoi(argv[4]) : 1) : -1;
  o.host_volumes = hold;
  o.connect_timeout = 30s;
  auto store = meshstore::Store::connect(argv[2], o);
  if (!store.ok()) {
    std::fprintf(stderr, "peer: %s\n", store.status().to_string().c_str());
    return 1;
  }
  if (write_sd) {
    const std::int64_t per = std::atol(argv[4]) * (std::int64_t{1} << 20) / 8 / 4;
    std::vector<std::vector<float>> tensors(
        8, std::vector<float>(static_cast<std::size_t>(per), 7.0f));
    meshstore::StateDict sd;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      if (!sd.insert("w" + std::to_string(t), meshstore::TensorView::of(tensors[t].data(), {per}))
               .ok()) {
        return 1;
      }
    }
    auto put = store->put_state_dict(argv[3], sd).get(120s);
    if (!put.ok()) {
      std::fprintf(stderr, "peer: %s\n", put.status().to_string().c_str());
      return 1;
    }
    std::printf("committed\n");
    return 0;
  }
  if (read) {
    auto t = store->get(argv[3]).get(30s);
    bool all_seven = t.ok() && t->numel() >= 1;
    for (std::int64_t i = 0; all_seven && i < t->numel(); ++i)
      all_seven = t->data_as<float>()[i] == 7.0f;
    if (!all_seven) {
      std::fprintf(stderr, "peer: read %s: %s\n", argv[3],
                   t.ok() ? "wrong value" : t.status().to_string().c_str());
      return 1;
    }
    std::printf("read ok\n");
    return 0;
  }
  float x = 7;
  std::vector<float> many(elements > 0 ? static_cast<std::size_t>(elements) : 0, 7.0f);
  auto view = elements > 0 ? meshstore::TensorView::of(many.data(), {elements})
                           : meshstore::TensorView::of(&x, {});
  auto put = store->put(argv[3], view).get(30s);
  if (!put.ok()) {
    std::fprintf(stderr, "peer: %s\n", put.status().to_string().c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}
