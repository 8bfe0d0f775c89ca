#pragma once
// Internal, for files built with the CUDA toolkit only: makes a GPU the
// calling thread's current device for a scope.
#include <cuda_runtime_api.h>

namespace meshstore::internal::cuda {

class DeviceScope {
 public:
  /// For the runtime's calls, which bind the device's context to the
  /// thread themselves: cudaSetDevice only when another device is current.
  explicit DeviceScope(int device) : DeviceScope(device, false) {}
  /// For driver-API calls (cuMemGetAddressRange, ...), which need the
  /// context already current on this thread: cudaSetDevice always, which
  /// makes the device's primary context current (CUDA 12+). Without it a
  /// thread that never made a runtime call gets CUDA_ERROR_INVALID_CONTEXT.
  static DeviceScope for_driver_calls(int device) { return DeviceScope(device, true); }
  ~DeviceScope() {
    if (previous_ >= 0 && error_ == cudaSuccess) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  DeviceScope(DeviceScope&&) = delete;
  DeviceScope& operator=(DeviceScope&&) = delete;
  /// cudaSuccess, or why the device could not be made current.
  cudaError_t error() const { return error_; }

 private:
  DeviceScope(int device, bool always) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (always || previous_ != device) error_ = cudaSetDevice(device);
  }
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

}  // namespace meshstore::internal::cuda
