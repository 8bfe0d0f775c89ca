#pragma once
// peer_bench's contenders: their names and what each does, and where each
// runs: process A (run_contender, writer.cpp), process B (run_reader,
// reader.cpp), or, for gloo and mpi, both processes of their own
// (run_external, external.cpp).
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "../bench_util.hpp"
#include "bench_args.hpp"
#include "meshstore/status.hpp"
#include "meshstore/store.hpp"
#include "workload.hpp"

namespace meshstore::bench {

#if MESHSTORE_HAVE_MPI
/// The settings the mpi contender runs with (written next to its figures).
inline constexpr const char* kMpiSettings =
    "-np 2 --bind-to none --mca pml ob1 --mca btl self,vader";
#endif

/// Nanoseconds on the steady clock (CLOCK_MONOTONIC: comparable between
/// the processes of one host).
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

/// Whether `c` is "meshstore" (the store picks the transport) or
/// "meshstore-TRANSPORT" (or meshstore-inplace).
inline bool is_meshstore(const std::string& c) {
  return c == "meshstore" || c.rfind("meshstore-", 0) == 0;
}
/// The transport a meshstore contender forces ("" = the store picks).
inline std::string transport_of(const std::string& c) {
  const bool picks = c == "meshstore" || c == "meshstore-inplace" || c == "meshstore-python" ||
                     c == "meshstore-direct" || c == "meshstore-revocable" || c == "meshstore-copy";
  return picks ? "" : c.substr(10);
}

/// The publishing options of a meshstore contender that publishes through
/// Store::publish: "meshstore" lets the store pick the mode, meshstore-direct
/// and meshstore-copy ask, meshstore-revocable asks for direct with
/// revoke_on_timeout (its readers close each lease with a checked round
/// trip); false for the others (publish_state_dict, or stage_publish in
/// place).
inline bool publishes(const std::string& c, meshstore::PublishOptions* po) {
  if (c == "meshstore") {
    po->mode = meshstore::PublishMode::automatic;
  } else if (c == "meshstore-direct") {
    po->mode = meshstore::PublishMode::direct;
  } else if (c == "meshstore-revocable") {
    po->mode = meshstore::PublishMode::direct;
    po->revoke_on_timeout = true;
  } else if (c == "meshstore-copy") {
    po->mode = meshstore::PublishMode::copy;
  } else {
    return false;
  }
  return true;
}

/// The file of the safetensors contender, named after the writer's pid.
inline std::string shm_path(const std::string& workload, pid_t writer) {
  return "/dev/shm/peer_bench." + std::to_string(writer) + "." + workload + ".safetensors";
}

/// What `contender` does and how it is set up, one line for results.md.
std::string describe(const std::string& contender);

/// One contender on one workload, as process A: the median seconds of
/// --iters rounds after two warm-up rounds, first byte in A to last byte in
/// B; or why it was skipped.
meshstore::Result<double> run_contender(const Args& a, const std::string& contender, Workload& w);

/// Process B (--role reader): prepares its side, says "ready" (tcp: "ready
/// PORT"), then for each "round R" line receives round R into its own
/// buffers and answers "done END_NS OK".
int run_reader(const Args& a);

/// Runs an external contender (gloo, mpi, meshstore-python), which starts both its processes;
/// the median seconds of its rounds after `warm`, or why it was skipped.
meshstore::Result<double> run_external(const Args& a, const std::string& contender,
                                       const Workload& w, int warm);

}  // namespace meshstore::bench
