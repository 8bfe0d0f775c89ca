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
//   meshstore_test_peer publish-direct ADDRESS PREFIX MIB
//     connects as a tool and publishes (Store::publish, PublishMode::direct)
//     one float tensor of MIB MiB (a decimal), all 7s, under PREFIX: the version's
//     object is this process's own buffer. Prints "published N lent BYTES",
//     then waits to be killed, the buffer still lent.
//   meshstore_test_peer read-latest ADDRESS PREFIX MIB
//     connects as a tool and reads the latest version published under PREFIX
//     (publish-direct's state dict: "w", MIB MiB of float 7s) into a buffer
//     of its own, checks every element, prints "read latest ok vN in MS ms"
//     (the call's time, connecting to the publisher included) and exits 0
//     (1 with the error otherwise).
//   meshstore_test_peer read ADDRESS KEY
//     connects as a tool (no volume), reads KEY, checks every element is the
//     float 7, prints "read ok" and exits 0 (1 with the error otherwise).
//   meshstore_test_peer read-loop ADDRESS FAR NEAR
//     connects as a tool and reads FAR and NEAR (tensors of float 7) in
//     turn until a read of FAR fails, then NEAR 20 more times. Prints
//     "far read N starting" before each read of FAR, "far reads ok" after
//     the first good round, then for the failed read
//     "far failed: start_ms=S end_ms=E: STATUS" (wall-clock milliseconds of
//     the call's start and answer), then "near after: N ok". Any read that
//     succeeds with a value other than all 7s prints "torn" and exits 1.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "meshstore/store.hpp"

using namespace std::chrono_literals;

namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The number of floats in `mib` MiB (a decimal: 0.004 is about 4 KiB).
std::int64_t floats_in(const char* mib) {
  return static_cast<std::int64_t>(std::atof(mib) * static_cast<double>(std::int64_t{1} << 20) / 4);
}

// A read of `key`: its status, and "torn" (exit) if it holds anything but 7s.
meshstore::Status read_checked(meshstore::Store& store, const std::string& key) {
  auto t = store.get(key).get(120s);
  if (!t.ok()) return t.status();
  for (std::int64_t i = 0; i < t->numel(); ++i) {
    if (t->data_as<float>()[i] != 7.0f) {
      std::printf("torn: %s element %lld\n", key.c_str(), static_cast<long long>(i));
      std::fflush(stdout);
      std::exit(1);
    }
  }
  return meshstore::Status();
}

int read_loop_main(meshstore::Store& store, const std::string& far, const std::string& near) {
  for (long round = 0;; ++round) {
    std::printf("far read %ld starting\n", round);
    std::fflush(stdout);
    const std::int64_t start = now_ms();
    auto s = read_checked(store, far);
    if (!s.ok()) {
      if (round == 0) {
        std::fprintf(stderr, "peer: the first read of %s failed: %s\n", far.c_str(),
                     s.to_string().c_str());
        return 1;
      }
      std::printf("far failed: start_ms=%lld end_ms=%lld: %s\n", static_cast<long long>(start),
                  static_cast<long long>(now_ms()), s.to_string().c_str());
      break;
    }
    if (auto n = read_checked(store, near); !n.ok()) {
      std::fprintf(stderr, "peer: a read of %s failed: %s\n", near.c_str(), n.to_string().c_str());
      return 1;
    }
    if (round == 0) {
      std::printf("far reads ok\n");
      std::fflush(stdout);
    }
  }
  int ok = 0;
  for (int i = 0; i < 20; ++i) ok += read_checked(store, near).ok() ? 1 : 0;
  std::printf("near after: %d ok\n", ok);
  return ok == 20 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool hold = argc >= 4 && std::strcmp(argv[1], "hold") == 0;
  const bool read = argc == 4 && std::strcmp(argv[1], "read") == 0;
  const bool write_sd = argc == 5 && std::strcmp(argv[1], "write-state-dict") == 0;
  const bool read_loop = argc == 5 && std::strcmp(argv[1], "read-loop") == 0;
  const bool publish_direct = argc == 5 && std::strcmp(argv[1], "publish-direct") == 0;
  const bool read_latest = argc == 5 && std::strcmp(argv[1], "read-latest") == 0;
  const long elements = hold && argc > 5 ? std::atol(argv[5]) : 0;
  if (!hold && !read && !write_sd && !read_loop && !publish_direct && !read_latest) {
    std::fprintf(stderr,
                 "usage: meshstore_test_peer hold ADDRESS KEY [LOCAL_RANK [ELEMENTS]] | read "
                 "ADDRESS KEY | write-state-dict ADDRESS KEY MIB | read-loop ADDRESS FAR NEAR | "
                 "publish-direct ADDRESS PREFIX MIB | read-latest ADDRESS PREFIX MIB\n");
    return 2;
  }
  meshstore::StoreOptions o;
  if (write_sd) {
    o.transport.name = "rpc";
    o.transport.rpc_chunk_bytes = std::size_t{1} << 20;
    o.transport.rpc_chunks_in_flight = 1;
  }
  o.placement.rank = 1;
  o.placement.local_rank = hold ? (argc > 4 ? std::atoi(argv[4]) : 1) : -1;
  o.placement.host_volumes = hold;
  o.limits.connect_timeout = 30s;
  if (read_loop) o.limits.request_timeout = 20s;  // the bound on a call stuck on a cut link
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
    auto put = store->state_dicts().put(argv[3], sd).get(120s);
    if (!put.ok()) {
      std::fprintf(stderr, "peer: %s\n", put.status().to_string().c_str());
      return 1;
    }
    std::printf("committed\n");
    return 0;
  }
  if (read_loop) return read_loop_main(*store, argv[3], argv[4]);
  if (publish_direct) {
    const std::int64_t n = floats_in(argv[4]);
    std::vector<float> weights(static_cast<std::size_t>(n), 7.0f);
    meshstore::StateDict sd;
    if (!sd.insert("w", meshstore::TensorView::of(weights.data(), {n})).ok()) return 1;
    meshstore::PublishOptions po;
    po.mode = meshstore::PublishMode::direct;
    auto pub = store->state_dicts().publish(argv[3], sd, po).get(60s);
    if (!pub.ok()) {
      std::fprintf(stderr, "peer: %s\n", pub.status().to_string().c_str());
      return 1;
    }
    std::printf("published %llu lent %llu\n", static_cast<unsigned long long>(pub->version()),
                static_cast<unsigned long long>(pub->lent_bytes()));
    std::fflush(stdout);
    for (;;) pause();
  }
  if (read_latest) {
    const std::int64_t n = floats_in(argv[4]);
    std::vector<float> weights(static_cast<std::size_t>(n), 0.0f);
    meshstore::StateDict sd;
    if (n <= 0 || !sd.insert("w", meshstore::TensorView::of(weights.data(), {n})).ok()) return 1;
    const auto t0 = std::chrono::steady_clock::now();
    auto version = store->state_dicts().get_latest_into(argv[3], sd).get(60s);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!version.ok()) {
      std::fprintf(stderr, "peer: read-latest %s: %s\n", argv[3],
                   version.status().to_string().c_str());
      return 1;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      if (weights[static_cast<std::size_t>(i)] != 7.0f) {
        std::fprintf(stderr, "peer: read-latest %s: element %lld is %g\n", argv[3],
                     static_cast<long long>(i), weights[static_cast<std::size_t>(i)]);
        return 1;
      }
    }
    std::printf("read latest ok v%llu in %.3f ms\n", static_cast<unsigned long long>(*version), ms);
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
