// Sharded tensors and sharded state dicts through one store: shards put by
// the ranks of one placement, read back whole, by any box, or as another
// placement's shards. The multi-process versions are in
// tests/integration/reshard_worlds.sh.

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "meshstore/store.hpp"
#include "meshstore/tensor_slice.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using testing::kWait;
using P = DimPlacement;

// The reference tensor: element i holds i.
Tensor reference(const Shape& shape) {
  auto t = Tensor::empty(DType::float32, shape).value();
  auto* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i);
  return t;
}

// The box `s` of `whole` as a new tensor.
Tensor cut(const Tensor& whole, const TensorSlice& s) {
  auto out = Tensor::empty(DType::float32, s.local_shape()).value();
  const auto strides = contiguous_strides(s.global_shape());
  Shape idx(s.local_shape().size(), 0);
  for (std::int64_t n = 0; n < out.numel(); ++n) {
    std::int64_t flat = 0, rem = n;
    for (std::size_t k = idx.size(); k-- > 0;) {
      idx[k] = rem % s.local_shape()[k];
      rem /= s.local_shape()[k];
    }
    for (std::size_t k = 0; k < idx.size(); ++k) flat += (s.offsets()[k] + idx[k]) * strides[k];
    out.data_as<float>()[n] = whole.data_as<float>()[flat];
  }
  return out;
}

::testing::AssertionResult same(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    return ::testing::AssertionFailure()
           << shape_to_string(a.shape()) << " vs " << shape_to_string(b.shape());
  }
  if (std::memcmp(a.data(), b.data(), a.nbytes()) != 0) {
    return ::testing::AssertionFailure() << "different elements";
  }
  return ::testing::AssertionSuccess();
}

// Every rank of `put` puts its shard of `whole`, in rank order (the
// placement overload: replicated boxes wait for all their copies). The key
// is visible exactly from the last rank's put.
void put_all(Store& store, const std::string& key, const Tensor& whole, const Placement& put) {
  for (std::int64_t r = 0; r < put.world_size(); ++r) {
    auto slice = put.slice_for(whole.shape(), r).value();
    auto shard = cut(whole, slice);
    ASSERT_OK(store.put(key, shard.view(), PutOptions::shard(whole.shape(), put, r)).get(kWait));
    EXPECT_EQ(*store.exists(key).get(kWait), r + 1 == put.world_size()) << "after rank " << r;
  }
}

struct Case {
  Shape mesh_put;
  std::vector<P> put;
  Shape mesh_get;
  std::vector<P> get;
};

TEST(ShardedStore, ReshardsBetweenPlacements) {
  auto store = Store::embedded().value();
  const std::vector<Case> cases = {
      {{4}, {P::shard(0)}, {2}, {P::shard(0)}},                                  // shrink 4 -> 2
      {{2}, {P::shard(0)}, {4}, {P::shard(0)}},                                  // grow 2 -> 4
      {{4}, {P::shard(1)}, {2}, {P::shard(0)}},                                  // columns -> rows
      {{2}, {P::shard(0)}, {4}, {P::shard(1)}},                                  // rows -> columns
      {{2, 2}, {P::shard(0), P::shard(1)}, {2, 2}, {P::shard(1), P::shard(0)}},  // 2D -> 2D
      {{4}, {P::shard(0)}, {2, 2}, {P::shard(0), P::shard(1)}},                  // 1D -> 2D
      {{2, 2}, {P::shard(0), P::shard(1)}, {4}, {P::shard(1)}},                  // 2D -> 1D
      {{2}, {P::replicate()}, {4}, {P::replicate()}},                            // replicas
      {{2, 2}, {P::replicate(), P::shard(0)}, {4}, {P::shard(1)}},
  };
  int n = 0;
  for (const Shape& shape : {Shape{8, 12}, Shape{7, 10}}) {  // even, and uneven (7 rows over 4)
    const Tensor whole = reference(shape);
    for (const auto& c : cases) {
      const auto put = Placement::make(c.mesh_put, c.put).value();
      const auto get = Placement::make(c.mesh_get, c.get).value();
      const std::string key = "w" + std::to_string(n++);
      SCOPED_TRACE(put.to_string() + " -> " + get.to_string() + " of " + shape_to_string(shape));
      put_all(store, key, whole, put);
      for (std::int64_t r = 0; r < get.world_size(); ++r) {
        const auto slice = get.slice_for(shape, r).value();
        auto got = store.get(key, ReadOptions::box(slice)).get(kWait);
        ASSERT_OK(got);
        EXPECT_TRUE(same(*got, cut(whole, slice))) << "rank " << r;
      }
      auto full = store.get(key).get(kWait);
      ASSERT_OK(full);
      EXPECT_TRUE(same(*full, whole));
    }
  }
}

