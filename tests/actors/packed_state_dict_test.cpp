// A state dict's small tensors travel packed into buckets, gathered from the
// caller's tensors as a bucket is written and scattered into the caller's
// tensors as it is read: one copy each way where the volume's memory maps
// (shm), through a scratch buffer elsewhere. Over every transport, the bytes
// arrive intact, the gaps between packed tensors are zeros, and a read that
// guessed a stale layout never leaves a wrong byte behind.

#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "meshstore/client/client.hpp"
#include "meshstore/store.hpp"
#include "meshstore/tensor.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using testing::kWait;

// Tensors of assorted sizes and dtypes, each filled with its own pattern.
struct Model {
  std::vector<std::vector<std::uint8_t>> bytes;
  std::vector<std::pair<std::string, TensorView>> views;

  Model(int n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    const DType dtypes[] = {DType::uint8, DType::bfloat16, DType::float32, DType::int64};
    bytes.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      const DType dt = dtypes[i % 4];
      // 1 element up to 60 KiB: all packed at the default 64 KiB limit.
      const std::int64_t numel =
          1 + static_cast<std::int64_t>(rng() % (60 * 1024 / dtype_size(dt)));
      bytes.emplace_back(static_cast<std::size_t>(numel) * dtype_size(dt));
      for (auto& b : bytes.back()) b = static_cast<std::uint8_t>(rng());
      views.emplace_back("layer." + std::to_string(i),
                         TensorView(bytes.back().data(), dt, {numel}));
    }
  }
  StateDict sd() {
    StateDict sd;
    for (auto& [name, v] : views) EXPECT_OK(sd.insert(name, v));
    return sd;
  }
};

// Destinations shaped like `m`, filled with a byte the model never has in
// every position (so a byte not written shows).
struct Into {
  std::vector<std::vector<std::uint8_t>> bytes;
  StateDict sd;
  explicit Into(const Model& m) {
    bytes.reserve(m.bytes.size());
    for (std::size_t i = 0; i < m.views.size(); ++i) {
      bytes.emplace_back(m.bytes[i].size(), 0xA5);
      const auto& v = m.views[i].second;
      EXPECT_OK(sd.insert(m.views[i].first, TensorView(bytes.back().data(), v.dtype(), v.shape())));
    }
  }
};

class PackedStateDict : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    StoreOptions o;
    o.transport.name = GetParam();
    auto store = Store::embedded(o);
    ASSERT_OK(store);
    store_ = std::make_unique<Store>(std::move(store).value());
  }
  Store& store() { return *store_; }
  std::unique_ptr<Store> store_;
};

TEST_P(PackedStateDict, ManySmallTensorsInSeveralBucketsArriveIntactVersionAfterVersion) {
  StateDictPutOptions options;
  options.pack_bucket_bytes = 256 << 10;  // several buckets
  Model m(300, 1);
  Into into(m);
  for (int version = 0; version < 3; ++version) {
    for (auto& b : m.bytes) {
      for (auto& x : b) x = static_cast<std::uint8_t>(x * 31 + version + 1);
    }
    ASSERT_OK(store().state_dicts().put("model", m.sd(), options).get(kWait));
    EXPECT_TRUE(*store().exists("model#packed.1").get(kWait));
    ASSERT_OK(store().state_dicts().get_into("model", into.sd).get(kWait));
    for (std::size_t i = 0; i < m.bytes.size(); ++i) {
      ASSERT_EQ(into.bytes[i], m.bytes[i]) << m.views[i].first << " version " << version;
    }
  }
  // Read by get_state_dict too (views into the buckets).
  auto got = store().state_dicts().get("model").get(kWait);
  ASSERT_OK(got);
  for (std::size_t i = 0; i < m.bytes.size(); ++i) {
    const auto* e = got->find(m.views[i].first);
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(std::memcmp(e->view.data(), m.bytes[i].data(), m.bytes[i].size()), 0);
  }
}

