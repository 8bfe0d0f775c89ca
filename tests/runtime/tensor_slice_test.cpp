#include "meshstore/tensor_slice.hpp"

#include "testing/test_util.hpp"

namespace meshstore {
namespace {

TensorSlice box(Shape g, Shape o, Shape l) { return TensorSlice::make(g, o, l).value(); }

TEST(TensorSlice, MakeValidatesBounds) {
  EXPECT_OK(TensorSlice::make({4, 8}, {2, 0}, {2, 8}));
  EXPECT_ERROR(TensorSlice::make({4, 8}, {3, 0}, {2, 8}), Errc::out_of_range, "dim 0");
  EXPECT_ERROR(TensorSlice::make({4, 8}, {0}, {2, 8}), Errc::invalid_argument,
               "same number of dims");
  EXPECT_ERROR(TensorSlice::make({4, 8}, {-1, 0}, {2, 8}), Errc::invalid_argument, "negative");
}

TEST(TensorSlice, IntersectionOfDisjointIsEmpty) {
  EXPECT_FALSE(box({4, 8}, {0, 0}, {2, 8}).intersect(box({4, 8}, {2, 0}, {2, 8})).has_value());
}

TEST(TensorSlice, IntersectionOfOverlappingBoxes) {
  auto rows = box({4, 8}, {1, 0}, {2, 8});
  auto cols = box({4, 8}, {0, 4}, {4, 4});
  auto both = rows.intersect(cols);
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(*both, box({4, 8}, {1, 4}, {2, 4}));
  EXPECT_EQ(both->numel(), 8);
}

TEST(TensorSlice, IntersectionAcrossDifferentGlobalShapesIsEmpty) {
  EXPECT_FALSE(TensorSlice::full({4, 8}).intersect(TensorSlice::full({8, 4})).has_value());
}

TEST(TensorSlice, Containment) {
  auto full = TensorSlice::full({4, 8});
  auto inner = box({4, 8}, {1, 2}, {2, 3});
  EXPECT_TRUE(full.contains(inner));
  EXPECT_FALSE(inner.contains(full));
  EXPECT_TRUE(inner.contains(inner));
  EXPECT_TRUE(full.is_full());
  EXPECT_FALSE(inner.is_full());
}

TEST(TensorSlice, ContiguityInTheGlobalTensor) {
  EXPECT_TRUE(box({4, 8}, {1, 0}, {2, 8}).is_contiguous_in_global());   // whole rows
  EXPECT_TRUE(box({4, 8}, {1, 2}, {1, 3}).is_contiguous_in_global());   // part of one row
  EXPECT_FALSE(box({4, 8}, {0, 2}, {2, 3}).is_contiguous_in_global());  // columns of 2 rows
  EXPECT_TRUE(box({2, 3, 4}, {1, 1, 0}, {1, 2, 4}).is_contiguous_in_global());
  EXPECT_FALSE(box({2, 3, 4}, {0, 1, 0}, {2, 2, 4}).is_contiguous_in_global());
  EXPECT_EQ(box({4, 8}, {1, 2}, {1, 3}).global_flat_offset(), 10);
}

TEST(TensorSlice, RelativeToAnOuterBox) {
  auto shard = box({8, 8}, {4, 0}, {4, 8});
  auto want = box({8, 8}, {5, 2}, {2, 3});
  auto rel = want.relative_to(shard);
  ASSERT_OK(rel);
  EXPECT_EQ(*rel, box({4, 8}, {1, 2}, {2, 3}));
  EXPECT_ERROR(box({8, 8}, {3, 0}, {2, 2}).relative_to(shard), Errc::out_of_range, "not inside");
}

TEST(TensorSlice, ScalarSliceHasOneElement) {
  TensorSlice s = TensorSlice::full({});
  EXPECT_EQ(s.numel(), 1);
  EXPECT_TRUE(s.is_full());
  EXPECT_EQ(s.to_string(), "[] of []");
  EXPECT_EQ(box({4, 8}, {1, 2}, {2, 3}).to_string(), "[1:3, 2:5] of [4, 8]");
}

TEST(TensorSlice, MinusLeavesDisjointBoxesCoveringTheRest) {
  const auto whole = box({4, 6}, {0, 0}, {4, 6});
  EXPECT_TRUE(whole.minus(whole).empty());
  const auto away = box({4, 6}, {0, 0}, {1, 1});
  EXPECT_EQ(box({4, 6}, {2, 2}, {2, 2}).minus(away),
            std::vector<TensorSlice>{box({4, 6}, {2, 2}, {2, 2})});
  // A hole in the middle: the rest in disjoint boxes, counted element by element.
  const auto hole = box({4, 6}, {1, 2}, {2, 2});
  auto rest = whole.minus(hole);
  std::int64_t n = 0;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    n += rest[i].numel();
    EXPECT_FALSE(rest[i].intersect(hole).has_value());
    for (std::size_t j = 0; j < i; ++j) EXPECT_FALSE(rest[i].intersect(rest[j]).has_value());
  }
  EXPECT_EQ(n, whole.numel() - hole.numel());
}

}  // namespace
}  // namespace meshstore