TEST(ShardedStore, LargeShardsMoveThroughEveryTransport) {
  // 4 MiB: the shards travel through the data plane, not inside messages.
  const Tensor whole = reference({1024, 1024});
  const auto rows = Placement::make({2}, {P::shard(0)}).value();
  const auto cols = Placement::make({4}, {P::shard(1)}).value();
  for (const char* transport : {"shm", "tcp", "rpc"}) {
    SCOPED_TRACE(transport);
    StoreOptions o;
    o.transport.name = transport;
    auto store = Store::embedded(o).value();
    put_all(store, "w", whole, rows);
    for (std::int64_t r = 0; r < cols.world_size(); ++r) {
      const auto slice = cols.slice_for(whole.shape(), r).value();
      auto dst = Tensor::zeros(DType::float32, slice.local_shape()).value();
      ASSERT_OK(store.get_into("w", dst.view(), ReadOptions::box(slice)).get(kWait));
      EXPECT_TRUE(same(dst, cut(whole, slice))) << "rank " << r;
    }
  }
}

TEST(ShardedStore, SlicesInsideOneShardAndAcrossShards) {
  auto store = Store::embedded().value();
  const Tensor whole = reference({100, 100});
  put_all(store, "big", whole, Placement::make({2, 2}, {P::shard(0), P::shard(1)}).value());
  for (const auto& s : {TensorSlice::make({100, 100}, {10, 10}, {20, 30}).value(),    // inside one
                        TensorSlice::make({100, 100}, {40, 45}, {20, 10}).value(),    // across four
                        TensorSlice::make({100, 100}, {0, 0}, {1, 100}).value(),      // one row
                        TensorSlice::make({100, 100}, {99, 99}, {1, 1}).value(),      // one element
                        TensorSlice::make({100, 100}, {50, 0}, {0, 100}).value()}) {  // empty
    auto got = store.get("big", ReadOptions::box(s)).get(kWait);
    ASSERT_OK(got);
    EXPECT_TRUE(same(*got, cut(whole, s))) << s.to_string();
  }
  // Into a caller's buffer, contiguous or strided.
  const auto s = TensorSlice::make({100, 100}, {45, 45}, {10, 10}).value();
  auto dst = Tensor::zeros(DType::float32, {10, 10}).value();
  ASSERT_OK(store.get_into("big", dst.view(), ReadOptions::box(s)).get(kWait));
  EXPECT_TRUE(same(dst, cut(whole, s)));
  auto wide = Tensor::zeros(DType::float32, {10, 20}).value();
  const TensorView strided(wide.data(), DType::float32, {10, 10}, {20, 2});
  ASSERT_OK(store.get_into("big", strided, ReadOptions::box(s)).get(kWait));
  EXPECT_EQ(wide.data_as<float>()[0], whole.data_as<float>()[45 * 100 + 45]);
  EXPECT_EQ(wide.data_as<float>()[2], whole.data_as<float>()[45 * 100 + 46]);
  EXPECT_EQ(wide.data_as<float>()[1], 0.0f);
}

