// ByteBudget: the bound on GPU staging memory in flight (docs/gpu.md).
#include "meshstore/internal/byte_budget.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace meshstore::internal {
namespace {

TEST(ByteBudget, AdmitsUpToTheLimitThenQueuesInOrder) {
  ByteBudget b(100);
  std::vector<int> ran;
  b.admit(60, [&] { ran.push_back(1); });
  b.admit(40, [&] { ran.push_back(2); });
  b.admit(10, [&] { ran.push_back(3); });  // 110 > 100: waits
  b.admit(1, [&] { ran.push_back(4); });   // would fit after 3, but never overtakes it
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  EXPECT_EQ(b.in_flight(), 100u);
  EXPECT_EQ(b.waiting(), 2u);
  b.release(40);  // room for 3 and then 4
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(b.in_flight(), 71u);
  EXPECT_EQ(b.waiting(), 0u);
  b.release(60);
  b.release(10);
  b.release(1);
  EXPECT_EQ(b.in_flight(), 0u);
}

TEST(ByteBudget, ARequestLargerThanTheLimitRunsAlone) {
  ByteBudget b(10);
  std::vector<int> ran;
  b.admit(5, [&] { ran.push_back(1); });
  b.admit(50, [&] { ran.push_back(2); });  // waits until nothing is in flight
  b.admit(1, [&] { ran.push_back(3); });
  EXPECT_EQ(ran, (std::vector<int>{1}));
  b.release(5);
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));  // alone, over the limit
  EXPECT_EQ(b.in_flight(), 50u);
  b.release(50);
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
  b.release(1);
  // Alone from the start: admitted at once.
  b.admit(1000, [&] { ran.push_back(4); });
  EXPECT_EQ(ran.back(), 4);
  b.release(1000);
  EXPECT_EQ(b.in_flight(), 0u);
}

TEST(ByteBudget, WorkMayAdmitAndReleaseFromInsideItsCallback) {
  ByteBudget b(2);
  int chained = 0;
  // Each piece releases itself and admits the next: a chain of 100 that
  // never holds more than the limit.
  std::function<void(int)> piece = [&](int left) {
    ++chained;
    EXPECT_LE(b.in_flight(), 2u);
    b.release(1);
    if (left > 0) b.admit(1, [&, left] { piece(left - 1); });
  };
  b.admit(1, [&] { piece(99); });
  EXPECT_EQ(chained, 100);
  EXPECT_EQ(b.in_flight(), 0u);
}

TEST(ByteBudget, ManyThreadsNeverExceedTheLimit) {
  constexpr std::size_t kLimit = 8;
  ByteBudget b(kLimit);
  std::atomic<int> done{0};
  std::atomic<std::size_t> peak{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        b.admit(3, [&] {
          const std::size_t now = b.in_flight();
          std::size_t p = peak.load();
          while (now > p && !peak.compare_exchange_weak(p, now)) {
          }
          ++done;
          b.release(3);
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), 2000);  // every request ran: none left waiting
  EXPECT_LE(peak.load(), kLimit);
  EXPECT_EQ(b.in_flight(), 0u);
  EXPECT_EQ(b.waiting(), 0u);
}

}  // namespace
}  // namespace meshstore::internal
