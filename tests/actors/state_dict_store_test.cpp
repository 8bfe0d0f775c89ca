// State dicts through the store: put_state_dict, get_state_dict and
// get_state_dict_into, with the errors and races users rely on.

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "meshstore/store.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using testing::kWait;

class StateDictStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = std::make_unique<Store>(Store::embedded().value()); }
  Store& store() { return *store_; }
  std::unique_ptr<Store> store_;
};

TEST_F(StateDictStoreTest, RoundTripsTensorsValuesAndOddNames) {
  std::vector<float> w(300 * 257);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  std::vector<std::int32_t> ids(7, 3);
  StateDict sd;
  ASSERT_OK(
      sd.insert("model.layers.0.self_attn.q_proj.weight", TensorView::of(w.data(), {300, 257})));
  ASSERT_OK(sd.insert("a\\.dotted\\.key/with/slashes", TensorView::of(ids.data(), {7})));
  ASSERT_OK(sd.insert("step", Value::int64(1234)));
  ASSERT_OK(sd.insert("lr", Value::float64(3e-4)));
  ASSERT_OK(sd.insert("note", Value::string("héllo")));
  ASSERT_OK(sd.insert("blob", Value::bytes(std::string("\0\1", 2))));
  ASSERT_OK(sd.insert("done", Value::boolean(true)));
  ASSERT_OK(store().state_dicts().put("ckpt", sd).get(kWait));

  auto got = store().state_dicts().get("ckpt").get(kWait);
  ASSERT_OK(got);
  ASSERT_EQ(got->size(), sd.size());
  for (std::size_t i = 0; i < sd.size(); ++i) {
    const auto& a = sd.entries()[i];
    const auto& b = got->entries()[i];
    EXPECT_EQ(a.name, b.name);  // the writer's order
    ASSERT_EQ(a.is_tensor(), b.is_tensor()) << a.name;
    if (a.is_tensor()) {
      EXPECT_EQ(b.view.dtype(), a.view.dtype());
      EXPECT_EQ(b.view.shape(), a.view.shape());
      EXPECT_EQ(std::memcmp(b.view.data(), a.view.data(), a.view.nbytes()), 0) << a.name;
    } else {
      EXPECT_EQ(*b.value, *a.value) << a.name;
    }
  }
}

TEST_F(StateDictStoreTest, EveryDTypeAndEmptyStateDicts) {
  StateDict sd;
  std::vector<Tensor> keep;
  for (DType dt : all_dtypes()) {
    auto t = Tensor::empty(dt, {5, 3}).value();
    auto* p = static_cast<unsigned char*>(t.data());
    for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(i * 7 + 1);
    ASSERT_OK(sd.insert(std::string("t.") + std::string(dtype_name(dt)), t));
    keep.push_back(t);
  }
  ASSERT_OK(store().state_dicts().put("all", sd).get(kWait));
  auto got = store().state_dicts().get("all").get(kWait);
  ASSERT_OK(got);
  for (std::size_t i = 0; i < keep.size(); ++i) {
    EXPECT_EQ(got->entries()[i].view.dtype(), keep[i].dtype());
    EXPECT_EQ(std::memcmp(got->entries()[i].view.data(), keep[i].data(), keep[i].nbytes()), 0);
  }
  ASSERT_OK(store().state_dicts().put("empty", StateDict()).get(kWait));
  auto empty = store().state_dicts().get("empty").get(kWait);
  ASSERT_OK(empty);
  EXPECT_TRUE(empty->empty());
  EXPECT_ERROR(store().state_dicts().get("none").get(kWait), Errc::not_found,
               "no state dict 'none'");
  float x = 1;
  ASSERT_OK(store().put("plain", TensorView::of(&x, {})).get(kWait));
  EXPECT_ERROR(store().state_dicts().get("plain").get(kWait), Errc::wrong_kind, "");
}

TEST_F(StateDictStoreTest, GetIntoFillsTheCallersBuffersInPlace) {
  std::vector<float> a(1 << 16, 1.0f), b(100, 2.0f);
  StateDict src;
  ASSERT_OK(src.insert("a", TensorView::of(a.data(), {1 << 16})));
  ASSERT_OK(src.insert("b", TensorView::of(b.data(), {10, 10})));
  ASSERT_OK(src.insert("step", Value::int64(9)));
  ASSERT_OK(store().state_dicts().put("sd", src).get(kWait));

  std::vector<float> a2(1 << 16, 0.0f), b2(100, 0.0f);
  StateDict dst;
  ASSERT_OK(dst.insert("b", TensorView::of(b2.data(), {10, 10})));  // any order
  ASSERT_OK(dst.insert("a", TensorView::of(a2.data(), {1 << 16})));
  ASSERT_OK(dst.insert("step", Value::int64(0)));
  ASSERT_OK(store().state_dicts().get_into("sd", dst).get(kWait));
  EXPECT_EQ(a2, a);
  EXPECT_EQ(b2, b);
  EXPECT_EQ(dst.find("a")->view.data(), static_cast<void*>(a2.data()));  // in place
  EXPECT_EQ(*dst.find("step")->value, Value::int64(9));
}

