// internal::spin_until: the busy wait behind a spinning host's waits
// (internal/idle_spin.hpp).
#include "meshstore/internal/idle_spin.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace meshstore::internal {
namespace {

using namespace std::chrono_literals;

TEST(IdleSpin, ReturnsOnceReadyWithoutWaitingOutTheSpin) {
  std::atomic<bool> flag{false};
  std::thread setter([&] {
    std::this_thread::sleep_for(2ms);
    flag.store(true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  // A spin far longer than the setter takes: it must return when the flag
  // is set, not when the spin ends.
  const bool ready = spin_until([&] { return flag.load(); }, std::chrono::seconds(30));
  const auto waited = std::chrono::steady_clock::now() - t0;
  setter.join();
  EXPECT_TRUE(ready);
  EXPECT_LT(waited, std::chrono::seconds(30));
}

TEST(IdleSpin, GivesUpAfterTheSpinWhenNeverReady) {
  int asked = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const bool ready = spin_until(
      [&] {
        ++asked;
        return false;
      },
      std::chrono::microseconds(500));
  EXPECT_FALSE(ready);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::microseconds(500));
  EXPECT_GT(asked, 1);
}

TEST(IdleSpin, AZeroSpinAsksOnce) {
  int asked = 0;
  EXPECT_TRUE(spin_until(
      [&] {
        ++asked;
        return true;
      },
      std::chrono::microseconds(0)));
  EXPECT_EQ(asked, 1);
  EXPECT_FALSE(spin_until([] { return false; }, std::chrono::microseconds(0)));
}

TEST(IdleSpin, TheSchedulerPollsFollowTheUsableCpus) {
  // Without MESHSTORE_SCHEDULER_POLLS (ctest sets none): 5,000 where the
  // process may run on enough CPUs, CAF's 100 elsewhere.
  if (std::getenv("MESHSTORE_SCHEDULER_POLLS") || std::getenv("MESHSTORE_SPIN")) {
    GTEST_SKIP() << "MESHSTORE_SCHEDULER_POLLS or MESHSTORE_SPIN is set";
  }
  EXPECT_EQ(scheduler_polls(), spinning_host() ? 5000u : 100u);
  EXPECT_EQ(spinning_host(), usable_cpus() >= kSpinningHostCores);
}

// A process bound to fewer CPUs than the host has (taskset, a cpuset,
// srun's binding) counts those: a child bound to one CPU sees one.
TEST(IdleSpin, UsableCpusAreTheAffinityMasks) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  EXPECT_LE(usable_cpus(), static_cast<unsigned>(CPU_COUNT(&mine)));  // a quota may cut it
  EXPECT_GE(usable_cpus(), 1u);
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) _exit(2);
    _exit(usable_cpus() == 1 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a child bound to one CPU counted another number";
}

// A container's CPU quota (docker --cpus, a pod's limit) counts as the
// CPUs it allows, rounded up; no quota counts as none.
TEST(IdleSpin, ACpuQuotaCountsAsTheCpusItAllows) {
  EXPECT_EQ(cpus_of_quota(200000, 100000), 2u);
  EXPECT_EQ(cpus_of_quota(150000, 100000), 2u);  // 1.5 CPUs: two may run
  EXPECT_EQ(cpus_of_quota(50000, 100000), 1u);
  EXPECT_EQ(cpus_of_quota(-1, 100000), 0u);  // cgroup v1: no quota
  EXPECT_EQ(cpus_of_quota(100000, 0), 0u);
  EXPECT_EQ(cpus_of_cpu_max("400000 100000"), 4u);
  EXPECT_EQ(cpus_of_cpu_max("max 100000"), 0u);  // cgroup v2: no quota
  EXPECT_EQ(cpus_of_cpu_max(""), 0u);
  EXPECT_EQ(cpus_of_cpu_max("lots 100000"), 0u);
  EXPECT_EQ(cpus_of_cpu_max("100000"), 0u);
}

}  // namespace
}  // namespace meshstore::internal
