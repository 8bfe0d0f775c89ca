// Direct publishing across processes: a publisher process lends its own
// tensor (meshstore_test_peer publish-direct) and a reader in this process
// copies it straight out of the publisher's memory, over cross-memory
// attach and over tcp; a publisher killed while a read waits on it turns
// that read, and every later one, into a clear error naming its lending
// volume, never a torn value or a hang.

#include "meshstore/store.hpp"
#include "testing/subprocess.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

using namespace std::chrono_literals;

const std::string kPeer = MESHSTORE_TEST_PEER_PATH;

// The bound within which a dead publisher must turn into an error.
constexpr auto kBound = 10s;
constexpr std::int64_t kMiB = 64;
constexpr std::int64_t kElements = kMiB * (1 << 20) / 4;

Store server_store(const std::string& transport) {
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  o.transport.name = transport;
  o.limits.request_timeout = 60s;  // far above the bound: an error must not come from a timeout
  return Store::embedded(o).value();
}

class DirectPublishAcrossProcesses : public ::testing::TestWithParam<const char*> {};

TEST_P(DirectPublishAcrossProcesses, AReaderCopiesStraightOutOfThePublishersMemory) {
  auto server = server_store(GetParam());
  Child publisher(
      {kPeer, "publish-direct", server.admin().address(), "weights", std::to_string(kMiB)});
  ASSERT_TRUE(publisher.wait_for_output("published 1 lent " + std::to_string(kMiB << 20), kWait))
      << publisher.output();
  std::vector<float> dst(kElements, 0.0f);
  StateDict sd;
  ASSERT_OK(sd.insert("w", TensorView::of(dst.data(), {kElements})));
  auto v = server.state_dicts().get_latest_into("weights", sd).get(kWait);
  ASSERT_OK(v);
  EXPECT_EQ(*v, 1u);
  std::size_t wrong = 0;
  for (float x : dst) wrong += x != 7.0f;
  EXPECT_EQ(wrong, 0u);
  publisher.signal(SIGKILL);
  ASSERT_TRUE(publisher.wait(kWait));
}

INSTANTIATE_TEST_SUITE_P(Transports, DirectPublishAcrossProcesses,
                         ::testing::Values("", "cma", "tcp"), [](const auto& info) {
                           return std::string(*info.param ? info.param : "chosen");
                         });

TEST(DirectPublishAcrossProcesses, APublisherKilledMidReadGivesItsReadersUnavailable) {
  auto server = server_store("");
  Child publisher(
      {kPeer, "publish-direct", server.admin().address(), "weights", std::to_string(kMiB)});
  ASSERT_TRUE(publisher.wait_for_output("published 1", kWait)) << publisher.output();
  // Frozen, the publisher answers nothing: the read below waits on its
  // lending volume when the kill comes.
  publisher.signal(SIGSTOP);
  std::vector<float> dst(kElements, 0.0f);
  StateDict sd;
  ASSERT_OK(sd.insert("w", TensorView::of(dst.data(), {kElements})));
  auto read = server.state_dicts().get_into("weights/v1", sd);
  EXPECT_FALSE(read.wait_for(200ms)) << "the read ended while its publisher was frozen";
  const auto t0 = std::chrono::steady_clock::now();
  publisher.signal(SIGKILL);
  ASSERT_TRUE(publisher.wait(kWait));
  auto r = read.get(kBound);
  EXPECT_NE(r.status().code(), Errc::timeout) << "the read hung until its timeout";
  EXPECT_ERROR(r, Errc::unavailable, "lend:");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, kBound);
  // Later readers: the version is lost with its publisher, said so; the
  // store goes on.
  EXPECT_ERROR(server.state_dicts().get_latest_into("weights", sd).get(kBound), Errc::unavailable,
               "lend:");
  float y = 1;
  ASSERT_OK(server.put("fresh", TensorView::of(&y, {})).get(kBound));
}

}  // namespace
}  // namespace meshstore::testing
