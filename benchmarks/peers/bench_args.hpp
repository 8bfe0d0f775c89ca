#pragma once
// peer_bench's command line: the workloads and contenders of a run, and the
// options of the reader process it starts (--role reader).
#include <string>
#include <vector>

namespace meshstore::bench {

/// The options of one peer_bench process. Those marked internal are set
/// only on the reader processes peer_bench starts.
struct Args {
  std::vector<std::string> workloads{"tensor", "qwen", "small"};
  std::vector<std::string> contenders {
    "memcpy", "memcpy-all-cores", "tcp", "safetensors-shm",
#if MESHSTORE_HAVE_HIREDIS
        "redis",
#endif
        "gloo", "mpi", "meshstore", "meshstore-direct", "meshstore-revocable", "meshstore-copy",
        "meshstore-inplace", "meshstore-python", "meshstore-shm", "meshstore-cma", "meshstore-tcp",
        "meshstore-rpc"
  };
  int iters = 3;
  bool smoke = false;
  std::string out = "peer_bench_results";
  // internal: the reader's part
  std::string role, contender, workload;
  int port = 0;
  std::string redis_socket;
};

/// The options in `argv`; a bad one ends the program through die().
Args parse(int argc, char** argv);

}  // namespace meshstore::bench
