// copy_view(): copy_into() across host and device memory. Built with and
// without CUDA: it needs only to_host() and to_device().
#include "meshstore/internal/cuda_copy.hpp"

namespace meshstore::internal::cuda {

Status copy_view(const TensorView& src, const TensorView& dst) {
  if (!on_device(src) && !on_device(dst)) return copy_into(src, dst);
  // copy_into checks dtypes and shapes without touching dst: its errors.
  if (src.dtype() != dst.dtype() || src.shape() != dst.shape()) return copy_into(src, dst);
  if (dst.nbytes() == 0) return Status();
  if (!on_device(src)) {
    // Host to device: the device side takes any strides, the host side
    // must be row-major.
    if (src.is_contiguous()) return to_device(dst, static_cast<const std::byte*>(src.data()));
    auto packed = Tensor::empty(src.dtype(), src.shape());
    if (!packed.ok()) return packed.status();
    MESHSTORE_RETURN_IF_ERROR(copy_into(src, packed->view()));
    return to_device(dst, static_cast<const std::byte*>(packed->data()));
  }
  if (!on_device(dst) && dst.is_contiguous())
    return to_host(static_cast<std::byte*>(dst.data()), src);
  // Device to a strided host view, or device to device: through the host.
  auto packed = Tensor::empty(src.dtype(), src.shape());
  if (!packed.ok()) return packed.status();
  MESHSTORE_RETURN_IF_ERROR(to_host(static_cast<std::byte*>(packed->data()), src));
  if (on_device(dst)) return to_device(dst, static_cast<const std::byte*>(packed->data()));
  return copy_into(packed->view(), dst);
}

}  // namespace meshstore::internal::cuda
