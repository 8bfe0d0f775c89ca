// ranks_exchange: every rank of a launched job shares the store. Run it
// under meshrun (or torchrun, mpirun, srun with MASTER_ADDR/MASTER_PORT):
//
//   build/bin/meshrun -n 4 -- build/bin/ranks_exchange [--strategy per_local_rank]
//
// Rank 0 creates the store (Store::from_env), the others connect. Each rank
// puts a tensor filled with its rank, reads every other rank's and checks
// it, then removes its own; every rank then sees the same (empty) key space.
// Ranks meet at barriers built from store keys.

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/launch_env.hpp"
#include "meshstore/store.hpp"

using namespace std::chrono_literals;

namespace {

int fail(int rank, const std::string& what, const meshstore::Status& s) {
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what.c_str(), s.to_string().c_str());
  return 1;
}

// Waits until exactly `n` keys lie under `prefix`: a bounded wait on a
// condition (polling the key space with backoff), not a sleep.
meshstore::Status wait_count(meshstore::Store& store, const std::string& prefix, int n) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  auto backoff = 1ms;
  for (;;) {
    auto keys = store.keys(prefix).get(30s);
    if (!keys.ok()) return keys.status();
    if (static_cast<int>(keys->size()) == n) return meshstore::Status();
    if (std::chrono::steady_clock::now() > deadline) {
      return meshstore::Status(meshstore::Errc::timeout,
                               "'" + prefix + "' holds " + std::to_string(keys->size()) +
                                   " keys, not " + std::to_string(n) + ", after 60 s");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
  }
}

// Every rank puts "barrier/<name>/<rank>" and waits for all of them.
meshstore::Status barrier(meshstore::Store& store, const std::string& name, int rank, int world) {
  const std::string prefix = "barrier/" + name;
  auto s = store.put_object(prefix + "/" + std::to_string(rank), "").get(30s);
  if (!s.ok()) return s.status();
  return wait_count(store, prefix, world);
}

}  // namespace

int main(int argc, char** argv) {
  meshstore::StoreOptions options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--strategy") == 0 && i + 1 < argc) {
      options.placement.strategy = argv[++i];
    } else {
      std::fprintf(stderr, "usage: ranks_exchange [--strategy NAME]\n");
      return 2;
    }
  }
  auto env = meshstore::LaunchEnv::from_env();
  if (!env.ok()) {
    std::fprintf(stderr, "ranks_exchange: %s\n", env.status().to_string().c_str());
    return 2;
  }
  const int rank = env->rank, world = env->world_size;
  auto opened = meshstore::Store::from_env(options);
  if (!opened.ok()) return fail(rank, "Store::from_env", opened.status());
  meshstore::Store store = std::move(opened).value();

  // 1. Each rank publishes its own tensor.
  std::vector<std::int32_t> mine(1024, rank);
  const std::string my_key = "ranks/" + std::to_string(rank) + "/w";
  if (auto s = store.put(my_key, meshstore::TensorView::of(mine.data(), {32, 32})).get(30s);
      !s.ok()) {
    return fail(rank, "put " + my_key, s.status());
  }
  if (auto s = barrier(store, "written", rank, world); !s.ok()) return fail(rank, "barrier", s);

  // 2. Each rank reads every other rank's tensor into its own buffer.
  std::vector<std::int32_t> buf(1024);
  for (int r = 0; r < world; ++r) {
    const std::string key = "ranks/" + std::to_string(r) + "/w";
    auto s = store.get_into(key, meshstore::TensorView::of(buf.data(), {32, 32})).get(30s);
    if (!s.ok()) return fail(rank, "get_into " + key, s.status());
    for (auto v : buf) {
      if (v != r)
        return fail(rank, "check " + key,
                    meshstore::Status(meshstore::Errc::internal, "wrong value"));
    }
  }
  auto keys = store.keys("ranks").get(30s);
  if (!keys.ok() || static_cast<int>(keys->size()) != world) {
    return fail(
        rank, "keys",
        keys.ok() ? meshstore::Status(meshstore::Errc::internal, "wrong count") : keys.status());
  }
  if (auto s = barrier(store, "read", rank, world); !s.ok()) return fail(rank, "barrier", s);

  // 3. Each rank removes its own key; afterwards every rank sees none.
  if (auto s = store.remove(my_key).get(30s); !s.ok()) return fail(rank, "remove", s.status());
  if (auto s = barrier(store, "removed", rank, world); !s.ok()) return fail(rank, "barrier", s);
  for (int r = 0; r < world; ++r) {
    auto e = store.exists("ranks/" + std::to_string(r) + "/w").get(30s);
    if (!e.ok() || *e)
      return fail(rank, "exists after remove",
                  meshstore::Status(meshstore::Errc::internal, "still there"));
  }
  keys = store.keys("ranks").get(30s);
  if (!keys.ok() || !keys->empty())
    return fail(rank, "keys after remove",
                meshstore::Status(meshstore::Errc::internal, "not empty"));

  // Leaving: rank 0 hosts the controller, so it goes last. The others check
  // in, wait for its release, withdraw their check-in and leave; rank 0
  // waits until every check-in is gone. (Under per_local_rank a rank's keys
  // live in its own volume and vanish with it, so no rank may count on
  // another's keys after that rank has left.)
  if (rank == 0) {
    if (auto s = wait_count(store, "leaving", world - 1); !s.ok())
      return fail(rank, "wait for check-ins", s);
    if (auto s = store.put_object("released", "").get(30s); !s.ok())
      return fail(rank, "release", s.status());
    if (auto s = wait_count(store, "leaving", 0); !s.ok())
      return fail(rank, "wait for departures", s);
  } else {
    const std::string mine_key = "leaving/" + std::to_string(rank);
    if (auto s = store.put_object(mine_key, "").get(30s); !s.ok())
      return fail(rank, "check in", s.status());
    if (auto s = wait_count(store, "released", 1); !s.ok())
      return fail(rank, "wait for release", s);
    // Rank 0 may leave as soon as it sees every check-in gone, and a write
    // is visible before its caller has the answer: the controller leaving
    // can be this remove's answer. Any other end of rank 0 fails the run
    // through rank 0's own exit status.
    auto out = store.remove(mine_key).get(30s);
    if (!out.ok() && out.status().code() != meshstore::Errc::unavailable)
      return fail(rank, "check out", out.status());
  }
  std::printf("rank %d of %d: ok (read %d tensors, strategy %s)\n", rank, world, world,
              options.placement.strategy.c_str());
  return 0;
}