TEST(ShardedStore, APartialKeyNamesWhatIsMissingAndANewVersionReplacesTheOldWhole) {
  auto store = Store::embedded().value();
  const Tensor v1 = reference({4, 6});
  const auto rows = Placement::make({2}, {P::shard(0)}).value();
  auto top = rows.slice_for({4, 6}, 0).value();
  ASSERT_OK(store.put("k", cut(v1, top).view(), PutOptions::box(top)).get(kWait));
  EXPECT_FALSE(*store.exists("k").get(kWait));
  EXPECT_ERROR(store.get("k").get(kWait), Errc::partially_committed,
               "'k' is partially committed: its shards cover 12 of 24 elements of [4, 6]; "
               "missing [2:4, 0:6]");
  auto bottom = rows.slice_for({4, 6}, 1).value();
  ASSERT_OK(store.put("k", cut(v1, bottom).view(), PutOptions::box(bottom)).get(kWait));
  EXPECT_TRUE(same(*store.get("k").get(kWait), v1));

  // A second version: readers keep seeing the first until it is complete.
  Tensor v2 = reference({4, 6});
  for (std::int64_t i = 0; i < v2.numel(); ++i) v2.data_as<float>()[i] += 1000;
  ASSERT_OK(store.put("k", cut(v2, top).view(), PutOptions::box(top)).get(kWait));
  EXPECT_TRUE(same(*store.get("k").get(kWait), v1));
  ASSERT_OK(store.put("k", cut(v2, bottom).view(), PutOptions::box(bottom)).get(kWait));
  EXPECT_TRUE(same(*store.get("k").get(kWait), v2));

  // Removing a key drops a sharded put in progress too.
  ASSERT_OK(store.put("p", cut(v1, top).view(), PutOptions::box(top)).get(kWait));
  ASSERT_OK(store.remove("p").get(kWait));
  ASSERT_OK(store.put("p", cut(v1, bottom).view(), PutOptions::box(bottom)).get(kWait));
  EXPECT_ERROR(store.get("p").get(kWait), Errc::partially_committed, "missing [0:2, 0:6]");
}

TEST(ShardedStore, ReplicasInAnyOrderNeverMixTwoVersions) {
  // [Replicate, Shard(0)] on (2, 2): ranks 0 and 2 hold rows [0:2], ranks 1
  // and 3 rows [2:4]. A version commits only with all four copies in, in
  // any order; a copy too many is refused, never taken for the next version.
  auto store = Store::embedded().value();
  const auto p = Placement::make({2, 2}, {P::replicate(), P::shard(0)}).value();
  Tensor v1 = reference({4, 3}), v2 = reference({4, 3});
  for (std::int64_t i = 0; i < v2.numel(); ++i) v2.data_as<float>()[i] += 100;
  auto put = [&](const Tensor& t, std::int64_t r) {
    return store
        .put("k", cut(t, p.slice_for({4, 3}, r).value()).view(), PutOptions::shard({4, 3}, p, r))
        .get(kWait);
  };
  ASSERT_OK(put(v1, 0));
  ASSERT_OK(put(v1, 1));
  ASSERT_OK(put(v1, 2));
  EXPECT_FALSE(*store.exists("k").get(kWait));  // rows [2:4] have 1 of 2 copies
  ASSERT_OK(put(v1, 3));
  EXPECT_TRUE(same(*store.get("k").get(kWait), v1));
  // Version 2 in another order; a third copy of a box is refused.
  ASSERT_OK(put(v2, 3));
  ASSERT_OK(put(v2, 1));
  EXPECT_ERROR(put(v2, 1), Errc::invalid_argument, "is in already (2 of 2 replicas)");
  EXPECT_TRUE(same(*store.get("k").get(kWait), v1));  // still version 1, whole
  ASSERT_OK(put(v2, 2));
  ASSERT_OK(put(v2, 0));
  EXPECT_TRUE(same(*store.get("k").get(kWait), v2));
}