TEST_F(StateDictStoreTest, MismatchesAreListedAndTheDestinationIsUntouched) {
  std::vector<float> a(64, 1.0f), b(64, 2.0f), c(64, 3.0f);
  StateDict src;
  ASSERT_OK(src.insert("a", TensorView::of(a.data(), {64})));
  ASSERT_OK(src.insert("b", TensorView::of(b.data(), {8, 8})));
  ASSERT_OK(src.insert("c", TensorView::of(c.data(), {64})));
  ASSERT_OK(store().state_dicts().put("sd", src).get(kWait));

  std::vector<float> a2(64, 0.0f), b2(64, 0.0f);
  std::vector<double> c2(64, 0.0);
  StateDict dst;
  ASSERT_OK(dst.insert("a", TensorView::of(a2.data(), {64})));
  ASSERT_OK(dst.insert("b", TensorView::of(b2.data(), {64})));    // shape differs
  ASSERT_OK(dst.insert("zzz", TensorView::of(a2.data(), {64})));  // extra, "c" missing
  auto r = store().state_dicts().get_into("sd", dst).get(kWait);
  EXPECT_ERROR(r, Errc::shape_mismatch, "missing 'c'");
  EXPECT_ERROR(r, Errc::shape_mismatch, "extra 'zzz'");
  EXPECT_ERROR(r, Errc::shape_mismatch, "'b (stored [8, 8], destination [64])'");
  EXPECT_EQ(a2, std::vector<float>(64, 0.0f)) << "a failed get_state_dict_into wrote bytes";

  StateDict wrong_dtype;
  ASSERT_OK(wrong_dtype.insert("a", TensorView::of(a2.data(), {64})));
  ASSERT_OK(wrong_dtype.insert("b", TensorView::of(b2.data(), {8, 8})));
  ASSERT_OK(wrong_dtype.insert("c", TensorView::of(c2.data(), {64})));
  EXPECT_ERROR(store().state_dicts().get_into("sd", wrong_dtype).get(kWait), Errc::dtype_mismatch,
               "'c (stored float32, destination float64)'");
  EXPECT_EQ(a2, std::vector<float>(64, 0.0f));
}

TEST_F(StateDictStoreTest, ANewVersionWithFewerNamesRemovesTheRest) {
  std::vector<float> w(1000, 1.0f);
  StateDict v1;
  ASSERT_OK(v1.insert("keep", TensorView::of(w.data(), {1000})));
  ASSERT_OK(v1.insert("drop", TensorView::of(w.data(), {1000})));
  StateDictPutOptions unpacked;
  unpacked.pack_max_tensor_bytes = 0;  // one key per tensor, to see them
  ASSERT_OK(store().state_dicts().put("m", v1, unpacked).get(kWait));
  StateDict v2;
  ASSERT_OK(v2.insert("keep", TensorView::of(w.data(), {1000})));
  ASSERT_OK(store().state_dicts().put("m", v2, unpacked).get(kWait));
  EXPECT_EQ(*store().keys("m/").get(kWait), std::vector<std::string>{"m/keep"});
  // Packed again: the per-tensor keys go, the blob comes.
  ASSERT_OK(store().state_dicts().put("m", v2).get(kWait));
  EXPECT_TRUE(store().keys("m/").get(kWait)->empty());
  EXPECT_TRUE(*store().exists("m#packed").get(kWait));
  auto got = store().state_dicts().get("m").get(kWait);
  ASSERT_OK(got);
  EXPECT_EQ(got->size(), 1u);
}

// A reader racing a writer of the next version sees one whole version.
TEST_F(StateDictStoreTest, ReadersNeverSeeAMixOfTwoVersions) {
  constexpr int kTensors = 8;
  constexpr int kVersions = 30;
  std::vector<std::vector<float>> bufs(kTensors, std::vector<float>(20000));
  auto publish = [&](int v) {
    StateDict sd;
    for (int t = 0; t < kTensors; ++t) {
      std::fill(bufs[t].begin(), bufs[t].end(), static_cast<float>(v));
      EXPECT_OK(sd.insert("w" + std::to_string(t), TensorView::of(bufs[t].data(), {20000})));
    }
    EXPECT_OK(sd.insert("version", Value::int64(v)));
    return store().state_dicts().put("live", sd).get(kWait);
  };
  ASSERT_OK(publish(0));
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int v = 1; v <= kVersions; ++v) EXPECT_OK(publish(v));
    done = true;
  });
  int reads = 0;
  // In a lambda, so a failed ASSERT returns here and the writer is joined.
  [&] {
    while (!done || reads < 5) {
      auto got = store().state_dicts().get("live").get(kWait);
      ASSERT_OK(got);
      const auto version = static_cast<float>(got->find("version")->value->as_int64());
      for (const auto& e : got->entries()) {
        if (!e.is_tensor()) continue;
        const float* p = static_cast<const float*>(e.view.data());
        ASSERT_EQ(p[0], version) << e.name << " is from another version";
        ASSERT_EQ(p[19999], version) << e.name;
      }
      ++reads;
      if (reads > 2000) break;  // bounded
    }
  }();
  writer.join();
}

TEST_F(StateDictStoreTest, RemovingAVersionWhileAReaderReadsIt) {
  std::vector<float> w(1 << 16, 5.0f);
  StateDict v0;
  for (int t = 0; t < 4; ++t)
    ASSERT_OK(v0.insert("w" + std::to_string(t), TensorView::of(w.data(), {1 << 16})));
  for (int round = 0; round < 20; ++round) {
    ASSERT_OK(store().state_dicts().put("v0", v0).get(kWait));
    auto reading = store().state_dicts().get("v0");
    std::vector<std::string> keys{"v0"};
    for (int t = 0; t < 4; ++t) keys.push_back("v0/w" + std::to_string(t));
    ASSERT_OK(store().remove_batch(keys).get(kWait));
    auto got = reading.get(kWait);
    // Whole or not at all.
    if (got.ok()) {
      ASSERT_EQ(got->size(), 4u);
      for (const auto& e : got->entries()) {
        EXPECT_EQ(static_cast<const float*>(e.view.data())[(1 << 16) - 1], 5.0f);
      }
    } else {
      EXPECT_TRUE(got.status().code() == Errc::not_found || got.status().code() == Errc::wrong_kind)
          << got.status().to_string();
    }
  }
}

