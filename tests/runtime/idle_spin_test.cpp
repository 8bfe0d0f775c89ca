// internal::spin_until: the busy wait behind a spinning host's waits
// (internal/idle_spin.hpp).
#include "meshstore/internal/idle_spin.hpp"

#include <gtest/gtest.h>

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

TEST(IdleSpin, TheSchedulerPollsFollowTheHostsCores) {
  // Without MESHSTORE_SCHEDULER_POLLS (ctest sets none): 5,000 where the
  // host spins, CAF's 100 elsewhere.
  if (std::getenv("MESHSTORE_SCHEDULER_POLLS")) GTEST_SKIP() << "MESHSTORE_SCHEDULER_POLLS is set";
  EXPECT_EQ(scheduler_polls(), spinning_host() ? 5000u : 100u);
  EXPECT_EQ(spinning_host(), std::thread::hardware_concurrency() >= kSpinningHostCores);
}

}  // namespace
}  // namespace meshstore::internal