TEST_P(PackedStateDict, TheGapsBetweenPackedTensorsAreZeros) {
  // Tensors of odd sizes: each starts at a 64-byte boundary, so the bucket
  // has gaps, which must hold zeros, never what the memory held before.
  // More than the inline limit (64 KiB), so the bucket is written through
  // the transport (straight into the volume's memory over shm).
  const std::vector<std::size_t> sizes{3, 60000, 60001, 1};
  std::vector<std::vector<std::uint8_t>> t;
  StateDict sd;
  std::size_t end = 0;
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    t.emplace_back(sizes[i], static_cast<std::uint8_t>(0xE0 + i));
    ASSERT_OK(sd.insert(
        "t" + std::to_string(i),
        TensorView(t.back().data(), DType::uint8, {static_cast<std::int64_t>(sizes[i])})));
    at.push_back((end + 63) / 64 * 64);
    end = at.back() + sizes[i];
  }
  std::vector<std::uint8_t> want(end, 0);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::memcpy(want.data() + at[i], t[i].data(), sizes[i]);
  }
  // First a bucket of the same size with every byte set: the next versions
  // may reuse its memory.
  std::vector<std::uint8_t> full(end, 0xCC);
  StateDict before;
  ASSERT_OK(before.insert("full",
                          TensorView(full.data(), DType::uint8, {static_cast<std::int64_t>(end)})));
  ASSERT_OK(store().state_dicts().put("gaps", before).get(kWait));
  for (int round = 0; round < 3; ++round) {
    ASSERT_OK(store().state_dicts().put("gaps", round % 2 ? before : sd).get(kWait));
    if (round % 2) continue;
    auto blob = store().get("gaps#packed").get(kWait);
    ASSERT_OK(blob);
    ASSERT_EQ(blob->nbytes(), end);
    const auto* p = static_cast<const std::uint8_t*>(blob->data());
    ASSERT_TRUE(std::vector<std::uint8_t>(p, p + end) == want) << "round " << round;
  }
}

TEST_P(PackedStateDict, StridedAndConvertedPackedTensorsTakeTheScratchPath) {
  // Put: a strided source and a float32 one stored as bfloat16 are packed
  // into buffers of their own before the bucket is gathered.
  std::vector<float> grid(4 * 6);
  std::iota(grid.begin(), grid.end(), 1.0f);
  std::vector<float> master(100);
  std::iota(master.begin(), master.end(), -50.0f);
  std::vector<std::int32_t> plain(10, 9);
  StateDict sd;
  ASSERT_OK(
      sd.insert("grid_t", TensorView(grid.data(), DType::float32, {4, 6}).transpose(0, 1).value()));
  ASSERT_OK(sd.insert("master", TensorView(master.data(), DType::float32, {100})));
  ASSERT_OK(sd.insert("plain", TensorView(plain.data(), DType::int32, {10})));
  StateDictPutOptions options;
  options.transfer_dtype = DType::bfloat16;
  ASSERT_OK(store().state_dicts().put("mixed", sd, options).get(kWait));

  // Read: a strided destination, and a float32 one for a bfloat16 entry
  // (ReadOptions::cast), make the read unpack from a scratch copy.
  std::vector<std::uint16_t> grid_back(24, 0);  // bf16, stored as 6 x 4
  std::vector<float> master_back(100, 0.0f);
  std::vector<std::int32_t> plain_back(10, 0);
  StateDict into;
  // A 6 x 4 destination laid out transposed (strided).
  ASSERT_OK(into.insert(
      "grid_t", TensorView(grid_back.data(), DType::bfloat16, {4, 6}).transpose(0, 1).value()));
  ASSERT_OK(into.insert("master", TensorView(master_back.data(), DType::float32, {100})));
  ASSERT_OK(into.insert("plain", TensorView(plain_back.data(), DType::int32, {10})));
  const auto cast = StateDictReadOptions::converting();
  ASSERT_OK(store().state_dicts().get_into("mixed", into, cast).get(kWait));
  EXPECT_EQ(plain_back, plain);
  EXPECT_EQ(master_back, master);  // small integers survive bfloat16
  // grid_t[r][c] = grid[c][r]; the strided destination holds it so that
  // grid_back, read row-major as 4 x 6, equals grid.
  for (std::size_t i = 0; i < grid.size(); ++i) {
    float f = 0;
    ASSERT_OK(cast_to(TensorView(&grid_back[i], DType::bfloat16, {}), DType::float32, &f));
    EXPECT_EQ(f, grid[i]) << i;
  }
}

