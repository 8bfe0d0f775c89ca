// Direct connections (docs/architecture.md, "Direct connections"): a
// client in one process that reads a volume in another, each connected
// only to the store's server in a third, connects to the volume's process
// itself, so that their control messages do not pass through the server.
// Checked on the sockets: the reader holds an established TCP connection
// to a port the volume's process listens on, with the data forced onto
// shared memory (no TCP transport between them).

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "meshstore/store.hpp"
#include "testing/subprocess.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

using namespace std::chrono_literals;

const std::string kPeer = MESHSTORE_TEST_PEER_PATH;

// The socket inodes process `pid` holds.
std::set<std::string> socket_inodes(int pid) {
  std::set<std::string> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (auto* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      char target[256];
      const auto n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      const std::string link(target, static_cast<std::size_t>(n));
      if (link.rfind("socket:[", 0) == 0) out.insert(link.substr(8, link.size() - 9));
    }
    ::closedir(d);
  }
  return out;
}

// From /proc/net/tcp and tcp6, the ports of sockets in `inodes` in state
// `state` (0A listening, 01 established): their local port, or with
// `remote` the peer's.
std::set<int> ports(const std::set<std::string>& inodes, const std::string& state, bool remote) {
  std::set<int> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream row(line);
      std::string slot, local, peer, st, queues, timer, retr, uid, timeout, inode;
      row >> slot >> local >> peer >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (st != state || !inodes.count(inode)) continue;
      const std::string& addr = remote ? peer : local;
      out.insert(static_cast<int>(std::stol(addr.substr(addr.rfind(':') + 1), nullptr, 16)));
    }
  }
  return out;
}

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

  const auto listening = ports(socket_inodes(holder.pid()), "0A", false);
  const auto reached = ports(socket_inodes(reader.pid()), "01", true);
  std::set<int> direct;
  for (int p : reached) {
    if (listening.count(p)) direct.insert(p);
  }
  EXPECT_EQ(direct.size(), 1u) << "the reader has no connection (or several) of its own to the "
                                  "volume's process; its messages go through the server";
  // Neither is the server's listener.
  EXPECT_EQ(direct.count(server.admin().port()), 0u);
}

}  // namespace
}  // namespace meshstore::testing
