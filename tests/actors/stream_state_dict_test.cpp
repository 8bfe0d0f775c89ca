// Streaming reads: a reader waiting for a state dict copies each tensor as
// soon as the writer has filled it, and completes when the version commits.

#include <atomic>
#include <thread>

#include "meshstore/store.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using namespace std::chrono_literals;
using testing::kWait;

constexpr int kTensors = 4;
constexpr std::int64_t kElems = 1 << 20;  // 4 MiB of float32 each: streamed, not inline

// A state dict of kTensors big tensors, a small (packed) one and a value,
// over buffers it owns.
struct Dict {
  std::vector<std::vector<float>> big = std::vector<std::vector<float>>(
      kTensors, std::vector<float>(static_cast<std::size_t>(kElems)));
  std::vector<float> norm = std::vector<float>(64);
  StateDict sd;

  Dict() {
    for (int t = 0; t < kTensors; ++t) {
      EXPECT_OK(sd.insert("layer." + std::to_string(t) + ".weight",
                          TensorView::of(big[t].data(), {kElems})));
    }
    EXPECT_OK(sd.insert("norm", TensorView::of(norm.data(), {64})));
    EXPECT_OK(sd.insert("step", Value::int64(-1)));
  }
  void fill(float v) {
    for (auto& b : big) std::fill(b.begin(), b.end(), v);
    std::fill(norm.begin(), norm.end(), v);
    EXPECT_OK(sd.set_value("step", Value::int64(static_cast<std::int64_t>(v))));
  }
  // True when every element and the value hold `v`: one whole version.
  ::testing::AssertionResult holds(float v) const {
    for (int t = 0; t < kTensors; ++t) {
      for (std::size_t i = 0; i < big[t].size(); i += 4099) {
        if (big[t][i] != v)
          return ::testing::AssertionFailure() << "layer " << t << "[" << i << "]";
      }
      if (big[t].back() != v) return ::testing::AssertionFailure() << "layer " << t << " end";
    }
    for (float x : norm) {
      if (x != v) return ::testing::AssertionFailure() << "norm";
    }
    if (sd.find("step")->value->as_int64() != static_cast<std::int64_t>(v)) {
      return ::testing::AssertionFailure() << "step";
    }
    return ::testing::AssertionSuccess();
  }
};

ControllerCounters counters(Store& store) {
  return store.admin().controller_counters().get(kWait).value();
}

// Waits (bounded) until the controller has handled `n` stream subscriptions.
void await_subscribes(Store& store, std::uint64_t n) {
  for (int i = 0; i < 2000 && counters(store).stream_subscribes < n; ++i) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_GE(counters(store).stream_subscribes, n);
}

// The put is one commit over the writer's channel, on its thread; the
// client actor announces the stream and its progress as the objects are
// written, and the commit ends it.
TEST(StreamStateDictTest, AWaitingReaderStreamsTheVersionWhileItIsPut) {
  auto store = Store::embedded().value();
  Dict src, dst;
  src.fill(7.0f);
  auto before = counters(store);
  auto read = store.state_dicts().stream_into("sd", dst.sd, 30s);
  await_subscribes(store, before.stream_subscribes + 1);
  const auto channel_puts = store.admin().fast_path_stats().state_dict_puts;
  ASSERT_OK(store.state_dicts().put("sd", src.sd).get(kWait));
  EXPECT_EQ(store.admin().fast_path_stats().state_dict_puts, channel_puts + 1)
      << "not over the channel";
  ASSERT_OK(read.get(kWait));
  EXPECT_TRUE(dst.holds(7.0f));
  auto after = counters(store);
  EXPECT_EQ(after.streams - before.streams, 1u);
  EXPECT_EQ(after.stream_readers - before.stream_readers, 1u);  // it followed the put
}

