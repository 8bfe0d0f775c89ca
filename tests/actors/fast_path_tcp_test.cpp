// The fast path across hosts: small gets and puts between a client and a
// volume it reaches over tcp go over a connection of their own (the tcp
// transport's small operations), with the same guarantees as the shm
// ring (Channels/FastPathOver.* in fast_path_test.cpp runs puts and gets
// of every size, a stale location and a racing writer over the ring, tcp
// and encrypted tcp). Here: objects and the size limit, in the clear and
// encrypted, and a client whose fast path is off never opens one. Every
// test forces tcp, so the volume is reached as one on another host would be.

#include <cstring>
#include <string>
#include <vector>

#include "meshstore/actors/client/fast_path.hpp"
#include "meshstore/actors/internal/limits.hpp"
#include "meshstore/store.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::kWait;

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

TensorView bytes_view(std::vector<std::uint8_t>& v) {
  return TensorView(v.data(), DType::uint8, {static_cast<std::int64_t>(v.size())});
}

StoreOptions over_tcp(bool encrypt = false) {
  StoreOptions o;
  o.transport = "tcp";
  o.listen = "127.0.0.1:0";
  o.encrypt_tcp = encrypt;
  return o;
}

StoreOptions tool_over_tcp(bool encrypt = false) {
  StoreOptions o;
  o.transport = "tcp";
  o.host_volumes = false;
  o.encrypt_tcp = encrypt;
  return o;
}

// Waits (bounded) until `store` has its fast-path channel to a volume: the
// client opens it in the background once it first reaches the volume.
bool has_channel(const Store& store) {
  return eventually([&] { return store.fast_path_stats().rings >= 1; }, 10s);
}

class FastPathTcp : public ::testing::TestWithParam<bool> {};  // encrypted or not

// Objects, read by another client's own fast path, and the limit: one byte
// more takes the actor path, with the same result. (Puts and gets of every
// size read on every path: Channels/FastPathOver.* in fast_path_test.cpp.)
TEST_P(FastPathTcp, ObjectsAndTheLimitOverTheConnection) {
  auto store = Store::embedded(over_tcp(GetParam())).value();
  std::vector<std::uint8_t> first = pattern(4, 1);
  ASSERT_OK(store.put("first", bytes_view(first)).get(kWait));  // finds the volume
  ASSERT_TRUE(has_channel(store));
  auto other = Store::connect(store.address(), tool_over_tcp(GetParam())).value();
  const auto puts = store.fast_path_stats().puts;
  ASSERT_OK(store.put_object("o", "text", ObjectFormat::utf8).get(kWait));
  EXPECT_EQ(store.fast_path_stats().puts, puts + 1);
  ASSERT_OK(other.get_stored_object("o").get(kWait));  // learns where it is
  ASSERT_TRUE(has_channel(other));
  const auto hits = other.fast_path_stats().hits;
  auto o = other.get_stored_object("o").get(kWait);
  ASSERT_OK(o);
  EXPECT_EQ(o->bytes, "text");
  EXPECT_EQ(o->format, ObjectFormat::utf8);
  EXPECT_EQ(other.fast_path_stats().hits, hits + 1);
  const std::size_t limit = actors::limits::kRingReadBytes;
  auto big = pattern(limit + 1, 3);
  const auto before = store.fast_path_stats();
  ASSERT_OK(store.put("big", bytes_view(big)).get(kWait));
  std::vector<std::uint8_t> dst(big.size(), 0);
  ASSERT_OK(store.get_into("big", bytes_view(dst)).get(kWait));
  EXPECT_EQ(dst, big);
  EXPECT_EQ(store.fast_path_stats().puts, before.puts);
  EXPECT_EQ(store.fast_path_stats().hits, before.hits);
  other.close();
  store.close();
}

INSTANTIATE_TEST_SUITE_P(Tcp, FastPathTcp, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "encrypted" : "clear");
});

// With the fast path off, nothing opens a channel, and calls still work.
TEST(FastPathTcpOff, OffOpensNoConnection) {
  StoreOptions o = over_tcp();
  o.fast_path = false;
  auto store = Store::embedded(o).value();
  std::vector<std::uint8_t> v = pattern(64, 5), dst(64, 0);
  ASSERT_OK(store.put("k", bytes_view(v)).get(kWait));
  ASSERT_OK(store.get_into("k", bytes_view(dst)).get(kWait));
  EXPECT_EQ(dst, v);
  const auto s = store.fast_path_stats();
  EXPECT_EQ(s.rings, 0u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.puts, 0u);
}

}  // namespace
}  // namespace meshstore
