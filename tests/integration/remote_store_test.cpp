// Stores that listen and connect, in one process: they share its actor
// runtime, so control goes to the local actors (CAF hands back the actor
// itself for a connection to its own node) and bytes take the transport
// chosen. Across processes: failure_test.cpp, direct_connection_test.cpp
// and the multiprocess launches.

#include <numeric>

#include "meshstore/controller/controller.hpp"
#include "meshstore/protocol/directory_actor.hpp"
#include "meshstore/store.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using namespace std::chrono_literals;
using testing::kWait;

StoreOptions server_options(const std::string& strategy = "singleton") {
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  o.placement.strategy = strategy;
  o.limits.request_timeout = 10s;
  return o;
}

StoreOptions rank_options(int rank, int local_rank, const std::string& host = "") {
  StoreOptions o;
  o.placement.rank = rank;
  o.placement.local_rank = local_rank;
  o.placement.host = host;
  o.limits.request_timeout = 10s;
  o.limits.connect_timeout = 10s;
  return o;
}

TEST(RemoteStore, ListeningStoreReportsItsAddress) {
  auto server = Store::embedded(server_options());
  ASSERT_OK(server);
  EXPECT_GT(server->admin().port(), 0);
  EXPECT_EQ(server->admin().address(), "127.0.0.1:" + std::to_string(server->admin().port()));
  auto plain = Store::embedded();
  EXPECT_EQ(plain->admin().port(), 0);
  EXPECT_EQ(plain->admin().address(), "");
}

TEST(RemoteStore, ConnectedRanksSeeEachOthersKeys) {
  auto server = Store::embedded(server_options()).value();
  auto a = Store::connect(server.admin().address(), rank_options(1, 1)).value();
  auto b = Store::connect(server.admin().address(), rank_options(2, 2)).value();
  std::vector<float> w(1000);
  std::iota(w.begin(), w.end(), 0.5f);
  ASSERT_OK(a.put("from_a", TensorView::of(w.data(), {10, 100})).get(kWait));
  auto t = b.get("from_a").get(kWait);
  ASSERT_OK(t);
  EXPECT_EQ(t->shape(), (Shape{10, 100}));
  EXPECT_EQ(t->data_as<float>()[999], 999.5f);
  ASSERT_OK(b.put_object("from_b", "hello").get(kWait));
  EXPECT_EQ(*server.get_object("from_b").get(kWait), "hello");
  EXPECT_EQ(*a.keys().get(kWait), (std::vector<std::string>{"from_a", "from_b"}));
  ASSERT_OK(server.remove("from_a").get(kWait));
  EXPECT_FALSE(*a.exists("from_a").get(kWait));
  EXPECT_ERROR(b.get("from_a").get(kWait), Errc::not_found, "'from_a'");
}

TEST(RemoteStore, LargeTensorCrossesTheNetworkInChunks) {
  auto server = Store::embedded(server_options()).value();
  auto opts = rank_options(1, 1);
  opts.transport.name = "rpc";               // the bytes cross CAF's network layer...
  opts.transport.rpc_chunk_bytes = 1 << 20;  // ...in many chunks
  auto a = Store::connect(server.admin().address(), opts).value();
  std::vector<std::uint8_t> big(24 << 20);
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<std::uint8_t>(i * 7 + (i >> 20));
  const auto n = static_cast<std::int64_t>(big.size());
  ASSERT_OK(a.put("big", TensorView::of(big.data(), {n})).get(kWait));
  std::vector<std::uint8_t> back(big.size());
  ASSERT_OK(a.get_into("big", TensorView::of(back.data(), {n})).get(kWait));
  EXPECT_EQ(back, big);
}

TEST(RemoteStore, PerLocalRankPlacesAVolumeInEveryRank) {
  auto server = Store::embedded([] {
                  auto o = server_options("per_local_rank");
                  o.placement.host = "hostA";
                  return o;
                }())
                    .value();
  auto r1 = Store::connect(server.admin().address(), rank_options(1, 1, "hostA")).value();
  auto r2 = Store::connect(server.admin().address(), rank_options(2, 0, "hostB")).value();
  auto stats = server.admin().stats().get(kWait);
  ASSERT_OK(stats);
  std::vector<std::string> ids;
  for (const auto& s : *stats) ids.push_back(s.volume_id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"host:hostA/lr0", "host:hostA/lr1", "host:hostB/lr0"}));
  // Each rank writes to its own volume; every rank reads all of them.
  float x = 1, y = 2;
  ASSERT_OK(r1.put("x", TensorView::of(&x, {})).get(kWait));
  ASSERT_OK(r2.put("y", TensorView::of(&y, {})).get(kWait));
  auto after = server.admin().stats().get(kWait);
  ASSERT_OK(after);
  for (const auto& s : *after) {
    if (s.volume_id == "host:hostA/lr1" || s.volume_id == "host:hostB/lr0") {
      EXPECT_EQ(s.objects, 1u) << s.volume_id;
    }
  }
  EXPECT_EQ(*r2.get("x").get(kWait)->data_as<float>(), 1.0f);
  EXPECT_EQ(*r1.get("y").get(kWait)->data_as<float>(), 2.0f);
}