TEST(ShardedStore, DisagreementsAndBadSlicesAreRefused) {
  auto store = Store::embedded().value();
  const Tensor a = reference({4, 4});
  auto top = TensorSlice::make({4, 4}, {0, 0}, {2, 4}).value();
  ASSERT_OK(store.put("k", cut(a, top).view(), PutOptions::box(top)).get(kWait));
  // Another rank with another global shape.
  auto other = TensorSlice::make({4, 8}, {2, 0}, {2, 8}).value();
  auto wide = reference({2, 8});
  EXPECT_ERROR(store.put("k", wide.view(), PutOptions::box(other)).get(kWait), Errc::shape_mismatch,
               "ranks disagree on the global shape of 'k': [4, 4] and [4, 8]");
  // Another dtype.
  auto bottom = TensorSlice::make({4, 4}, {2, 0}, {2, 4}).value();
  std::vector<double> d(8, 1.0);
  EXPECT_ERROR(store.put("k", TensorView::of(d.data(), {2, 4}), PutOptions::box(bottom)).get(kWait),
               Errc::dtype_mismatch, "ranks disagree on the dtype of 'k': float32 and float64");
  // A box overlapping a stored one without being the same box.
  auto middle = TensorSlice::make({4, 4}, {1, 0}, {2, 4}).value();
  EXPECT_ERROR(store.put("k", cut(a, middle).view(), PutOptions::box(middle)).get(kWait),
               Errc::invalid_argument, "overlaps shard [0:2, 0:4]");
  // A box put twice for one version (one copy per version with a slice).
  EXPECT_ERROR(store.put("k", cut(a, top).view(), PutOptions::box(top)).get(kWait),
               Errc::invalid_argument,
               "shard [0:2, 0:4] of [4, 4] is in already (1 of 1 replicas)");
  // A shard whose shape is not its slice's.
  EXPECT_ERROR(store.put("k", reference({3, 4}).view(), PutOptions::box(bottom)).get(kWait),
               Errc::shape_mismatch,
               "the shard has shape [3, 4], its slice [2:4, 0:4] of [4, 4] needs [2, 4]");
  // The refused shards changed nothing: the right one still completes it.
  ASSERT_OK(store.put("k", cut(a, bottom).view(), PutOptions::box(bottom)).get(kWait));
  EXPECT_TRUE(same(*store.get("k").get(kWait), a));
  // A slice outside the key's global shape.
  EXPECT_ERROR(store.get("k", ReadOptions::box(TensorSlice::make({8, 8}, {0, 0}, {1, 1}).value()))
                   .get(kWait),
               Errc::out_of_range, "is not in its global shape [4, 4]");
  auto small = Tensor::zeros(DType::float32, {1, 1}).value();
  EXPECT_ERROR(store.get_into("k", small.view(), ReadOptions::box(top)).get(kWait),
               Errc::shape_mismatch, "slice [2, 4], destination [1, 1]");
}

// -- sharded state dicts ---------------------------------------------------------

// A model whose entries are sharded differently: the writer's layout.
struct Model {
  std::map<std::string, Tensor> whole;  // name -> global tensor
  std::map<std::string, Placement> placement;
  std::int64_t step = 0;
};

Model model(float base, std::int64_t step) {
  Model m;
  auto add = [&](const std::string& name, Shape shape, std::optional<Placement> p) {
    Tensor t = reference(shape);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] += base;
    m.whole.emplace(name, std::move(t));
    if (p) m.placement.emplace(name, *p);
  };
  add("embed", {10, 8}, Placement::make({4}, {P::shard(0)}).value());      // uneven rows
  add("proj", {6, 12}, Placement::make({4}, {P::shard(1)}).value());       // columns
  add("tiny", {3, 4}, Placement::make({4}, {P::shard(0)}).value());        // rank 3's box is empty
  add("none", {0, 4}, Placement::make({4}, {P::shard(0)}).value());        // nothing at all
  add("norm", {8}, std::nullopt);                                          // whole, packed
  add("head", {64, 300}, Placement::make({4}, {P::replicate()}).value());  // replicas, 75 KiB
  m.step = step;
  return m;
}

// Rank `rank`'s part of `m`: its local state dict (owning the boxes) and layout.
struct Part {
  StateDict sd;
  std::map<std::string, RankShard> layout;
};

Part part_of(const Model& m, std::int64_t rank) {
  Part p;
  for (const auto& [name, t] : m.whole) {
    auto it = m.placement.find(name);
    if (it == m.placement.end()) {
      EXPECT_OK(p.sd.insert(name, t));
      continue;
    }
    const RankShard mine = it->second.shard_for(t.shape(), rank).value();
    EXPECT_OK(p.sd.insert(name, cut(t, mine.slice)));
    p.layout.emplace(name, mine);
  }
  EXPECT_OK(p.sd.insert("step", Value::int64(m.step)));
  return p;
}

