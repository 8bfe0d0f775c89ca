// Reads into strided (or GPU) destinations through contiguous temporaries.

#include "meshstore/client/unpack.hpp"

#include "meshstore/internal/cuda_copy.hpp"

namespace meshstore::client {

using internal::cuda::on_device;

Result<std::byte*> contiguous_target(const TensorView& dst,
                                     std::vector<std::pair<Tensor, TensorView>>& unpack,
                                     bool host_only) {
  if (dst.is_contiguous() && !(host_only && on_device(dst))) {
    return static_cast<std::byte*>(dst.data());
  }
  auto tmp = Tensor::empty(dst.dtype(), dst.shape());
  if (!tmp.ok()) return tmp.status();
  auto* p = static_cast<std::byte*>(tmp->data());
  unpack.emplace_back(std::move(tmp).value(), dst);
  return p;
}

Status finish_unpack(std::vector<std::pair<Tensor, TensorView>>& unpack) {
  Status first;
  for (auto& [tmp, dst] : unpack) {
    if (on_device(dst)) {
      auto s = internal::cuda::to_device(dst, static_cast<const std::byte*>(tmp.data()));
      if (!s.ok() && first.ok()) first = s.with_context("host to " + dst.device().to_string());
    } else {
      unpack_from(tmp.data(), dst);
    }
  }
  unpack.clear();
  return first;
}

}  // namespace meshstore::client
