#pragma once
// Batched device copies: many pieces of device memory gathered into (or
// scattered from) one contiguous device buffer by one kernel, so that a
// state dict's small tensors cross the bus in one copy (copy_pieces).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace meshstore::internal::cuda {

/// One piece as the kernel reads it (device memory): `n` bytes at `device`
/// and at `at` in the staging buffer.
struct PieceCopy {
  std::uint64_t device = 0;
  std::uint64_t at = 0;
  std::uint64_t n = 0;
};

/// Queues on `stream` the copy of `count` pieces (`table`, in device
/// memory) between their device memory and `staging` (device memory):
/// staging <- pieces when `gather`, else pieces <- staging. `largest` is
/// the largest piece's size.
cudaError_t launch_piece_copy(const PieceCopy* table, std::size_t count, std::uint64_t largest,
                              void* staging, bool gather, cudaStream_t stream);

}  // namespace meshstore::internal::cuda