TEST(StreamStateDictTest, ACommittedStateDictIsReadAtOnceWithoutAStream) {
  auto store = Store::embedded().value();
  Dict src, dst;
  src.fill(3.0f);
  ASSERT_OK(store.state_dicts().put("sd", src.sd).get(kWait));
  auto before = counters(store);
  ASSERT_OK(store.state_dicts().stream_into("sd", dst.sd, 30s).get(kWait));
  EXPECT_TRUE(dst.holds(3.0f));
  EXPECT_EQ(counters(store).stream_readers, before.stream_readers);
}

TEST(StreamStateDictTest, WorkersFollowEveryPublishedVersionNeverAMix) {
  auto store = Store::embedded().value();
  constexpr int kVersions = 6;
  Dict src;
  std::atomic<bool> failed{false};
  std::thread worker([&] {
    Dict dst;
    std::uint64_t seen = 0;
    while (seen < kVersions && !failed) {
      auto v = store.state_dicts().get_next_into("weights", dst.sd, seen, 30s).get(kWait);
      if (!v.ok() || *v <= seen || !dst.holds(static_cast<float>(*v))) {
        ADD_FAILURE() << (v.ok() ? "version " + std::to_string(*v) + " after " +
                                       std::to_string(seen) + " or a mix"
                                 : v.status().to_string());
        failed = true;
        return;
      }
      seen = *v;
    }
  });
  for (int v = 1; v <= kVersions && !failed; ++v) {
    src.fill(static_cast<float>(v));
    auto published =
        store.state_dicts().publish("weights", src.sd, PublishOptions::by_copy()).get(kWait);
    ASSERT_OK(published);
    ASSERT_EQ(published->version(), static_cast<std::uint64_t>(v));
  }
  worker.join();
  EXPECT_FALSE(failed);
}

TEST(StreamStateDictTest, AMismatchedDestinationFailsBeforeAnyByteMoves) {
  auto store = Store::embedded().value();
  Dict src;
  src.fill(1.0f);
  std::vector<float> wrong(kElems / 2, -5.0f);
  StateDict dst;
  for (int t = 0; t < kTensors; ++t) {
    ASSERT_OK(dst.insert("layer." + std::to_string(t) + ".weight",
                         TensorView::of(wrong.data(), {kElems / 2})));
  }
  auto before = counters(store);
  auto read = store.state_dicts().stream_into("sd", dst, 30s);
  await_subscribes(store, before.stream_subscribes + 1);
  ASSERT_OK(store.state_dicts().put("sd", src.sd).get(kWait));
  EXPECT_ERROR(read.get(kWait), Errc::shape_mismatch,
               "stream_state_dict_into 'sd': the destination does not match the stored state dict: "
               "missing 'norm', 'step'; mismatched 'layer.0.weight (stored [1048576], destination "
               "[524288])'");
  EXPECT_EQ(wrong.front(), -5.0f);
  EXPECT_EQ(wrong.back(), -5.0f);
}

TEST(StreamStateDictTest, SmallStateDictsAreReadOnceCommitted) {
  auto store = Store::embedded().value();
  std::vector<std::int32_t> a(100, 9), b(100, 0);
  StateDict src, dst;
  ASSERT_OK(src.insert("a", TensorView::of(a.data(), {100})));
  ASSERT_OK(dst.insert("a", TensorView::of(b.data(), {100})));
  auto before = counters(store);
  auto read = store.state_dicts().stream_into("small", dst, 30s);
  await_subscribes(store, before.stream_subscribes + 1);
  ASSERT_OK(store.state_dicts().put("small", src).get(kWait));
  ASSERT_OK(read.get(kWait));
  EXPECT_EQ(b, a);
}

// Puts `sd` under `key` while a reader waits for it; answers whether the
// put was announced as a stream. The reader gets the bytes either way.
bool put_is_streamed(Store& store, const std::string& key, const StateDict& src, StateDict& dst) {
  const auto before = counters(store);
  auto read = store.state_dicts().stream_into(key, dst, 30s);
  await_subscribes(store, before.stream_subscribes + 1);
  EXPECT_OK(store.state_dicts().put(key, src).get(kWait));
  EXPECT_OK(read.get(kWait));
  return counters(store).streams > before.streams;
}

