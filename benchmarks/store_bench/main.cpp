// store_bench: user-level figures of the store, each next to a baseline
// measured in the same run (never a bare absolute time).
//
//   store_bench --scenario single --transport shm --bytes 1GiB [--iters 5] [--json]
//       put / get_into / get of one tensor, warm (the same key reused) and
//       cold (first put), between two processes: this one is the client, a
//       peer process it starts holds the store and its volume. Baselines:
//       memcpy of the same bytes, and (tcp, rpc) a raw TCP stream of the same
//       bytes between the same two processes.
//   store_bench --scenario small --transport shm [--iters 2000] [--json]
//       p50/p99 of a 4 KiB put + get_into across the two processes, against
//       the round trip of a bare request (exists) to the same peer.
//   store_bench --scenario weight-sync --model qwen3-0.6b --transport shm [--json]
//       put_state_dict and get_state_dict_into of a Qwen3-shaped bf16 state
//       dict (the exact names and shapes) against memcpy of the same bytes;
//       the per-tensor overhead fitted from a second workload (1,000 tensors
//       of 4 KiB); the end-to-end put then get.
//   store_bench --scenario reshard [--bytes 1GiB]
//       a tensor put as 2 row shards and read as 4 column shards.
//   store_bench --scenario safetensors-load [--bytes 2GiB]
//       a safetensors checkpoint loaded into the store, against read().
//   store_bench --scenario soak [--seconds 60] [--json]
//       a publisher and two reader processes killed and restarted at random;
//       memory and /dev/shm over time, every version read checked.
//   store_bench --scenario python [--bytes 1GiB] [--model qwen3-0.6b] [--smoke]
//       the same calls from C++ and from Python (benchmarks/python/py_bench.py,
//       torch tensors through DLPack), each on an embedded store, one run.
//   store_bench --scenario control [--keys 1000000] [--clients 64] [--json]
//       the control plane at scale: a peer process holds the store; this
//       one's clients commit tiny keys one at a time, 64 in flight and 1,000
//       a call, time exists and get as the index grows, read the peer's
//       memory per key, then connect --clients clients at once.
//   store_bench --scenario failover [--keys 1000000] [--iters 10] [--json]
//       kill -9 of `meshstore serve`, started again at its port, to the
//       first read, with 10k, 100k and 1M keys on this process's volume;
//       a standby's takeover; and a controller its ProcMesh restarts
//       (two workers: this binary again).
//   store_bench --scenario replicas [--bytes 1073741824] [--iters 5] [--json]
//   store_bench --scenario metrics [--iters 4000] [--json]
//       4 KiB put + get_into and 64 MiB put / get_into with metrics served
//       (StoreOptions::metrics) against without, alternating in one run.
//   --processes 1     everything in one process (an embedded store)
//   --transport cuda-ipc   runs cuda_bench (GPU memory) instead
//   store_bench --smoke      every scenario, tiny, for CI (single and small
//                            over shm, tcp and cma; the rest over shm)
//
// Progress goes to stderr; the table or the JSON object to stdout. This
// file holds main: it picks the role (the bench or one of its helper
// processes) and the scenarios; each scenario lives in scenario_*.cpp.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "meshstore/proc_mesh.hpp"
#include "peer.hpp"
#include "scenarios.hpp"

namespace meshstore::bench {
namespace {

// --transport cuda-ipc: GPU memory, which cuda_bench measures against
// cudaMemcpy in the same run; this program becomes cuda_bench. Returns
// only when cuda_bench cannot start.
int run_cuda_bench(const Args& a) {
  if (a.scenario != "single") usage("--transport cuda-ipc measures --scenario single only");
  std::string exe(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  if (n <= 0) usage("cannot find this program's directory");
  exe.resize(static_cast<std::size_t>(n));
  const std::string cuda_bench = exe.substr(0, exe.rfind('/')) + "/cuda_bench";
  std::vector<std::string> args{cuda_bench, "--transport", "cuda-ipc", "--bytes",
                                std::to_string(a.bytes) + "B"};
  if (a.iters > 0) {
    args.push_back("--iters");
    args.push_back(std::to_string(a.iters));
  }
  if (a.json) args.push_back("--json");
  if (a.smoke) args.push_back("--smoke");
  std::vector<char*> argv2;
  for (auto& s : args) argv2.push_back(s.data());
  argv2.push_back(nullptr);
  execv(cuda_bench.c_str(), argv2.data());
  std::fprintf(stderr,
               "store_bench: --transport cuda-ipc runs %s, which this build lacks (%s): build "
               "with the CUDA toolkit (MESHSTORE_WITH_CUDA=AUTO finds /usr/local/cuda)\n",
               cuda_bench.c_str(), std::strerror(errno));
  return 1;
}

int run(int argc, char** argv) {
  // A worker of --scenario failover's ProcMesh (this binary, launched
  // again): it serves the controller until stopped.
  if (ProcMesh::is_worker()) return ProcMesh::serve().ok() ? 0 : 1;
  const Args a = parse(argc, argv);
  if (a.peer == "serve") return run_peer(a);
  if (a.peer == "read") return run_reader(a);
  if (a.peer == "load") return run_loader(a);
  if (a.peer == "soak-read") return run_soak_reader(a);
  if (!a.peer.empty()) usage("unknown --peer role");
  if (a.transport == "cuda-ipc") return run_cuda_bench(a);
  signal(SIGPIPE, SIG_IGN);
  if (a.scenario == "soak") {
    run_soak(a);  // its own smoke run: bench.store_bench.soak (60 s)
    return 0;
  }
  if (a.scenario == "python") {
    // Its own smoke run (ctest bench.store_bench.python_smoke): it needs
    // the Python package and torch, which --smoke's scenarios do not.
    run_python(a);
    return 0;
  }
  if (a.smoke) {
    // Every scenario over the same-host and the cross-host data planes.
    for (const char* transport : {"shm", "tcp", "cma"}) {
      Args s = a;
      s.transport = transport;
      s.scenario = "single";
      run_single(s);
      s.scenario = "small";
      run_small(s);
    }
    Args w = a;
    w.transport = "shm";
    w.scenario = "weight-sync";
    run_weight_sync(w);
    w.scenario = "reshard";
    run_reshard(w);
    w.scenario = "safetensors-load";
    run_safetensors_load(w);
    w.scenario = "control";
    run_control(w);
    w.scenario = "failover";
    run_failover(w);
    w.scenario = "replicas";
    run_replicas(w);
    w.scenario = "metrics";
    run_metrics(w);
    return 0;
  }
  if (a.scenario == "single")
    run_single(a);
  else if (a.scenario == "small")
    run_small(a);
  else if (a.scenario == "reshard")
    run_reshard(a);
  else if (a.scenario == "safetensors-load")
    run_safetensors_load(a);
  else if (a.scenario == "python")
    run_python(a);
  else if (a.scenario == "control")
    run_control(a);
  else if (a.scenario == "failover")
    run_failover(a);
  else if (a.scenario == "replicas")
    run_replicas(a);
  else if (a.scenario == "metrics")
    run_metrics(a);
  else
    run_weight_sync(a);
  return 0;
}

}  // namespace
}  // namespace meshstore::bench

int main(int argc, char** argv) { return meshstore::bench::run(argc, argv); }