TEST_F(StateDictStoreTest, PublishedVersionsReuseTheRetiredOnesMemory) {
  constexpr int kTensors = 4;
  std::vector<std::vector<float>> w(kTensors, std::vector<float>(1 << 18));
  StateDict sd;
  for (int t = 0; t < kTensors; ++t) {
    ASSERT_OK(sd.insert("layer" + std::to_string(t), TensorView::of(w[t].data(), {1 << 18})));
  }
  ASSERT_OK(sd.insert("step", Value::int64(0)));
  std::set<std::string> steady, later;
  for (std::uint64_t v = 1; v <= 10; ++v) {
    for (auto& buf : w) std::fill(buf.begin(), buf.end(), static_cast<float>(v));
    auto published =
        store().state_dicts().publish("weights", sd, PublishOptions::by_copy()).get(kWait);
    ASSERT_OK(published);
    ASSERT_EQ(published->version(), v);
    auto names = transports::shm::own_segments();
    if (v == 3) steady = std::set<std::string>(names.begin(), names.end());
    if (v == 9) later = std::set<std::string>(names.begin(), names.end());
  }
  // From the third version on, each one lands in the segments a retired
  // version left: the very same segments, nothing new is allocated (until
  // the pointer's text grows from "9" to "10": a different size).
  EXPECT_FALSE(steady.empty());
  EXPECT_EQ(later, steady);
  EXPECT_EQ(*store().state_dicts().latest("weights").get(kWait), 10u);
  EXPECT_FALSE(*store().exists("weights/v9").get(kWait));  // retired (keep = 1)

  std::vector<std::vector<float>> got(kTensors, std::vector<float>(1 << 18, 0.0f));
  StateDict dst;
  for (int t = 0; t < kTensors; ++t) {
    ASSERT_OK(dst.insert("layer" + std::to_string(t), TensorView::of(got[t].data(), {1 << 18})));
  }
  ASSERT_OK(dst.insert("step", Value::int64(-1)));
  auto read = store().state_dicts().get_latest_into("weights", dst).get(kWait);
  ASSERT_OK(read);
  EXPECT_EQ(*read, 10u);
  EXPECT_EQ(got[3][(1 << 18) - 1], 10.0f);
}

TEST_F(StateDictStoreTest, LatestPointerErrors) {
  StateDict sd;
  EXPECT_ERROR(store().state_dicts().publish("p", sd, PublishOptions::by_copy(0)).get(kWait),
               Errc::invalid_argument, "keep");
  EXPECT_EQ(*store().state_dicts().latest("p").get(kWait), 0u);
  EXPECT_ERROR(store().state_dicts().get_latest_into("p", sd).get(kWait), Errc::not_found,
               "nothing published under 'p'");
  ASSERT_OK(store().put_object("notapointer", "hello").get(kWait));
  EXPECT_ERROR(store().state_dicts().latest("notapointer").get(kWait), Errc::wrong_kind,
               "not a version pointer");
}

// Two writers publishing under one prefix at once: every publish either
// gets a version of its own, which holds exactly its bytes, or fails with
// Errc::conflict and leaves nothing behind. No version is written twice
// (silently replacing another writer's) and the pointer never goes back.
TEST_F(StateDictStoreTest, RacingWritersOnOnePrefixNeverLoseOrMixAVersion) {
  constexpr int kPublishes = 40;
  constexpr int kKeep = 1000;  // keep every version, to check each one
  struct Outcome {
    int writer = 0, round = 0;
    std::uint64_t version = 0;
  };
  std::mutex mu;
  std::vector<Outcome> won;
  std::atomic<int> conflicts{0};
  std::atomic<int> other_errors{0};
  auto writer = [&](int id) {
    std::vector<std::int32_t> w(20000);
    for (int r = 0; r < kPublishes; ++r) {
      std::fill(w.begin(), w.end(), id * 1000 + r);
      StateDict sd;
      ASSERT_OK(sd.insert("w", TensorView::of(w.data(), {20000})));
      ASSERT_OK(sd.insert("writer", Value::int64(id)));
      auto v = store().state_dicts().publish("race", sd, PublishOptions::by_copy(kKeep)).get(kWait);
      if (v.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        won.push_back({id, r, v->version()});
      } else if (v.status().code() == Errc::conflict) {
        EXPECT_NE(v.status().message().find("another writer published under 'race'"),
                  std::string::npos)
            << v.status().to_string();
        ++conflicts;
      } else {
        ADD_FAILURE() << v.status().to_string();
        ++other_errors;
      }
    }
  };
  std::thread a(writer, 1), b(writer, 2);
  a.join();
  b.join();
  EXPECT_EQ(other_errors.load(), 0);
  ASSERT_FALSE(won.empty());
  EXPECT_EQ(won.size() + static_cast<std::size_t>(conflicts.load()), 2u * kPublishes);
  std::set<std::uint64_t> versions;
  std::uint64_t newest = 0;
  for (const auto& o : won) {
    EXPECT_TRUE(versions.insert(o.version).second) << "version " << o.version << " twice";
    newest = std::max(newest, o.version);
    // The version holds the bytes of the publish that was told it won it.
    auto got = store().state_dicts().get("race/v" + std::to_string(o.version)).get(kWait);
    ASSERT_OK(got);
    EXPECT_EQ(got->find("writer")->value->as_int64(), o.writer);
    const auto* w = got->find("w")->owned.data_as<std::int32_t>();
    EXPECT_EQ(w[0], o.writer * 1000 + o.round);
    EXPECT_EQ(w[19999], o.writer * 1000 + o.round);
  }
  EXPECT_EQ(*store().state_dicts().latest("race").get(kWait), newest);
  // A lost publish left no version behind: the stored versions are the won ones.
  std::set<std::uint64_t> stored;
  auto keys = store().keys("race").get(kWait);
  ASSERT_OK(keys);
  for (const auto& k : *keys) {
    if (k.rfind("race/v", 0) != 0) continue;
    const auto rest = k.substr(6);
    if (rest.find_first_not_of("0123456789") == std::string::npos) stored.insert(std::stoull(rest));
  }
  EXPECT_EQ(stored, versions);
}