// The reader's placements: another mesh, another sharding of every entry.
std::map<std::string, Placement> reader_placements() {
  const auto cols = Placement::make({2, 2}, {P::shard(1), P::replicate()}).value();
  const auto rows2d = Placement::make({2, 2}, {P::shard(0), P::shard(0)}).value();
  return {{"embed", cols},  {"proj", rows2d},
          {"tiny", cols},   {"none", rows2d},
          {"norm", rows2d}, {"head", Placement::make({2, 2}, {P::shard(0), P::shard(1)}).value()}};
}

// Reads `key` as reader rank `rank` of reader_placements() and checks every
// box against `m`.
void expect_reads_as(Store& store, const std::string& key, const Model& m, std::int64_t rank) {
  StateDict sd;
  std::map<std::string, TensorSlice> boxes;
  std::map<std::string, Tensor> want;
  for (const auto& [name, p] : reader_placements()) {
    const Tensor& whole = m.whole.at(name);
    const auto box = p.slice_for(whole.shape(), rank).value();
    boxes.emplace(name, box);
    want.emplace(name, cut(whole, box));
    ASSERT_OK(sd.insert(name, Tensor::zeros(DType::float32, box.local_shape()).value()));
  }
  ASSERT_OK(sd.insert("step", Value::int64(-1)));
  ASSERT_OK(
      store.state_dicts().get_into(key, sd, StateDictReadOptions::of_boxes(boxes)).get(kWait));
  for (const auto& [name, t] : want) {
    const auto* e = sd.find(name);
    EXPECT_TRUE(same(e->owned, t)) << name << " on reader rank " << rank;
  }
  EXPECT_EQ(sd.find("step")->value->as_int64(), m.step);
}

void expect_whole(Store& store, const std::string& key, const Model& m) {
  auto got = store.state_dicts().get(key).get(kWait);
  ASSERT_OK(got);
  for (const auto& [name, t] : m.whole) {
    const auto* e = got->find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_TRUE(same(e->owned, t)) << name;
  }
  EXPECT_EQ(got->find("step")->value->as_int64(), m.step);
}

TEST(ShardedStateDict, PutByOneMeshIsReadByAnotherWithOtherShapes) {
  auto store = Store::embedded().value();
  const Model v1 = model(0, 1);
  for (std::int64_t r = 0; r < 4; ++r) {
    // Ranks in an odd order: 3, 1, 0, 2. Nothing is visible before the last.
    const std::int64_t rank = (r * 3 + 3) % 4;
    Part p = part_of(v1, rank);
    // Each rank's part is one commit over its channel.
    const auto before = store.admin().fast_path_stats().state_dict_puts;
    ASSERT_OK(store.state_dicts().put_sharded("m", p.sd, p.layout, rank).get(kWait));
    EXPECT_EQ(store.admin().fast_path_stats().state_dict_puts, before + 1) << "rank " << rank;
    EXPECT_EQ(*store.exists("m").get(kWait), r == 3) << "after rank " << rank;
    if (r < 3) {
      EXPECT_ERROR(store.state_dicts().get("m").get(kWait), Errc::partially_committed,
                   "'m' is partially committed: it is sharded state dict 'm', which commits once "
                   "all its 7 keys are complete; ");
      EXPECT_ERROR(store.get("m/embed").get(kWait), Errc::partially_committed,
                   "'m/embed' is partially committed: it belongs to sharded state dict 'm'");
    }
  }
  expect_whole(store, "m", v1);
  for (std::int64_t r = 0; r < 4; ++r) expect_reads_as(store, "m", v1, r);

  // Version 2 drops "tiny": readers see version 1 whole until every rank
  // is in, then version 2 whole, and "m/tiny" is gone with the old version.
  Model v2 = model(1000, 2);
  v2.whole.erase("tiny");
  v2.placement.erase("tiny");
  for (std::int64_t rank = 0; rank < 4; ++rank) {
    Part p = part_of(v2, rank);
    ASSERT_OK(store.state_dicts().put_sharded("m", p.sd, p.layout, rank).get(kWait));
    if (rank < 3) expect_whole(store, "m", v1);
  }
  expect_whole(store, "m", v2);
  EXPECT_FALSE(*store.exists("m/tiny").get(kWait));
  auto keys = store.keys("m").get(kWait);
  ASSERT_OK(keys);
  // Sharded entries stand alone however small; "norm" is packed (m#packed).
  EXPECT_EQ(*keys, (std::vector<std::string>{"m", "m/embed", "m/head", "m/proj", "m/step"}));
  EXPECT_TRUE(*store.exists("m#packed").get(kWait));
}

