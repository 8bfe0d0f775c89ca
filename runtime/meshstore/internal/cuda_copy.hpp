#pragma once
// Moving tensors between CUDA device memory and host memory, for the
// store's device paths (docs/gpu.md). Every function is safe to call in a
// build without CUDA: it answers Errc::unavailable.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "meshstore/result.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::internal::cuda {

/// Whether `v` names device (GPU) memory rather than host memory.
inline bool on_device(const TensorView& v) { return v.device().type != DeviceType::cpu; }

/// Checks that device view `view` (device cuda:N) can be used: CUDA works
/// here, device N exists, and the view's first and last bytes are live
/// device memory on device N (not freed, not host memory, not another
/// device's, not running past the end of an allocation into unmapped
/// addresses). `what`
/// names the view ("put 'w'"). Errc::unavailable when CUDA cannot be used,
/// Errc::invalid_argument otherwise.
Status check_device_view(const TensorView& view, const std::string& what);

/// `n` bytes of page-locked host memory (the fast path for device copies)
/// from a process-wide pool, given back to it when the last owner lets go;
/// plain host memory when page-locked memory cannot be had. nullptr only
/// when no memory at all can be had.
std::shared_ptr<std::byte> pinned(std::size_t n);

/// Copies the elements of device view `src` (any strides) into `dst`, host
/// memory of src.nbytes() bytes, row-major. Returns when the bytes are there.
Status to_host(std::byte* dst, const TensorView& src);

/// Copies `n` bytes from `src` to `dst`, each host or device memory (the
/// runtime tells which), on the device that holds either (for a device to
/// device copy, the destination's). Returns when the bytes are there.
Status copy_bytes(void* dst, const void* src, std::size_t n);

/// Page-locks the host memory [p, p + n) (cudaHostRegister, portable to
/// every device), so device copies to and from it run at the DMA engines'
/// speed instead of through the driver's own bounce buffers. It stays
/// page-locked until the returned handle's last owner lets go, which must
/// happen before the memory is unmapped. Errc::unavailable without CUDA,
/// Errc::internal when the driver refuses (the memory then still works for
/// copies, only slower).
Result<std::shared_ptr<void>> register_host(void* p, std::size_t n);

/// True when `p` is CUDA device (or managed) memory; false for host memory,
/// and always false where CUDA cannot be used.
bool is_device_pointer(const void* p);

/// Copies `src`, host memory holding dst.nbytes() bytes row-major, into
/// device view `dst` (any strides). Returns when the bytes are there.
Status to_device(const TensorView& dst, const std::byte* src);

/// `n` bytes of GPU memory on `device` (at least one), freed when the last
/// owner lets go. Errc::unavailable without CUDA, Errc::out_of_capacity
/// when the device is full.
Result<std::shared_ptr<std::byte>> device_alloc(std::size_t n, int device);

/// A dma-buf file descriptor exporting the GPU memory around [p, p + n)
/// (the range widened to whole host pages), for an RDMA device to register
/// (GPUDirect RDMA: ibv_reg_dmabuf_mr); `*offset` receives p's offset in
/// the exported range. The caller closes it. Errc::unsupported where the
/// driver cannot export it (no cuMemGetHandleForAddressRange, or no dma-buf
/// support for this memory), Errc::unavailable without CUDA.
Result<int> export_dmabuf(const void* p, std::size_t n, std::uint64_t* offset);

/// The device allocation holding `p` (cuMemGetAddressRange): its start and
/// size. Errc::invalid_argument (or unsupported) when `p` is not device
/// memory, Errc::unavailable without CUDA.
Result<std::pair<std::uintptr_t, std::size_t>> allocation_of(const void* p);

/// The CUDA IPC handle (cudaIpcGetMemHandle, as bytes) of the device
/// allocation starting at `p`, for another process on this host to open
/// with ipc_open(). Errc::internal when the runtime refuses (`p` is not
/// the start of a device allocation), Errc::unavailable without CUDA.
Result<std::string> ipc_handle(const void* p);

/// Opens `handle` (ipc_handle() of another process on this host) with
/// device `device` current: the other process's device memory, mapped
/// here until the returned pointer's last owner lets go. A process cannot
/// open its own handles. Errc::unavailable when the runtime refuses.
Result<std::shared_ptr<std::byte>> ipc_open(const std::string& handle, int device);

/// copy_into() for views anywhere: each of `src` and `dst` may be host or
/// device memory, with any strides. Mismatched dtypes or shapes fail as
/// copy_into() fails, before `dst` is touched; a device side is staged
/// through host memory where a single CUDA copy cannot do it. Built with or
/// without CUDA (without, a device side answers Errc::unavailable).
Status copy_view(const TensorView& src, const TensorView& dst);

}  // namespace meshstore::internal::cuda
