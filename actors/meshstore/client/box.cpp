// Box geometry for sharded reads.

#include "meshstore/client/box.hpp"

#include <cstring>

namespace meshstore::client {

void copy_box(const std::byte* src, const TensorSlice& from, std::byte* dst, const TensorSlice& to,
              const TensorSlice& region, std::size_t elsize, std::int64_t skip) {
  const std::size_t nd = region.global_shape().size();
  if (region.empty()) return;
  if (nd == 0) {
    std::memcpy(dst, src, elsize);
    return;
  }
  const auto sstr = contiguous_strides(from.local_shape());
  const auto dstr = contiguous_strides(to.local_shape());
  const std::size_t run = static_cast<std::size_t>(region.local_shape()[nd - 1]) * elsize;
  Shape idx(nd, 0);  // position inside `region`, the last dim fixed at 0
  for (;;) {
    std::int64_t so = 0, d = 0;
    for (std::size_t k = 0; k < nd; ++k) {
      const auto g = region.offsets()[k] + idx[k];
      so += (g - from.offsets()[k]) * sstr[k];
      d += (g - to.offsets()[k]) * dstr[k];
    }
    std::memcpy(dst + d * static_cast<std::int64_t>(elsize),
                src + (so - skip) * static_cast<std::int64_t>(elsize), run);
    std::size_t k = nd - 1;
    for (;;) {
      if (k == 0) return;
      --k;
      if (++idx[k] < region.local_shape()[k]) break;
      idx[k] = 0;
    }
  }
}

std::int64_t offset_in(const TensorSlice& from, const Shape& at) {
  const auto strides = contiguous_strides(from.local_shape());
  std::int64_t off = 0;
  for (std::size_t k = 0; k < at.size(); ++k) off += (at[k] - from.offsets()[k]) * strides[k];
  return off;
}

}  // namespace meshstore::client
