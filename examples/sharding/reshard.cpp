// reshard: one mesh puts a sharded tensor, another mesh reads it back with
// a different sharding. Every rank of a launch (meshrun, torchrun, mpirun,
// srun) is one rank of the placement; the store is a running
// `meshstore serve`, so the put world and the get world are separate
// launches:
//
//   build/bin/meshstore serve --port 29517 &
//   build/bin/meshrun -n 4 -- build/bin/reshard --store 127.0.0.1:29517 --mode put \
//       --shape 7x10 --mesh 2,2 --placement S0,S1
//   build/bin/meshrun -n 2 -- build/bin/reshard --store 127.0.0.1:29517 --mode get \
//       --shape 7x10 --mesh 2 --placement S1
//
// Placements: one entry per mesh dimension, S<d> = Shard(d), R = Replicate.
// Element i of the global float32 tensor holds i, so every reader checks
// the box it got, element by element. Each rank prints one line.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/launch_env.hpp"
#include "meshstore/placement.hpp"
#include "meshstore/store.hpp"

using namespace std::chrono_literals;

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(
      stderr,
      "reshard: %s\n"
      "usage: reshard --store HOST:PORT --mode put|get --shape AxB[xC...] --mesh N[,M...]\n"
      "               --placement S0|S1|R[,...] [--key NAME]\n",
      why.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  return out;
}

meshstore::Shape dims(const std::string& s, char sep, const char* what) {
  meshstore::Shape out;
  for (const auto& p : split(s, sep)) {
    char* end = nullptr;
    const long long v = std::strtoll(p.c_str(), &end, 10);
    if (p.empty() || *end != '\0' || v < 0) usage(std::string("bad ") + what + " '" + s + "'");
    out.push_back(v);
  }
  if (out.empty()) usage(std::string("empty ") + what);
  return out;
}

std::vector<meshstore::DimPlacement> placements(const std::string& s) {
  std::vector<meshstore::DimPlacement> out;
  for (const auto& p : split(s, ',')) {
    if (p == "R") {
      out.push_back(meshstore::DimPlacement::replicate());
    } else if (p.size() > 1 && p[0] == 'S') {
      out.push_back(meshstore::DimPlacement::shard(std::atoll(p.c_str() + 1)));
    } else {
      usage("bad placement '" + p + "' (S<d> or R)");
    }
  }
  return out;
}

int fail(int rank, const std::string& what, const meshstore::Status& s) {
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what.c_str(), s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string store_addr, mode, shape_s, mesh_s, place_s, key = "resharded";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--store")
      store_addr = next();
    else if (arg == "--mode")
      mode = next();
    else if (arg == "--shape")
      shape_s = next();
    else if (arg == "--mesh")
      mesh_s = next();
    else if (arg == "--placement")
      place_s = next();
    else if (arg == "--key")
      key = next();
    else
      usage("unknown argument '" + arg + "'");
  }
  if (store_addr.empty() || shape_s.empty() || mesh_s.empty() || place_s.empty()) {
    usage("--store, --shape, --mesh and --placement are required");
  }
  if (mode != "put" && mode != "get") usage("--mode is put or get");
  const auto shape = dims(shape_s, 'x', "shape");
  auto placement = meshstore::Placement::make(dims(mesh_s, ',', "mesh"), placements(place_s));
  if (!placement.ok()) return fail(-1, "placement", placement.status());
  auto env = meshstore::LaunchEnv::from_env();
  if (!env.ok()) return fail(-1, "launch environment", env.status());
  const int rank = env->rank;
  if (env->world_size != placement->world_size()) {
    return fail(rank, "launch",
                meshstore::Status(meshstore::Errc::invalid_argument,
                                  "the mesh has " + std::to_string(placement->world_size()) +
                                      " ranks, the launch " + std::to_string(env->world_size)));
  }
  meshstore::StoreOptions o;
  o.rank = rank;
  o.local_rank = -1;       // the shards live in the server's volumes
  o.host_volumes = false;  // so this world may exit once it has put them
  auto store = meshstore::Store::connect(store_addr, o);
  if (!store.ok()) return fail(rank, "connect", store.status());
  auto slice = placement->slice_for(shape, rank);
  if (!slice.ok()) return fail(rank, "slice", slice.status());

  if (mode == "put") {
    // This rank's box of the global tensor whose element i holds i.
    auto shard = meshstore::Tensor::empty(meshstore::DType::float32, slice->local_shape()).value();
    const auto strides = meshstore::contiguous_strides(shape);
    for (std::int64_t n = 0; n < shard.numel(); ++n) {
      std::int64_t rem = n, flat = 0;
      for (std::size_t k = shape.size(); k-- > 0;) {
        flat += (slice->offsets()[k] + rem % slice->local_shape()[k]) * strides[k];
        rem /= slice->local_shape()[k];
      }
      shard.data_as<float>()[n] = static_cast<float>(flat);
    }
    auto put = store->put(key, shard.view(), shape, *placement, rank).get(60s);
    if (!put.ok()) return fail(rank, "put", put.status());
    std::printf("rank %d put %s\n", rank, slice->to_string().c_str());
    return 0;
  }
  // get: wait (bounded) until the put world's shards cover the tensor.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (auto backoff = 1ms;; backoff = std::min<std::chrono::milliseconds>(backoff * 2, 100ms)) {
    auto there = store->exists(key).get(30s);
    if (!there.ok()) return fail(rank, "exists", there.status());
    if (*there) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return fail(
          rank, "waiting for the shards",
          meshstore::Status(meshstore::Errc::timeout, "'" + key + "' incomplete after 60 s"));
    }
    std::this_thread::sleep_for(backoff);
  }
  auto got = store->get(key, *slice).get(60s);
  if (!got.ok()) return fail(rank, "get", got.status());
  const auto strides = meshstore::contiguous_strides(shape);
  for (std::int64_t n = 0; n < got->numel(); ++n) {
    std::int64_t rem = n, flat = 0;
    for (std::size_t k = shape.size(); k-- > 0;) {
      flat += (slice->offsets()[k] + rem % slice->local_shape()[k]) * strides[k];
      rem /= slice->local_shape()[k];
    }
    if (got->data_as<float>()[n] != static_cast<float>(flat)) {
      std::fprintf(stderr, "rank %d: element %lld of %s is %g, expected %lld\n", rank,
                   static_cast<long long>(n), slice->to_string().c_str(),
                   static_cast<double>(got->data_as<float>()[n]), static_cast<long long>(flat));
      return 1;
    }
  }
  std::printf("rank %d got %s ok\n", rank, slice->to_string().c_str());
  return 0;
}
