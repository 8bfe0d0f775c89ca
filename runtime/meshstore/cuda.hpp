#pragma once
// Whether this process can use CUDA device memory, and why not. The store
// takes and fills tensors whose TensorView names a CUDA device (cuda:N)
// directly; these calls say whether that can work here.
#include "meshstore/status.hpp"

namespace meshstore::cuda {

/// True when this build has CUDA support (MESHSTORE_WITH_CUDA found a toolkit).
bool built() noexcept;

/// OK when CUDA devices can be used in this process; otherwise
/// Errc::unavailable saying why: a build without CUDA, or the runtime's own
/// answer (no driver: "cudaGetDeviceCount: CUDA driver version is
/// insufficient for CUDA runtime version"; no device: "no CUDA-capable
/// device is detected"). Asked once per process.
Status status();

/// CUDA devices this process sees (0 when status() is not OK).
int device_count();

}  // namespace meshstore::cuda
