// The fast path across hosts: small gets and puts between a client and a
// volume it reaches over tcp go over a connection of their own (the tcp
// transport's small operations), with the same guarantees as the shm
// ring: the value a put committed is the key's on every path, encrypted
// connections carry it too, and a client whose fast path is off never
// opens one. (A stale location and a racing writer, for both channels:
// Channels/FastPathOver.* in fast_path_test.cpp.) Every test forces tcp,
// so the volume is reached as one on another host would be.

#include <cstring>
#include <string>
#include <vector>

#include "meshstore/actors/client/fast_path.hpp"
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

TEST_P(FastPathTcp, SmallGetsAndPutsGoOverTheConnectionAndEveryPathReadsThem) {
  auto store = Store::embedded(over_tcp(GetParam())).value();
  std::vector<std::uint8_t> first = pattern(4, 1);
  ASSERT_OK(store.put("first", bytes_view(first)).get(kWait));  // finds the volume
  ASSERT_TRUE(has_channel(store));
  auto other = Store::connect(store.address(), tool_over_tcp(GetParam())).value();
  const std::size_t limit = actors::FastPath::kMaxBytes;
  for (std::size_t n : {std::size_t{1}, std::size_t{4096}, limit}) {
    SCOPED_TRACE(n);
    const std::string key = "p" + std::to_string(n);
    for (std::uint8_t round = 0; round < 3; ++round) {  // overwrites too
      auto src = pattern(n, static_cast<std::uint8_t>(n + round));
      const auto puts = store.fast_path_stats().puts;
      ASSERT_OK(store.put(key, bytes_view(src)).get(kWait));
      EXPECT_EQ(store.fast_path_stats().puts, puts + 1) << "not put over the connection";
      std::vector<std::uint8_t> dst(n, 0);
      const auto hits = store.fast_path_stats().hits;
      ASSERT_OK(store.get_into(key, bytes_view(dst)).get(kWait));
      EXPECT_EQ(store.fast_path_stats().hits, hits + 1) << "not read over the connection";
      EXPECT_EQ(dst, src);
      auto batch = store.get_batch({key, "first"}).get(kWait);  // the actor path
      ASSERT_OK(batch);
      ASSERT_EQ(batch->front().nbytes(), n);
      EXPECT_EQ(std::memcmp(batch->front().data(), src.data(), n), 0);
      auto seen = other.get(key).get(kWait);  // another client
      ASSERT_OK(seen);
      ASSERT_EQ(seen->nbytes(), n);
      EXPECT_EQ(std::memcmp(seen->data(), src.data(), n), 0);
    }
  }
  // Objects too, with their format, read by the other client's fast path.
  ASSERT_OK(store.put_object("o", "text", ObjectFormat::utf8).get(kWait));
  ASSERT_TRUE(has_channel(other));
  ASSERT_OK(other.get_stored_object("o").get(kWait));  // learns where it is
  const auto hits = other.fast_path_stats().hits;
  auto o = other.get_stored_object("o").get(kWait);
  ASSERT_OK(o);
  EXPECT_EQ(o->bytes, "text");
  EXPECT_EQ(o->format, ObjectFormat::utf8);
  EXPECT_EQ(other.fast_path_stats().hits, hits + 1);
  // One byte over the limit: the actor path, same result.
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