TEST(ShardedStateDict, PlainStateDictsAreReadByBoxesToo) {
  // A state dict put whole by one process is read as shards by a mesh.
  auto store = Store::embedded().value();
  const Model m = model(5, 7);
  StateDict sd;
  for (const auto& [name, t] : m.whole) ASSERT_OK(sd.insert(name, t.view()));
  ASSERT_OK(sd.insert("step", Value::int64(m.step)));
  ASSERT_OK(store.state_dicts().put("plain", sd).get(kWait));
  for (std::int64_t r = 0; r < 4; ++r) expect_reads_as(store, "plain", m, r);
}

TEST(ShardedStateDict, DisagreementsAndBadLayoutsAreRefusedWithNothingVisible) {
  auto store = Store::embedded().value();
  const Model m = model(0, 1);
  Part p0 = part_of(m, 0);
  ASSERT_OK(store.state_dicts().put_sharded("m", p0.sd, p0.layout, 0).get(kWait));

  // A rank with an entry the others lack.
  Part extra = part_of(m, 1);
  ASSERT_OK(extra.sd.insert("extra", Tensor::zeros(DType::float32, {200, 200}).value()));
  EXPECT_ERROR(store.state_dicts().put_sharded("m", extra.sd, extra.layout, 1).get(kWait),
               Errc::invalid_argument,
               "ranks disagree on its entries: keys only earlier ranks put: none; keys only this "
               "rank puts: 'm/extra'");
  // A rank whose global shape of an entry differs (its layout differs).
  Part shape = part_of(m, 1);
  shape.layout.at("proj").slice = TensorSlice::make({6, 16}, {0, 3}, {6, 3}).value();
  EXPECT_ERROR(store.state_dicts().put_sharded("m", shape.sd, shape.layout, 1).get(kWait),
               Errc::invalid_argument, "ranks disagree on its layout");
  // A replica whose bytes differ from rank 0's.
  Part odd = part_of(m, 1);
  Tensor head = reference({64, 300});
  head.data_as<float>()[17] = -1;
  StateDict odd_sd;
  for (const auto& e : odd.sd.entries()) {
    if (e.name == "head") {
      ASSERT_OK(odd_sd.insert("head", head));
    } else if (e.is_tensor()) {
      ASSERT_OK(odd_sd.insert(e.name, e.owned));
    } else {
      ASSERT_OK(odd_sd.insert(e.name, *e.value));
    }
  }
  EXPECT_ERROR(store.state_dicts().put_sharded("m", odd_sd, odd.layout, 1).get(kWait),
               Errc::invalid_argument,
               "put shard of 'm/head': replicas of shard [0:64, 0:300] of [64, 300] hold "
               "different bytes");
  // Bad input caught before anything moves.
  Part bad = part_of(m, 2);
  bad.layout.at("embed").slice = TensorSlice::make({10, 8}, {0, 0}, {2, 8}).value();
  EXPECT_ERROR(store.state_dicts().put_sharded("m", bad.sd, bad.layout, 2).get(kWait),
               Errc::shape_mismatch,
               "entry 'embed' has shape [3, 8], its slice [0:2, 0:8] of [10, 8] needs [2, 8]");
  Part ghost = part_of(m, 2);
  ghost.layout.emplace("ghost", RankShard{TensorSlice::full({2}), 1});
  EXPECT_ERROR(store.state_dicts().put_sharded("m", ghost.sd, ghost.layout, 2).get(kWait),
               Errc::invalid_argument, "the layout names 'ghost', no entry of the state dict");
  EXPECT_ERROR(store.state_dicts().put_sharded("m", p0.sd, p0.layout, -1).get(kWait),
               Errc::invalid_argument, "rank must be >= 0, got -1");
  EXPECT_FALSE(*store.exists("m").get(kWait));

  // The refusals changed nothing: the right ranks complete it.
  for (std::int64_t rank = 1; rank < 4; ++rank) {
    Part p = part_of(m, rank);
    ASSERT_OK(store.state_dicts().put_sharded("m", p.sd, p.layout, rank).get(kWait));
  }
  expect_whole(store, "m", m);

  // A reader's box outside an entry, or a destination of another shape.
  StateDict sd;
  for (const auto& [name, t] : m.whole) {
    ASSERT_OK(sd.insert(name, Tensor::zeros(DType::float32, t.shape()).value()));
  }
  ASSERT_OK(sd.insert("step", Value::int64(0)));
  const std::map<std::string, TensorSlice> outside = {
      {"embed", TensorSlice::make({20, 8}, {0, 0}, {10, 8}).value()}};
  EXPECT_ERROR(
      store.state_dicts().get_into("m", sd, StateDictReadOptions::of_boxes(outside)).get(kWait),
      Errc::shape_mismatch, "embed (stored [10, 8], box [0:10, 0:8] of [20, 8])");
  const std::map<std::string, TensorSlice> smaller = {
      {"embed", TensorSlice::make({10, 8}, {0, 0}, {5, 8}).value()}};
  EXPECT_ERROR(
      store.state_dicts().get_into("m", sd, StateDictReadOptions::of_boxes(smaller)).get(kWait),
      Errc::shape_mismatch,
      "embed (box [0:5, 0:8] of [10, 8] has shape [5, 8], destination [10, 8])");
  const std::map<std::string, TensorSlice> on_value = {{"step", TensorSlice::full({1})}};
  EXPECT_ERROR(
      store.state_dicts().get_into("m", sd, StateDictReadOptions::of_boxes(on_value)).get(kWait),
      Errc::invalid_argument, "step (a box for a value)");
}

