#include <cstring>

#include "meshstore/store.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using testing::kWait;

class LargeTensorTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = std::make_unique<Store>(Store::embedded().value()); }
  Store& store() { return *store_; }
  std::unique_ptr<Store> store_;
};

TEST_F(LargeTensorTest, OneGiBRoundTripThroughChunkedRpc) {
  const std::size_t n = std::size_t{1} << 30;
  std::vector<std::uint8_t> src(n);
  for (std::size_t i = 0; i < n; i += 4096) src[i] = static_cast<std::uint8_t>((i >> 12) * 31 + 1);
  src[n - 1] = 0xAB;
  const auto len = static_cast<std::int64_t>(n);
  ASSERT_OK(store().put("big", TensorView::of(src.data(), {len})).get(kWait));
  {
    std::vector<std::uint8_t> dst(n, 0);
    ASSERT_OK(store().get_into("big", TensorView::of(dst.data(), {len})).get(kWait));
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), n), 0);
  }
  auto t = store().get("big").get(kWait);
  ASSERT_OK(t);
  EXPECT_EQ(t->nbytes(), n);
  EXPECT_EQ(t->data_as<std::uint8_t>()[n - 1], 0xAB);
}

}  // namespace
}  // namespace meshstore
