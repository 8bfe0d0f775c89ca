#pragma once
// peer_bench's workloads: the tensors each moves from A to B, the bytes of
// each round, and the check that B holds them.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/store.hpp"

namespace meshstore::bench {

/// A workload's tensors (bf16), held in buffers with a state dict over them.
struct Workload {
  std::string name;
  std::vector<std::pair<std::string, meshstore::Shape>> shapes;
  std::vector<std::vector<std::uint16_t>> buffers;
  meshstore::StateDict sd;
  std::uint64_t bytes = 0;
};

/// The workload `name` (tensor, qwen, small), zeroed; smaller with `smoke`.
/// Dies on an unknown name.
Workload make_workload(const std::string& name, bool smoke);

/// The bytes of round `r`: element i of tensor t holds (i * 7 + t + r).
void fill(Workload& w, int r);

/// Round `r`'s bytes written straight into `sd`, whose entries are `w`'s
/// tensors in order (the staged tensors of meshstore-inplace).
void fill(const Workload& w, const meshstore::StateDict& sd, int r);

/// Whether `w` holds round `r` (every tensor, a sample of its elements).
bool holds(const Workload& w, int r);

}  // namespace meshstore::bench
