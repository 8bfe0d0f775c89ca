// peer_bench: meshstore side by side with what users already have, on the
// same workloads, measured in one run on one machine (benchmarks/README.md,
// docs/performance.md).
//
//   build/bin/peer_bench [--workloads tensor,qwen,small] [--contenders LIST]
//                        [--iters 3] [--out DIR] [--smoke]
//
// Each workload moves from process A to process B and is verified there; a
// round is timed from A's first byte to B's last (CLOCK_MONOTONIC, one
// host). Workloads: tensor (one 1 GiB tensor), qwen (the Qwen3-0.6B bf16
// state dict, 310 tensors, 1.19 GB), small (10,000 tensors of 4 KiB).
// Contenders: memcpy (one process: the limit of a one-copy move on one
// core), memcpy-all-cores (the same copy split over every core: the host's
// copy bandwidth, which a copy spread over threads can reach), tcp (a raw
// loopback TCP stream: the limit across hosts), safetensors-shm (A writes a
// safetensors file into /dev/shm, B maps it and copies the tensors out: what
// many RL frameworks do between trainer and inference), redis (Redis 7 on a
// unix socket), gloo (torch.distributed send/recv, peer_gloo.py), mpi (Open
// MPI send/recv over shared memory, peer_mpi), and meshstore: "meshstore"
// with the transport the store picks for the pair, then each transport
// forced (A publishes the state dict into the store it hosts, B follows with
// get_next_state_dict_into into its own buffers, streamed while A writes),
// and each publishing mode asked for by name (meshstore-direct,
// meshstore-revocable: direct with revoke_on_timeout, meshstore-copy,
// meshstore-inplace).
// For meshstore, tcp, safetensors-shm and redis, B is this program started
// again with --role reader; gloo and mpi start both their processes
// themselves and report each round. A contender whose software is missing
// is listed as skipped, with the reason. Writes results.md, results.json,
// results.dat and (with gnuplot) results.png into --out.
//
// This file holds main: the role, the contenders checked, and the loop
// over workloads and contenders. contenders.hpp says where each contender
// runs; results.hpp writes the report.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "../bench_util.hpp"
#include "bench_args.hpp"
#include "contenders.hpp"
#include "results.hpp"
#include "workload.hpp"

namespace meshstore::bench {
namespace {

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.role == "reader") return run_reader(a);
  if (!a.role.empty()) die("unknown --role");
  for (const auto& c : a.contenders) {
    const bool known = c == "memcpy" || c == "memcpy-all-cores" || c == "tcp" ||
                       c == "safetensors-shm" || c == "gloo" || c == "mpi" || is_meshstore(c)
#if MESHSTORE_HAVE_HIREDIS
                       || c == "redis"
#endif
        ;
    if (!known) die("unknown or unbuilt contender '" + c + "'");
  }
  std::system(("mkdir -p '" + a.out + "'").c_str());
  Results results;
  for (const auto& wname : a.workloads) {
    Workload w = make_workload(wname, a.smoke);
    results.bytes[wname] = w.bytes;
    results.tensors[wname] = w.shapes.size();
    for (const auto& c : a.contenders) {
      std::fprintf(stderr, "peer_bench: %s on %s\n", c.c_str(), wname.c_str());
      auto s = run_contender(a, c, w);
      if (!s.ok()) {
        std::fprintf(stderr, "peer_bench: %s skipped: %s\n", c.c_str(),
                     s.status().message().c_str());
      }
      results.seconds[wname].emplace(c, std::move(s));
    }
  }
  write_results(a, results);
  return 0;
}

}  // namespace
}  // namespace meshstore::bench

int main(int argc, char** argv) { return meshstore::bench::run(argc, argv); }
