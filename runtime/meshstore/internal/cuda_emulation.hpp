#pragma once
// Emulated CUDA devices, for tests on machines without a GPU (docs/gpu.md,
// "Testing without a GPU"). Once switched on, every CUDA call of this
// process (those of meshstore/tensor.hpp and meshstore/internal/cuda_copy.hpp)
// works on emulated devices instead of the CUDA runtime:
//
// - "device memory" from device_alloc() lives at addresses the CPU cannot
//   touch (mapped PROT_NONE): code that dereferences a device pointer, or
//   hands one to a system call, faults or fails here as it would on a GPU;
// - the copy calls reach it through a second, private mapping of the same
//   pages, checking every byte they touch lies in one live allocation on
//   the right device (a freed or overrun buffer fails as CUDA fails);
// - register_host() refuses overlapping ranges as cudaHostRegister does;
// - CUDA IPC works between processes of one user on one host that both
//   emulate: a handle names the allocation's memfd (/proc/PID/fd/FD), and
//   a process cannot open its own, as with CUDA;
// - there is no GPUDirect (export_dmabuf() is unsupported).
//
// Nothing ships switched on: only a test harness calls emulate_devices().
#include "meshstore/status.hpp"

namespace meshstore::internal::cuda {

/// Switches this process to `count` (1 to 16) emulated CUDA devices. Call
/// it before anything else asks about CUDA (it is meant for a test's
/// main()). A second call, or a bad count, fails with
/// Errc::invalid_argument.
Status emulate_devices(int count);

/// True once emulate_devices() has succeeded.
bool emulating() noexcept;

/// Emulated device allocations made in this process so far (device_alloc()
/// calls that succeeded; IPC openings are not counted): lets a test see
/// whether device memory is reused. 0 when not emulating.
std::uint64_t emulated_allocations() noexcept;

}  // namespace meshstore::internal::cuda