TEST_P(PackedStateDict, AReadThatGuessedAStaleLayoutEndsWithTheNewOne) {
  // Two tensors of the same size swap places in the bucket between two
  // versions: the bucket's size is the same, only the manifest tells. A
  // read planned with the cached (old) layout scatters by it, sees the new
  // manifest, and reads again: the destination ends with the new bytes.
  std::vector<std::uint8_t> x(4096, 1), y(4096, 2);
  StateDict first, second;
  ASSERT_OK(first.insert("x", TensorView(x.data(), DType::uint8, {4096})));
  ASSERT_OK(first.insert("y", TensorView(y.data(), DType::uint8, {4096})));
  ASSERT_OK(second.insert("y", TensorView(y.data(), DType::uint8, {4096})));
  ASSERT_OK(second.insert("x", TensorView(x.data(), DType::uint8, {4096})));
  std::vector<std::uint8_t> xb(4096, 0), yb(4096, 0);
  StateDict into;
  ASSERT_OK(into.insert("x", TensorView(xb.data(), DType::uint8, {4096})));
  ASSERT_OK(into.insert("y", TensorView(yb.data(), DType::uint8, {4096})));
  ASSERT_OK(store().state_dicts().put("swap", first).get(kWait));
  ASSERT_OK(store().state_dicts().get_into("swap", into).get(kWait));  // caches the layout
  ASSERT_EQ(xb, x);
  ASSERT_EQ(yb, y);
  std::fill(x.begin(), x.end(), 3);
  std::fill(y.begin(), y.end(), 4);
  ASSERT_OK(store().state_dicts().put("swap", second).get(kWait));
  ASSERT_OK(store().state_dicts().get_into("swap", into).get(kWait));
  EXPECT_EQ(xb, x);
  EXPECT_EQ(yb, y);
}

// The volumes' staged objects now (puts in flight, and objects staged
// ahead for a client's next put).
Result<std::uint64_t> staged_now(Store& store) {
  auto stats = store.admin().stats().get(kWait);
  if (!stats.ok()) return stats.status();
  std::uint64_t staged = 0;
  for (const auto& v : *stats) staged += v.staged;
  return staged;
}

// The staged objects once they reach `want`, or what they were at the
// deadline.
std::uint64_t staged_reaches(Store& store, std::uint64_t want) {
  std::uint64_t staged = ~std::uint64_t{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    auto now = staged_now(store);
    if (!now.ok()) return staged;
    staged = *now;
    if (staged == want) break;
  }
  return staged;
}

// The objects a state dict's put stages: its manifest and its buckets.
std::uint64_t objects_of(Store& store, const std::string& key) {
  std::uint64_t n = 1;
  if (!*store.exists(key + "#packed").get(kWait)) return n;
  ++n;
  for (int b = 1; *store.exists(key + "#packed." + std::to_string(b)).get(kWait); ++b) ++n;
  return n;
}

