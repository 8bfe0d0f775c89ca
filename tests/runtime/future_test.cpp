#include "meshstore/future.hpp"

#include <atomic>
#include <thread>

#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using namespace std::chrono_literals;
using testing::kWait;

TEST(Future, ReadyFutureGivesValue) {
  auto f = make_ready_future(5);
  EXPECT_TRUE(f.ready());
  EXPECT_EQ(*f.get(), 5);
}

TEST(Future, GetWithTimeoutReportsTimeoutThenStillCompletes) {
  Promise<int> p;
  auto f = p.future();
  auto r = f.get(20ms);
  EXPECT_ERROR(r, Errc::wait_timeout, "not ready");
  p.set_value(9);
  EXPECT_EQ(*f.get(kWait), 9);
}

TEST(Future, HugeTimeoutsMeanForever) {
  Promise<int> p;
  auto f = p.future();
  std::thread t([&] { p.set_value(1); });
  // A deadline of now + max() would overflow; it must wait, not time out.
  auto r = f.get(std::chrono::hours::max());
  t.join();
  EXPECT_EQ(*r, 1);
  EXPECT_TRUE(make_ready_future(2).wait_for(std::chrono::milliseconds::max()));
}

TEST(Future, CompletedFromForeignThreadWakesWaiter) {
  Promise<std::string> p;
  auto f = p.future();
  std::thread t([&] { p.set_value("from another thread"); });
  auto r = f.get(kWait);
  t.join();
  ASSERT_OK(r);
  EXPECT_EQ(*r, "from another thread");
}

TEST(Future, ManyThreadsWaitOnOneFuture) {
  Promise<int> p;
  auto f = p.future();
  std::atomic<int> seen{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 8; ++i) {
    waiters.emplace_back([f, &seen] {
      if (f.get(kWait).value_or(0) == 3) ++seen;
    });
  }
  p.set_value(3);
  for (auto& t : waiters) t.join();
  EXPECT_EQ(seen.load(), 8);
}

TEST(Future, ThenChainsValues) {
  Promise<int> p;
  auto f = p.future().then([](const int& x) { return x * 2; }).then([](const int& x) {
    return std::to_string(x);
  });
  p.set_value(21);
  EXPECT_EQ(*f.get(kWait), "42");
}

TEST(Future, ThenSkipsContinuationOnError) {
  Promise<int> p;
  bool ran = false;
  auto f = p.future().then([&](const int&) {
    ran = true;
    return 1;
  });
  p.set_error(Status(Errc::not_found, "gone"));
  EXPECT_ERROR(f.get(kWait), Errc::not_found, "gone");
  EXPECT_FALSE(ran);
}

TEST(Future, ThenFlattensReturnedFuture) {
  Promise<int> outer;
  Promise<int> inner;
  auto inner_f = inner.future();
  auto f = outer.future().then([inner_f](const int&) { return inner_f; });
  outer.set_value(1);
  EXPECT_FALSE(f.wait_for(10ms));
  inner.set_value(7);
  EXPECT_EQ(*f.get(kWait), 7);
}

TEST(Future, ThenMayReturnResultStatusOrNothing) {
  auto a = make_ready_future(1).then(
      [](const int&) -> Result<int> { return Status(Errc::out_of_range, "r"); });
  EXPECT_ERROR(a.get(kWait), Errc::out_of_range, "r");
  auto b = make_ready_future(1).then([](const int&) { return Status(Errc::conflict, "c"); });
  EXPECT_ERROR(b.get(kWait), Errc::conflict, "c");
  int side = 0;
  Future<void> c = make_ready_future(4).then([&](const int& x) { side = x; });
  EXPECT_OK(c.get(kWait));
  EXPECT_EQ(side, 4);
  Future<int> d = make_ready_future().then([] { return 8; });
  EXPECT_EQ(*d.get(kWait), 8);
}

TEST(Future, ExceptionInContinuationBecomesInternalError) {
  auto f = make_ready_future(1).then([](const int&) -> int { throw std::runtime_error("boom"); });
  EXPECT_ERROR(f.get(kWait), Errc::internal, "boom");
}

