#include "meshstore/cuda/strided.cuh"

namespace meshstore::internal::cuda {
namespace {

template <class T, bool Pack>
__global__ void strided_copy(T* packed, T* strided, StridedLayout layout) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < layout.numel; i += step) {
    std::int64_t rest = i, at = 0;
    for (int d = layout.ndim - 1; d >= 0; --d) {
      const std::int64_t index = rest % layout.shape[d];
      rest /= layout.shape[d];
      at += index * layout.strides[d];
    }
    if (Pack) {
      packed[i] = strided[at];
    } else {
      strided[at] = packed[i];
    }
  }
}

template <class T>
cudaError_t launch(void* packed, void* strided, const StridedLayout& layout, bool pack,
                   cudaStream_t stream) {
  constexpr int kThreads = 256;
  const std::int64_t wanted = (layout.numel + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 8192 ? (wanted > 0 ? wanted : 1) : 8192);
  if (pack) {
    strided_copy<T, true><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(packed),
                                                           static_cast<T*>(strided), layout);
  } else {
    strided_copy<T, false><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(packed),
                                                            static_cast<T*>(strided), layout);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_strided_copy(void* packed, void* strided, const StridedLayout& layout,
                                std::size_t elsize, bool pack, cudaStream_t stream) {
  switch (elsize) {
    case 1:
      return launch<std::uint8_t>(packed, strided, layout, pack, stream);
    case 2:
      return launch<std::uint16_t>(packed, strided, layout, pack, stream);
    case 4:
      return launch<std::uint32_t>(packed, strided, layout, pack, stream);
    case 8:
      return launch<std::uint64_t>(packed, strided, layout, pack, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace meshstore::internal::cuda