TEST_P(PackedStateDict, RepeatedPutsOfOneLayoutReadBackIntactAndKeepOneStagedAhead) {
  // A state dict put again with the same layout: every version reads back
  // intact. The put runs on the caller's thread over the client's channel
  // to its volume (a ring over shm, tcp's small-op connection, actor
  // messages over cma and rpc) and keeps the next put's objects staged (a
  // manifest and its buckets), which the next put writes into: what stays
  // staged between puts is that one set, not one more per put.
  StateDictPutOptions options;
  options.pack_bucket_bytes = 256 << 10;  // several buckets, not streamed
  Model m(24, 7);
  Into into(m);
  ASSERT_OK(store().state_dicts().put("ahead", m.sd(), options).get(kWait));
  EXPECT_EQ(staged_reaches(store(), 0), 0u) << "one put keeps nothing staged";
  // The channel opens in the background once the client has reached its
  // volume (over tcp, a connection made on a copy-engine thread): the puts
  // below are the channel's only once it is there.
  ASSERT_TRUE(testing::eventually([&] { return store().admin().fast_path_stats().rings >= 1; }));
  std::uint64_t ahead = 0;
  for (int version = 0; version < 5; ++version) {
    for (auto& b : m.bytes) {
      for (auto& x : b) x = static_cast<std::uint8_t>(x * 13 + version + 1);
    }
    ASSERT_OK(store().state_dicts().put("ahead", m.sd(), options).get(kWait));
    if (version == 0) {
      // Its manifest and buckets, staged again for the next put.
      ahead = objects_of(store(), "ahead");
      ASSERT_GE(ahead, 3u);
    }
    ASSERT_OK(store().state_dicts().get_into("ahead", into.sd).get(kWait));
    for (std::size_t i = 0; i < m.bytes.size(); ++i) {
      ASSERT_EQ(into.bytes[i], m.bytes[i]) << m.views[i].first << " version " << version;
    }
    ASSERT_EQ(staged_reaches(store(), ahead), ahead) << "version " << version;
  }
  // Another layout: what was staged ahead is given back, and the new
  // layout (put once) keeps nothing.
  Model other(10, 8);
  ASSERT_OK(store().state_dicts().put("ahead", other.sd(), options).get(kWait));
  EXPECT_EQ(staged_reaches(store(), 0), 0u);
  Into back(other);
  ASSERT_OK(store().state_dicts().get_into("ahead", back.sd).get(kWait));
  for (std::size_t i = 0; i < other.bytes.size(); ++i) {
    ASSERT_EQ(back.bytes[i], other.bytes[i]) << other.views[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, PackedStateDict,
                         ::testing::Values("", "shm", "cma", "tcp", "rpc"), [](const auto& info) {
                           return std::string(*info.param ? info.param : "chosen");
                         });

TEST(StagedAhead, APutWritesIntoWhatThePutBeforeStagedSoRoomForTwoVersionsIsEnough) {
  // The bytes of one version (manifest and buckets), measured on a store
  // of its own.
  Model m(40, 11);
  std::uint64_t version_bytes = 0;
  {
    auto probe = Store::embedded();
    ASSERT_OK(probe);
    ASSERT_OK(probe->state_dicts().put("model", m.sd()).get(kWait));
    auto stats = probe->admin().stats().get(kWait);
    ASSERT_OK(stats);
    for (const auto& v : *stats) version_bytes += v.bytes_held;
    probe->close();
  }
  ASSERT_GT(version_bytes, 64u << 10);
  // Room for two versions and a half: the committed one and the next put's
  // staging. A put that staged anew beside what was staged ahead would
  // need three.
  StoreOptions o;
  o.limits.volume_capacity_bytes = version_bytes * 5 / 2;
  auto store = Store::embedded(o);
  ASSERT_OK(store);
  Into into(m);
  for (int version = 0; version < 40; ++version) {
    for (auto& b : m.bytes) {
      for (auto& x : b) x = static_cast<std::uint8_t>(x + 3);
    }
    // Puts back to back: each commit stages the next put's objects after
    // the controller retired the version before, in its memory.
    ASSERT_OK(store->state_dicts().put("model", m.sd()).get(kWait)) << "version " << version;
    if (version % 3 != 2) continue;
    ASSERT_OK(store->state_dicts().get_into("model", into.sd).get(kWait));
    for (std::size_t i = 0; i < m.bytes.size(); ++i) {
      ASSERT_EQ(into.bytes[i], m.bytes[i]) << "version " << version;
    }
  }
  // Two puts issued together (the caller does not wait between them), of
  // two models with that layout: each commits whole or not at all, and the
  // key reads back as one of them.
  Model a(40, 11), b(40, 11);
  for (auto& v : b.bytes) {
    for (auto& x : v) x = static_cast<std::uint8_t>(x ^ 0xFF);
  }
  auto put_a = store->state_dicts().put("model", a.sd());
  auto put_b = store->state_dicts().put("model", b.sd());
  for (auto* p : {&put_a, &put_b}) {
    auto r = p->get(kWait);
    // Two versions in flight beside the committed one may not fit.
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Errc::out_of_capacity) << r.status().to_string();
    }
  }
  ASSERT_OK(store->state_dicts().get_into("model", into.sd).get(kWait));
  EXPECT_TRUE(into.bytes == a.bytes || into.bytes == b.bytes || into.bytes == m.bytes);
  store->close();
}