// The pointer moves by compare-and-set: a writer whose version was staged
// before others published (and retired it) cannot move the pointer back.
TEST_F(StateDictStoreTest, AStaleWriterCannotMoveThePointerBack) {
  std::vector<float> w(1024, 1.0f);
  StateDict sd;
  ASSERT_OK(sd.insert("w", TensorView::of(w.data(), {1024})));
  auto stale = store().state_dicts().stage_publish("p", {{"w", DType::float32, {1024}}}).get(kWait);
  ASSERT_OK(stale);
  EXPECT_EQ(stale->key(), "p/v1");
  // Another writer publishes v1 and v2 meanwhile (keep 1: v1 is retired).
  ASSERT_EQ(store().state_dicts().publish("p", sd, PublishOptions::by_copy()).get(kWait)->version(),
            1u);
  ASSERT_EQ(store().state_dicts().publish("p", sd, PublishOptions::by_copy()).get(kWait)->version(),
            2u);
  // v1's name is free again, so the stale commit stores it; then the
  // pointer, read as absent, has moved: the publish is withdrawn. Two
  // commits asked of the controller (the version, the refused move), no
  // third through the actors.
  const auto before = store().admin().controller_counters().get(kWait)->notify_put_batch;
  EXPECT_ERROR(stale->commit().get(kWait), Errc::conflict,
               "another writer published under 'p' at the same time, so version 1 was not "
               "published");
  EXPECT_EQ(store().admin().controller_counters().get(kWait)->notify_put_batch, before + 2);
  EXPECT_EQ(*store().state_dicts().latest("p").get(kWait), 2u);
  EXPECT_FALSE(*store().exists("p/v1").get(kWait));
  // And a version both writers aim at goes to the first to commit.
  auto first = store().state_dicts().stage_publish("q", {{"w", DType::float32, {1024}}}).get(kWait);
  auto second =
      store().state_dicts().stage_publish("q", {{"w", DType::float32, {1024}}}).get(kWait);
  ASSERT_OK(first);
  ASSERT_OK(second);
  for (auto& e : first->state_dict().entries())
    std::fill_n(static_cast<float*>(e.view.data()), 1024, 1.0f);
  for (auto& e : second->state_dict().entries())
    std::fill_n(static_cast<float*>(e.view.data()), 1024, 2.0f);
  EXPECT_EQ(*first->commit().get(kWait), 1u);
  // Refused over the channel, which gives the loser's objects back: one
  // commit asked of the controller, not a second through the actors.
  const auto asked = store().admin().controller_counters().get(kWait)->notify_put_batch;
  EXPECT_ERROR(second->commit().get(kWait), Errc::conflict, "version 1 was not published");
  EXPECT_EQ(store().admin().controller_counters().get(kWait)->notify_put_batch, asked + 1);
  auto got = store().state_dicts().get("q/v1").get(kWait);
  ASSERT_OK(got);
  EXPECT_EQ(got->find("w")->owned.data_as<float>()[0], 1.0f);
  // The loser's memory went back: only q/v1's objects are held.
  auto stats = store().admin().stats().get(kWait);
  ASSERT_OK(stats);
  EXPECT_EQ((*stats)[0].staged, 0u);
}

// Workers pulling the newest version while the trainer publishes get one
// whole version each time, whichever it is.
TEST_F(StateDictStoreTest, ReadersFollowTheLatestPointerWhileAWriterPublishes) {
  constexpr int kTensors = 4;
  std::vector<std::vector<float>> w(kTensors, std::vector<float>(50000));
  StateDict sd;
  for (int t = 0; t < kTensors; ++t) {
    ASSERT_OK(sd.insert("w" + std::to_string(t), TensorView::of(w[t].data(), {50000})));
  }
  auto fill = [&](int v) {
    for (auto& buf : w) std::fill(buf.begin(), buf.end(), static_cast<float>(v));
  };
  fill(1);
  ASSERT_OK(store().state_dicts().publish("live", sd, PublishOptions::by_copy()).get(kWait));
  std::atomic<bool> done{false};
  std::thread trainer([&] {
    for (int v = 2; v <= 25; ++v) {
      fill(v);
      EXPECT_OK(store().state_dicts().publish("live", sd, PublishOptions::by_copy()).get(kWait));
    }
    done = true;
  });
  std::vector<std::vector<float>> got(kTensors, std::vector<float>(50000));
  StateDict dst;
  for (int t = 0; t < kTensors; ++t) {
    ASSERT_OK(dst.insert("w" + std::to_string(t), TensorView::of(got[t].data(), {50000})));
  }
  std::uint64_t last = 0;
  [&] {
    for (int i = 0; i < 2000 && !(done && last == 25); ++i) {
      auto v = store().state_dicts().get_latest_into("live", dst).get(kWait);
      ASSERT_OK(v);
      EXPECT_GE(*v, last);  // never goes back
      last = *v;
      for (const auto& g : got) {
        ASSERT_EQ(g.front(), static_cast<float>(*v));
        ASSERT_EQ(g.back(), static_cast<float>(*v));
      }
    }
  }();
  trainer.join();
}

