// Copies of whole keys in one process (StoreOptions::placement.replicas):
// every kind of whole put commits with its copies on other volumes, reads
// return the bytes put, and a remove or an overwrite frees every copy.
// Deaths are in tests/integration/copies_test.cpp.

#include <numeric>

#include "meshstore/store.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {
namespace {

Store store_of(int volumes, int replicas) {
  StoreOptions o;
  o.placement.strategy = "controller_colocated";
  o.placement.num_volumes = volumes;
  o.placement.replicas = replicas;
  return Store::embedded(o).value();
}

std::map<std::string, KeyInfo> listed(Store& store) {
  std::map<std::string, KeyInfo> out;
  auto all = store.list("").get(kWait).value();
  for (auto& k : all) out[k.key] = k;
  return out;
}

// Committed objects over every volume, and the volumes holding any.
std::pair<std::uint64_t, int> objects_held(Store& store) {
  std::uint64_t n = 0;
  int volumes = 0;
  const auto stats = store.admin().stats().get(kWait).value();
  for (const auto& v : stats) {
    n += v.objects;
    volumes += v.objects != 0;
  }
  return {n, volumes};
}

TEST(CopiesInOneProcess, EveryWholePutIsKeptOnTwoVolumes) {
  auto store = store_of(3, 2);
  std::vector<float> big(1 << 18);  // 1 MiB: not inline
  std::iota(big.begin(), big.end(), 0.0f);
  float small = 5.0f;
  ASSERT_OK(store.put("big", TensorView::of(big.data(), {1 << 18})).get(kWait));
  ASSERT_OK(store.put("small", TensorView::of(&small, {})).get(kWait));
  ASSERT_OK(store.put_object("obj", "bytes of an object").get(kWait));
  float a = 1, b = 2;
  ASSERT_OK(store.put_batch({{"b/0", TensorView::of(&a, {})}, {"b/1", TensorView::of(&b, {})}})
                .get(kWait));
  StateDict sd;
  ASSERT_OK(sd.insert("w", TensorView::of(big.data(), {1 << 18})));
  ASSERT_OK(store.state_dicts().put("sd", sd).get(kWait));
  auto keys = listed(store);
  for (const auto& name : {"big", "small", "obj", "b/0", "b/1"}) {
    ASSERT_EQ(keys.count(name), 1u) << name;
    EXPECT_EQ(keys[name].copies, 2u) << name;
    EXPECT_EQ(keys[name].shards, 1u) << name;
  }
  EXPECT_EQ(keys["big"].nbytes, std::uint64_t{1} << 20);
  for (const auto& [k, info] : keys) EXPECT_EQ(info.copies, 2u) << k;  // the state dict's too
  auto got = store.get("big").get(kWait);
  ASSERT_OK(got);
  EXPECT_EQ(got->data_as<float>()[4321], 4321.0f);
  EXPECT_EQ(*store.get("small").get(kWait)->data_as<float>(), 5.0f);
  EXPECT_EQ(store.get_object("obj").get(kWait).value(), "bytes of an object");
  std::vector<float> back(1 << 18);
  StateDict into;
  ASSERT_OK(into.insert("w", TensorView::of(back.data(), {1 << 18})));
  ASSERT_OK(store.state_dicts().get_into("sd", into).get(kWait));
  EXPECT_EQ(back, big);
  // Every key's two objects, spread over the three volumes.
  const auto [objects, volumes] = objects_held(store);
  EXPECT_EQ(objects, 2 * keys.size());
  EXPECT_GE(volumes, 2);
}

TEST(CopiesInOneProcess, ARemoveOrAnOverwriteFreesEveryCopy) {
  auto store = store_of(2, 2);
  std::vector<float> big(1 << 18, 1.0f);
  ASSERT_OK(store.put("k", TensorView::of(big.data(), {1 << 18})).get(kWait));
  EXPECT_EQ(objects_held(store), std::make_pair(std::uint64_t{2}, 2));
  big[7] = 2.0f;
  ASSERT_OK(store.put("k", TensorView::of(big.data(), {1 << 18})).get(kWait));
  EXPECT_EQ(objects_held(store).first, 2u);  // the old version's copies went
  EXPECT_EQ(store.get("k").get(kWait)->data_as<float>()[7], 2.0f);
  ASSERT_OK(store.remove("k").get(kWait));
  EXPECT_EQ(objects_held(store).first, 0u);
  EXPECT_FALSE(*store.exists("k").get(kWait));
}

TEST(CopiesInOneProcess, OneVolumeKeepsOneCopyAndSaysSo) {
  auto store = store_of(1, 3);
  float x = 3.0f;
  ASSERT_OK(store.put("k", TensorView::of(&x, {})).get(kWait));
  EXPECT_EQ(listed(store)["k"].copies, 1u);
  EXPECT_EQ(*store.get("k").get(kWait)->data_as<float>(), 3.0f);
}

TEST(CopiesInOneProcess, ShardedKeysKeepTheirPlacementsReplicasOnly) {
  auto store = store_of(2, 2);
  std::vector<float> rows(8, 1.0f);
  const Shape global{4, 4};
  auto p = Placement::make({2}, {DimPlacement::shard(0)}).value();
  for (std::int64_t r = 0; r < 2; ++r) {
    ASSERT_OK(store.put("s", TensorView::of(rows.data(), {2, 4}), PutOptions::shard(global, p, r))
                  .get(kWait));
  }
  auto keys = listed(store);
  EXPECT_EQ(keys["s"].shards, 2u);
  EXPECT_EQ(keys["s"].copies, 1u);
}

TEST(CopiesInOneProcess, APutAsksForItsOwnNumberOfCopies) {
  std::vector<float> big(1 << 18, 4.0f);
  const auto view = TensorView::of(big.data(), {1 << 18});
  auto one = store_of(3, 1);
  PutOptions o;
  o.replicas = 3;
  ASSERT_OK(one.put("three", view, o).get(kWait));
  ASSERT_OK(one.put("default", view).get(kWait));
  auto keys = listed(one);
  EXPECT_EQ(keys["three"].copies, 3u);
  EXPECT_EQ(keys["default"].copies, 1u);
  EXPECT_EQ(objects_held(one), std::make_pair(std::uint64_t{4}, 3));
  EXPECT_EQ(one.get("three").get(kWait)->data_as<float>()[1000], 4.0f);
  // A put asking for one copy in a store keeping two keeps one.
  auto two = store_of(2, 2);
  o.replicas = 1;
  ASSERT_OK(two.put("single", view, o).get(kWait));
  EXPECT_EQ(listed(two)["single"].copies, 1u);
  // Out of range, or with a box: refused, nothing put.
  o.replicas = 17;
  EXPECT_ERROR(two.put("bad", view, o).get(kWait), Errc::invalid_argument,
               "put 'bad': replicas must be in [1, 16], got 17");
  PutOptions boxed = PutOptions::box(TensorSlice::full({1 << 18}));
  boxed.replicas = 2;
  EXPECT_ERROR(two.put("bad", view, boxed).get(kWait), Errc::invalid_argument,
               "replicas with a slice or placement");
  EXPECT_FALSE(*two.exists("bad").get(kWait));
}

}  // namespace
}  // namespace meshstore::testing