TEST(StagedAhead, StateDictsOverTheLimitOrPutOnceKeepNone) {
  auto store = Store::embedded();
  ASSERT_OK(store);
  // 20 MiB, over the 16 MiB staged ahead at most: staged only while put.
  std::vector<std::uint8_t> big(20 << 20, 0x5A);
  StateDict large;
  ASSERT_OK(large.insert("w", TensorView(big.data(), DType::uint8, {20 << 20})));
  ASSERT_OK(store->state_dicts().put("large", large).get(kWait));
  // The ring opens in the background once the client reached its volume.
  ASSERT_TRUE(testing::eventually([&] { return store->admin().fast_path_stats().rings >= 1; }));
  for (int i = 0; i < 2; ++i) ASSERT_OK(store->state_dicts().put("large", large).get(kWait));
  EXPECT_EQ(staged_reaches(*store, 0), 0u);
  // Many keys, each put once (checkpoints by step, say): none.
  Model m(20, 9);
  for (int i = 0; i < 6; ++i) {
    ASSERT_OK(store->state_dicts().put("step" + std::to_string(i), m.sd()).get(kWait));
  }
  EXPECT_EQ(staged_reaches(*store, 0), 0u);
  // Many keys put again and again: four staged ahead at most (the least
  // recently used given back).
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 6; ++i) {
      ASSERT_OK(store->state_dicts().put("step" + std::to_string(i), m.sd()).get(kWait));
    }
  }
  auto staged = staged_now(*store);
  ASSERT_OK(staged);
  const std::uint64_t each = objects_of(*store, "step0");
  EXPECT_LE(*staged, 4 * each);
  EXPECT_EQ(staged_reaches(*store, 4 * each), 4 * each);
  // The keys read back intact after all that.
  Into into(m);
  ASSERT_OK(store->state_dicts().get_into("step5", into.sd).get(kWait));
  for (std::size_t i = 0; i < m.bytes.size(); ++i) ASSERT_EQ(into.bytes[i], m.bytes[i]);
  store->close();
}

TEST(StagedAhead, AClosingClientGivesWhatItStagedAheadBack) {
  // A client of a store served by another: what it staged ahead lies on the server's
  // volume, and its store's close gives it back at once, not after the
  // volume's orphan grace (30 s, longer than staged_reaches waits).
  StoreOptions so;
  so.listen = "127.0.0.1:0";
  auto server = Store::embedded(so);
  ASSERT_OK(server);
  StoreOptions co;
  co.placement.host_volumes = false;
  auto client = Store::connect(server->admin().address(), co);
  ASSERT_OK(client);
  Model m(30, 5);
  ASSERT_OK(client->state_dicts().put("model", m.sd()).get(kWait));
  // The client's ring opens in the background once it reached the volume.
  ASSERT_TRUE(testing::eventually([&] { return client->admin().fast_path_stats().rings >= 1; }));
  for (int i = 0; i < 2; ++i) ASSERT_OK(client->state_dicts().put("model", m.sd()).get(kWait));
  const std::uint64_t ahead = objects_of(*server, "model");
  ASSERT_EQ(staged_reaches(*server, ahead), ahead) << "the client's next put's, on the server";
  client->close();
  EXPECT_EQ(staged_reaches(*server, 0), 0u) << "staged objects outlived their client's store";
  // The key is intact for other readers.
  Into into(m);
  ASSERT_OK(server->state_dicts().get_into("model", into.sd).get(kWait));
  for (std::size_t i = 0; i < m.bytes.size(); ++i) ASSERT_EQ(into.bytes[i], m.bytes[i]);
  server->close();
}