TEST_F(StateDictStoreTest, APointerThisClientMovedIsReadWithoutARequestWhileItIsCurrent) {
  // The pointer's record names its version and its object: while that
  // object is the current one (its tag names it), a read asks nobody. A
  // publish clears the old pointer's tag before it returns, and the cache
  // never takes an older record than it holds, so no read goes back a
  // version (ReadersFollowTheLatestPointerWhileAWriterPublishes races them).
  float x = 1;
  StateDict sd;
  ASSERT_OK(sd.insert("x", TensorView::of(&x, {})));
  ASSERT_OK(store().state_dicts().publish("p", sd, PublishOptions::by_copy()).get(kWait));
  // The ring to the volume opens in the background once the client reached
  // it: a read of the pointer's tag needs it.
  ASSERT_TRUE(testing::eventually([&] { return store().admin().fast_path_stats().rings >= 1; }));
  auto locates = [&] { return store().admin().controller_counters().get(kWait)->locate; };
  const auto before = locates();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*store().state_dicts().latest("p").get(kWait), 1u);
  EXPECT_EQ(locates(), before);
  x = 2;
  ASSERT_OK(store().state_dicts().publish("p", sd, PublishOptions::by_copy()).get(kWait));
  float got = 0;
  StateDict dst;
  ASSERT_OK(dst.insert("x", TensorView::of(&got, {})));
  const auto again = locates();
  EXPECT_EQ(*store().state_dicts().get_latest_into("p", dst).get(kWait), 2u);
  EXPECT_EQ(got, 2.0f);
  EXPECT_EQ(*store().state_dicts().latest("p").get(kWait), 2u);
  EXPECT_EQ(locates(), again);
}

TEST_F(StateDictStoreTest, PackedModeMovesSmallTensorsAsOneBlob) {
  std::vector<float> big(1 << 16, 7.0f);  // 256 KiB: its own object
  std::vector<std::int32_t> small(3 * 5);
  for (std::size_t i = 0; i < small.size(); ++i) small[i] = static_cast<std::int32_t>(i);
  auto strided = TensorView::of(small.data(), {3, 5}).transpose(0, 1).value();  // 5 x 3
  std::uint16_t scalar = 0x3f80;
  for (std::uint64_t pack : {std::uint64_t{0}, std::uint64_t{64} << 10, ~std::uint64_t{0}}) {
    StateDict sd;
    ASSERT_OK(sd.insert("big", TensorView::of(big.data(), {1 << 16})));
    ASSERT_OK(sd.insert("strided", strided));
    ASSERT_OK(sd.insert("scalar", TensorView(&scalar, DType::bfloat16, {})));
    ASSERT_OK(sd.insert("empty", TensorView(nullptr, DType::float32, {0, 4})));
    ASSERT_OK(sd.insert("step", Value::int64(3)));
    StateDictPutOptions options;
    options.pack_max_tensor_bytes = pack;
    const std::string key = "packed" + std::to_string(pack & 0xffff);
    ASSERT_OK(store().state_dicts().put(key, sd, options).get(kWait)) << pack;
    // Packed entries have no key of their own; the blob holds them.
    EXPECT_EQ(*store().exists(key + "/strided").get(kWait), pack == 0) << pack;
    EXPECT_EQ(*store().exists(key + "#packed").get(kWait), pack != 0) << pack;

    auto got = store().state_dicts().get(key).get(kWait);
    ASSERT_OK(got) << pack;
    const auto* s = got->find("strided");
    ASSERT_EQ(s->view.shape(), (Shape{5, 3}));
    EXPECT_EQ(static_cast<const std::int32_t*>(s->view.data())[1],
              small[5]);  // [0][1] of the transpose
    EXPECT_EQ(*static_cast<const std::uint16_t*>(got->find("scalar")->view.data()), scalar);
    EXPECT_EQ(got->find("empty")->view.shape(), (Shape{0, 4}));
    EXPECT_EQ(static_cast<const float*>(got->find("big")->view.data())[(1 << 16) - 1], 7.0f);
    if (pack == ~std::uint64_t{0}) {
      // Everything in one allocation: the tensors are views into it.
      const auto* a = static_cast<const std::byte*>(got->find("big")->view.data());
      const auto* b = static_cast<const std::byte*>(s->view.data());
      EXPECT_LT(static_cast<std::size_t>(b > a ? b - a : a - b), std::size_t{1} << 20);
    }

    std::vector<float> big2(1 << 16, 0.0f);
    std::vector<std::int32_t> small2(15, -1);
    std::uint16_t scalar2 = 0;
    StateDict into;
    ASSERT_OK(into.insert("big", TensorView::of(big2.data(), {1 << 16})));
    ASSERT_OK(
        into.insert("strided", TensorView::of(small2.data(), {3, 5}).transpose(0, 1).value()));
    ASSERT_OK(into.insert("scalar", TensorView(&scalar2, DType::bfloat16, {})));
    ASSERT_OK(into.insert("empty", TensorView(nullptr, DType::float32, {0, 4})));
    ASSERT_OK(into.insert("step", Value::int64(0)));
    ASSERT_OK(store().state_dicts().get_into(key, into).get(kWait)) << pack;
    EXPECT_EQ(small2, small) << pack;
    EXPECT_EQ(big2, big) << pack;
    EXPECT_EQ(scalar2, scalar);
    EXPECT_EQ(*into.find("step")->value, Value::int64(3));
  }
}

