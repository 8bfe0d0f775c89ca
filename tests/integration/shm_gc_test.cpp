// Garbage collection of shared memory left by processes that died. These
// run alone (ctest RUN_SERIAL): any store starting elsewhere collects dead
// processes' segments too, which would race with what these tests observe.

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "meshstore/store.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"
#include "testing/subprocess.hpp"
#include "testing/test_util.hpp"

namespace meshstore::transports::shm {
namespace {

using namespace std::chrono_literals;
using meshstore::testing::Child;
using meshstore::testing::kWait;

const std::string kTool = MESHSTORE_TOOL_PATH;

void make_segment_file(const std::string& name) {
  const int fd = shm_open(("/" + name).c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << name;
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
}

TEST(ShmGc, GarbageCollectRemovesOnlyWhatDeadProcessesLeft) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  // A dead owner; our own pid with another start time (a reused pid); ours.
  const std::string dead = std::string(kSegmentPrefix) + std::to_string(child) + "-1.1.1";
  const std::string reused = std::string(kSegmentPrefix) + std::to_string(getpid()) + "-1.1.1";
  const std::string mine = process_prefix() + "999.1";
  make_segment_file(dead);
  make_segment_file(reused);
  make_segment_file(mine);
  const auto report = garbage_collect();
  EXPECT_FALSE(segment_exists(dead));
  EXPECT_FALSE(segment_exists(reused));
  EXPECT_TRUE(segment_exists(mine));
  EXPECT_GE(report.removed.size(), 2u);
  EXPECT_GE(report.live, 1u);
  shm_unlink(("/" + mine).c_str());
}

// Names of /dev/shm segments created by process `pid`.
std::vector<std::string> segments_of(pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = "meshstore." + std::to_string(pid) + "-";
  DIR* dir = opendir("/dev/shm");
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
  }
  closedir(dir);
  return out;
}

TEST(ShmGc, SharedMemoryOfAKilledServerIsCollected) {
  Child serve({kTool, "serve", "--port", "0"});
  const std::string address = served_address(serve, 60s);
  ASSERT_FALSE(address.empty()) << serve.output();
  {
    StoreOptions o;
    o.placement.host_volumes = false;
    o.placement.local_rank = -1;
    auto client = Store::connect(address, o).value();
    std::vector<float> w(1 << 18, 2.0f);  // 1 MiB: lands in a shared-memory segment
    ASSERT_OK(client.put("w", TensorView::of(w.data(), {1 << 18})).get(kWait));
  }
  const auto left = segments_of(serve.pid());
  ASSERT_FALSE(left.empty()) << "the server holds no shared-memory segment";
  serve.signal(SIGKILL);
  ASSERT_TRUE(serve.wait(kWait));
  EXPECT_EQ(segments_of(serve.pid()), left);  // a crash leaves them behind...

  Child dry({kTool, "gc", "--dry-run"});
  ASSERT_TRUE(dry.wait(kWait));
  EXPECT_EQ(dry.exit_code(), 0);
  EXPECT_NE(dry.output().find("would remove /dev/shm/" + left.front()), std::string::npos)
      << dry.output();
  EXPECT_EQ(segments_of(serve.pid()), left);

  Child gc({kTool, "gc"});  // ...and meshstore gc (or the next store) removes them
  ASSERT_TRUE(gc.wait(kWait));
  EXPECT_EQ(gc.exit_code(), 0);
  EXPECT_NE(gc.output().find("removed /dev/shm/" + left.front()), std::string::npos) << gc.output();
  EXPECT_TRUE(segments_of(serve.pid()).empty());
}

}  // namespace
}  // namespace meshstore::transports::shm