TEST(Promise, DroppedPromiseBreaksItsFuture) {
  Future<int> f;
  {
    Promise<int> p;
    f = p.future();
  }
  EXPECT_ERROR(f.get(kWait), Errc::broken_promise, "");
}

TEST(Promise, DroppedPromiseReportsItsChosenStatus) {
  Future<void> f;
  {
    Promise<void> p(Status(Errc::shutdown, "store closed"));
    f = p.future();
  }
  EXPECT_ERROR(f.get(kWait), Errc::shutdown, "store closed");
}

TEST(Promise, SecondCompletionIsIgnored) {
  Promise<int> p;
  EXPECT_TRUE(p.set_value(1));
  EXPECT_FALSE(p.set_value(2));
  EXPECT_FALSE(p.set_error(Status(Errc::internal, "late")));
  EXPECT_EQ(*p.future().get(kWait), 1);
}

TEST(Promise, MoveAssignmentCompletesTheOverwrittenPromise) {
  Promise<int> a;
  auto fa = a.future();
  Promise<int> b;
  a = std::move(b);
  EXPECT_ERROR(fa.get(kWait), Errc::broken_promise, "");
}

TEST(Future, CallbacksRunOutsideTheLock) {
  // A callback that touches the same future (ready(), another on_complete)
  // would deadlock if callbacks ran under the state's mutex.
  Promise<int> p;
  auto f = p.future();
  std::atomic<bool> nested{false};
  f.on_complete([f, &nested](const Result<int>&) {
    EXPECT_TRUE(f.ready());
    f.on_complete([&nested](const Result<int>&) { nested = true; });
  });
  p.set_value(1);
  EXPECT_TRUE(nested.load());
}

TEST(Future, InvalidFutureReportsInvalidArgument) {
  Future<int> f;
  EXPECT_FALSE(f.valid());
  EXPECT_ERROR(f.get(), Errc::invalid_argument, "no state");
}

TEST(WhenAll, CollectsEveryResultInOrder) {
  Promise<int> a, b, c;
  auto all = when_all(std::vector<Future<int>>{a.future(), b.future(), c.future()});
  c.set_value(3);
  b.set_error(Status(Errc::timeout, "b"));
  EXPECT_FALSE(all.ready());
  a.set_value(1);
  auto r = all.get(kWait);
  ASSERT_OK(r);
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ(*(*r)[0], 1);
  EXPECT_EQ((*r)[1].status().code(), Errc::timeout);
  EXPECT_EQ(*(*r)[2], 3);
}

TEST(Gather, ValuesInInputOrder) {
  std::vector<Promise<int>> ps(4);
  std::vector<Future<int>> fs;
  for (auto& p : ps) fs.push_back(p.future());
  auto g = gather(std::move(fs));
  std::vector<std::thread> threads;
  for (int i = 3; i >= 0; --i) threads.emplace_back([&ps, i] { ps[i].set_value(i * 10); });
  for (auto& t : threads) t.join();
  auto r = g.get(kWait);
  ASSERT_OK(r);
  EXPECT_EQ(*r, (std::vector<int>{0, 10, 20, 30}));
}

TEST(Gather, FailsFastWithFirstError) {
  Promise<void> a, b;
  auto g = gather(std::vector<Future<void>>{a.future(), b.future()});
  b.set_error(Status(Errc::unavailable, "volume died"));
  // a is still pending, but the error is already known.
  EXPECT_ERROR(g.get(kWait), Errc::unavailable, "volume died");
  a.set_value();
}

TEST(Gather, EmptyInputIsReadyAtOnce) {
  EXPECT_TRUE(gather(std::vector<Future<int>>{}).ready());
  EXPECT_OK(gather(std::vector<Future<void>>{}).get(kWait));
  EXPECT_TRUE(when_all(std::vector<Future<int>>{}).get(kWait)->empty());
}

}  // namespace
}  // namespace meshstore