// A put keeps the layout it laid out (the manifest) for the next put of
// its key, and uses it only when every entry matches: a change of shape,
// dtype, name, value size or options lays the state dict out anew, and
// every version reads back as it was put.
TEST(PutLayout, TheKeptLayoutIsUsedOnlyWhenEveryEntryMatches) {
  auto store = Store::embedded();
  ASSERT_OK(store);
  std::vector<float> a(1000), b(3000);
  std::vector<std::uint8_t> c(50);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) + 0.25f;
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = static_cast<std::uint8_t>(i * 7);
  struct Variant {
    const char* what;
    Shape b_shape;
    DType c_dtype;
    const char* a_name;
    Value step;
    StateDictPutOptions options;
  };
  StateDictPutOptions bf16;
  bf16.transfer_dtype = DType::bfloat16;
  StateDictPutOptions unpacked;
  unpacked.pack_max_tensor_bytes = 0;
  const std::vector<Variant> variants{
      {"base", {3000}, DType::uint8, "a", Value::int64(1), {}},
      {"the same again", {3000}, DType::uint8, "a", Value::int64(2), {}},
      {"a shape", {30, 100}, DType::uint8, "a", Value::int64(3), {}},
      {"a dtype", {30, 100}, DType::int8, "a", Value::int64(4), {}},
      {"a name", {30, 100}, DType::int8, "a2", Value::int64(5), {}},
      {"a value's size", {30, 100}, DType::int8, "a2", Value::string("a longer value"), {}},
      {"the transfer dtype", {30, 100}, DType::int8, "a2", Value::string("a longer value"), bf16},
      {"no packing", {30, 100}, DType::int8, "a2", Value::string("a longer value"), unpacked},
      {"back to the base", {3000}, DType::uint8, "a", Value::int64(1), {}},
  };
  for (const auto& v : variants) {
    StateDict sd;
    ASSERT_OK(sd.insert(v.a_name, TensorView(a.data(), DType::float32, {1000})));
    ASSERT_OK(sd.insert("b", TensorView(b.data(), DType::float32, v.b_shape)));
    ASSERT_OK(sd.insert("c", TensorView(c.data(), v.c_dtype, {50})));
    ASSERT_OK(sd.insert("step", v.step));
    ASSERT_OK(store->state_dicts().put("m", sd, v.options).get(kWait)) << v.what;
    auto got = store->state_dicts().get("m").get(kWait);
    ASSERT_OK(got) << v.what;
    ASSERT_EQ(got->entries().size(), 4u) << v.what;
    const DType stored = v.options.transfer_dtype ? DType::bfloat16 : DType::float32;
    const auto* ga = got->find(v.a_name);
    const auto* gb = got->find("b");
    const auto* gc = got->find("c");
    const auto* gs = got->find("step");
    ASSERT_TRUE(ga && gb && gc && gs) << v.what;
    EXPECT_EQ(ga->view.dtype(), stored) << v.what;
    EXPECT_EQ(gb->view.shape(), v.b_shape) << v.what;
    EXPECT_EQ(gc->view.dtype(), v.c_dtype) << v.what;
    ASSERT_TRUE(gs->value.has_value()) << v.what;
    EXPECT_TRUE(*gs->value == v.step) << v.what;
    EXPECT_EQ(std::memcmp(gc->view.data(), c.data(), c.size()), 0) << v.what;
    if (stored == DType::float32) {
      EXPECT_EQ(std::memcmp(ga->view.data(), a.data(), a.size() * 4), 0) << v.what;
      EXPECT_EQ(std::memcmp(gb->view.data(), b.data(), b.size() * 4), 0) << v.what;
    }
  }
  store->close();
}

