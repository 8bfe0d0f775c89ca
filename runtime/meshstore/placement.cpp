#include <algorithm>

#include "meshstore/tensor_slice.hpp"

namespace meshstore {

std::string DimPlacement::to_string() const {
  return kind == Kind::shard ? "Shard(" + std::to_string(dim) + ")" : "Replicate()";
}

std::pair<std::int64_t, std::int64_t> chunk_range(std::int64_t size, std::int64_t pieces,
                                                  std::int64_t index) noexcept {
  const std::int64_t step = (size + pieces - 1) / pieces;  // torch.chunk's piece size
  const std::int64_t begin = std::min(size, index * step);
  const std::int64_t end = std::min(size, begin + step);
  return {begin, end};
}

Result<Placement> Placement::make(Shape mesh_shape, std::vector<DimPlacement> dims) {
  if (mesh_shape.empty()) {
    return Status(Errc::invalid_argument, "placement: the mesh needs at least one dimension");
  }
  for (std::size_t i = 0; i < mesh_shape.size(); ++i) {
    if (mesh_shape[i] < 1) {
      return Status(Errc::invalid_argument, "placement: mesh dimension " + std::to_string(i) +
                                                " has " + std::to_string(mesh_shape[i]) +
                                                " ranks; it needs at least 1");
    }
  }
  if (shape_numel(mesh_shape) > (std::int64_t{1} << 31)) {
    return Status(Errc::invalid_argument,
                  "placement: a mesh of " + shape_to_string(mesh_shape) + " is too large");
  }
  if (dims.size() != mesh_shape.size()) {
    return Status(Errc::invalid_argument,
                  "placement: " + std::to_string(dims.size()) + " placements for a mesh of " +
                      std::to_string(mesh_shape.size()) + " dimension(s) " +
                      shape_to_string(mesh_shape) + "; give one per mesh dimension");
  }
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i].kind == DimPlacement::Kind::shard && dims[i].dim < 0) {
      return Status(Errc::invalid_argument,
                    "placement: mesh dimension " + std::to_string(i) + " shards tensor dimension " +
                        std::to_string(dims[i].dim) + ", which is negative");
    }
    if (dims[i].kind != DimPlacement::Kind::shard &&
        dims[i].kind != DimPlacement::Kind::replicate) {
      return Status(Errc::invalid_argument,
                    "placement: mesh dimension " + std::to_string(i) + " has an unknown kind");
    }
  }
  return Placement(std::move(mesh_shape), std::move(dims));
}

Result<Shape> Placement::coordinates(std::int64_t rank) const {
  if (rank < 0 || rank >= world_size()) {
    return Status(Errc::out_of_range, "placement " + to_string() + ": rank " +
                                          std::to_string(rank) + " is not in [0, " +
                                          std::to_string(world_size()) + ")");
  }
  Shape coords(mesh_shape_.size());
  for (std::size_t i = mesh_shape_.size(); i-- > 0;) {
    coords[i] = rank % mesh_shape_[i];
    rank /= mesh_shape_[i];
  }
  return coords;
}

Result<TensorSlice> Placement::slice_for(const Shape& global_shape, std::int64_t rank) const {
  auto coords = coordinates(rank);
  if (!coords.ok()) return coords.status();
  Shape offsets(global_shape.size(), 0), local = global_shape;
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i].kind != DimPlacement::Kind::shard) continue;
    const auto d = dims_[i].dim;
    if (d >= static_cast<std::int64_t>(global_shape.size())) {
      return Status(Errc::invalid_argument,
                    "placement " + to_string() + ": Shard(" + std::to_string(d) +
                        ") of a tensor of shape " + shape_to_string(global_shape) + " (" +
                        std::to_string(global_shape.size()) + " dimension(s))");
    }
    const auto k = static_cast<std::size_t>(d);
    // Split what the earlier mesh dimensions left of tensor dimension d.
    const auto [begin, end] = chunk_range(local[k], mesh_shape_[i], (*coords)[i]);
    offsets[k] += begin;
    local[k] = end - begin;
  }
  return TensorSlice::make(global_shape, std::move(offsets), std::move(local));
}

Result<RankShard> Placement::shard_for(const Shape& global_shape, std::int64_t rank) const {
  auto slice = slice_for(global_shape, rank);
  if (!slice.ok()) return slice.status();
  RankShard out{*slice, 0};
  for (std::int64_t r = 0; r < world_size(); ++r) {
    if (slice_for(global_shape, r).value() == *slice) ++out.replicas;
  }
  return out;
}

Result<bool> Placement::is_primary(std::int64_t rank) const {
  auto coords = coordinates(rank);
  if (!coords.ok()) return coords.status();
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i].kind == DimPlacement::Kind::replicate && (*coords)[i] != 0) return false;
  }
  return true;
}

std::string Placement::to_string() const {
  std::string out = "[";
  for (std::size_t i = 0; i < dims_.size(); ++i) out += (i ? ", " : "") + dims_[i].to_string();
  out += "] on (";
  for (std::size_t i = 0; i < mesh_shape_.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(mesh_shape_[i]);
  }
  return out + ")";
}

}  // namespace meshstore
