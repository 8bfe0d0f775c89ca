#pragma once

// Box geometry for sharded reads: copying the overlap of two row-major boxes
// of a tensor, and offsets inside a box.

#include <cstddef>
#include <cstdint>

#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"

namespace meshstore::client {

// Copies the elements of `region` (a box inside both) from a row-major
// buffer holding box `from` to one holding box `to`.
// `src` holds box `from` minus its first `skip` elements (a range read of it).
void copy_box(const std::byte* src, const TensorSlice& from, std::byte* dst, const TensorSlice& to,
              const TensorSlice& region, std::size_t elsize, std::int64_t skip = 0);

// Element offset, in the row-major box `from`, of global position `at`.
std::int64_t offset_in(const TensorSlice& from, const Shape& at);

}  // namespace meshstore::client
