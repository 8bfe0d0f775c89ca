// Cancelling a call that uses the caller's buffers (Future::cancel): once
// cancel() returns, the store never touches the buffer again, and a
// cancelled put leaves nothing visible. The transfers run over rpc in
// 1 MiB chunks, one in flight, so a 64 MiB call usually lasts long enough
// to be cancelled in the middle. A 64 MiB put is sent over the client's
// channel from its waiting thread (put_over_channel with the call's
// guard); a 64 MiB get_into takes the actors. On a fast host a call can still finish
// before cancel() runs (the first read of a store did, once, on a 2-vCPU
// VM): each test then checks that call finished whole and tries again, at
// most kTries times, and needs one cancelled in flight.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "meshstore/store.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using testing::kWait;

constexpr std::int64_t kElems = std::int64_t{16} << 20;  // 64 MiB of uint32

// A store whose reads and writes go slowly enough to cancel in flight.
Store slow_store() {
  StoreOptions o;
  o.transport.name = "rpc";
  o.transport.rpc_chunk_bytes = std::size_t{1} << 20;
  o.transport.rpc_chunks_in_flight = 1;
  o.transport.shared_memory_volumes = false;
  return Store::embedded(o).value();
}

TensorView view_of(std::vector<std::uint32_t>& v) {
  return TensorView::of(v.data(), {static_cast<std::int64_t>(v.size())});
}

constexpr int kTries = 10;

bool all_equal(const std::vector<std::uint32_t>& v, std::uint32_t x) {
  return std::all_of(v.begin(), v.end(), [x](std::uint32_t e) { return e == x; });
}

TEST(Cancel, ACancelledGetIntoNeverWritesTheBufferAgain) {
  auto store = slow_store();
  std::vector<std::uint32_t> stored(kElems, 7);
  ASSERT_OK(store.put("w", view_of(stored)).get(kWait));
  std::vector<std::uint32_t> dst(kElems, 0);
  bool cancelled = false;
  for (int i = 0; i < kTries && !cancelled; ++i) {
    std::fill(dst.begin(), dst.end(), 0);
    auto got = store.get_into("w", view_of(dst));
    cancelled = got.cancel();
    if (!cancelled) {  // it had finished first, whole
      EXPECT_OK(got.get(kWait));
      EXPECT_TRUE(all_equal(dst, 7));
      continue;
    }
    // From here on the buffer is the caller's again.
    std::fill(dst.begin(), dst.end(), 0xdeadbeef);
    EXPECT_ERROR(got.get(kWait), Errc::cancelled, "get_into 'w': cancelled");
  }
  // A later read completes after anything the cancelled one left running,
  // and closing waits for every actor.
  std::vector<std::uint32_t> again(kElems, 0);
  ASSERT_OK(store.get_into("w", view_of(again)).get(kWait));
  EXPECT_TRUE(all_equal(again, 7));
  store.close();
  EXPECT_TRUE(all_equal(dst, 0xdeadbeef)) << "the store wrote into a cancelled call's buffer";
  EXPECT_TRUE(cancelled) << "64 MiB in 1 MiB round trips finished before cancel() was called";
}

TEST(Cancel, ACancelledPutLeavesThePreviousVersionWhole) {
  auto store = slow_store();
  std::vector<std::uint32_t> v1(kElems, 1);
  ASSERT_OK(store.put("w", view_of(v1)).get(kWait));
  std::uint32_t previous = 1;
  bool cancelled = false;
  std::vector<std::uint32_t> back(kElems, 0);
  for (int i = 0; i < kTries && !cancelled; ++i) {
    const auto value = static_cast<std::uint32_t>(10 + i);
    std::vector<std::uint32_t> v2(kElems, value);
    auto put = store.put("w", view_of(v2));
    cancelled = put.cancel();
    std::fill(v2.begin(), v2.end(), 3);  // never to be read by the store
    auto r = put.get(kWait);
    ASSERT_OK(store.get_into("w", view_of(back)).get(kWait));
    if (cancelled) {
      EXPECT_ERROR(r, Errc::cancelled, "put 'w': cancelled");
      EXPECT_TRUE(all_equal(back, previous)) << "a cancelled put became visible, or mixed";
    } else {  // it had finished first
      EXPECT_OK(r);
      EXPECT_TRUE(all_equal(back, value));
      previous = value;
    }
  }
  EXPECT_TRUE(cancelled) << "64 MiB in 1 MiB round trips finished before cancel() was called";
  // The store goes on: the next put of the key commits.
  std::vector<std::uint32_t> v4(1024, 4), small(1024, 0);
  ASSERT_OK(store.put("w", view_of(v4)).get(kWait));
  ASSERT_OK(store.get_into("w", view_of(small)).get(kWait));
  EXPECT_TRUE(all_equal(small, 4));
}

