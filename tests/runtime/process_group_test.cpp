// ProcessGroup: children started, watched, and started again on request.

#include "meshstore/internal/process_group.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "testing/test_util.hpp"

namespace meshstore::internal {
namespace {

using namespace std::chrono_literals;

// What the group told: each line and each exit, by index.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> lines;
  std::vector<int> exits;
  bool wait_exits(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, testing::kWait, [&] { return exits.size() >= n; });
  }
};

ProcessSpec shell(const std::string& script) {
  ProcessSpec p;
  p.program = "/bin/sh";
  p.args = {"-c", script};
  return p;
}

TEST(ProcessGroup, AnExitedProcessIsStartedAgainOnRequestWithItsOwnArguments) {
  Seen seen;
  auto group = ProcessGroup::start(
      {shell("echo run; exit 3")},
      [&](int, bool, const std::string& line) {
        std::lock_guard<std::mutex> lock(seen.mu);
        seen.lines.push_back(line);
      },
      [&](int, int status) {
        std::lock_guard<std::mutex> lock(seen.mu);
        seen.exits.push_back(status);
        seen.cv.notify_all();
      });
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  ASSERT_TRUE(seen.wait_exits(1));
  const auto first = (*group)->pid(0);
  ASSERT_TRUE((*group)->relaunch(0).ok());
  ASSERT_TRUE(seen.wait_exits(2));
  EXPECT_NE((*group)->pid(0), first);
  (*group)->stop(1s);
  std::lock_guard<std::mutex> lock(seen.mu);
  ASSERT_EQ(seen.exits.size(), 2u);  // started once more, not again
  for (int status : seen.exits) EXPECT_EQ(ProcessGroup::describe(status), "exited with status 3");
  EXPECT_EQ(seen.lines, (std::vector<std::string>{"run", "run"}));
}

TEST(ProcessGroup, RelaunchRefusesABadIndexARunningProcessAndAStoppedGroup) {
  auto group = ProcessGroup::start({shell("sleep 30")}, nullptr, nullptr);
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  EXPECT_EQ((*group)->relaunch(1).code(), Errc::out_of_range);
  EXPECT_EQ((*group)->relaunch(-1).code(), Errc::out_of_range);
  EXPECT_EQ((*group)->relaunch(0).code(), Errc::invalid_argument);  // it runs
  (*group)->stop(200ms);
  EXPECT_FALSE((*group)->running(0));
  EXPECT_EQ((*group)->relaunch(0).code(), Errc::shutdown);
}

}  // namespace
}  // namespace meshstore::internal