TEST_F(StateDictStoreTest, AWholeStateDictCommitsWithOneControlMessage) {
  constexpr int kTensors = 100;
  std::vector<std::vector<float>> w(kTensors, std::vector<float>(20000, 1.0f));  // 80 KB each
  StateDict sd;
  for (int t = 0; t < kTensors; ++t) {
    ASSERT_OK(sd.insert("layer." + std::to_string(t), TensorView::of(w[t].data(), {20000})));
  }
  StateDictPutOptions unpacked;
  unpacked.pack_max_tensor_bytes = 0;  // 100 objects, moved in parallel
  for (const auto& options : {unpacked, StateDictPutOptions{}}) {
    auto before = store().admin().controller_counters().get(kWait);
    ASSERT_OK(before);
    ASSERT_OK(store().state_dicts().put("sd", sd, options).get(kWait));
    auto after = store().admin().controller_counters().get(kWait);
    ASSERT_OK(after);
    EXPECT_EQ(after->notify_put_batch - before->notify_put_batch, 1u);
    EXPECT_EQ(after->notify_put - before->notify_put, 0u);
  }
}

TEST_F(StateDictStoreTest, Float32IsPublishedAsBFloat16RoundedToNearestEven) {
  std::vector<float> big(1 << 15), small(100);
  std::mt19937 gen(5);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (auto& x : big) x = dist(gen);
  for (auto& x : small) x = dist(gen);
  std::vector<std::int32_t> ids(10, 7);
  StateDict sd;
  ASSERT_OK(sd.insert("big", TensorView::of(big.data(), {1 << 15})));     // its own object
  ASSERT_OK(sd.insert("small", TensorView::of(small.data(), {10, 10})));  // packed
  ASSERT_OK(sd.insert("ids", TensorView::of(ids.data(), {10})));          // not a float: as is
  StateDictPutOptions options;
  options.transfer_dtype = DType::bfloat16;
  ASSERT_OK(store().state_dicts().put("cast", sd, options).get(kWait));
  auto got = store().state_dicts().get("cast").get(kWait);
  ASSERT_OK(got);
  for (const auto& [name, src] : {std::make_pair("big", &big), std::make_pair("small", &small)}) {
    const auto& e = *got->find(name);
    ASSERT_EQ(e.view.dtype(), DType::bfloat16) << name;
    const auto* h = static_cast<const std::uint16_t*>(e.view.data());
    for (std::size_t i = 0; i < src->size(); ++i) {
      ASSERT_EQ(h[i], float_to_bfloat16((*src)[i])) << name << "[" << i << "]";
    }
  }
  EXPECT_EQ(got->find("ids")->view.dtype(), DType::int32);
  // A float32 destination is told the stored dtype.
  std::vector<float> dst(1 << 15);
  StateDict wrong;
  ASSERT_OK(wrong.insert("big", TensorView::of(dst.data(), {1 << 15})));
  ASSERT_OK(wrong.insert("small", TensorView::of(small.data(), {10, 10})));
  ASSERT_OK(wrong.insert("ids", TensorView::of(ids.data(), {10})));
  EXPECT_ERROR(store().state_dicts().get_into("cast", wrong).get(kWait), Errc::dtype_mismatch,
               "stored bfloat16, destination float32");
  options.transfer_dtype = DType::int8;
  EXPECT_ERROR(store().state_dicts().put("cast2", sd, options).get(kWait), Errc::invalid_argument,
               "transfer_dtype");
}

TEST_F(StateDictStoreTest, ReplacingAStateDictLeavesOtherKeysUnderItsName) {
  std::vector<float> w(1 << 15, 1.0f);  // 128 KiB: its own key
  float x = 2;
  ASSERT_OK(store().put("m/own", TensorView::of(&x, {})).get(kWait));  // not part of the dict
  StateDict sd;
  ASSERT_OK(sd.insert("w", TensorView::of(w.data(), {1 << 15})));
  ASSERT_OK(store()
                .state_dicts()
                .publish("m", sd, PublishOptions::by_copy())
                .get(kWait));                                // m/v1, pointer at m
  ASSERT_OK(store().state_dicts().put("m", sd).get(kWait));  // replaces the pointer object m
  ASSERT_OK(store().state_dicts().put("m", sd).get(kWait));  // and itself
  EXPECT_TRUE(*store().exists("m/own").get(kWait));
  EXPECT_TRUE(*store().exists("m/v1/w").get(kWait));  // the published version survives
  EXPECT_TRUE(*store().exists("m/w").get(kWait));
  StateDict other;
  ASSERT_OK(other.insert("w2", TensorView::of(w.data(), {1 << 15})));
  ASSERT_OK(store().state_dicts().put("m", other).get(kWait));
  EXPECT_FALSE(*store().exists("m/w").get(kWait));  // the dict's own stale entry went
  EXPECT_TRUE(*store().exists("m/own").get(kWait));
  EXPECT_TRUE(*store().exists("m/v1").get(kWait));
}

