// Zero-copy publishing: stage_state_dict and stage_publish allocate a state
// dict in the store's memory, the writer fills it in place and commits it.

#include <cstring>
#include <set>

#include "meshstore/store.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using testing::kWait;

// A big tensor (stored alone), two small ones (packed) and an empty one.
std::vector<TensorSpec> specs() {
  return {{"model.embed.weight", DType::float32, {256, 128}},
          {"model.norm.weight", DType::float32, {128}},
          {"model.bias", DType::int64, {3}},
          {"model.empty", DType::float16, {0, 4}}};
}

// Fills every staged tensor with a pattern of (step, entry, byte).
void fill(StateDict& sd, int step) {
  int e = 0;
  for (auto& entry : sd.entries()) {
    if (!entry.is_tensor()) continue;
    auto* p = static_cast<unsigned char*>(const_cast<void*>(entry.view.data()));
    for (std::size_t i = 0; i < entry.view.nbytes(); ++i) {
      p[i] = static_cast<unsigned char>(step * 31 + e * 7 + i);
    }
    ++e;
  }
}

// True when `got` holds `step`'s pattern for `specs()`.
::testing::AssertionResult holds(const StateDict& got, int step) {
  const auto want = specs();
  if (got.size() < want.size()) return ::testing::AssertionFailure() << "too few entries";
  for (std::size_t e = 0; e < want.size(); ++e) {
    const auto& entry = got.entries()[e];
    if (entry.name != want[e].name || entry.view.shape() != want[e].shape ||
        entry.view.dtype() != want[e].dtype) {
      return ::testing::AssertionFailure() << "entry " << e << " is '" << entry.name << "'";
    }
    const auto* p = static_cast<const unsigned char*>(entry.view.data());
    for (std::size_t i = 0; i < entry.view.nbytes(); ++i) {
      if (p[i] != static_cast<unsigned char>(step * 31 + static_cast<int>(e) * 7 + i)) {
        return ::testing::AssertionFailure() << "'" << entry.name << "' byte " << i;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

std::uint64_t staged_objects(Store& store) {
  std::uint64_t n = 0;
  const auto stats = store.admin().stats().get(kWait).value();
  for (const auto& v : stats) n += v.staged;
  return n;
}

TEST(StagedStateDictTest, FilledInPlaceThenCommittedWithOneControlMessage) {
  auto store = Store::embedded().value();
  auto staged = store.state_dicts().stage("ckpt", specs()).get(kWait);
  ASSERT_OK(staged);
  EXPECT_TRUE(staged->zero_copy());
  EXPECT_EQ(staged->key(), "ckpt");
  EXPECT_EQ(staged_objects(store), 2u);            // the blob and the big tensor
  EXPECT_FALSE(*store.exists("ckpt").get(kWait));  // nothing visible before the commit
  fill(staged->state_dict(), 1);
  ASSERT_OK(staged->state_dict().insert("step", Value::int64(41)));

  auto before = store.admin().controller_counters().get(kWait).value();
  const auto channel_commits = store.admin().fast_path_stats().state_dict_puts;
  auto committed = staged->commit().get(kWait);
  ASSERT_OK(committed);
  EXPECT_EQ(*committed, 0u);
  auto after = store.admin().controller_counters().get(kWait).value();
  EXPECT_EQ(after.notify_put_batch - before.notify_put_batch, 1u);
  EXPECT_EQ(after.notify_put - before.notify_put, 0u);
  // That message: the commit request over the client's channel, naming the
  // objects written in place (the manifest and the value inline).
  EXPECT_EQ(store.admin().fast_path_stats().state_dict_puts, channel_commits + 1);
  EXPECT_EQ(staged_objects(store), 0u);

  auto got = store.state_dicts().get("ckpt").get(kWait);
  ASSERT_OK(got);
  EXPECT_TRUE(holds(*got, 1));
  ASSERT_EQ(got->size(), 5u);
  EXPECT_EQ(got->entries()[4].value->as_int64(), 41);

  // The staged tensor *is* the stored object, not a copy of it: a byte
  // changed through it after the commit (which users must not do) shows in
  // the next read.
  auto* big = static_cast<unsigned char*>(
      const_cast<void*>(staged->state_dict().find("model.embed.weight")->view.data()));
  big[5] = static_cast<unsigned char>(big[5] + 1);
  auto again = store.get("ckpt/model.embed.weight").get(kWait);
  ASSERT_OK(again);
  EXPECT_EQ(static_cast<const unsigned char*>(again->data())[5], big[5]);
}

// Each commit is one commit request over the client's channel for the
// version written in place, and one for the pointer's move (with the
// retirement of the version that falls out).
TEST(StagedStateDictTest, PublishedVersionsReuseTheRetiredOnesSegments) {
  auto store = Store::embedded().value();
  std::set<std::string> steady, later;
  for (int v = 1; v <= 6; ++v) {
    auto staged = store.state_dicts().stage_publish("weights", specs()).get(kWait);
    ASSERT_OK(staged);
    EXPECT_EQ(staged->key(), "weights/v" + std::to_string(v));
    fill(staged->state_dict(), v);
    const auto channel_puts = store.admin().fast_path_stats().puts;
    const auto channel_commits = store.admin().fast_path_stats().state_dict_puts;
    auto version = staged->commit().get(kWait);
    ASSERT_OK(version);
    EXPECT_EQ(*version, static_cast<std::uint64_t>(v));
    // The version, written in place: one commit over the channel; then the
    // pointer's move and the retirement: one more (counted as a put of one
    // key, the pointer).
    EXPECT_EQ(store.admin().fast_path_stats().state_dict_puts, channel_commits + 1);
    EXPECT_EQ(store.admin().fast_path_stats().puts, channel_puts + 1);
    auto names = transports::shm::own_segments();
    if (v == 3) steady = std::set<std::string>(names.begin(), names.end());
    if (v == 6) later = std::set<std::string>(names.begin(), names.end());
  }
  // From the third version on, the staging lands in the retired version's
  // segments: nothing new is allocated.
  EXPECT_FALSE(steady.empty());
  EXPECT_EQ(later, steady);
  EXPECT_FALSE(*store.exists("weights/v5").get(kWait));  // retired (keep = 1)

  StateDict dst;
  std::vector<Tensor> bufs;
  for (const auto& s : specs()) {
    bufs.push_back(Tensor::zeros(s.dtype, s.shape).value());
    ASSERT_OK(dst.insert(s.name, bufs.back()));
  }
  auto read = store.state_dicts().get_latest_into("weights", dst).get(kWait);
  ASSERT_OK(read);
  EXPECT_EQ(*read, 6u);
  EXPECT_TRUE(holds(dst, 6));
}

TEST(StagedStateDictTest, AbortAndDroppingGiveTheMemoryBack) {
  auto store = Store::embedded().value();
  {
    auto staged = store.state_dicts().stage("a", specs()).get(kWait);
    ASSERT_OK(staged);
    EXPECT_EQ(staged_objects(store), 2u);
    StagedStateDict copy = *staged;  // copies share one staging
    staged->abort();
    staged->abort();  // idempotent
    EXPECT_EQ(staged_objects(store), 0u);
    EXPECT_ERROR(copy.commit().get(kWait), Errc::invalid_argument, "aborted");
  }
  {
    auto staged = store.state_dicts().stage("b", specs()).get(kWait);
    ASSERT_OK(staged);
    EXPECT_EQ(staged_objects(store), 2u);
  }  // the last copy goes uncommitted
  // The future's copy, if the thread that completed it still held it, goes
  // with that thread's job: the memory comes back there.
  EXPECT_TRUE(testing::eventually([&] { return staged_objects(store) == 0; }));
  EXPECT_FALSE(*store.exists("a").get(kWait));
  EXPECT_FALSE(*store.exists("b").get(kWait));

  auto staged = store.state_dicts().stage("c", specs()).get(kWait);
  ASSERT_OK(staged);
  fill(staged->state_dict(), 2);
  ASSERT_OK(staged->commit().get(kWait));
  EXPECT_ERROR(staged->commit().get(kWait), Errc::invalid_argument, "committed already");
  staged->abort();  // nothing after a commit
  auto got = store.state_dicts().get("c").get(kWait);
  ASSERT_OK(got);
  EXPECT_TRUE(holds(*got, 2));
}

TEST(StagedStateDictTest, ATensorInsertedAfterStagingIsRefused) {
  auto store = Store::embedded().value();
  auto staged = store.state_dicts().stage("x", specs()).get(kWait);
  ASSERT_OK(staged);
  std::vector<float> extra(4, 1.0f);
  ASSERT_OK(staged->state_dict().insert("extra", TensorView::of(extra.data(), {4})));
  EXPECT_ERROR(staged->commit().get(kWait), Errc::invalid_argument,
               "tensor 'extra' was not staged");
  EXPECT_EQ(staged_objects(store), 0u);  // given back
  EXPECT_FALSE(*store.exists("x").get(kWait));
}

TEST(StagedStateDictTest, WithoutSharedMemoryTheTensorsArePrivateAndCommitPutsThem) {
  StoreOptions o;
  o.transport.shared_memory_volumes = false;  // the volume is out of this process's reach
  auto store = Store::embedded(o).value();
  auto staged = store.state_dicts().stage_publish("w", specs()).get(kWait);
  ASSERT_OK(staged);
  EXPECT_FALSE(staged->zero_copy());
  EXPECT_EQ(staged_objects(store), 0u);  // nothing at the volume until the commit
  fill(staged->state_dict(), 3);
  auto version = staged->commit().get(kWait);
  ASSERT_OK(version);
  EXPECT_EQ(*version, 1u);
  auto got = store.state_dicts().get("w/v1").get(kWait);
  ASSERT_OK(got);
  EXPECT_TRUE(holds(*got, 3));
}

TEST(StagedStateDictTest, BadSpecsAreRefusedBeforeAnythingIsStaged) {
  auto store = Store::embedded().value();
  auto stage = [&](std::vector<TensorSpec> s, StateDictPutOptions o = {}) {
    return store.state_dicts().stage("k", std::move(s), o).get(kWait);
  };
  EXPECT_ERROR(stage({{"", DType::float32, {1}}}), Errc::invalid_argument, "a tensor with no name");
  EXPECT_ERROR(stage({{"a", DType::float32, {1}}, {"a", DType::int8, {2}}}), Errc::invalid_argument,
               "name 'a' appears twice");
  EXPECT_ERROR(stage({{"a", DType::float32, {2, -1}}}), Errc::invalid_argument,
               "tensor 'a' has shape [2, -1]");
  EXPECT_ERROR(stage({{"a", DType::float32, {1LL << 40, 1LL << 40}}}), Errc::invalid_argument,
               "too many bytes");
  EXPECT_ERROR(stage({{"a", static_cast<DType>(200), {1}}}), Errc::invalid_argument,
               "no valid dtype");
  StateDictPutOptions cast;
  cast.transfer_dtype = DType::bfloat16;
  EXPECT_ERROR(stage(specs(), cast), Errc::invalid_argument, "transfer_dtype does not apply");
  EXPECT_ERROR(store.state_dicts().stage("", specs()).get(kWait), Errc::invalid_argument, "key");
  EXPECT_ERROR(store.state_dicts().stage_publish("p", specs(), 0).get(kWait),
               Errc::invalid_argument, "keep must be at least 1, got 0");
  StoreOptions small;
  small.limits.volume_capacity_bytes = 1 << 16;
  auto tiny = Store::embedded(small).value();
  EXPECT_ERROR(tiny.state_dicts().stage("big", specs()).get(kWait), Errc::out_of_capacity,
               "is full");
  EXPECT_EQ(staged_objects(store), 0u);
  EXPECT_EQ(staged_objects(tiny), 0u);
  StagedStateDict empty;
  EXPECT_ERROR(empty.commit().get(kWait), Errc::invalid_argument, "empty StagedStateDict");
  EXPECT_TRUE(empty.state_dict().empty());
  EXPECT_FALSE(empty.zero_copy());
}

TEST(StagedStateDictTest, AStagingMayOutliveItsStore) {
  StagedStateDict staged;
  {
    auto store = Store::embedded().value();
    staged = store.state_dicts().stage("k", specs()).get(kWait).value();
    fill(staged.state_dict(), 4);
    store.close();
    EXPECT_ERROR(store.state_dicts().stage("k2", specs()).get(kWait), Errc::shutdown, "closed");
  }
  // The store is gone: the commit fails cleanly and the handle goes
  // without touching the dead actors (no hang, no crash).
  EXPECT_ERROR(staged.commit().get(kWait), Errc::shutdown, "");
}

}  // namespace
}  // namespace meshstore
