// reshard: one mesh puts a sharded tensor (or a sharded state dict),
// another mesh reads it back with a different sharding. Every rank of a
// launch (meshrun, torchrun, mpirun, srun) is one rank of the placement; the
// store is a running `meshstore serve`, so the put world and the get world
// are separate launches:
//
//   build/bin/meshstore serve --port 29517 &
//   build/bin/meshrun -n 4 -- build/bin/reshard --store 127.0.0.1:29517 --mode put
//       --shape 7x10 --mesh 2,2 --placement S0,S1
//   build/bin/meshrun -n 2 -- build/bin/reshard --store 127.0.0.1:29517 --mode get
//       --shape 7x10 --mesh 2 --placement S1
//
// Placements: one entry per mesh dimension, S<d> = Shard(d), R = Replicate.
// Element i of the global float32 tensor holds i, so every reader checks
// the box it got, element by element. Each rank prints one line.
//
// --box B0:E0,B1:E1 reads that box (rows B0 to E0, columns B1 to E1) on
// every rank instead of the placement's.
//
// --state-dict puts and reads a state dict instead: "w" (the tensor above,
// sharded), "norm" (a whole float32 tensor of the last dimension's size)
// and "step" (a value); a reader gets its box of "w" and the whole rest.
//
// What users see when a mesh misbehaves (tests/integration/reshard_worlds.sh
// runs each): --rank R acts as rank R alone (no launcher); --skip-rank R
// leaves rank R's shard out (a rank that died); --odd dtype|shape|bytes|entries
// puts a float64 shard, another global shape, other bytes, or an extra
// state dict entry; --expect-error CODE succeeds only when the put or get
// fails with that code (errors.md), printing the message.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/launch_env.hpp"
#include "meshstore/store.hpp"
#include "meshstore/tensor_slice.hpp"

