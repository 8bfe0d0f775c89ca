// The client's box geometry (copy_box, offset_in): what a read of a box
// out of the shards of a tensor copies, and what it leaves alone.

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "meshstore/client/box.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"
#include "testing/test_util.hpp"

namespace meshstore::client {
namespace {

// Element `index` of the whole tensor (its row-major position), byte `k`:
// every element of a small tensor has its own bytes.
std::byte byte_of(std::int64_t index, std::size_t k) {
  return static_cast<std::byte>((index * 7 + static_cast<std::int64_t>(k) * 131 + 1) & 0xff);
}

std::int64_t global_index(const Shape& shape, const Shape& at) {
  std::int64_t i = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + at[d];
  return i;
}

// The global positions of `box`'s elements, in row-major order.
std::vector<Shape> positions(const TensorSlice& box) {
  std::vector<Shape> out;
  if (box.empty()) return out;
  Shape at = box.offsets();
  for (;;) {
    out.push_back(at);
    std::size_t d = at.size();
    for (;;) {
      if (d == 0) return out;
      --d;
      if (++at[d] < box.offsets()[d] + box.local_shape()[d]) break;
      at[d] = box.offsets()[d];
    }
  }
}

bool inside(const TensorSlice& box, const Shape& at) {
  for (std::size_t d = 0; d < at.size(); ++d) {
    if (at[d] < box.offsets()[d] || at[d] >= box.offsets()[d] + box.local_shape()[d]) return false;
  }
  return true;
}

// A row-major buffer holding the elements of `box`.
std::vector<std::byte> bytes_of(const TensorSlice& box, std::size_t elsize) {
  std::vector<std::byte> out;
  for (const auto& at : positions(box)) {
    for (std::size_t k = 0; k < elsize; ++k) {
      out.push_back(byte_of(global_index(box.global_shape(), at), k));
    }
  }
  return out;
}

// A buffer of box `to` before the copy: bytes no element has.
std::vector<std::byte> untouched(const TensorSlice& to, std::size_t elsize) {
  return std::vector<std::byte>(static_cast<std::size_t>(to.numel()) * elsize, std::byte{0xEE});
}

// `dst` (box `to`, initially untouched()) after `region` was copied into it.
std::vector<std::byte> expected(const TensorSlice& to, const TensorSlice& region,
                                std::size_t elsize) {
  auto out = untouched(to, elsize);
  std::size_t i = 0;
  for (const auto& at : positions(to)) {
    if (inside(region, at)) {
      for (std::size_t k = 0; k < elsize; ++k) {
        out[i * elsize + k] = byte_of(global_index(to.global_shape(), at), k);
      }
    }
    ++i;
  }
  return out;
}

TensorSlice box(const Shape& global, const Shape& offsets, const Shape& local) {
  return TensorSlice::make(global, offsets, local).value();
}

// Copies the overlap of `from` and `to` and returns `to`'s buffer.
std::vector<std::byte> copy_overlap(const TensorSlice& from, const TensorSlice& to,
                                    std::size_t elsize) {
  const auto src = bytes_of(from, elsize);
  auto dst = untouched(to, elsize);
  const auto region = from.intersect(to);
  if (region) copy_box(src.data(), from, dst.data(), to, *region, elsize);
  return dst;
}

TEST(ClientBox, CopiesAWholeTensorIntoAWholeTensor) {
  const auto whole = TensorSlice::full({4, 5});
  EXPECT_EQ(copy_overlap(whole, whole, 4), bytes_of(whole, 4));
}

TEST(ClientBox, CopiesThePartialOverlapOfTwoBoxes) {
  const auto from = box({6, 8}, {0, 0}, {4, 5});
  const auto to = box({6, 8}, {2, 3}, {4, 5});
  const auto region = box({6, 8}, {2, 3}, {2, 2});
  ASSERT_EQ(from.intersect(to), region);
  EXPECT_EQ(copy_overlap(from, to, 4), expected(to, region, 4));
}

TEST(ClientBox, CopiesAnOverlapInThreeDimensions) {
  const auto from = box({4, 5, 6}, {1, 0, 2}, {3, 4, 3});
  const auto to = box({4, 5, 6}, {0, 2, 0}, {4, 3, 6});
  const auto region = from.intersect(to);
  ASSERT_TRUE(region && !region->empty());
  EXPECT_EQ(copy_overlap(from, to, 2), expected(to, *region, 2));
}

TEST(ClientBox, CopiesARowShardIntoAColumnShard) {
  // Resharding: rows 2..3 of every column, into a box of columns 4..7.
  const auto rows = box({4, 8}, {2, 0}, {2, 8});
  const auto columns = box({4, 8}, {0, 4}, {4, 4});
  EXPECT_EQ(copy_overlap(rows, columns, 8), expected(columns, box({4, 8}, {2, 4}, {2, 4}), 8));
}

TEST(ClientBox, CopiesElementsOfEveryDtypeSize) {
  const auto from = box({5, 7}, {1, 2}, {4, 5});
  const auto to = box({5, 7}, {0, 0}, {3, 4});
  const auto region = from.intersect(to);
  ASSERT_TRUE(region);
  for (DType d : all_dtypes()) {
    SCOPED_TRACE(std::string(dtype_name(d)));
    const std::size_t elsize = dtype_size(d);
    EXPECT_EQ(copy_overlap(from, to, elsize), expected(to, *region, elsize));
  }
}

TEST(ClientBox, CopiesFromARangeReadThatSkipsTheBoxsFirstElements) {
  // A box read by range: only the bytes from the region's first element to
  // its last are fetched, so the source starts `skip` elements into `from`.
  const std::size_t elsize = 4;
  const auto from = box({6, 8}, {1, 0}, {5, 8});
  const auto to = box({6, 8}, {0, 2}, {6, 3});
  const auto region = from.intersect(to).value();
  Shape last = region.offsets();
  for (std::size_t d = 0; d < last.size(); ++d) last[d] += region.local_shape()[d] - 1;
  const std::int64_t lo = offset_in(from, region.offsets());
  const std::int64_t hi = offset_in(from, last) + 1;
  ASSERT_EQ(lo, 2);
  const auto all = bytes_of(from, elsize);
  const std::vector<std::byte> range(all.begin() + lo * elsize, all.begin() + hi * elsize);
  auto dst = untouched(to, elsize);
  copy_box(range.data(), from, dst.data(), to, region, elsize, lo);
  EXPECT_EQ(dst, expected(to, region, elsize));
}

TEST(ClientBox, CopiesARegionPieceByPieceAsWellAsWhole) {
  // The rows of a region copied in separate pieces (as reads split them
  // over threads) give the bytes of one copy of the whole region.
  const std::size_t elsize = 2;
  const auto from = box({9, 6}, {0, 1}, {9, 4});
  const auto to = box({9, 6}, {1, 0}, {7, 6});
  const auto region = from.intersect(to).value();
  const auto src = bytes_of(from, elsize);
  auto dst = untouched(to, elsize);
  for (std::int64_t row = 0; row < region.local_shape()[0]; row += 3) {
    Shape off = region.offsets(), len = region.local_shape();
    off[0] += row;
    len[0] = std::min<std::int64_t>(3, region.local_shape()[0] - row);
    copy_box(src.data(), from, dst.data(), to, box(region.global_shape(), off, len), elsize);
  }
  EXPECT_EQ(dst, expected(to, region, elsize));
}

TEST(ClientBox, CopiesAZeroDimensionalTensorAsOneElement) {
  const auto scalar = TensorSlice::full({});
  EXPECT_EQ(copy_overlap(scalar, scalar, 8), bytes_of(scalar, 8));
}

TEST(ClientBox, AnEmptyRegionCopiesNothing) {
  const auto whole = TensorSlice::full({4, 4});
  const auto src = bytes_of(whole, 4);
  auto dst = untouched(whole, 4);
  copy_box(src.data(), whole, dst.data(), whole, box({4, 4}, {1, 1}, {0, 2}), 4);
  EXPECT_EQ(dst, untouched(whole, 4));
}

TEST(ClientBox, OffsetInCountsRowMajorFromTheBoxsFirstElement) {
  const auto b = box({6, 8}, {2, 3}, {3, 4});
  EXPECT_EQ(offset_in(b, {2, 3}), 0);
  EXPECT_EQ(offset_in(b, {2, 4}), 1);
  EXPECT_EQ(offset_in(b, {3, 3}), 4);
  EXPECT_EQ(offset_in(b, {4, 6}), 11);
}

TEST(ClientBox, OffsetInOfTheBoxsLastElementIsItsSizeLessOne) {
  const auto b = box({4, 5, 6}, {1, 2, 3}, {2, 3, 3});
  EXPECT_EQ(offset_in(b, {2, 4, 5}), b.numel() - 1);
  EXPECT_EQ(offset_in(TensorSlice::full({7}), {6}), 6);
}

}  // namespace
}  // namespace meshstore::client
