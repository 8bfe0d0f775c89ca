// Direct connections (docs/internals/connections.md, "Direct connections"): a
// client in one process that reads a volume in another, each connected
// only to the store's server in a third, connects to the volume's process
// itself, so that their control messages do not pass through the server.
// Checked on the sockets: the reader holds an established TCP connection
// to a port the volume's process listens on, with the data forced onto
// shared memory (no TCP transport between them).

#include <cstdlib>
#include <string>

#include "meshstore/store.hpp"
#include "testing/sockets.hpp"
#include "testing/subprocess.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

using namespace std::chrono_literals;

const std::string kPeer = MESHSTORE_TEST_PEER_PATH;

TEST(DirectConnection, AReaderConnectsToTheProcessHoldingTheVolumeItReads) {
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  o.placement.strategy = "per_local_rank";
  o.limits.request_timeout = 60s;
  auto server = Store::embedded(o).value();
  Child holder({kPeer, "hold", server.admin().address(), "held"});
  ASSERT_TRUE(holder.wait_for_output("ready", 60s)) << holder.output();
  float seven = 7;
  ASSERT_OK(server.put("near", TensorView::of(&seven, {})).get(kWait));
  // The reader's bytes go over shared memory: any TCP connection it has to
  // the holder's process is a control connection.
  ::setenv("MESHSTORE_TRANSPORT", "shm", 1);
  Child reader({kPeer, "read-loop", server.admin().address(), "held", "near"});
  ::unsetenv("MESHSTORE_TRANSPORT");
  ASSERT_TRUE(reader.wait_for_output("far reads ok", 60s)) << reader.output();

  const auto direct = connected_ports(reader.pid(), holder.pid());
  EXPECT_EQ(direct.size(), 1u) << "the reader has no connection (or several) of its own to the "
                                  "volume's process; its messages go through the server";
  // Neither is the server's listener.
  EXPECT_EQ(direct.count(server.admin().port()), 0u);
}

}  // namespace
}  // namespace meshstore::testing
