#pragma once
// The few CUDA runtime calls the GPU examples make, served on meshstore's
// emulated devices (docs/gpu.md, "Testing without a GPU") so that a
// guide's example runs unchanged in CI, with or without the toolkit. First
// on the include path of an example's emulated build, this header stands
// in for the toolkit's: its types match the toolkit's, and each call is
// renamed to emulated_cudart.cpp's, so it never clashes with the CUDA
// runtime the library links where the toolkit exists.
#include <cstddef>

enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
using cudaError_t = cudaError;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

#define cudaMalloc meshstore_emulated_cudaMalloc
#define cudaFree meshstore_emulated_cudaFree
#define cudaMemcpy meshstore_emulated_cudaMemcpy
#define cudaGetErrorString meshstore_emulated_cudaGetErrorString

cudaError_t cudaMalloc(void** ptr, std::size_t size);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind);
const char* cudaGetErrorString(cudaError_t error);
