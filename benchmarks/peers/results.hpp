#pragma once
// peer_bench's results: the figures of a run and the report made of them
// (results.md with the goal's summary, results.json, the chart).
#include <cstdint>
#include <map>
#include <string>

#include "bench_args.hpp"
#include "meshstore/status.hpp"

namespace meshstore::bench {

/// The figures of a run.
struct Results {
  /// workload -> contender -> median seconds, or why it was skipped
  std::map<std::string, std::map<std::string, meshstore::Result<double>>> seconds;
  /// workload -> its bytes, its tensors
  std::map<std::string, std::uint64_t> bytes, tensors;
};

/// Writes results.md (the goal's summary, the table, what each contender
/// does, the fitted per-tensor overheads), results.json, results.dat,
/// chart.gp and, when gnuplot is installed, results.png into --out; then
/// prints results.md and what it wrote. `r` holds every workload and
/// contender of `a`.
void write_results(const Args& a, const Results& r);

}  // namespace meshstore::bench