// remove of a state dict's key takes the whole state dict: its packed
// buckets and the entries stored alone go with the manifest, their memory
// goes back, and keys put on their own under its name stay.
TEST_F(StateDictStoreTest, RemovingAStateDictRemovesEverythingWrittenWithIt) {
  std::vector<float> big(1 << 15, 1.0f);  // 128 KiB: a key of its own
  std::vector<float> small(16, 2.0f);     // packed
  float x = 3;
  ASSERT_OK(store().put("m/own", TensorView::of(&x, {})).get(kWait));
  auto objects = [&] {
    auto stats = store().admin().stats().get(kWait);
    EXPECT_OK(stats);
    std::uint64_t n = 0;
    if (stats.ok()) {
      for (const auto& v : *stats) n += v.objects;
    }
    return n;
  };
  const std::uint64_t before = objects();
  StateDict sd;
  ASSERT_OK(sd.insert("big", TensorView::of(big.data(), {1 << 15})));
  ASSERT_OK(sd.insert("small", TensorView::of(small.data(), {16})));
  ASSERT_OK(sd.insert("step", Value::int64(7)));
  for (const char* key : {"m", "a", "b"}) ASSERT_OK(store().state_dicts().put(key, sd).get(kWait));
  EXPECT_TRUE(*store().exists("m#packed").get(kWait));
  EXPECT_TRUE(*store().exists("m/big").get(kWait));

  ASSERT_OK(store().remove("m").get(kWait));
  EXPECT_EQ(*store().keys("m").get(kWait), std::vector<std::string>{"m/own"});
  EXPECT_FALSE(*store().exists("m#packed").get(kWait));
  EXPECT_EQ(store().state_dicts().get("m").get(kWait).status().code(), Errc::not_found);

  // remove_batch counts the keys it was given, not what went with them.
  auto removed = store().remove_batch({"a", "b", "nothing"}).get(kWait);
  ASSERT_OK(removed);
  EXPECT_EQ(*removed, 2u);
  EXPECT_TRUE(store().keys("a").get(kWait)->empty());
  EXPECT_TRUE(store().keys("b").get(kWait)->empty());
  // Every object but m/own's is freed at its volume.
  EXPECT_TRUE(testing::eventually([&] { return objects() == before; })) << objects();

  // A published version is a state dict too; its pointer and the other
  // versions stay.
  ASSERT_OK(store().state_dicts().publish("p", sd, PublishOptions::by_copy(2)).get(kWait));
  ASSERT_OK(store().state_dicts().publish("p", sd, PublishOptions::by_copy(2)).get(kWait));
  ASSERT_OK(store().remove("p/v2").get(kWait));
  EXPECT_FALSE(*store().exists("p/v2/big").get(kWait));
  EXPECT_TRUE(*store().exists("p/v1/big").get(kWait));
  EXPECT_EQ(*store().state_dicts().latest("p").get(kWait), 2u);

  // The pointer takes every version along, lent ones too: their loan ends.
  ASSERT_OK(store().state_dicts().publish("p", sd, PublishOptions::by_copy(2)).get(kWait));  // p/v3
  PublishOptions direct;
  direct.mode = PublishMode::direct;
  direct.keep = 3;
  auto lent = store().state_dicts().publish("p", sd, direct).get(kWait);  // p/v4
  ASSERT_OK(lent);
  ASSERT_EQ(lent->mode(), PublishMode::direct);
  ASSERT_OK(store().put("p/vintage", TensorView::of(&x, {})).get(kWait));  // not a version
  ASSERT_OK(store().remove("p").get(kWait));
  EXPECT_EQ(*store().keys("p").get(kWait), std::vector<std::string>{"p/vintage"});
  EXPECT_OK(lent->returned().get(kWait));
  EXPECT_TRUE(testing::eventually([&] { return objects() == before + 1; })) << objects();
}

}  // namespace
}  // namespace meshstore

namespace meshstore {
namespace {

// Reads plan with the manifest they read last for the same key (or prefix);
// a layout changed since must still be read right, and a destination that
// fits only the old layout must be refused against the new one.
TEST_F(StateDictStoreTest, ACachedLayoutNeverMisleadsALaterRead) {
  std::vector<float> a(1000, 1.0f), b(3000, 2.0f);
  StateDict one, two;
  ASSERT_OK(one.insert("w", TensorView::of(a.data(), {1000})));
  ASSERT_OK(two.insert("w", TensorView::of(b.data(), {3000})));
  ASSERT_OK(two.insert("extra", Value::int64(5)));
  std::vector<float> got_a(1000), got_b(3000);
  StateDict dst_one, dst_two;
  ASSERT_OK(dst_one.insert("w", TensorView::of(got_a.data(), {1000})));
  ASSERT_OK(dst_two.insert("w", TensorView::of(got_b.data(), {3000})));
  ASSERT_OK(dst_two.insert("extra", Value::int64(0)));

  ASSERT_OK(store().state_dicts().put("sd", one).get(kWait));
  ASSERT_OK(store().state_dicts().get_into("sd", dst_one).get(kWait));  // caches layout one
  ASSERT_OK(store().state_dicts().put("sd", two).get(kWait));
  EXPECT_ERROR(store().state_dicts().get_into("sd", dst_one).get(kWait), Errc::shape_mismatch,
               "missing 'extra'; mismatched 'w (stored [3000], destination [1000])'");
  ASSERT_OK(store().state_dicts().get_into("sd", dst_two).get(kWait));
  EXPECT_EQ(got_b[2999], 2.0f);
  EXPECT_EQ(dst_two.find("extra")->value->as_int64(), 5);
  ASSERT_OK(store().remove_batch({"sd", "sd/w", "sd/extra"}).get(kWait));
  EXPECT_ERROR(store().state_dicts().get_into("sd", dst_two).get(kWait), Errc::not_found,
               "no state dict 'sd'");

  // Versions: the layout cached for the prefix, then a new layout.
  ASSERT_OK(store().state_dicts().publish("p", one, PublishOptions::by_copy()).get(kWait));
  EXPECT_EQ(*store().state_dicts().get_latest_into("p", dst_one).get(kWait), 1u);
  ASSERT_OK(store().state_dicts().publish("p", two, PublishOptions::by_copy()).get(kWait));
  EXPECT_EQ(*store().state_dicts().get_latest_into("p", dst_two).get(kWait), 2u);
  std::fill(b.begin(), b.end(), 3.0f);
  ASSERT_OK(store().state_dicts().publish("p", two, PublishOptions::by_copy()).get(kWait));
  EXPECT_EQ(*store().state_dicts().get_latest_into("p", dst_two).get(kWait), 3u);
  EXPECT_EQ(got_b[0], 3.0f);
}

}  // namespace
}  // namespace meshstore