TEST(StreamStateDictTest, APutIsAStreamOnlyWhenAReaderCanCopyWhileItWrites) {
  auto store = Store::embedded().value();
  // 1,000 tensors of 4 KiB: packed into one object, so a reader has
  // nothing to copy before the put ends and no stream is announced.
  std::vector<std::vector<std::int32_t>> small(1000, std::vector<std::int32_t>(1024));
  std::vector<std::vector<std::int32_t>> small_dst(1000, std::vector<std::int32_t>(1024, -1));
  StateDict src, dst;
  for (int i = 0; i < 1000; ++i) {
    std::fill(small[i].begin(), small[i].end(), i);
    ASSERT_OK(src.insert("t." + std::to_string(i), TensorView::of(small[i].data(), {1024})));
    ASSERT_OK(dst.insert("t." + std::to_string(i), TensorView::of(small_dst[i].data(), {1024})));
  }
  EXPECT_FALSE(put_is_streamed(store, "packed", src, dst));
  EXPECT_EQ(small_dst, small);
  // Two objects of 1 MiB: one can be read while the other is written.
  constexpr std::int64_t kMiB = (1 << 20) / 4;
  std::vector<float> a(kMiB, 1.0f), b(kMiB, 2.0f), a_dst(kMiB), b_dst(kMiB);
  StateDict two, two_dst;
  ASSERT_OK(two.insert("a", TensorView::of(a.data(), {kMiB})));
  ASSERT_OK(two.insert("b", TensorView::of(b.data(), {kMiB})));
  ASSERT_OK(two_dst.insert("a", TensorView::of(a_dst.data(), {kMiB})));
  ASSERT_OK(two_dst.insert("b", TensorView::of(b_dst.data(), {kMiB})));
  EXPECT_TRUE(put_is_streamed(store, "two", two, two_dst));
  EXPECT_EQ(a_dst, a);
  EXPECT_EQ(b_dst, b);
  // 4 KiB less beside the largest (the manifest, an object of its own,
  // holds less than that): not worth a stream.
  StateDict uneven, uneven_dst;
  ASSERT_OK(uneven.insert("a", TensorView::of(a.data(), {kMiB})));
  ASSERT_OK(uneven.insert("b", TensorView(b.data(), DType::uint8, {kMiB * 4 - 4096})));
  ASSERT_OK(uneven_dst.insert("a", TensorView::of(a_dst.data(), {kMiB})));
  ASSERT_OK(uneven_dst.insert("b", TensorView(b_dst.data(), DType::uint8, {kMiB * 4 - 4096})));
  EXPECT_FALSE(put_is_streamed(store, "uneven", uneven, uneven_dst));
}

TEST(StreamStateDictTest, NothingWrittenInTimeIsATimeout) {
  auto store = Store::embedded().value();
  Dict dst;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_ERROR(store.state_dicts().stream_into("never", dst.sd, 100ms).get(kWait), Errc::timeout,
               "stream_state_dict_into 'never': nothing was written within 100 ms");
  EXPECT_ERROR(store.state_dicts().get_next_into("nothing", dst.sd, 0, 150ms).get(kWait),
               Errc::timeout, "no version after 0 was published in time");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
  EXPECT_ERROR(store.state_dicts().stream_into("k", dst.sd, -1ms).get(kWait),
               Errc::invalid_argument, "negative timeout");
  EXPECT_ERROR(store.state_dicts().get_next_into("", dst.sd, 0, 1s).get(kWait),
               Errc::invalid_argument, "key");
  store.close();
  EXPECT_ERROR(store.state_dicts().stream_into("k", dst.sd, 1s).get(kWait), Errc::shutdown,
               "closed");
}

}  // namespace
}  // namespace meshstore