TEST(RemoteStore, PerHostPlacesOneVolumePerHost) {
  auto server = Store::embedded([] {
                  auto o = server_options("per_host");
                  o.placement.host = "hostA";
                  return o;
                }())
                    .value();
  auto a1 = Store::connect(server.admin().address(), rank_options(1, 1, "hostA")).value();
  auto b0 = Store::connect(server.admin().address(), rank_options(2, 0, "hostB")).value();
  auto b1 = Store::connect(server.admin().address(), rank_options(3, 1, "hostB")).value();
  auto before = server.admin().stats().get(kWait);
  ASSERT_OK(before);
  std::vector<std::string> ids;
  for (const auto& s : *before) ids.push_back(s.volume_id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"host:hostA", "host:hostB"}));
  float v = 3;
  ASSERT_OK(b1.put("on_b", TensorView::of(&v, {})).get(kWait));
  auto after = server.admin().stats().get(kWait);
  ASSERT_OK(after);
  for (const auto& s : *after) {
    EXPECT_EQ(s.objects, s.volume_id == "host:hostB" ? 1u : 0u) << s.volume_id;
  }
  EXPECT_EQ(*a1.get("on_b").get(kWait)->data_as<float>(), 3.0f);
}

TEST(RemoteStore, ACachedLocationNeverHidesAnotherRanksChange) {
  // Rank a reads k (and caches where and what it is); rank b replaces k with
  // a different shape, then with an object. a's next reads follow.
  auto server = Store::embedded(server_options()).value();
  auto a = Store::connect(server.admin().address(), rank_options(1, 1)).value();
  auto b = Store::connect(server.admin().address(), rank_options(2, 2)).value();
  std::vector<float> four(4, 1.0f), eight(8, 2.0f);
  ASSERT_OK(b.put("k", TensorView::of(four.data(), {4})).get(kWait));
  ASSERT_OK(a.get("k").get(kWait));
  ASSERT_OK(b.put("k", TensorView::of(eight.data(), {8})).get(kWait));
  std::vector<float> dst(8, 0.0f);
  ASSERT_OK(a.get_into("k", TensorView::of(dst.data(), {8})).get(kWait));
  EXPECT_EQ(dst, eight);
  ASSERT_OK(b.put_object("k", "now an object").get(kWait));
  EXPECT_EQ(*a.get_object("k").get(kWait), "now an object");
  ASSERT_OK(b.remove("k").get(kWait));
  EXPECT_ERROR(a.get_object("k").get(kWait), Errc::not_found, "no key 'k'");
}

TEST(RemoteStore, ACachedLocationOfAnOverwrittenKeyIsLocatedAgain) {
  // Rank a reads k (and caches where it is); rank b overwrites k with bytes
  // of the same shape and dtype, which frees the object a's cache names. a's
  // next read finds it gone, locates k again and reads b's bytes; the same
  // for a read into a destination, and a remove. Found gone by a direct
  // read (its tag cleared, on a's thread: the fast path's stale count), k is
  // located afresh; found gone at the volume, it is located again pinned.
  auto server = Store::embedded(server_options()).value();
  auto a = Store::connect(server.admin().address(), rank_options(1, 1)).value();
  auto b = Store::connect(server.admin().address(), rank_options(2, 2)).value();
  constexpr std::int64_t n = 64 * 1024;
  std::vector<float> first(n, 1.0f), second(n, 2.0f), third(n, 3.0f);
  auto located_again = [&] {
    return server.admin().controller_counters().get(kWait)->pinned_locates +
           a.admin().fast_path_stats().stale;
  };

  ASSERT_OK(b.put("k", TensorView::of(first.data(), {n})).get(kWait));
  ASSERT_OK(a.get("k").get(kWait));
  ASSERT_OK(b.put("k", TensorView::of(second.data(), {n})).get(kWait));
  const auto pins = located_again();
  auto got = a.get("k").get(kWait);
  ASSERT_OK(got);
  EXPECT_EQ(std::vector<float>(got->data_as<float>(), got->data_as<float>() + n), second);
  EXPECT_EQ(located_again(), pins + 1);  // the stale location was located again

  ASSERT_OK(a.get("k").get(kWait));
  ASSERT_OK(b.put("k", TensorView::of(third.data(), {n})).get(kWait));
  std::vector<float> dst(n, 0.0f);
  ASSERT_OK(a.get_into("k", TensorView::of(dst.data(), {n})).get(kWait));
  EXPECT_EQ(dst, third);
  EXPECT_EQ(located_again(), pins + 2);

  ASSERT_OK(a.get("k").get(kWait));
  ASSERT_OK(b.remove("k").get(kWait));
  EXPECT_ERROR(a.get("k").get(kWait), Errc::not_found, "no key 'k'");
}

