// A standby (meshstore serve --standby-of, StoreOptions::standby_of): it
// waits while its primary serves, takes over when the primary's process is
// killed, and stores given both addresses go on with it; their volumes
// rebuild its index, so every key put before the kill reads back.

#include <cstring>

#include "meshstore/store.hpp"
#include "testing/sockets.hpp"
#include "testing/subprocess.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

using namespace std::chrono_literals;

const std::string kTool = MESHSTORE_TOOL_PATH;
constexpr auto kBound = 10s;

TEST(Standby, TakesOverWhenThePrimaryIsKilledAndEveryKeyReadsBack) {
  Child primary({kTool, "serve", "--port", "0", "--strategy", "per_local_rank"});
  const std::string first = served_address(primary, 60s);
  ASSERT_FALSE(first.empty()) << primary.output();
  const int port = free_port();  // testing/sockets.hpp
  ASSERT_NE(port, 0);
  const std::string second = "127.0.0.1:" + std::to_string(port);
  Child standby({kTool, "serve", "--port", std::to_string(port), "--strategy", "per_local_rank",
                 "--standby-of", first});
  // Standing by: connected to the primary, not serving.
  ASSERT_TRUE(
      eventually([&] { return !connected_ports(standby.pid(), primary.pid()).empty(); }, 60s))
      << standby.output();
  EXPECT_EQ(standby.output().find("serving on"), std::string::npos) << standby.output();

  const std::string both = first + "," + second;
  StoreOptions o;
  o.limits.request_timeout = 30s;
  o.placement.local_rank = 0;
  auto holder = Store::connect(both, o).value();  // hosts the volume of local rank 0
  o.placement.host_volumes = false;
  auto reader = Store::connect(both, o).value();
  std::vector<float> w(1 << 16);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  ASSERT_OK(holder.put("w", TensorView::of(w.data(), {1 << 16})).get(kWait));
  StateDict sd;
  ASSERT_OK(sd.insert("layer.weight", TensorView::of(w.data(), {256, 256})));
  ASSERT_OK(holder.state_dicts().put("ckpt", sd).get(kWait));
  const std::int64_t before = reader.get("w").get(kWait).value().numel();
  EXPECT_EQ(before, 1 << 16);

  primary.signal(SIGKILL);
  ASSERT_TRUE(primary.wait(kWait));
  transports::shm::garbage_collect(false, primary.pid());
  EXPECT_EQ(served_address(standby, 60s), second) << standby.output();
  // Both stores went on with the standby: the keys read back bit-exact,
  // and puts commit there.
  auto back = reader.get("w").get(kBound);
  ASSERT_OK(back);
  EXPECT_EQ(std::memcmp(back->data(), w.data(), w.size() * sizeof(float)), 0);
  auto ckpt = reader.state_dicts().get("ckpt").get(kBound);
  ASSERT_OK(ckpt);
  EXPECT_EQ(ckpt->size(), 1u);
  float x = 5;
  ASSERT_OK(reader.put("after", TensorView::of(&x, {})).get(kBound));
  EXPECT_EQ(*holder.get("after").get(kBound)->data_as<float>(), 5.0f);
  // A store that connects now, with both addresses, reaches the standby.
  auto late = Store::connect(both, o);
  ASSERT_OK(late);
  EXPECT_EQ(*late->get("after").get(kBound)->data_as<float>(), 5.0f);
  late->close();
  reader.close();
  holder.close();
  standby.signal(SIGTERM);
  EXPECT_TRUE(standby.wait(kWait));
}

TEST(Standby, AStandbyStoppedBeforeItServesExitsCleanly) {
  Child primary({kTool, "serve", "--port", "0"});
  const std::string first = served_address(primary, 60s);
  ASSERT_FALSE(first.empty()) << primary.output();
  Child standby({kTool, "serve", "--port", "0", "--standby-of", first});
  ASSERT_TRUE(
      eventually([&] { return !connected_ports(standby.pid(), primary.pid()).empty(); }, 60s))
      << standby.output();
  standby.signal(SIGTERM);
  ASSERT_TRUE(standby.wait(kWait));
  EXPECT_EQ(standby.exit_code(), 0) << standby.output();
  EXPECT_NE(standby.output().find("before serving, stopped"), std::string::npos)
      << standby.output();
  primary.signal(SIGTERM);
  EXPECT_TRUE(primary.wait(kWait));
}

TEST(Standby, BadAddressesAndAMissingPrimaryAreRefused) {
  StoreOptions o;
  o.standby_of = "127.0.0.1:1";
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "standby_of '127.0.0.1:1' needs listen");
  o.listen = "127.0.0.1:0";
  o.limits.connect_timeout = 300ms;
  EXPECT_ERROR(Store::embedded(o), Errc::unavailable, "the primary must be serving");
  o.standby_of = "127.0.0.1:1,127.0.0.1:2";
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "names one primary");
  StoreOptions c;
  c.limits.connect_timeout = 300ms;
  EXPECT_ERROR(Store::connect("127.0.0.1:1,", c), Errc::invalid_argument, "connect: address ''");
  EXPECT_ERROR(Store::connect("127.0.0.1:1,127.0.0.1:0", c), Errc::invalid_argument, "port 0");
  EXPECT_ERROR(Store::connect("127.0.0.1:1,127.0.0.1:2", c), Errc::unavailable,
               "no store answered at any of 127.0.0.1:1, 127.0.0.1:2");
}

}  // namespace
}  // namespace meshstore::testing
