#pragma once

// Reading objects from one volume under a read lease: whole objects, boxes
// cut out of shards, or zero-copy views over mapped regions.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshstore/client/client_state.hpp"
#include "meshstore/future.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"

namespace meshstore::client {

// Where one object of a read goes.
struct ReadTarget {
  std::uint64_t object_id = 0;
  std::byte* dst = nullptr;
  std::size_t nbytes = 0;
  // `dst` is GPU memory.
  bool device = false;
  // Sharded reads: copy only `region` of this shard (box `from`) into
  // `dst`, which is laid out as box `to`, instead of the whole object.
  struct Box {
    TensorSlice from, to, region;
    std::size_t elsize = 1;
  };
  std::optional<Box> box;
  // GetMode::view: where the tensor goes (dst is then null), and its type.
  Tensor* view = nullptr;
  DType dtype = DType::uint8;
  Shape shape;
  // A cast read: the object holds `shape` elements of `dtype`, and `dst`
  // (contiguous host memory) gets them converted to this dtype.
  std::optional<DType> cast_to;
  // The object's bytes go to these pieces (dst is then null).
  std::shared_ptr<const Scatter> scatter;
  // Where its record says the object lies (ShardRecord::place), "" unknown.
  std::string place;
};

// Pins the objects at one volume, reads them, unpins. Sets `*stale` when the
// volume no longer has one of them, or (unless `pinned`: they were located
// under a controller's pin) one was superseded.
Future<void> read_from_volume(client_pointer self, const std::string& volume_id,
                              std::vector<ReadTarget> targets, bool pinned,
                              std::shared_ptr<bool> stale);

}  // namespace meshstore::client
