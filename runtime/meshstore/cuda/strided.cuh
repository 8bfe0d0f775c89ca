#pragma once
// Strided device copies: a device view with any strides packed into (or
// unpacked from) contiguous device memory, by a grid-stride kernel.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace meshstore::internal::cuda {

/// Dims a strided device copy takes (TensorView has no bound; more is
/// Errc::unsupported).
constexpr int kMaxStridedDims = 16;

struct StridedLayout {
  int ndim = 0;
  std::int64_t numel = 0;
  std::int64_t shape[kMaxStridedDims] = {};
  std::int64_t strides[kMaxStridedDims] = {};  // in elements
};

/// Queues on `stream` a copy between `packed` (contiguous, numel elements)
/// and `strided` (laid out as `layout`): packed <- strided when `pack`,
/// else strided <- packed. `elsize` is 1, 2, 4 or 8.
cudaError_t launch_strided_copy(void* packed, void* strided, const StridedLayout& layout,
                                std::size_t elsize, bool pack, cudaStream_t stream);

}  // namespace meshstore::internal::cuda