using namespace std::chrono_literals;

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(
      stderr,
      "reshard: %s\n"
      "usage: reshard --store HOST:PORT --mode put|get --shape AxB[xC...] --mesh N[,M...]\n"
      "               --placement S0|S1|R[,...] [--key NAME] [--state-dict]\n"
      "               [--rank R] [--skip-rank R] [--odd dtype|shape|bytes|entries]\n"
      "               [--expect-error CODE] [--box B0:E0,B1:E1]\n",
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

// The box `slice` of the global tensor whose element i holds i (+ `plus`).
meshstore::Tensor box_of_iota(const meshstore::TensorSlice& slice, float plus) {
  auto t = meshstore::Tensor::empty(meshstore::DType::float32, slice.local_shape()).value();
  const auto strides = meshstore::contiguous_strides(slice.global_shape());
  for (std::int64_t n = 0; n < t.numel(); ++n) {
    std::int64_t rem = n, flat = 0;
    for (std::size_t k = strides.size(); k-- > 0;) {
      flat += (slice.offsets()[k] + rem % slice.local_shape()[k]) * strides[k];
      rem /= slice.local_shape()[k];
    }
    t.data_as<float>()[n] = static_cast<float>(flat) + plus;
  }
  return t;
}

// Whether `got` is box_of_iota(slice, 0); names the first wrong element.
bool check_box(int rank, const meshstore::Tensor& got, const meshstore::TensorSlice& slice) {
  const auto want = box_of_iota(slice, 0);
  for (std::int64_t n = 0; n < got.numel(); ++n) {
    if (got.data_as<float>()[n] != want.data_as<float>()[n]) {
      std::fprintf(stderr, "rank %d: element %lld of %s is %g, expected %g\n", rank,
                   static_cast<long long>(n), slice.to_string().c_str(),
                   static_cast<double>(got.data_as<float>()[n]),
                   static_cast<double>(want.data_as<float>()[n]));
      return false;
    }
  }
  return true;
}

constexpr std::int64_t kStep = 42;

// The whole "norm" entry of the state dict: element i holds i / 8.
meshstore::Tensor norm_of(std::int64_t n) {
  auto t = meshstore::Tensor::empty(meshstore::DType::float32, {n}).value();
  for (std::int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = static_cast<float>(i) / 8;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string store_addr, mode, shape_s, mesh_s, place_s, key = "resharded", odd, expect, box_s;
  bool state_dict = false;
  int as_rank = -1, skip_rank = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    auto number = [&]() {
      const std::string v = next();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0) usage("bad " + arg + " '" + v + "'");
      return static_cast<int>(n);
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
    else if (arg == "--state-dict")
      state_dict = true;
    else if (arg == "--rank")
      as_rank = number();
    else if (arg == "--skip-rank")
      skip_rank = number();
    else if (arg == "--odd")
      odd = next();
    else if (arg == "--expect-error")
      expect = next();
    else if (arg == "--box")
      box_s = next();
    else
      usage("unknown argument '" + arg + "'");
  }
  if (store_addr.empty() || shape_s.empty() || mesh_s.empty() || place_s.empty()) {
    usage("--store, --shape, --mesh and --placement are required");
  }
  if (mode != "put" && mode != "get") usage("--mode is put or get");
  if (!odd.empty() && odd != "dtype" && odd != "shape" && odd != "bytes" && odd != "entries") {
    usage("--odd is dtype, shape, bytes or entries");
  }
  const auto shape = dims(shape_s, 'x', "shape");
  auto placement = meshstore::Placement::make(dims(mesh_s, ',', "mesh"), placements(place_s));
  if (!placement.ok()) return fail(-1, "placement", placement.status());
  int rank = as_rank;
  if (rank < 0) {
    auto env = meshstore::LaunchEnv::from_env();
    if (!env.ok()) return fail(-1, "launch environment", env.status());
    rank = env->rank;
    if (env->world_size != placement->world_size()) {
      return fail(rank, "launch",
                  meshstore::Status(meshstore::Errc::invalid_argument,
                                    "the mesh has " + std::to_string(placement->world_size()) +
                                        " ranks, the launch " + std::to_string(env->world_size)));
    }
  }
  if (rank == skip_rank) {
    std::printf("rank %d skipped\n", rank);
    return 0;
  }
  // The outcome of the put or get: with --expect-error, the refusal is the
  // success.
  auto outcome = [&](const std::string& what, const meshstore::Status& s) -> int {
    if (expect.empty()) return s.ok() ? -1 : fail(rank, what, s);
    if (s.ok()) {
      std::fprintf(stderr, "rank %d: %s succeeded, expected %s\n", rank, what.c_str(),
                   expect.c_str());
      return 1;
    }
    if (meshstore::errc_name(s.code()) != expect) return fail(rank, what, s);
    std::printf("rank %d refused as expected: %s\n", rank, s.to_string().c_str());
    return 0;
  };
  meshstore::StoreOptions o;
  o.placement.rank = rank;
  o.placement.local_rank = -1;       // the shards live in the server's volumes
  o.placement.host_volumes = false;  // so this world may exit once it has put them
  auto store = meshstore::Store::connect(store_addr, o);
  if (!store.ok()) return fail(rank, "connect", store.status());

  if (mode == "put") {
    // --odd shape: this rank believes in a taller tensor.
    meshstore::Shape global = shape;
    if (odd == "shape") global[0] += 1;
    auto mine = placement->shard_for(global, rank);
    if (!mine.ok()) return fail(rank, "slice", mine.status());
    auto shard = box_of_iota(mine->slice, odd == "bytes" ? 0.5f : 0.0f);
    meshstore::Tensor wide;
    if (odd == "dtype") {
      wide = meshstore::Tensor::empty(meshstore::DType::float64, shard.shape()).value();
      for (std::int64_t n = 0; n < shard.numel(); ++n) {
        wide.data_as<double>()[n] = shard.data_as<float>()[n];
      }
    }
    const meshstore::TensorView view = wide.defined() ? wide.view() : shard.view();
    meshstore::Status s;
    if (state_dict) {
      meshstore::StateDict sd;
      const auto norm = norm_of(shape.back());
      if (!sd.insert("w", view).ok() || !sd.insert("norm", norm.view()).ok() ||
          !sd.insert("step", meshstore::Value::int64(kStep)).ok()) {
        return fail(rank, "state dict", meshstore::Status(meshstore::Errc::internal, "insert"));
      }
      const auto extra = norm_of(1 << 16);  // 256 KiB: stored alone, a key of its own
      if (odd == "entries") (void)sd.insert("extra", extra.view());
      s = store->state_dicts().put_sharded(key, sd, {{"w", *mine}}, rank).get(60s).status();
    } else {
      s = store->put(key, view, meshstore::PutOptions::shard(global, *placement, rank))
              .get(60s)
              .status();
    }
    if (int rc = outcome("put", s); rc >= 0) return rc;
    std::printf("rank %d put %s\n", rank, mine->slice.to_string().c_str());
    return 0;
  }
  // The box to read: this rank's under the placement, or --box for all.
  auto slice = placement->slice_for(shape, rank);
  if (!box_s.empty()) {
    meshstore::Shape offsets, lengths;
    for (const auto& range : split(box_s, ',')) {
      const auto ends = dims(range, ':', "box");
      if (ends.size() != 2 || ends[1] < ends[0]) usage("bad --box range '" + range + "'");
      offsets.push_back(ends[0]);
      lengths.push_back(ends[1] - ends[0]);
    }
    slice = meshstore::TensorSlice::make(shape, offsets, lengths);
  }
  if (!slice.ok()) return fail(rank, "slice", slice.status());
  // get: wait (bounded) until the put world's shards cover the tensor,
  // unless an error is what this run is after.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (auto backoff = 1ms; expect.empty();
       backoff = std::min<std::chrono::milliseconds>(backoff * 2, 100ms)) {
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
  if (state_dict) {
    auto w = meshstore::Tensor::zeros(meshstore::DType::float32, slice->local_shape()).value();
    auto norm = meshstore::Tensor::zeros(meshstore::DType::float32, {shape.back()}).value();
    meshstore::StateDict sd;
    if (!sd.insert("w", w.view()).ok() || !sd.insert("norm", norm.view()).ok() ||
        !sd.insert("step", meshstore::Value::int64(0)).ok()) {
      return fail(rank, "state dict", meshstore::Status(meshstore::Errc::internal, "insert"));
    }
    auto s = store->state_dicts()
                 .get_into(key, sd, meshstore::StateDictReadOptions::of_boxes({{"w", *slice}}))
                 .get(60s);
    if (int rc = outcome("get_state_dict_into", s.status()); rc >= 0) return rc;
    const auto want_norm = norm_of(shape.back());
    if (!check_box(rank, w, *slice)) return 1;
    if (std::memcmp(norm.data(), want_norm.data(), norm.nbytes()) != 0 ||
        sd.find("step")->value->as_int64() != kStep) {
      std::fprintf(stderr, "rank %d: norm or step differ from what was put\n", rank);
      return 1;
    }
    std::printf("rank %d got w %s, norm and step ok\n", rank, slice->to_string().c_str());
    return 0;
  }
  auto got = store->get(key, meshstore::ReadOptions::box(*slice)).get(60s);
  if (int rc = outcome("get", got.status()); rc >= 0) return rc;
  if (!check_box(rank, *got, *slice)) return 1;
  std::printf("rank %d got %s ok\n", rank, slice->to_string().c_str());
  return 0;
}
