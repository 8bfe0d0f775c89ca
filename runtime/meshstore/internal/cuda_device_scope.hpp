#pragma once
// Internal, for files built with the CUDA toolkit only: makes a GPU the
// calling thread's current device for a scope.
#include <cuda_runtime_api.h>

namespace meshstore::internal::cuda {

class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) error_ = cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0 && error_ == cudaSuccess) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  /// cudaSuccess, or why the device could not be made current.
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

}  // namespace meshstore::internal::cuda
