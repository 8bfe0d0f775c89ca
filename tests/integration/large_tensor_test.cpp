#include <cstring>
#include <string>
#include <vector>

#include "meshstore/store.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using testing::kWait;

class LargeTensorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Forced: the bytes travel in actor messages, one chunk at a time (the
    // chosen transport in one process would be shm, which sends none).
    StoreOptions o;
    o.transport.name = "rpc";
    store_ = std::make_unique<Store>(Store::embedded(o).value());
  }
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

// Past 4 GiB: CAF corrupts a message that large, so nothing of it may travel
// in one; over shm no payload byte travels in a message at all.
TEST(LargeTensor, OverFourGiBThroughSharedMemory) {
  StoreOptions o;
  o.transport.name = "shm";
  // The volume allocates 4 GiB of /dev/shm while the stage request waits:
  // on 2 busy cores that once took longer than the default 30 s.
  o.limits.request_timeout = std::chrono::seconds(120);
  auto store = Store::embedded(o).value();
  const std::size_t n = (std::size_t{4} << 30) + 4096 + 3;
  std::vector<std::uint8_t> buf(n);
  std::vector<std::size_t> marks;
  for (std::size_t i = 0; i < n; i += (std::size_t{1} << 24) + 1) marks.push_back(i);
  marks.push_back(n - 1);
  for (std::size_t i : marks) buf[i] = static_cast<std::uint8_t>((i >> 7) * 13 + 1);
  const auto len = static_cast<std::int64_t>(n);
  ASSERT_OK(store.put("huge", TensorView::of(buf.data(), {len})).get(std::chrono::seconds(240)));
  std::vector<std::uint8_t> expect;
  for (std::size_t i : marks) {
    expect.push_back(buf[i]);
    buf[i] = 0;
  }
  ASSERT_OK(
      store.get_into("huge", TensorView::of(buf.data(), {len})).get(std::chrono::seconds(240)));
  for (std::size_t k = 0; k < marks.size(); ++k) {
    ASSERT_EQ(buf[marks[k]], expect[k]) << "byte " << marks[k];
  }
  auto keys = store.list("huge").get(kWait);
  ASSERT_OK(keys);
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_EQ(keys->front().nbytes, n);
  ASSERT_OK(store.remove("huge").get(kWait));
}

// Many small keys over shm: more than the kernel's 65,530 mappings per
// process (vm.max_map_count), which a segment per object once exhausted at
// about 65,000 keys (the put then failed with out_of_capacity). Small
// regions share slabs, so the volume maps a few hundred segments. Every
// key reads back, and all of them can be removed.
TEST(LargeTensor, MoreSmallKeysThanAProcessMayMapSegments) {
  StoreOptions o;
  o.transport.name = "shm";
  auto store = Store::embedded(o).value();
  constexpr int kKeys = 70000;
  for (int i = 0; i < kKeys; ++i) {
    std::int64_t v[2] = {i, -i};
    ASSERT_OK(store.put("small/" + std::to_string(i), TensorView::of(v, {2})).get(kWait)) << i;
  }
  for (int i = 0; i < kKeys; i += 997) {
    std::int64_t back[2] = {0, 0};
    ASSERT_OK(store.get_into("small/" + std::to_string(i), TensorView::of(back, {2})).get(kWait));
    EXPECT_EQ(back[0], i);
    EXPECT_EQ(back[1], -i);
  }
  auto listed = store.list("small/").get(kWait);
  ASSERT_OK(listed);
  EXPECT_EQ(listed->size(), static_cast<std::size_t>(kKeys));
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back("small/" + std::to_string(i));
  auto removed = store.remove_batch(std::move(keys)).get(kWait);
  ASSERT_OK(removed);
  EXPECT_EQ(*removed, static_cast<std::size_t>(kKeys));
}

}  // namespace
}  // namespace meshstore
