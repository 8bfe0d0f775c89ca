// The copy engine's batches: many copies of any size, cut into runs across
// the engine's threads, land whole and write nothing beside them.

#include "meshstore/transports/copy_engine.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace meshstore::transports {
namespace {

constexpr std::byte kGuard{0xEE};
constexpr std::size_t kGap = 64;  // guard bytes around each destination

// Bytes no two positions of a copy share often, so a piece copied to the
// wrong offset shows.
std::vector<std::byte> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::byte> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return v;
}

TEST(CopyEngine, ABatchOfCopiesOfEverySizeLandsWholeAndWritesNothingBeside) {
  // Sizes around the runs' cuts: empty, a byte, pages and a byte either
  // side, several MiB (one copy spread over runs), small ones after it.
  const std::vector<std::size_t> sizes = {
      0,  1,        4095,          4097, (1u << 20) + 3, 7, (3u << 20) + 5, 0, (17u << 20) + 1,
      33, 4096 * 3, (2u << 20) - 1};
  std::vector<std::vector<std::byte>> srcs;
  std::size_t room = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    srcs.push_back(pattern(sizes[i], static_cast<std::uint32_t>(i)));
    room += sizes[i] + kGap;
  }
  std::vector<std::byte> dst(room + kGap, kGuard);
  std::vector<CopyEngine::Copy> copies;
  std::vector<std::size_t> at;
  std::size_t pos = kGap;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    copies.push_back({dst.data() + pos, srcs[i].data(), sizes[i]});
    at.push_back(pos);
    pos += sizes[i] + kGap;
  }
  ASSERT_GE(CopyEngine::instance().threads(), 1);
  CopyEngine::instance().copy_all_here(copies);

  std::size_t guard_at = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    for (; guard_at < at[i]; ++guard_at) {
      ASSERT_EQ(dst[guard_at], kGuard) << "byte " << guard_at << " before copy " << i;
    }
    for (std::size_t b = 0; b < sizes[i]; ++b) {
      ASSERT_EQ(dst[at[i] + b], srcs[i][b]) << "copy " << i << " of " << sizes[i] << ", byte " << b;
    }
    guard_at = at[i] + sizes[i];
  }
  for (; guard_at < dst.size(); ++guard_at) ASSERT_EQ(dst[guard_at], kGuard);
}

TEST(CopyEngine, AnEmptyBatchAndOneLargeCopyHereComplete) {
  CopyEngine::instance().copy_all_here({});
  const auto src = pattern((9u << 20) + 11, 99);
  std::vector<std::byte> dst(src.size());
  CopyEngine::instance().copy_here(dst.data(), src.data(), src.size());
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace meshstore::transports
