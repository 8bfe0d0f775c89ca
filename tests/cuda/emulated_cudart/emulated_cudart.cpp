// The CUDA runtime calls of this folder's cuda_runtime_api.h, served by
// meshstore's emulated devices: linked into a GPU example's emulated build,
// it switches the process to one emulated device before main() runs, so
// the example's own code is the code a GPU runs. Device 0 only
// (cudaSetDevice is not declared); a copy checks its ranges as the
// emulation does.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "cuda_runtime_api.h"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/internal/cuda_emulation.hpp"

namespace {

namespace cuda = meshstore::internal::cuda;

// Before main(): nothing has asked about CUDA yet.
[[maybe_unused]] const bool emulating = [] {
  if (auto s = cuda::emulate_devices(1); !s.ok()) {
    std::fprintf(stderr, "emulated_cudart: %s\n", s.to_string().c_str());
    std::abort();
  }
  return true;
}();

std::mutex mu;
std::map<void*, std::shared_ptr<std::byte>>& allocations() {
  static auto* live = new std::map<void*, std::shared_ptr<std::byte>>;
  return *live;
}

}  // namespace

cudaError_t cudaMalloc(void** ptr, std::size_t size) {
  if (ptr == nullptr || size == 0) return cudaErrorInvalidValue;
  auto block = cuda::device_alloc(size, 0);
  if (!block.ok()) return cudaErrorMemoryAllocation;
  std::lock_guard lock(mu);
  *ptr = block->get();
  allocations().emplace(*ptr, std::move(*block));
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard lock(mu);
  return allocations().erase(ptr) == 1 ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind) {
  if (kind == cudaMemcpyHostToHost) return cudaErrorInvalidValue;  // not what the examples do
  return cuda::copy_bytes(dst, src, count).ok() ? cudaSuccess : cudaErrorInvalidValue;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
  }
  return "unknown error";
}
