// Placements: which box of a global tensor each rank of a mesh holds.

#include <random>

#include "meshstore/tensor_slice.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using P = DimPlacement;

TensorSlice box(Shape g, Shape o, Shape l) { return TensorSlice::make(g, o, l).value(); }

// The slices of every rank.
std::vector<TensorSlice> slices(const Placement& p, const Shape& global) {
  std::vector<TensorSlice> out;
  for (std::int64_t r = 0; r < p.world_size(); ++r) out.push_back(p.slice_for(global, r).value());
  return out;
}

TEST(Placement, ChunksSplitAsTorchChunkDoes) {
  // torch.tensor(range(S)).chunk(n): pieces of ceil(S/n), the last shorter;
  // DTensor pads with empty pieces when chunk makes fewer than n.
  auto ranges = [](std::int64_t size, std::int64_t n) {
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    for (std::int64_t i = 0; i < n; ++i) out.push_back(chunk_range(size, n, i));
    return out;
  };
  using R = std::vector<std::pair<std::int64_t, std::int64_t>>;
  EXPECT_EQ(ranges(8, 4), (R{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  EXPECT_EQ(ranges(7, 4), (R{{0, 2}, {2, 4}, {4, 6}, {6, 7}}));
  EXPECT_EQ(ranges(5, 4), (R{{0, 2}, {2, 4}, {4, 5}, {5, 5}}));
  EXPECT_EQ(ranges(10, 4), (R{{0, 3}, {3, 6}, {6, 9}, {9, 10}}));
  EXPECT_EQ(ranges(2, 4), (R{{0, 1}, {1, 2}, {2, 2}, {2, 2}}));
  EXPECT_EQ(ranges(0, 3), (R{{0, 0}, {0, 0}, {0, 0}}));
  EXPECT_EQ(ranges(9, 1), (R{{0, 9}}));
}

TEST(Placement, OneDimensionalShards) {
  auto rows = Placement::make({4}, {P::shard(0)}).value();
  EXPECT_EQ(slices(rows, {7, 3}),
            (std::vector<TensorSlice>{box({7, 3}, {0, 0}, {2, 3}), box({7, 3}, {2, 0}, {2, 3}),
                                      box({7, 3}, {4, 0}, {2, 3}), box({7, 3}, {6, 0}, {1, 3})}));
  auto cols = Placement::make({2}, {P::shard(1)}).value();
  EXPECT_EQ(slices(cols, {4, 6}),
            (std::vector<TensorSlice>{box({4, 6}, {0, 0}, {4, 3}), box({4, 6}, {0, 3}, {4, 3})}));
  auto rep = Placement::make({3}, {P::replicate()}).value();
  for (const auto& s : slices(rep, {5})) EXPECT_TRUE(s.is_full());
  EXPECT_TRUE(*rep.is_primary(0));
  EXPECT_FALSE(*rep.is_primary(1));
  EXPECT_FALSE(*rep.is_primary(2));
}

TEST(Placement, TwoDimensionalMeshes) {
  // Ranks row-major on (2, 2): rank 1 is (0, 1), rank 2 is (1, 0).
  auto p = Placement::make({2, 2}, {P::shard(0), P::shard(1)}).value();
  EXPECT_EQ(*p.coordinates(1), (Shape{0, 1}));
  EXPECT_EQ(*p.coordinates(2), (Shape{1, 0}));
  EXPECT_EQ(slices(p, {4, 4}),
            (std::vector<TensorSlice>{box({4, 4}, {0, 0}, {2, 2}), box({4, 4}, {0, 2}, {2, 2}),
                                      box({4, 4}, {2, 0}, {2, 2}), box({4, 4}, {2, 2}, {2, 2})}));
  // [Replicate, Shard(0)]: ranks 0 and 2 hold the same rows; 0 and 1 are primary.
  auto rs = Placement::make({2, 2}, {P::replicate(), P::shard(0)}).value();
  EXPECT_EQ(slices(rs, {6, 2}),
            (std::vector<TensorSlice>{box({6, 2}, {0, 0}, {3, 2}), box({6, 2}, {3, 0}, {3, 2}),
                                      box({6, 2}, {0, 0}, {3, 2}), box({6, 2}, {3, 0}, {3, 2})}));
  EXPECT_TRUE(*rs.is_primary(0));
  EXPECT_TRUE(*rs.is_primary(1));
  EXPECT_FALSE(*rs.is_primary(2));
  EXPECT_FALSE(*rs.is_primary(3));
  // Two mesh dimensions splitting the same tensor dimension nest: halves,
  // then halves of each half.
  auto nested = Placement::make({2, 2}, {P::shard(0), P::shard(0)}).value();
  EXPECT_EQ(slices(nested, {8}),
            (std::vector<TensorSlice>{box({8}, {0}, {2}), box({8}, {2}, {2}), box({8}, {4}, {2}),
                                      box({8}, {6}, {2})}));
  // Uneven and nested: 7 rows over (2, 2) -> [0:4] then [0:2], [2:4]; [4:7] then [4:6], [6:7].
  EXPECT_EQ(slices(nested, {7}),
            (std::vector<TensorSlice>{box({7}, {0}, {2}), box({7}, {2}, {2}), box({7}, {4}, {2}),
                                      box({7}, {6}, {1})}));
}

TEST(Placement, PrimariesTileTheTensorExactly) {
  // Every placement of up to 3 mesh dims over random shapes: the primary
  // replicas' boxes are disjoint and cover every element.
  std::mt19937 rng(7);
  const std::vector<P> kinds{P::replicate(), P::shard(0), P::shard(1), P::shard(2)};
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t mesh_dims = 1 + rng() % 3;
    Shape mesh;
    std::vector<P> dims;
    for (std::size_t i = 0; i < mesh_dims; ++i) {
      mesh.push_back(1 + static_cast<std::int64_t>(rng() % 4));
      dims.push_back(kinds[rng() % kinds.size()]);
    }
    const Shape global{static_cast<std::int64_t>(rng() % 9), static_cast<std::int64_t>(rng() % 9),
                       static_cast<std::int64_t>(1 + rng() % 5)};
    auto p = Placement::make(mesh, dims).value();
    std::int64_t covered = 0;
    std::vector<TensorSlice> primaries;
    for (std::int64_t r = 0; r < p.world_size(); ++r) {
      auto s = p.slice_for(global, r);
      ASSERT_OK(s);
      if (!*p.is_primary(r)) continue;
      for (const auto& other : primaries) {
        auto both = s->intersect(other);
        EXPECT_TRUE(!both || both->empty()) << p.to_string() << " of " << shape_to_string(global);
      }
      covered += s->numel();
      primaries.push_back(*s);
    }
    EXPECT_EQ(covered, shape_numel(global)) << p.to_string() << " of " << shape_to_string(global);
    // shard_for counts the ranks holding each box: over all ranks, every
    // box appears exactly as often as its replica count says.
    for (std::int64_t r = 0; r < p.world_size(); ++r) {
      auto mine = p.shard_for(global, r);
      ASSERT_OK(mine);
      EXPECT_EQ(mine->slice, *p.slice_for(global, r));
      std::uint32_t same = 0;
      for (std::int64_t q = 0; q < p.world_size(); ++q)
        same += *p.slice_for(global, q) == mine->slice;
      EXPECT_EQ(mine->replicas, same);
    }
  }
}

TEST(Placement, ShardForCountsTheReplicatedRanks) {
  auto p = Placement::make({2, 3}, {P::replicate(), P::shard(0)}).value();
  auto mine = p.shard_for({6, 2}, 4).value();
  EXPECT_EQ(mine.slice, box({6, 2}, {2, 0}, {2, 2}));
  EXPECT_EQ(mine.replicas, 2u);
  EXPECT_EQ(Placement::make({4}, {P::shard(0)})->shard_for({8}, 1)->replicas, 1u);
  EXPECT_ERROR(p.shard_for({6, 2}, 6), Errc::out_of_range, "rank 6 is not in [0, 6)");
}

TEST(Placement, BadInputIsNamed) {
  EXPECT_ERROR(Placement::make({}, {}), Errc::invalid_argument, "at least one dimension");
  EXPECT_ERROR(Placement::make({2, 0}, {P::shard(0), P::replicate()}), Errc::invalid_argument,
               "mesh dimension 1 has 0 ranks");
  EXPECT_ERROR(Placement::make({2, 2}, {P::shard(0)}), Errc::invalid_argument,
               "1 placements for a mesh of 2 dimension(s) [2, 2]");
  EXPECT_ERROR(Placement::make({2}, {P::shard(-1)}), Errc::invalid_argument, "negative");
  auto p = Placement::make({2}, {P::shard(2)}).value();
  EXPECT_ERROR(p.slice_for({4, 4}, 0), Errc::invalid_argument,
               "placement [Shard(2)] on (2): Shard(2) of a tensor of shape [4, 4]");
  EXPECT_ERROR(p.slice_for({4, 4, 4}, 2), Errc::out_of_range, "rank 2 is not in [0, 2)");
  EXPECT_ERROR(p.is_primary(-1), Errc::out_of_range, "rank -1");
  EXPECT_EQ(Placement::make({2, 4}, {P::replicate(), P::shard(1)})->to_string(),
            "[Replicate(), Shard(1)] on (2, 4)");
}

}  // namespace
}  // namespace meshstore
