#include "meshstore/tensor.hpp"

#include <numeric>

#include "testing/test_util.hpp"

namespace meshstore {
namespace {

TEST(Tensor, ContiguousStridesAreRowMajor) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Strides{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({}), Strides{});
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({3, 0, 2}), 0);
}

TEST(TensorView, TransposeIsNotContiguousButNarrowOfRowsIs) {
  std::vector<float> data(12);
  auto v = TensorView::of(data.data(), {3, 4});
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_FALSE(v.transpose(0, 1)->is_contiguous());
  EXPECT_TRUE(v.narrow(0, 1, 2)->is_contiguous());
  EXPECT_FALSE(v.narrow(1, 1, 2)->is_contiguous());
  EXPECT_EQ(v.nbytes(), 48u);
}

TEST(TensorView, ValidateRejectsBadViews) {
  std::vector<float> data(4);
  EXPECT_ERROR(TensorView(nullptr, DType::float32, {2}).validate("put 'x'"), Errc::invalid_argument,
               "null data");
  EXPECT_ERROR(TensorView(data.data(), DType::float32, {-1}).validate("put 'x'"),
               Errc::invalid_argument, "negative dimension");
  EXPECT_ERROR(TensorView(data.data(), DType::float32, {2, 2}, {1}).validate("put 'x'"),
               Errc::invalid_argument, "strides");
  EXPECT_ERROR(TensorView(data.data(), DType::float32, {1LL << 40, 1LL << 40}).validate("put 'x'"),
               Errc::invalid_argument, "overflows");
  // Empty tensors may have no data at all.
  EXPECT_OK(TensorView(nullptr, DType::float32, {0, 5}).validate("put 'x'"));
}

TEST(TensorView, NarrowAndTransposeCheckBounds) {
  std::vector<float> data(12);
  auto v = TensorView::of(data.data(), {3, 4});
  EXPECT_ERROR(v.narrow(1, 3, 2), Errc::out_of_range, "outside dim 1");
  EXPECT_ERROR(v.narrow(2, 0, 1), Errc::out_of_range, "dim 2");
  EXPECT_ERROR(v.transpose(0, 5), Errc::out_of_range, "transpose");
}

TEST(CopyInto, HonoursStridesOnBothSides) {
  std::vector<int32_t> src(12);
  std::iota(src.begin(), src.end(), 0);
  auto s = TensorView::of(src.data(), {3, 4}).transpose(0, 1).value();  // 4x3, strided
  std::vector<int32_t> dst(24, -1);
  // Destination: every other column of a 4x6 buffer.
  TensorView d(dst.data(), DType::int32, {4, 3}, {6, 2});
  ASSERT_OK(copy_into(s, d));
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(dst[i * 6 + j * 2], src[j * 4 + i]);
      EXPECT_EQ(dst[i * 6 + j * 2 + 1], -1);  // gaps untouched
    }
  }
}

TEST(CopyInto, MismatchFailsAndLeavesDestinationUntouched) {
  std::vector<float> a(4, 1.0f);
  std::vector<float> b(6, 2.0f);
  std::vector<double> c(4, 3.0);
  EXPECT_ERROR(copy_into(TensorView::of(a.data(), {4}), TensorView::of(b.data(), {6})),
               Errc::shape_mismatch, "[4]");
  EXPECT_ERROR(copy_into(TensorView::of(a.data(), {4}), TensorView::of(c.data(), {4})),
               Errc::dtype_mismatch, "float64");
  EXPECT_EQ(b, std::vector<float>(6, 2.0f));
  EXPECT_EQ(c, std::vector<double>(4, 3.0));
}

TEST(PackUnpack, RoundTripThroughContiguousBytes) {
  std::vector<int64_t> src(30);
  std::iota(src.begin(), src.end(), 100);
  auto col = TensorView::of(src.data(), {5, 6}).narrow(1, 2, 3).value();  // 5x3 of 5x6
  std::vector<int64_t> packed(15);
  pack_to(col, packed.data());
  EXPECT_EQ(packed[0], 102);
  EXPECT_EQ(packed[3], 108);
  std::vector<int64_t> back(30, 0);
  auto dst = TensorView::of(back.data(), {5, 6}).narrow(1, 2, 3).value();
  unpack_from(packed.data(), dst);
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < 6; ++c) EXPECT_EQ(back[r * 6 + c], (c >= 2 && c < 5) ? src[r * 6 + c] : 0);
  }
}

TEST(ContentChecksum, DependsOnTheElementsNotTheirLayout) {
  std::vector<std::uint8_t> bytes(1000);
  std::iota(bytes.begin(), bytes.end(), 0);
  const auto whole = TensorView::of(bytes.data(), {1000});
  const auto sum = content_checksum(whole);
  EXPECT_NE(sum, 0u);
  EXPECT_EQ(sum, content_checksum(TensorView::of(bytes.data(), {10, 100})));
  // Any one bit flipped, at any position (lanes, tail), changes it.
  for (std::size_t i : {0, 7, 31, 32, 500, 991, 999}) {
    bytes[i] ^= 1;
    EXPECT_NE(content_checksum(whole), sum) << "byte " << i;
    bytes[i] ^= 1;
  }
  EXPECT_EQ(content_checksum(whole), sum);
  // Length counts: a prefix differs from the whole, even with zeros.
  std::vector<std::uint8_t> zeros(64, 0);
  EXPECT_NE(content_checksum(TensorView::of(zeros.data(), {63})),
            content_checksum(TensorView::of(zeros.data(), {64})));
  // A strided view and its contiguous copy agree.
  std::vector<float> grid(6 * 8);
  std::iota(grid.begin(), grid.end(), 0.0f);
  const TensorView cols(grid.data(), DType::float32, {6, 3}, {8, 1});  // 3 of 8 columns
  std::vector<float> packed(18);
  pack_to(cols, packed.data());
  EXPECT_EQ(content_checksum(cols), content_checksum(TensorView::of(packed.data(), {6, 3})));
  const TensorView transposed(grid.data(), DType::float32, {8, 6}, {1, 8});
  std::vector<float> t(48);
  pack_to(transposed, t.data());
  EXPECT_EQ(content_checksum(transposed), content_checksum(TensorView::of(t.data(), {8, 6})));
  EXPECT_NE(content_checksum(transposed), content_checksum(TensorView::of(grid.data(), {8, 6})));
}

TEST(Tensor, EmptyZerosAndClone) {
  auto t = Tensor::zeros(DType::float32, {2, 3});
  ASSERT_OK(t);
  EXPECT_TRUE(t->defined());
  EXPECT_EQ(t->nbytes(), 24u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t->data()) % 64, 0u);
  t->data_as<float>()[5] = 7.0f;
  Tensor copy = *t;          // shares bytes
  Tensor deep = t->clone();  // does not
  t->data_as<float>()[0] = 1.0f;
  EXPECT_EQ(copy.data_as<float>()[0], 1.0f);
  EXPECT_EQ(deep.data_as<float>()[0], 0.0f);
  EXPECT_EQ(deep.data_as<float>()[5], 7.0f);
  EXPECT_FALSE(Tensor().defined());
  EXPECT_ERROR(Tensor::empty(DType::float32, {-2}), Errc::invalid_argument, "negative");
  auto scalar = Tensor::empty(DType::int64, {});
  ASSERT_OK(scalar);
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_EQ(scalar->nbytes(), 8u);
}

}  // namespace
}  // namespace meshstore
