// meshrun as users run it: environment, output prefixes, failures, Ctrl-C.

#include <filesystem>
#include <fstream>
#include <sstream>

#include "testing/subprocess.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

using namespace std::chrono_literals;

const std::string kMeshrun = MESHRUN_PATH;

// A fresh directory for the ranks to drop their pids into; removed with it.
struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/meshrun_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

std::vector<pid_t> read_pids(const std::string& dir, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::ifstream in(dir + "/" + std::to_string(r));
    pid_t p = 0;
    if (in >> p) pids.push_back(p);
  }
  return pids;
}

// Waits (bounded) until none of `pids` exists any more.
bool all_gone(const std::vector<pid_t>& pids) {
  for (int i = 0; i < 100; ++i) {
    bool any = false;
    for (auto p : pids) any |= process_alive(p);
    if (!any) return true;
    usleep(50 * 1000);
  }
  return false;
}

TEST(Meshrun, StartsEveryRankWithTorchrunEnvironment) {
  Child c(
      {kMeshrun, "-n", "3", "--", "sh", "-c",
       "echo rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE addr=$MASTER_ADDR "
       "port=${MASTER_PORT:+set}; echo to-stderr >&2"});
  ASSERT_TRUE(c.wait(60s));
  EXPECT_EQ(c.exit_code(), 0) << c.output();
  for (int r = 0; r < 3; ++r) {
    const auto rs = std::to_string(r);
    EXPECT_NE(c.output().find("[rank " + rs + "] rank=" + rs + " world=3 local=" + rs +
                              "/3 addr=127.0.0.1 port=set"),
              std::string::npos)
        << c.output();
    EXPECT_NE(c.output().find("[rank " + rs + "] to-stderr"), std::string::npos) << c.output();
  }
}

TEST(Meshrun, OneFailingRankStopsTheOthersAndIsNamed) {
  TempDir tmp;
  const auto& dir = tmp.path;
  Child c({kMeshrun, "-n", "3", "--", "sh", "-c",
           "echo $$ > " + dir +
               "/$RANK; if [ $RANK = 1 ]; then sleep 0.5; exit 7; fi; exec sleep 300"});
  ASSERT_TRUE(c.wait(60s)) << "meshrun did not stop the sleeping ranks";
  EXPECT_EQ(c.exit_code(), 7);
  EXPECT_NE(c.output().find("meshrun: failed: rank 1 exited with code 7"), std::string::npos)
      << c.output();
  auto pids = read_pids(dir, 3);
  EXPECT_EQ(pids.size(), 3u);
  EXPECT_TRUE(all_gone(pids));
}

TEST(Meshrun, InterruptCleansUpEveryChild) {
  TempDir tmp;
  const auto& dir = tmp.path;
  Child c({kMeshrun, "-n", "2", "--", "sh", "-c",
           "echo $$ > " + dir + "/$RANK; echo ready; exec sleep 300"});
  ASSERT_TRUE(c.wait_for_output("[rank 1] ready", 60s) && c.wait_for_output("[rank 0] ready", 60s))
      << c.output();
  auto pids = read_pids(dir, 2);
  ASSERT_EQ(pids.size(), 2u);
  c.signal(SIGINT);
  ASSERT_TRUE(c.wait(60s));
  EXPECT_EQ(c.exit_code(), 128 + SIGINT);
  EXPECT_TRUE(all_gone(pids));
}

TEST(Meshrun, MissingProgramIsAClearError) {
  Child c({kMeshrun, "-n", "2", "--", "/nonexistent/program"});
  ASSERT_TRUE(c.wait(60s));
  EXPECT_NE(c.exit_code(), 0);
  EXPECT_NE(c.output().find("cannot run '/nonexistent/program'"), std::string::npos) << c.output();
}

TEST(Meshrun, BadArgumentsPrintUsage) {
  Child c({kMeshrun, "-n", "0", "--", "true"});
  ASSERT_TRUE(c.wait(60s));
  EXPECT_EQ(c.exit_code(), 2);
  EXPECT_NE(c.output().find("usage: meshrun"), std::string::npos) << c.output();
  Child d({kMeshrun, "--", "true"});
  ASSERT_TRUE(d.wait(60s));
  EXPECT_NE(d.output().find("-n N is required"), std::string::npos) << d.output();
}

}  // namespace
}  // namespace meshstore::testing