// The gather and scatter copies themselves, on their own.
TEST(GatherScatter, PiecesLandAtTheirOffsetsWithZerosBetween) {
  std::vector<std::byte> a(5, std::byte{1}), b(3, std::byte{2});
  client::Gather g;
  g.pieces = {{a.data(), 2, 5}, {b.data(), 10, 3}};
  std::vector<std::byte> out(16, std::byte{0x7F});
  ASSERT_OK(client::fill_gathered_now(g, out.data(), out.size()));
  std::vector<std::byte> want(16, std::byte{0});
  std::fill(want.begin() + 2, want.begin() + 7, std::byte{1});
  std::fill(want.begin() + 10, want.begin() + 13, std::byte{2});
  EXPECT_EQ(out, want);

  client::Scatter s;
  std::vector<std::byte> x(5), y(3);
  s.pieces = {{2, x.data(), 5}, {10, y.data(), 3}};
  ASSERT_OK(client::scatter_now(s, out.data(), out.size()));
  EXPECT_EQ(x, a);
  EXPECT_EQ(y, b);
}

TEST(GatherScatter, PiecesOutsideTheObjectOrOverlappingAreRefusedAndNothingIsWritten) {
  std::vector<std::byte> a(8, std::byte{1});
  std::vector<std::byte> out(16, std::byte{0x7F});
  const std::vector<std::byte> before = out;
  client::Gather past_end;
  past_end.pieces = {{a.data(), 12, 8}};
  auto s = client::fill_gathered_now(past_end, out.data(), out.size());
  EXPECT_EQ(s.code(), Errc::invalid_argument) << s.to_string();
  client::Gather overlapping;
  overlapping.pieces = {{a.data(), 0, 8}, {a.data(), 4, 8}};
  EXPECT_EQ(client::fill_gathered_now(overlapping, out.data(), out.size()).code(),
            Errc::invalid_argument);
  EXPECT_EQ(client::fill_gathered_here(overlapping, out.data(), out.size()).code(),
            Errc::invalid_argument);
  EXPECT_EQ(out, before);

  std::vector<std::byte> x(8, std::byte{0});
  client::Scatter huge;
  huge.pieces = {{~std::uint64_t{0} - 2, x.data(), 8}};  // offset + nbytes overflows
  EXPECT_EQ(client::scatter_now(huge, out.data(), out.size()).code(), Errc::out_of_range);
  EXPECT_EQ(x, std::vector<std::byte>(8, std::byte{0}));
}

TEST(GatherScatter, ALargeObjectSplitOverTheCopyThreadsIsExact) {
  // 8 MiB in 2,000 pieces of odd sizes: split over the engine's threads.
  constexpr std::uint64_t kBytes = 8 << 20;
  std::mt19937 rng(7);
  std::vector<std::byte> src(kBytes);
  for (auto& b : src) b = static_cast<std::byte>(rng());
  auto g = std::make_shared<client::Gather>();
  auto sc = std::make_shared<client::Scatter>();
  std::vector<std::byte> back(kBytes, std::byte{0});
  std::vector<std::byte> want(kBytes, std::byte{0});
  std::uint64_t at = 0;
  while (at < kBytes) {
    const std::uint64_t n = std::min<std::uint64_t>(1 + rng() % 6000, kBytes - at);
    const std::uint64_t gap = rng() % 3 == 0 ? rng() % 64 : 0;
    if (at + gap + n > kBytes) break;
    g->pieces.push_back({src.data() + at + gap, at + gap, n});
    sc->pieces.push_back({at + gap, back.data() + at + gap, n});
    std::memcpy(want.data() + at + gap, src.data() + at + gap, n);
    at += gap + n;
  }
  auto object = std::make_shared<std::vector<std::byte>>(kBytes, std::byte{0x55});
  ASSERT_OK(client::fill_gathered_here(*g, object->data(), kBytes));
  EXPECT_TRUE(*object == want);
  std::shared_ptr<const std::byte> from(object, object->data());
  ASSERT_OK(client::scatter_from(sc, from, kBytes).get(kWait));
  EXPECT_TRUE(back == want);
}

}  // namespace
}  // namespace meshstore
