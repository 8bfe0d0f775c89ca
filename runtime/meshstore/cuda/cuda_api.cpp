// The CUDA calls of meshstore/tensor.hpp and meshstore/internal/cuda_copy.hpp:
// each goes to the native backend (the CUDA runtime, or "unavailable" in a
// build without it) or, once a test switched them on, to emulated devices
// (backend.hpp). check_device_view() is written once, here, for both.
#include <cstdio>

#include "meshstore/internal/cuda_backend.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/internal/cuda_emulation.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore {
namespace cuda {

bool built() noexcept { return internal::cuda::native::built(); }

Status status() {
  namespace b = internal::cuda;
  return b::emulating() ? b::emulated::status() : b::native::status();
}

int device_count() {
  namespace b = internal::cuda;
  return b::emulating() ? b::emulated::device_count() : b::native::device_count();
}

}  // namespace cuda

namespace internal::cuda {
namespace {

std::string address(const void* p) {
  char at[32];
  std::snprintf(at, sizeof(at), "%p", p);
  return at;
}

Result<int> locate(const void* p) { return emulating() ? emulated::locate(p) : native::locate(p); }

}  // namespace

Result<std::pair<std::uintptr_t, std::size_t>> allocation_of(const void* p) {
  return emulating() ? emulated::allocation_of(p) : native::allocation_of(p);
}

std::size_t span_of(const TensorView& v) {
  if (v.numel() == 0) return 0;
  std::int64_t last = 0;  // the last element, in elements from the first
  for (std::size_t d = 0; d < static_cast<std::size_t>(v.ndim()); ++d) {
    last += (v.shape()[d] - 1) * v.strides()[d];
  }
  return static_cast<std::size_t>(last + 1) * dtype_size(v.dtype());
}

bool KnownAllocations::holds(std::uintptr_t first, std::size_t span, int device) const {
  auto it = by_base_.upper_bound(first);
  if (it == by_base_.begin()) return false;
  --it;
  const auto& [size, on] = it->second;
  return on == device && first - it->first < size && span <= size - (first - it->first);
}

bool KnownAllocations::holds(const TensorView& v) const {
  return !by_base_.empty() && v.numel() > 0 &&
         holds(reinterpret_cast<std::uintptr_t>(v.data()), span_of(v), v.device().index);
}

void KnownAllocations::add(std::uintptr_t base, std::size_t size, int device) {
  by_base_[base] = {size, device};
}

Status check_device_view(const TensorView& view, const std::string& what, KnownAllocations* known) {
  const std::string dev = view.device().to_string();
  if (auto s = meshstore::cuda::status(); !s.ok()) {
    return Status(s.code(), what + ": device " + dev + ": " + s.message());
  }
  const int count = meshstore::cuda::device_count();
  if (view.device().index < 0 || view.device().index >= count) {
    return Status(Errc::invalid_argument,
                  what + ": device " + dev + " does not exist (this process sees " +
                      std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") + ")");
  }
  if (view.numel() == 0) return Status();  // no memory to check
  const std::size_t span = span_of(view);
  auto first = locate(view.data());
  if (!first.ok()) return first.status().with_context(what);
  if (*first < 0) {
    return Status(Errc::invalid_argument, what + ": the memory at " + address(view.data()) +
                                              " is not CUDA device memory (host memory, "
                                              "or device memory already freed), yet the "
                                              "view says " +
                                              dev);
  }
  if (*first != view.device().index) {
    return Status(Errc::invalid_argument, what + ": the memory at " + address(view.data()) +
                                              " lies on cuda:" + std::to_string(*first) +
                                              ", the view says " + dev);
  }
  if (span <= 1) return Status();
  // The last byte too, in the same allocation as the first: a view longer
  // than its allocation ends in unmapped addresses, or in another
  // allocation. Where the driver cannot name the allocation (no
  // cuMemGetAddressRange), only that the last byte is device memory of
  // this device.
  const auto* last = static_cast<const std::byte*>(view.data()) + span - 1;
  auto allocation = allocation_of(view.data());
  const bool inside =
      allocation.ok() && reinterpret_cast<std::uintptr_t>(last) >= allocation->first &&
      reinterpret_cast<std::uintptr_t>(last) - allocation->first < allocation->second;
  if (inside) {
    if (known) known->add(allocation->first, allocation->second, view.device().index);
    return Status();
  }
  auto at = locate(last);
  const int on = at.ok() ? *at : -1;
  if (on != view.device().index) {
    return Status(
        Errc::invalid_argument,
        what + ": the view's last byte, at " + address(last) + ", is " +
            (on < 0 ? std::string("not device memory") : "on cuda:" + std::to_string(on)) +
            ": the view (spanning " + std::to_string(span) +
            " bytes) runs past the end of its allocation on " + dev);
  }
  if (allocation.ok()) {
    return Status(Errc::invalid_argument,
                  what + ": the view (spanning " + std::to_string(span) +
                      " bytes) runs past the end of its allocation on " + dev + " (" +
                      std::to_string(allocation->second) +
                      " bytes) into another allocation; its last byte is at " + address(last));
  }
  return Status();
}

std::shared_ptr<std::byte> pinned(std::size_t n) {
  return emulating() ? emulated::pinned(n) : native::pinned(n);
}

Status to_host(std::byte* dst, const TensorView& src) {
  return emulating() ? emulated::to_host(dst, src) : native::to_host(dst, src);
}

Status to_device(const TensorView& dst, const std::byte* src) {
  return emulating() ? emulated::to_device(dst, src) : native::to_device(dst, src);
}

Status copy_bytes(void* dst, const void* src, std::size_t n) {
  return emulating() ? emulated::copy_bytes(dst, src, n) : native::copy_bytes(dst, src, n);
}

Status copy_pieces(std::byte* host, const std::vector<DevicePiece>& pieces, bool to_host) {
  return emulating() ? emulated::copy_pieces(host, pieces, to_host)
                     : native::copy_pieces(host, pieces, to_host);
}

bool is_device_pointer(const void* p) {
  if (!p || !meshstore::cuda::status().ok()) return false;
  auto at = locate(p);
  return at.ok() && *at >= 0;
}

Result<std::shared_ptr<void>> register_host(void* p, std::size_t n) {
  return emulating() ? emulated::register_host(p, n) : native::register_host(p, n);
}

Result<std::shared_ptr<std::byte>> device_alloc(std::size_t n, int device) {
  return emulating() ? emulated::device_alloc(n, device) : native::device_alloc(n, device);
}

Result<int> export_dmabuf(const void* p, std::size_t n, std::uint64_t* offset) {
  return emulating() ? emulated::export_dmabuf(p, n, offset) : native::export_dmabuf(p, n, offset);
}

Result<std::string> ipc_handle(const void* p) {
  return emulating() ? emulated::ipc_handle(p) : native::ipc_handle(p);
}

Result<std::shared_ptr<std::byte>> ipc_open(const std::string& handle, int device) {
  return emulating() ? emulated::ipc_open(handle, device) : native::ipc_open(handle, device);
}

}  // namespace internal::cuda
}  // namespace meshstore