namespace meshstore {
namespace {

// Keys of the packed buckets of state dict `key`.
std::vector<std::string> buckets_of(Store& store, const std::string& key) {
  std::vector<std::string> out;
  const auto keys = store.keys("").get(kWait).value();
  for (const auto& k : keys) {
    if (k.rfind(key + "#packed", 0) == 0) out.push_back(k);
  }
  return out;
}

TEST_F(StateDictStoreTest, PackedBucketsOfAConfigurableSize) {
  // 50 tensors of 4000 bytes and one of 40,000: packed (under 64 KiB) into
  // buckets of at most 16 KiB; the big one takes a bucket of its own.
  std::vector<std::vector<float>> w(50, std::vector<float>(1000));
  std::vector<float> big(10000);
  StateDict sd;
  for (std::size_t t = 0; t < w.size(); ++t) {
    for (std::size_t i = 0; i < w[t].size(); ++i) w[t][i] = static_cast<float>(t * 1000 + i);
    ASSERT_OK(sd.insert("t" + std::to_string(t), TensorView::of(w[t].data(), {1000})));
    if (t == 20) {
      ASSERT_OK(sd.insert("big", TensorView::of(big.data(), {10000})));
    }
  }
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = -static_cast<float>(i);
  ASSERT_OK(sd.insert("step", Value::int64(9)));
  StateDictPutOptions o;
  o.pack_bucket_bytes = 16 << 10;
  ASSERT_OK(store().state_dicts().put("sd", sd, o).get(kWait));
  const auto buckets = buckets_of(store(), "sd");
  EXPECT_GE(buckets.size(), 14u);  // 4 small tensors per bucket, and the big one alone
  EXPECT_EQ(buckets.front(), "sd#packed");

  auto check = [&](const StateDict& got) {
    ASSERT_EQ(got.size(), sd.size());
    for (const auto& e : sd.entries()) {
      const auto* g = got.find(e.name);
      ASSERT_NE(g, nullptr) << e.name;
      if (!e.is_tensor()) {
        EXPECT_EQ(*g->value, *e.value);
        continue;
      }
      EXPECT_EQ(std::memcmp(g->view.data(), e.view.data(), e.view.nbytes()), 0) << e.name;
    }
  };
  auto got = store().state_dicts().get("sd").get(kWait);  // views into each bucket
  ASSERT_OK(got);
  check(*got);
  std::vector<std::vector<float>> into_w(50, std::vector<float>(1000));
  std::vector<float> into_big(10000);
  StateDict into;
  for (std::size_t t = 0; t < w.size(); ++t) {
    ASSERT_OK(into.insert("t" + std::to_string(t), TensorView::of(into_w[t].data(), {1000})));
    if (t == 20) {
      ASSERT_OK(into.insert("big", TensorView::of(into_big.data(), {10000})));
    }
  }
  ASSERT_OK(into.insert("step", Value::int64(0)));
  ASSERT_OK(store().state_dicts().get_into("sd", into).get(kWait));
  check(into);

  // Streamed bucket by bucket.
  auto before = store().admin().controller_counters().get(kWait).value();
  auto streamed = store().state_dicts().stream_into("sd2", into, kWait);
  for (int i = 0; i < 2000 && store().admin().controller_counters().get(kWait)->stream_subscribes <=
                                  before.stream_subscribes;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_OK(store().state_dicts().put("sd2", sd, o).get(kWait));
  ASSERT_OK(streamed.get(kWait));
  check(into);

  // Written in place, bucket by bucket.
  std::vector<TensorSpec> specs;
  for (const auto& e : sd.entries()) {
    if (e.is_tensor()) specs.push_back({e.name, e.view.dtype(), e.view.shape()});
  }
  auto staged = store().state_dicts().stage("sd3", specs, o).get(kWait);
  ASSERT_OK(staged);
  for (auto& e : staged->state_dict().entries()) {
    std::memcpy(e.view.data(), sd.find(e.name)->view.data(), e.view.nbytes());
  }
  ASSERT_OK(staged->state_dict().insert("step", Value::int64(9)));
  ASSERT_OK(staged->commit().get(kWait));
  auto got3 = store().state_dicts().get("sd3").get(kWait);
  ASSERT_OK(got3);
  EXPECT_EQ(buckets_of(store(), "sd3").size(), buckets.size());  // the same layout
  check(*got3);

  // One bucket again: the replace removes the others.
  ASSERT_OK(store().state_dicts().put("sd", sd).get(kWait));
  EXPECT_EQ(buckets_of(store(), "sd"), std::vector<std::string>{"sd#packed"});
  auto again = store().state_dicts().get("sd").get(kWait);
  ASSERT_OK(again);
  check(*again);
}

}  // namespace
}  // namespace meshstore