class CachedReadAfterWrite : public ::testing::TestWithParam<std::string> {};

TEST_P(CachedReadAfterWrite, NoReadAfterAWriteReturnedFindsWhatTheWriteReplacedOrRemoved) {
  // Rank a reads each key (caching where it is) before rank b overwrites or
  // removes it. Once b's call returned, a must see b's write: a small value
  // (the volume's ring over shm, its small-operations connection over tcp),
  // a 256 KiB one (lease-free over shm) and a removed key, each round. The
  // volume drops what b's write superseded before b's call returns; had it
  // not yet, a's cached location would still find it.
  auto server = Store::embedded(server_options()).value();
  auto opts = [&](int rank) {
    auto o = rank_options(rank, rank);
    o.transport.name = GetParam();
    return o;
  };
  auto a = Store::connect(server.admin().address(), opts(1)).value();
  auto b = Store::connect(server.admin().address(), opts(2)).value();
  constexpr std::int64_t n = 64 * 1024;
  std::vector<float> big(n), into(n);
  // a reaches the volume with a first read; its channel to the volume
  // opens in the background (over tcp, a connection of its own), and the
  // reads below are the channel's once it is there.
  std::int64_t zero = 0;
  ASSERT_OK(b.put("small", TensorView::of(&zero, {})).get(kWait));
  ASSERT_OK(a.get("small").get(kWait));
  ASSERT_TRUE(testing::eventually([&] { return a.admin().fast_path_stats().rings >= 1; }));
  for (std::int64_t round = 0; round < 60; ++round) {
    ASSERT_OK(b.put("small", TensorView::of(&round, {})).get(kWait));
    auto small = a.get("small").get(kWait);
    ASSERT_OK(small);
    ASSERT_EQ(*small->data_as<std::int64_t>(), round) << "round " << round;

    std::fill(big.begin(), big.end(), static_cast<float>(round));
    ASSERT_OK(b.put("big", TensorView::of(big.data(), {n})).get(kWait));
    ASSERT_OK(a.get_into("big", TensorView::of(into.data(), {n})).get(kWait));
    ASSERT_EQ(into.front(), static_cast<float>(round)) << "round " << round;
    ASSERT_EQ(into.back(), static_cast<float>(round)) << "round " << round;

    ASSERT_OK(b.put("gone", TensorView::of(&round, {})).get(kWait));
    ASSERT_OK(a.get("gone").get(kWait));
    ASSERT_OK(b.remove("gone").get(kWait));
    ASSERT_TRUE(testing::is_error(a.get("gone").get(kWait), Errc::not_found, "'gone'"))
        << "round " << round;
  }
  // The reads went the ways named above: by cached location, which the
  // volume's channel (the small value) and, over shm, the lease-free check
  // (the large one) found stale, then located afresh.
  const auto fast = a.admin().fast_path_stats();
  EXPECT_GT(fast.stale, 0u);
  if (GetParam() == "shm") {
    EXPECT_GT(fast.lease_free_stale, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Channels, CachedReadAfterWrite, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

TEST(RemoteStore, LateJoinerFindsExistingKeys) {
  auto server = Store::embedded(server_options()).value();
  {
    auto early = Store::connect(server.admin().address(), rank_options(1, 1)).value();
    std::int64_t v = 42;
    ASSERT_OK(early.put("early", TensorView::of(&v, {})).get(kWait));
  }
  auto late = Store::connect(server.admin().address(), rank_options(2, 2)).value();
  EXPECT_EQ(*late.get("early").get(kWait)->data_as<std::int64_t>(), 42);
}

TEST(RemoteStore, ConnectToNothingFailsWithinTheDeadline) {
  auto opts = rank_options(1, 1);
  opts.limits.connect_timeout = 500ms;
  // Port 1 on loopback: nothing listens there.
  EXPECT_ERROR(Store::connect("127.0.0.1:1", opts), Errc::unavailable,
               "no meshstore answered at 127.0.0.1:1 after");
  EXPECT_ERROR(Store::connect("nonsense", opts), Errc::invalid_argument, "has no port");
  EXPECT_ERROR(Store::connect("127.0.0.1:0", opts), Errc::invalid_argument, "has port 0");
}

TEST(RemoteStore, ListeningOnABadAddressIsAnError) {
  auto o = server_options();
  o.listen = "127.0.0.1:99999";
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "no valid port");
}

TEST(CustomStrategy, BadChoicesAreClearErrors) {
  auto o = server_options();
  o.placement.custom_strategy.placement = "scatter";
  o.placement.custom_strategy.select = [](const ClientDesc&,
                                          const std::vector<VolumeDesc>&) -> Result<std::string> {
    return std::string("volume-0");
  };
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "custom_strategy.placement");
  o.placement.custom_strategy.placement = "controller_colocated";
  o.placement.custom_strategy.select = [](const ClientDesc&,
                                          const std::vector<VolumeDesc>&) -> Result<std::string> {
    return std::string("volume-42");
  };
  auto store = Store::embedded(o).value();
  float x = 1;
  EXPECT_ERROR(store.put("k", TensorView::of(&x, {})).get(kWait), Errc::invalid_argument,
               "custom strategy chose volume 'volume-42', which is not registered");
}

// A server on host A whose custom strategy places a volume on each host
// (per_host) and picks a client's own host's volume, "no volume on HOST"
// (unavailable) while there is none. Its strategy name stays "singleton",
// which the custom placement overrides.
StoreOptions per_host_server() {
  auto o = server_options();
  o.placement.host = "hostA";
  o.placement.custom_strategy.placement = "per_host";
  o.placement.custom_strategy.select =
      [](const ClientDesc& c, const std::vector<VolumeDesc>& volumes) -> Result<std::string> {
    for (const auto& v : volumes) {
      if (v.host == c.host) return v.volume_id;
    }
    return Status(Errc::unavailable, "no volume on " + c.host);
  };
  return o;
}

TEST(CustomStrategy, JoinersFollowTheCustomPlacement) {
  // A joining process learns the placement (per_host), not the default
  // strategy name, so host B's local rank 0 hosts host B's volume.
  auto o = per_host_server();
  auto server = Store::embedded(o).value();
  auto b0 = Store::connect(server.admin().address(), rank_options(1, 0, "hostB")).value();
  float x = 2;
  ASSERT_OK(b0.put("on_b", TensorView::of(&x, {})).get(kWait));
  auto stats = server.admin().stats().get(kWait);
  ASSERT_OK(stats);
  std::vector<std::string> ids;
  for (const auto& s : *stats) ids.push_back(s.volume_id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"host:hostA", "host:hostB"}));
}

