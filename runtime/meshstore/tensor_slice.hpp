#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshstore/status.hpp"
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

  /// The shape of the whole tensor.
  const Shape& global_shape() const noexcept { return global_shape_; }
  /// The global coordinates of the box's first element, one per dim.
  const Shape& offsets() const noexcept { return offsets_; }
  /// The box's own shape.
  const Shape& local_shape() const noexcept { return local_shape_; }
  /// Number of dims (of the global tensor and of the box alike).
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

// -- placements: DTensor-style shardings as boxes -----------------------------
// Placements: how a tensor is laid out over a mesh of ranks, as PyTorch's
// DTensor describes it. A mesh has a shape, (2, 2) say, and ranks are laid
// out on it row-major. Along each mesh dimension the tensor is either
// split, Shard(d) cutting tensor dimension d into as many pieces as that
// mesh dimension has ranks, or Replicate (every rank along it holds the
// same). slice_for() gives the box of the global tensor a rank holds.
//
//   auto p = meshstore::Placement::make({2, 2}, {meshstore::DimPlacement::replicate(),
//                                                meshstore::DimPlacement::shard(0)}).value();
//   meshstore::TensorSlice mine = p.slice_for({100, 64}, rank).value();   // rows [0:50] or
//   [50:100]

/// What one mesh dimension does to the tensor.
struct DimPlacement {
  /// How a mesh dimension lays the tensor out: replicated or sharded.
  enum class Kind : std::uint8_t { replicate = 0, shard = 1 };
  /// Whether the tensor is replicated or split along this mesh dimension.
  Kind kind = Kind::replicate;
  /// Kind::shard: the tensor dimension split along this mesh dimension.
  std::int64_t dim = 0;

  /// Tensor dimension `dim` split into one piece per rank along this mesh
  /// dimension, the way torch.chunk splits: pieces of ceil(size / ranks)
  /// elements, the last ones shorter or empty.
  static DimPlacement shard(std::int64_t dim) { return DimPlacement{Kind::shard, dim}; }
  /// Every rank along this mesh dimension holds the same box.
  static DimPlacement replicate() { return DimPlacement{Kind::replicate, 0}; }

  /// "Shard(0)" or "Replicate()".
  std::string to_string() const;
  friend bool operator==(const DimPlacement& a, const DimPlacement& b) {
    return a.kind == b.kind && (a.kind == Kind::replicate || a.dim == b.dim);
  }
  friend bool operator!=(const DimPlacement& a, const DimPlacement& b) { return !(a == b); }
};

/// The box of a global tensor one rank holds, and how many ranks (this one
/// included) hold that same box: what a sharded put of the rank's piece
/// needs (Store::put, Store::StateDicts::put_sharded).
struct RankShard {
  TensorSlice slice;           ///< The box the rank holds.
  std::uint32_t replicas = 1;  ///< Ranks holding that same box, this one included.
};

/// A tensor's layout over a mesh: the mesh's shape and one DimPlacement per
/// mesh dimension. A value type; thread-compatible.
class Placement {
 public:
  /// A validated placement: at least one mesh dimension, each of at least
  /// one rank, one DimPlacement per mesh dimension, shard dims not negative.
  /// Errc::invalid_argument naming what is wrong.
  static Result<Placement> make(Shape mesh_shape, std::vector<DimPlacement> dims);

  /// The mesh's shape (ranks row-major on it).
  const Shape& mesh_shape() const noexcept { return mesh_shape_; }
  /// One DimPlacement per mesh dimension, in order.
  const std::vector<DimPlacement>& dims() const noexcept { return dims_; }
  /// Ranks on the mesh: the product of its shape.
  std::int64_t world_size() const noexcept { return shape_numel(mesh_shape_); }

  /// Rank `rank`'s coordinates on the mesh (row-major).
  /// Errc::out_of_range when rank is not in [0, world_size()).
  Result<Shape> coordinates(std::int64_t rank) const;

  /// The box of a tensor of `global_shape` that rank `rank` holds. Mesh
  /// dimensions apply in order: a second Shard of the same tensor dimension
  /// splits the piece the first one left (as DTensor does). A rank past
  /// the end of an uneven split holds an empty box. Errc::out_of_range for a
  /// bad rank; Errc::invalid_argument when a shard dim is not a dimension
  /// of the tensor.
  Result<TensorSlice> slice_for(const Shape& global_shape, std::int64_t rank) const;

  /// slice_for() with the number of ranks whose box is the same (the ranks
  /// along the Replicate mesh dimensions). Same errors.
  Result<RankShard> shard_for(const Shape& global_shape, std::int64_t rank) const;

  /// True when `rank` is the first holder of its box: its coordinate is 0
  /// along every Replicate mesh dimension. Readers need only the primary
  /// replicas; the primaries' boxes cover the tensor without overlap.
  Result<bool> is_primary(std::int64_t rank) const;

  /// "[Replicate(), Shard(0)] on (2, 2)".
  std::string to_string() const;

  friend bool operator==(const Placement& a, const Placement& b) {
    return a.mesh_shape_ == b.mesh_shape_ && a.dims_ == b.dims_;
  }
  friend bool operator!=(const Placement& a, const Placement& b) { return !(a == b); }

 private:
  Placement(Shape mesh_shape, std::vector<DimPlacement> dims)
      : mesh_shape_(std::move(mesh_shape)), dims_(std::move(dims)) {}
  Shape mesh_shape_;
  std::vector<DimPlacement> dims_;
};

/// Element range [begin, end) of piece `index` when `size` elements are
/// split into `pieces` the way torch.chunk does: ceil(size / pieces) each,
/// the last pieces shorter, and empty (begin == end == size) past the end.
/// Requires pieces >= 1 and 0 <= index < pieces.
std::pair<std::int64_t, std::int64_t> chunk_range(std::int64_t size, std::int64_t pieces,
                                                  std::int64_t index) noexcept;

}  // namespace meshstore
