#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshstore/result.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore {

/// A box inside a global tensor: the global shape, the offsets of the box's
/// first element, and the box's own (local) shape. A shard of a sharded
/// tensor is described by one TensorSlice. A 0-dim slice is the scalar.
/// A value type; thread-compatible.
class TensorSlice {
 public:
  /// The 0-dim slice (a whole scalar).
  TensorSlice() = default;

  /// A validated slice. Fails with Errc::invalid_argument when the three
  /// vectors differ in length or hold negative values, and with
  /// Errc::out_of_range when the box leaves the global shape.
  static Result<TensorSlice> make(Shape global_shape, Shape offsets, Shape local_shape);
  /// The slice covering all of `global_shape`.
  static TensorSlice full(Shape global_shape);

  const Shape& global_shape() const noexcept { return global_shape_; }
  const Shape& offsets() const noexcept { return offsets_; }
  const Shape& local_shape() const noexcept { return local_shape_; }
  std::int64_t ndim() const noexcept { return static_cast<std::int64_t>(global_shape_.size()); }
  /// Elements inside the box.
  std::int64_t numel() const noexcept { return shape_numel(local_shape_); }
  /// True when the box holds no element.
  bool empty() const noexcept { return numel() == 0; }
  /// True when the box is the whole global tensor.
  bool is_full() const noexcept;

  /// True when both slices live in the same global shape.
  bool same_space(const TensorSlice& other) const noexcept {
    return global_shape_ == other.global_shape_;
  }
  /// True when every element of `other` lies inside this box (an empty
  /// `other` in the same space is contained).
  bool contains(const TensorSlice& other) const noexcept;
  /// The overlap of two boxes, or nullopt when they are disjoint (or live in
  /// different global shapes).
  std::optional<TensorSlice> intersect(const TensorSlice& other) const;

  /// This box minus `other`: disjoint boxes covering exactly the elements of
  /// this one that `other` lacks (this box itself when they do not overlap;
  /// none when `other` contains it).
  std::vector<TensorSlice> minus(const TensorSlice& other) const;

  /// True when the box's elements form one contiguous run of the row-major
  /// global tensor (so it can be moved with one memcpy).
  bool is_contiguous_in_global() const noexcept;
  /// Element offset of the box's first element in the row-major global tensor.
  std::int64_t global_flat_offset() const noexcept;

  /// This box expressed inside `outer` (which must contain it): the result's
  /// global shape is outer's local shape. Used to address the part of a
  /// stored shard that a read needs.
  Result<TensorSlice> relative_to(const TensorSlice& outer) const;

  /// "[0:2, 4:8] of [4, 8]".
  std::string to_string() const;

  friend bool operator==(const TensorSlice& a, const TensorSlice& b) {
    return a.global_shape_ == b.global_shape_ && a.offsets_ == b.offsets_ &&
           a.local_shape_ == b.local_shape_;
  }
  friend bool operator!=(const TensorSlice& a, const TensorSlice& b) { return !(a == b); }

 private:
  TensorSlice(Shape g, Shape o, Shape l)
      : global_shape_(std::move(g)), offsets_(std::move(o)), local_shape_(std::move(l)) {}
  Shape global_shape_;
  Shape offsets_;
  Shape local_shape_;
};

}  // namespace meshstore