TEST(CustomStrategy, ClientsWaitForTheirVolumeToRegister) {
  // per_host placement: host B's volume arrives only when its local rank 0
  // connects; a rank 1 of host B that connects first waits for it.
  auto o = server_options("per_host");
  o.placement.host = "hostA";
  auto server = Store::embedded(o).value();
  auto early = Store::connect(server.admin().address(), rank_options(3, 1, "hostB")).value();
  float x = 5;
  auto put = early.put("early", TensorView::of(&x, {}));  // no volume for hostB yet
  auto b0 = Store::connect(server.admin().address(), rank_options(2, 0, "hostB")).value();
  ASSERT_OK(put.get(kWait));
  EXPECT_EQ(*server.get("early").get(kWait)->data_as<float>(), 5.0f);
}

// A client the strategy finds no volume for (host C has none, and none
// registers) has no channel to put over: its put, its state dict's and
// its batch's answer why (the strategy's word, after its wait for a volume
// to register), store nothing, and the store serves the other clients on.
TEST(CustomStrategy, AClientWithNoVolumeIsToldWhyItsPutsFail) {
  auto o = per_host_server();
  auto server = Store::embedded(o).value();
  auto ro = rank_options(5, 1, "hostC");  // not local rank 0: hosts no volume
  ro.limits.request_timeout = 1s;         // how long it waits for one to register
  auto lone = Store::connect(server.admin().address(), ro).value();
  float x = 7;
  EXPECT_ERROR(lone.put("lone", TensorView::of(&x, {})).get(kWait), Errc::unavailable,
               "no volume on hostC");
  std::vector<float> w(64, 1.0f);
  StateDict sd;
  ASSERT_OK(sd.insert("w", TensorView::of(w.data(), {64})));
  EXPECT_ERROR(lone.state_dicts().put("sd", sd).get(kWait), Errc::unavailable,
               "no volume on hostC");
  EXPECT_ERROR(lone.put_batch({{"a", TensorView::of(&x, {})}}).get(kWait), Errc::unavailable,
               "no volume on hostC");
  for (const std::string key : {"lone", "sd", "a"}) {
    EXPECT_FALSE(*server.exists(key).get(kWait)) << key;
  }
  ASSERT_OK(server.put("served", TensorView::of(&x, {})).get(kWait));
  lone.close();
}

TEST(Versions, CompatibleWhenMajorAndMinorMatch) {
  EXPECT_TRUE(controller::versions_compatible("0.1.0", "0.1.7"));
  EXPECT_FALSE(controller::versions_compatible("0.2.0", "0.1.0"));
  EXPECT_FALSE(controller::versions_compatible("", "0.1.0"));
}

}  // namespace
}  // namespace meshstore
