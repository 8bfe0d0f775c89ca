#include "meshstore/tensor_slice.hpp"

#include <algorithm>

namespace meshstore {

Result<TensorSlice> TensorSlice::make(Shape global_shape, Shape offsets, Shape local_shape) {
  if (offsets.size() != global_shape.size() || local_shape.size() != global_shape.size()) {
    return Status(Errc::invalid_argument,
                  "TensorSlice: global shape " + shape_to_string(global_shape) + ", offsets " +
                      shape_to_string(offsets) + " and local shape " +
                      shape_to_string(local_shape) + " must have the same number of dims");
  }
  for (std::size_t i = 0; i < global_shape.size(); ++i) {
    if (global_shape[i] < 0 || offsets[i] < 0 || local_shape[i] < 0) {
      return Status(Errc::invalid_argument, "TensorSlice: negative value in global shape " +
                                                shape_to_string(global_shape) + ", offsets " +
                                                shape_to_string(offsets) + " or local shape " +
                                                shape_to_string(local_shape));
    }
    if (offsets[i] + local_shape[i] > global_shape[i]) {
      return Status(Errc::out_of_range, "TensorSlice: dim " + std::to_string(i) + " spans [" +
                                            std::to_string(offsets[i]) + ", " +
                                            std::to_string(offsets[i] + local_shape[i]) +
                                            ") beyond size " + std::to_string(global_shape[i]) +
                                            " of global shape " + shape_to_string(global_shape));
    }
  }
  return TensorSlice(std::move(global_shape), std::move(offsets), std::move(local_shape));
}

TensorSlice TensorSlice::full(Shape global_shape) {
  Shape offsets(global_shape.size(), 0);
  Shape local = global_shape;
  return TensorSlice(std::move(global_shape), std::move(offsets), std::move(local));
}

bool TensorSlice::is_full() const noexcept { return local_shape_ == global_shape_; }

bool TensorSlice::contains(const TensorSlice& other) const noexcept {
  if (!same_space(other)) return false;
  if (other.empty()) return true;
  for (std::size_t i = 0; i < global_shape_.size(); ++i) {
    if (other.offsets_[i] < offsets_[i] ||
        other.offsets_[i] + other.local_shape_[i] > offsets_[i] + local_shape_[i]) {
      return false;
    }
  }
  return true;
}

std::optional<TensorSlice> TensorSlice::intersect(const TensorSlice& other) const {
  if (!same_space(other)) return std::nullopt;
  Shape off(global_shape_.size()), len(global_shape_.size());
  for (std::size_t i = 0; i < global_shape_.size(); ++i) {
    const auto lo = std::max(offsets_[i], other.offsets_[i]);
    const auto hi =
        std::min(offsets_[i] + local_shape_[i], other.offsets_[i] + other.local_shape_[i]);
    if (hi <= lo) return std::nullopt;
    off[i] = lo;
    len[i] = hi - lo;
  }
  return TensorSlice(global_shape_, std::move(off), std::move(len));
}

std::vector<TensorSlice> TensorSlice::minus(const TensorSlice& other) const {
  if (empty()) return {};
  auto both = intersect(other);
  if (!both) return {*this};
  // Peel off, dimension by dimension, the parts below and above the
  // overlap; what is left at the end is the overlap itself.
  std::vector<TensorSlice> out;
  Shape off = offsets_, len = local_shape_;
  for (std::size_t d = 0; d < offsets_.size(); ++d) {
    const auto lo = both->offsets_[d], hi = lo + both->local_shape_[d];
    if (off[d] < lo) {
      Shape o = off, l = len;
      l[d] = lo - off[d];
      out.push_back(TensorSlice(global_shape_, std::move(o), std::move(l)));
    }
    if (off[d] + len[d] > hi) {
      Shape o = off, l = len;
      o[d] = hi;
      l[d] = off[d] + len[d] - hi;
      out.push_back(TensorSlice(global_shape_, std::move(o), std::move(l)));
    }
    off[d] = lo;
    len[d] = hi - lo;
  }
  return out;
}

bool TensorSlice::is_contiguous_in_global() const noexcept {
  if (empty()) return true;
  // Skip leading dims of extent 1; the first dim with extent > 1 may be
  // partial, and every dim after it must be taken whole.
  std::size_t i = 0;
  while (i < local_shape_.size() && local_shape_[i] == 1) ++i;
  for (std::size_t j = i + 1; j < local_shape_.size(); ++j) {
    if (local_shape_[j] != global_shape_[j]) return false;
  }
  return true;
}

std::int64_t TensorSlice::global_flat_offset() const noexcept {
  const auto strides = contiguous_strides(global_shape_);
  std::int64_t off = 0;
  for (std::size_t i = 0; i < offsets_.size(); ++i) off += offsets_[i] * strides[i];
  return off;
}

Result<TensorSlice> TensorSlice::relative_to(const TensorSlice& outer) const {
  if (!outer.contains(*this)) {
    return Status(Errc::out_of_range,
                  "TensorSlice: " + to_string() + " is not inside " + outer.to_string());
  }
  Shape off(offsets_.size());
  for (std::size_t i = 0; i < offsets_.size(); ++i) off[i] = offsets_[i] - outer.offsets_[i];
  return TensorSlice(outer.local_shape_, std::move(off), local_shape_);
}

std::string TensorSlice::to_string() const {
  std::string out = "[";
  for (std::size_t i = 0; i < offsets_.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(offsets_[i]) + ":" + std::to_string(offsets_[i] + local_shape_[i]);
  }
  return out + "] of " + shape_to_string(global_shape_);
}

}  // namespace meshstore
