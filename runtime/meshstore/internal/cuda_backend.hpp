#pragma once
// The two implementations behind the CUDA calls of meshstore/tensor.hpp and
// meshstore/internal/cuda_copy.hpp: `native` (the CUDA runtime in cuda.cpp,
// or "unavailable" answers in cuda_none.cpp) and `emulated` (host memory
// posing as device memory, cuda_emulated.cpp, for tests where no GPU is).
// cuda_api.cpp sends each call to one of them. Private to the runtime.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::internal::cuda {

// Each namespace implements the calls documented in cuda.hpp and
// cuda_copy.hpp, plus locate(): the device holding `p`, -1 for host memory
// and addresses the backend does not know, or an error when it cannot tell.
#define MESHSTORE_CUDA_BACKEND_CALLS                                                         \
  Status status();                                                                           \
  int device_count();                                                                        \
  Result<int> locate(const void* p);                                                         \
  std::shared_ptr<std::byte> pinned(std::size_t n);                                          \
  Status to_host(std::byte* dst, const TensorView& src);                                     \
  Status to_device(const TensorView& dst, const std::byte* src);                             \
  Status copy_bytes(void* dst, const void* src, std::size_t n);                              \
  Status copy_pieces(std::byte* host, const std::vector<DevicePiece>& pieces, bool to_host); \
  Result<std::shared_ptr<void>> register_host(void* p, std::size_t n);                       \
  Result<std::shared_ptr<std::byte>> device_alloc(std::size_t n, int device);                \
  Result<int> export_dmabuf(const void* p, std::size_t n, std::uint64_t* offset);            \
  Result<std::pair<std::uintptr_t, std::size_t>> allocation_of(const void* p);               \
  Result<std::string> ipc_handle(const void* p);                                             \
  Result<std::shared_ptr<std::byte>> ipc_open(const std::string& handle, int device);

// The bytes view `v` spans, from its first element to its last (0 for an
// empty view). Shared by both backends (cuda_api.cpp).
std::size_t span_of(const TensorView& v);

namespace native {
bool built() noexcept;  // whether this build has the CUDA runtime
MESHSTORE_CUDA_BACKEND_CALLS
}  // namespace native
namespace emulated {
MESHSTORE_CUDA_BACKEND_CALLS
}

#undef MESHSTORE_CUDA_BACKEND_CALLS

}  // namespace meshstore::internal::cuda
