// Copies of whole keys (StoreOptions::placement.replicas): a put commits
// with a copy on another volume, a read falls over to a surviving copy
// when a volume's process is killed, and the controller makes the copy
// the dead volume took again on another volume.

#include "meshstore/store.hpp"
#include "testing/subprocess.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

using namespace std::chrono_literals;

const std::string kPeer = MESHSTORE_TEST_PEER_PATH;
constexpr auto kBound = 10s;

// The key's list() entry, or a failure when it is not listed.
Result<KeyInfo> info_of(Store& store, const std::string& key) {
  auto all = store.list(key).get(kWait);
  if (!all.ok()) return all.status();
  for (auto& k : *all) {
    if (k.key == key) return k;
  }
  return Status(Errc::not_found, "'" + key + "' is not listed");
}

// A server with a volume of its own, keeping `replicas` copies of each key
// put whole, whose ranks host a volume each.
Store server_keeping(int replicas) {
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  o.placement.strategy = "per_local_rank";
  o.placement.replicas = replicas;
  o.limits.request_timeout = 60s;  // an error within kBound is not a timeout
  return Store::embedded(o).value();
}

std::vector<std::string> volumes_of(Store& store) {
  std::vector<std::string> out;
  const auto stats = store.admin().stats().get(kWait).value();
  for (const auto& v : stats) out.push_back(v.volume_id);
  return out;
}

TEST(Copies, AKeyPutWholeIsCopiedAndReadFromEitherCopy) {
  auto server = server_keeping(2);
  std::vector<float> x(1 << 18, 3.0f);  // 1 MiB: through a transport, not inline
  // The server's volume is the only one: nothing to copy to yet.
  ASSERT_OK(server.put("alone", TensorView::of(x.data(), {1 << 18})).get(kWait));
  EXPECT_EQ(info_of(server, "alone")->copies, 1u);
  Child peer({kPeer, "hold", server.admin().address(), "held", "1", "262144"});
  ASSERT_TRUE(peer.wait_for_output("ready", 60s)) << peer.output();
  // The peer's put has a copy on the server's volume; the key put before
  // the peer's volume joined gets its second copy there in the background.
  EXPECT_EQ(info_of(server, "held")->copies, 2u);
  EXPECT_EQ(info_of(server, "held")->shards, 1u);
  EXPECT_EQ(info_of(server, "held")->nbytes, std::uint64_t{1} << 20);
  EXPECT_TRUE(eventually([&] { return info_of(server, "alone")->copies == 2; }, kBound));
  auto held = server.get("held").get(kWait);
  ASSERT_OK(held);
  EXPECT_EQ(held->data_as<float>()[12345], 7.0f);
  ASSERT_OK(server.put("mine", TensorView::of(x.data(), {1 << 18})).get(kWait));
  EXPECT_EQ(info_of(server, "mine")->copies, 2u);
  // A remove takes every copy.
  ASSERT_OK(server.remove("mine").get(kWait));
  EXPECT_FALSE(*server.exists("mine").get(kWait));
  peer.signal(SIGKILL);
  ASSERT_TRUE(peer.wait(kWait));
  transports::shm::garbage_collect(false, peer.pid());
}

TEST(Copies, AKilledVolumeLosesNoKeyAndItsCopiesAreMadeAgain) {
  auto server = server_keeping(2);
  Child other({kPeer, "hold", server.admin().address(), "other", "2", "262144"});
  ASSERT_TRUE(other.wait_for_output("ready", 60s)) << other.output();
  Child holder({kPeer, "hold", server.admin().address(), "held", "1", "262144"});
  ASSERT_TRUE(holder.wait_for_output("ready", 60s)) << holder.output();
  ASSERT_EQ(volumes_of(server).size(), 3u);
  ASSERT_EQ(info_of(server, "held")->copies, 2u);
  ASSERT_EQ(server.get("held").get(kWait)->data_as<float>()[0], 7.0f);  // cached now

  holder.signal(SIGKILL);
  ASSERT_TRUE(holder.wait(kWait));
  // The read that follows at once takes the surviving copy, whichever
  // copy its cached location named.
  for (int i = 0; i < 3; ++i) {
    auto r = server.get("held").get(kBound);
    ASSERT_OK(r);
    EXPECT_EQ(r->data_as<float>()[262143], 7.0f);
  }
  // Once the controller has seen the death, the key has its two copies
  // again: one on each surviving volume.
  ASSERT_TRUE(eventually([&] { return volumes_of(server).size() == 2; }, kBound));
  EXPECT_TRUE(eventually([&] { return info_of(server, "held")->copies == 2; }, kBound));
  EXPECT_EQ(info_of(server, "other")->copies, 2u);
  other.signal(SIGKILL);
  ASSERT_TRUE(other.wait(kWait));
  // The last copy of each key is on the server's own volume.
  auto r = server.get("held").get(kBound);
  ASSERT_OK(r);
  EXPECT_EQ(r->data_as<float>()[100], 7.0f);
  EXPECT_EQ(server.get("other").get(kBound)->data_as<float>()[100], 7.0f);
  transports::shm::garbage_collect(false, holder.pid());
  transports::shm::garbage_collect(false, other.pid());
}

TEST(Copies, ReplicasOutOfRangeAreRefused) {
  StoreOptions o;
  o.placement.replicas = 0;
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument,
               "placement.replicas must be in [1, 16], got 0");
  o.placement.replicas = 2;
  o.placement.repair_share = 0;
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument,
               "placement.repair_share must be in (0, 1]");
}

}  // namespace
}  // namespace meshstore::testing