TEST(ShardedStateDict, RemoveDropsAPutThatWillNeverComplete) {
  // A writer mesh died after two ranks: remove() clears the partial put,
  // and a new mesh puts the state dict from scratch.
  auto store = Store::embedded().value();
  const Model m = model(0, 3);
  for (std::int64_t rank : {0, 1}) {
    Part p = part_of(m, rank);
    ASSERT_OK(store.state_dicts().put_sharded("m", p.sd, p.layout, rank).get(kWait));
  }
  Part again = part_of(m, 1);
  EXPECT_ERROR(store.state_dicts().put_sharded("m", again.sd, again.layout, 1).get(kWait),
               Errc::invalid_argument, "is in already");
  ASSERT_OK(store.remove("m").get(kWait));
  for (std::int64_t rank = 0; rank < 4; ++rank) {
    Part p = part_of(m, rank);
    ASSERT_OK(store.state_dicts().put_sharded("m", p.sd, p.layout, rank).get(kWait));
  }
  expect_whole(store, "m", m);
}

TEST(ShardedStore, ReplicasWithDifferentBytesAreRefused) {
  auto store = Store::embedded().value();
  const auto p = Placement::make({2}, {P::replicate()}).value();
  const Tensor a = reference({4, 4});
  Tensor b = reference({4, 4});
  b.data_as<float>()[15] = 0.5f;
  ASSERT_OK(store.put("k", a.view(), PutOptions::shard({4, 4}, p, 0)).get(kWait));
  EXPECT_ERROR(store.put("k", b.view(), PutOptions::shard({4, 4}, p, 1)).get(kWait),
               Errc::invalid_argument,
               "replicas of shard [0:4, 0:4] of [4, 4] hold different bytes");
  // A strided view of the same bytes is the same replica.
  Tensor wide = reference({4, 8});
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) wide.data_as<float>()[r * 8 + c] = a.data_as<float>()[r * 4 + c];
  }
  TensorView strided(wide.data(), DType::float32, {4, 4}, {8, 1});
  ASSERT_OK(store.put("k", strided, PutOptions::shard({4, 4}, p, 1)).get(kWait));
  EXPECT_TRUE(same(*store.get("k").get(kWait), a));
}

}  // namespace
}  // namespace meshstore
