// kill -9 of a process in a running store: the others get clear errors
// within a bound, nothing hangs.

#include <regex>

#include "meshstore/store.hpp"
#include "testing/subprocess.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

using namespace std::chrono_literals;

const std::string kPeer = MESHSTORE_TEST_PEER_PATH;
const std::string kTool = MESHSTORE_TOOL_PATH;
const std::string kMeshrun = MESHRUN_PATH;

// The bound within which a dead peer must turn into an error.
constexpr auto kBound = 10s;

TEST(Failure, KilledVolumeProcessGivesClearErrorsAtOnce) {
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  o.strategy = "per_local_rank";
  o.request_timeout = 60s;  // far above the bound: the error must not come from a timeout
  auto server = Store::embedded(o).value();
  Child peer({kPeer, "hold", server.address(), "held"});
  ASSERT_TRUE(peer.wait_for_output("ready", 60s)) << peer.output();
  ASSERT_EQ(*server.get("held").get(kWait)->data_as<float>(), 7.0f);

  peer.signal(SIGKILL);
  ASSERT_TRUE(peer.wait(kWait));
  auto r = server.get("held").get(kBound);
  EXPECT_NE(r.status().code(), Errc::timeout) << "the get hung until its timeout";
  EXPECT_ERROR(r, Errc::unavailable, "went down");
  // Later reads say the key was lost with its volume; the rest still works.
  EXPECT_ERROR(server.get("held").get(kBound), Errc::unavailable, "was stored on volume");
  EXPECT_FALSE(*server.exists("held").get(kBound));
  float y = 1;
  ASSERT_OK(server.put("fresh", TensorView::of(&y, {})).get(kBound));
  EXPECT_EQ(*server.get("fresh").get(kBound)->data_as<float>(), 1.0f);
  ASSERT_OK(server.remove("held").get(kBound));         // acknowledges the loss
  transports::shm::garbage_collect(false, peer.pid());  // what the killed peer left
}

TEST(Failure, KilledServerGivesClearErrorsAtOnce) {
  Child serve({kTool, "serve", "--port", "0"});
  ASSERT_TRUE(serve.wait_for_output("serving on", 60s)) << serve.output();
  std::smatch m;
  const std::string out = serve.output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex("serving on (127\\.0\\.0\\.1:[0-9]+)")));
  StoreOptions o;
  o.request_timeout = 60s;
  auto client = Store::connect(m[1], o).value();
  float x = 3;
  ASSERT_OK(client.put("k", TensorView::of(&x, {})).get(kWait));

  serve.signal(SIGKILL);
  ASSERT_TRUE(serve.wait(kWait));
  auto r = client.get("k").get(kBound);
  EXPECT_NE(r.status().code(), Errc::timeout) << "the get hung until its timeout";
  EXPECT_ERROR(r, Errc::unavailable, "");
  // Every later call fails at once, naming the cause.
  // The controller and the strategy die together; either may be named first.
  EXPECT_ERROR(client.keys().get(kBound), Errc::unavailable, "went down");
  EXPECT_ERROR(client.put("k2", TensorView::of(&x, {})).get(kBound), Errc::unavailable,
               "unreachable");
  transports::shm::garbage_collect(false, serve.pid());  // what the killed server left
}

TEST(Failure, MeshrunExitsNonZeroWhenARankIsKilled) {
  Child c({kMeshrun, "-n", "3", "--", "sh", "-c",
           "if [ $RANK = 2 ]; then kill -9 $$; fi; exec sleep 300"});
  ASSERT_TRUE(c.wait(kWait)) << "meshrun hung after a rank was killed";
  EXPECT_EQ(c.exit_code(), 128 + SIGKILL);
  EXPECT_NE(c.output().find("rank 2 was killed by signal 9"), std::string::npos) << c.output();
}

}  // namespace
}  // namespace meshstore::testing
