#pragma once
// Moving tensors between CUDA device memory and host memory, for the
// store's device paths (docs/gpu.md). Every function is safe to call in a
// build without CUDA: it answers Errc::unavailable.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::internal::cuda {

/// Whether `v` names device (GPU) memory rather than host memory.
inline bool on_device(const TensorView& v) { return v.device().type != DeviceType::cpu; }

/// Device allocations that check_device_view() found during one call,
/// each by its first address, size and device.
class KnownAllocations {
 public:
  /// Whether [first, first + span) lies within one known allocation on
  /// `device`.
  bool holds(std::uintptr_t first, std::size_t span, int device) const;
  /// Whether every byte of device view `v` lies within one known
  /// allocation on its device.
  bool holds(const TensorView& v) const;
  void add(std::uintptr_t base, std::size_t size, int device);

 private:
  std::map<std::uintptr_t, std::pair<std::size_t, int>> by_base_;
};

/// Checks that device view `view` (device cuda:N) can be used: CUDA works
/// here, device N exists, and the view's first and last bytes are live
/// device memory on device N, in one allocation (not freed, not host
/// memory, not another device's, not running past the end of an
/// allocation). `what` names the view ("put 'w'"). Errc::unavailable when
/// CUDA cannot be used, Errc::invalid_argument otherwise. With `known`,
/// the allocation this check finds is added to it: a caller checking many
/// views (a state dict's, often carved from a few allocations) skips the
/// next ones known->holds(), which then cost no call to the driver.
Status check_device_view(const TensorView& view, const std::string& what,
                         KnownAllocations* known = nullptr);

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

/// One contiguous piece of device memory in a batched copy (copy_pieces):
/// `n` bytes at `device_ptr` on GPU `device`, and `offset` into the host
/// buffer where they go (or come from).
struct DevicePiece {
  void* device_ptr = nullptr;
  std::size_t offset = 0;
  std::size_t n = 0;
  int device = 0;
};

/// Copies many pieces between host memory `host` and device memory at
/// once: each piece's bytes to host + offset (`to_host`), or from there to
/// the device. Returns when every byte is there. Where the pieces are many
/// and small (a state dict's packed entries) they cost about one copy: per
/// GPU, one kernel gathers them into (or scatters them from) one device
/// buffer, moved in one copy of the host range they span, instead of a
/// synchronous copy each (about 10 us apiece). Pieces must not overlap.
/// To the host, the bytes between pieces in the range they span may be
/// written too (a buffer of the pieces alone, as the store stages them).
Status copy_pieces(std::byte* host, const std::vector<DevicePiece>& pieces, bool to_host);

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