TEST(Cancel, ACancelledNewKeyNeverAppearsAndBatchesCancelWhole) {
  auto store = slow_store();
  std::vector<std::uint32_t> a(kElems / 2, 5), b(kElems / 2, 6);
  bool cancelled = false;
  for (int i = 0; i < kTries && !cancelled; ++i) {
    const std::string ka = "a" + std::to_string(i), kb = "b" + std::to_string(i);
    auto put = store.put_batch({{ka, view_of(a)}, {kb, view_of(b)}});
    cancelled = put.cancel();
    auto r = put.get(kWait);
    if (!cancelled) {  // it had finished first: both keys
      EXPECT_OK(r);
      EXPECT_TRUE(*store.exists(ka).get(kWait));
      EXPECT_TRUE(*store.exists(kb).get(kWait));
      continue;
    }
    EXPECT_ERROR(r, Errc::cancelled, "cancelled");
    EXPECT_FALSE(*store.exists(ka).get(kWait));
    EXPECT_FALSE(*store.exists(kb).get(kWait));
  }
  EXPECT_TRUE(cancelled);
}

TEST(Cancel, AFinishedCallOrOneThatCannotBeCancelledAnswersFalse) {
  auto store = Store::embedded().value();
  std::vector<std::uint32_t> v(1024, 9), back(1024, 0);
  auto put = store.put("k", view_of(v));
  ASSERT_OK(put.get(kWait));
  EXPECT_FALSE(put.cancel());
  EXPECT_OK(put.get(kWait));  // unchanged
  auto keys = store.keys("");
  EXPECT_FALSE(keys.cancel());  // not a call with buffers
  EXPECT_OK(keys.get(kWait));
  auto got = store.get_into("k", view_of(back));
  ASSERT_OK(got.get(kWait));
  EXPECT_FALSE(got.cancel());
  EXPECT_TRUE(all_equal(back, 9));
  Future<int> plain = make_ready_future(1);
  EXPECT_FALSE(plain.cancel());
  EXPECT_FALSE(Future<int>().cancel());
}

TEST(Cancel, ChainedFuturesCancelTheCallTheyFollow) {
  auto store = slow_store();
  std::vector<std::uint32_t> stored(kElems, 8);
  ASSERT_OK(store.put("w", view_of(stored)).get(kWait));
  std::vector<std::uint32_t> dst(kElems, 0);
  bool cancelled = false;
  for (int i = 0; i < kTries && !cancelled; ++i) {
    std::fill(dst.begin(), dst.end(), 0);
    auto chained = store.get_into("w", view_of(dst)).then([] { return 1; });
    cancelled = chained.cancel();
    if (!cancelled) {  // it had finished first, whole
      EXPECT_EQ(*chained.get(kWait), 1);
      EXPECT_TRUE(all_equal(dst, 8));
      continue;
    }
    std::fill(dst.begin(), dst.end(), 0xabcdef);
    EXPECT_ERROR(chained.get(kWait), Errc::cancelled, "cancelled");
  }
  store.close();
  EXPECT_TRUE(all_equal(dst, 0xabcdef));
  EXPECT_TRUE(cancelled);
}

}  // namespace
}  // namespace meshstore
