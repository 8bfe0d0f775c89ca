#include "meshstore/store.hpp"

#include <spdlog/sinks/ostream_sink.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include "meshstore/logging.hpp"
#include "meshstore/tensor.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using namespace std::chrono_literals;
using testing::kWait;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = std::make_unique<Store>(Store::embedded(options()).value()); }
  virtual StoreOptions options() { return StoreOptions{}; }
  Store& store() { return *store_; }
  std::unique_ptr<Store> store_;
};

std::vector<float> iota_floats(std::size_t n, float start = 0.0f) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST_F(StoreTest, PutThenGetRoundTripsEveryDType) {
  for (DType d : all_dtypes()) {
    const std::string key = "dtypes/" + std::string(dtype_name(d));
    std::vector<std::uint8_t> bytes(3 * 5 * dtype_size(d));
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 7 + 1);
    ASSERT_OK(store().put(key, TensorView(bytes.data(), d, {3, 5})).get(kWait)) << key;
    auto t = store().get(key).get(kWait);
    ASSERT_OK(t) << key;
    EXPECT_EQ(t->dtype(), d);
    EXPECT_EQ(t->shape(), (Shape{3, 5}));
    EXPECT_EQ(std::memcmp(t->data(), bytes.data(), bytes.size()), 0) << key;
  }
}

TEST_F(StoreTest, GetUnknownKeyNamesTheKey) {
  EXPECT_ERROR(store().get("no/such/key").get(kWait), Errc::not_found, "'no/such/key'");
  std::vector<float> dst(4);
  EXPECT_ERROR(store().get_into("ghost", TensorView::of(dst.data(), {4})).get(kWait),
               Errc::not_found, "'ghost'");
  EXPECT_ERROR(store().get_object("ghost").get(kWait), Errc::not_found, "'ghost'");
}

TEST_F(StoreTest, GetIntoFillsTheCallersBuffer) {
  auto w = iota_floats(12);
  ASSERT_OK(store().put("w", TensorView::of(w.data(), {3, 4})).get(kWait));
  std::vector<float> dst(12, -1.0f);
  ASSERT_OK(store().get_into("w", TensorView::of(dst.data(), {3, 4})).get(kWait));
  EXPECT_EQ(dst, w);
}

TEST_F(StoreTest, GetIntoWithWrongDTypeFailsAndLeavesDestinationUntouched) {
  auto w = iota_floats(12);
  ASSERT_OK(store().put("layers.3.w", TensorView::of(w.data(), {3, 4})).get(kWait));
  std::vector<std::int32_t> dst(12, 77);
  auto r = store().get_into("layers.3.w", TensorView::of(dst.data(), {3, 4})).get(kWait);
  EXPECT_ERROR(r, Errc::dtype_mismatch,
               "get_into: dtype mismatch for 'layers.3.w': stored float32, destination int32");
  EXPECT_EQ(dst, std::vector<std::int32_t>(12, 77));
}

TEST_F(StoreTest, GetIntoWithWrongShapeFailsAndLeavesDestinationUntouched) {
  auto w = iota_floats(12);
  ASSERT_OK(store().put("w", TensorView::of(w.data(), {3, 4})).get(kWait));
  std::vector<float> dst(12, 5.0f);
  EXPECT_ERROR(store().get_into("w", TensorView::of(dst.data(), {4, 3})).get(kWait),
               Errc::shape_mismatch, "stored [3, 4], destination [4, 3]");
  EXPECT_EQ(dst, std::vector<float>(12, 5.0f));
}

TEST_F(StoreTest, BatchGetIntoChecksEveryDestinationBeforeMovingBytes) {
  auto a = iota_floats(4);
  auto b = iota_floats(4, 10.0f);
  ASSERT_OK(
      store()
          .put_batch({{"a", TensorView::of(a.data(), {4})}, {"b", TensorView::of(b.data(), {4})}})
          .get(kWait));
  std::vector<float> da(4, -1.0f);
  std::vector<double> db(4, -1.0);
  auto r = store()
               .get_into_batch(
                   {{"a", TensorView::of(da.data(), {4})}, {"b", TensorView::of(db.data(), {4})}})
               .get(kWait);
  EXPECT_ERROR(r, Errc::dtype_mismatch, "'b'");
  EXPECT_EQ(da, std::vector<float>(4, -1.0f));  // 'a' was fine, but nothing moved
}

TEST_F(StoreTest, EmptyTensorsAndScalars) {
  ASSERT_OK(store().put("empty", TensorView(nullptr, DType::float32, {0, 7})).get(kWait));
  auto e = store().get("empty").get(kWait);
  ASSERT_OK(e);
  EXPECT_EQ(e->shape(), (Shape{0, 7}));
  EXPECT_EQ(e->nbytes(), 0u);

  double pi = 3.25;
  ASSERT_OK(store().put("scalar", TensorView::of(&pi, {})).get(kWait));
  auto s = store().get("scalar").get(kWait);
  ASSERT_OK(s);
  EXPECT_TRUE(s->shape().empty());
  EXPECT_EQ(*s->data_as<double>(), 3.25);
  double back = 0;
  ASSERT_OK(store().get_into("scalar", TensorView::of(&back, {})).get(kWait));
  EXPECT_EQ(back, 3.25);
}

TEST_F(StoreTest, NonContiguousPutIsPacked) {
  auto base = iota_floats(24);                                              // 4x6
  auto cols = TensorView::of(base.data(), {4, 6}).narrow(1, 1, 3).value();  // 4x3, strided
  ASSERT_OK(store().put("cols", cols).get(kWait));
  auto t = store().get("cols").get(kWait);
  ASSERT_OK(t);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(t->data_as<float>()[r * 3 + c], base[r * 6 + c + 1]);
  }
  auto transposed = TensorView::of(base.data(), {4, 6}).transpose(0, 1).value();  // 6x4
  ASSERT_OK(store().put("t", transposed).get(kWait));
  auto tt = store().get("t").get(kWait);
  ASSERT_OK(tt);
  EXPECT_EQ(tt->shape(), (Shape{6, 4}));
  EXPECT_EQ(tt->data_as<float>()[1], base[6]);
}

TEST_F(StoreTest, NonContiguousGetIntoScatters) {
  auto w = iota_floats(12);
  ASSERT_OK(store().put("w", TensorView::of(w.data(), {3, 4})).get(kWait));
  std::vector<float> big(3 * 8, -1.0f);
  auto dst = TensorView::of(big.data(), {3, 8}).narrow(1, 2, 4).value();
  ASSERT_OK(store().get_into("w", dst).get(kWait));
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 8; ++c) {
      EXPECT_EQ(big[r * 8 + c], (c >= 2 && c < 6) ? w[r * 4 + c - 2] : -1.0f) << r << "," << c;
    }
  }
}

TEST_F(StoreTest, OverwriteWithADifferentShapeReplacesTheValue) {
  auto a = iota_floats(4);
  ASSERT_OK(store().put("k", TensorView::of(a.data(), {2, 2})).get(kWait));
  std::vector<std::int64_t> b{9, 8, 7, 6, 5, 4};
  ASSERT_OK(store().put("k", TensorView::of(b.data(), {3, 2})).get(kWait));
  auto t = store().get("k").get(kWait);
  ASSERT_OK(t);
  EXPECT_EQ(t->dtype(), DType::int64);
  EXPECT_EQ(t->shape(), (Shape{3, 2}));
  EXPECT_EQ(t->data_as<std::int64_t>()[5], 4);
  // The replaced value's memory is released.
  auto stats = store().admin().stats().get(kWait);
  ASSERT_OK(stats);
  EXPECT_EQ((*stats)[0].objects, 1u);
  EXPECT_EQ((*stats)[0].bytes_held, 48u);
}

TEST_F(StoreTest, ObjectsRoundTripAndAreNotTensors) {
  std::string blob("binary\0payload", 14);
  ASSERT_OK(store().put_object("cfg", blob).get(kWait));
  auto back = store().get_object("cfg").get(kWait);
  ASSERT_OK(back);
  EXPECT_EQ(*back, blob);
  ASSERT_OK(store().put_object("empty", "").get(kWait));
  EXPECT_EQ(*store().get_object("empty").get(kWait), "");
  EXPECT_ERROR(store().get("cfg").get(kWait), Errc::wrong_kind, "holds an object");
  auto w = iota_floats(2);
  ASSERT_OK(store().put("t", TensorView::of(w.data(), {2})).get(kWait));
  EXPECT_ERROR(store().get_object("t").get(kWait), Errc::wrong_kind, "holds a tensor");
}

TEST_F(StoreTest, ObjectsKeepTheFormatTheyWerePutWith) {
  // Small objects travel inline, large ones through a transport: the format
  // is the key's, so both keep it, and list() reports it.
  const std::string big(std::size_t{200} << 10, 'x');
  ASSERT_OK(store().put_object("o.text", "h\xc3\xa9llo", ObjectFormat::utf8).get(kWait));
  ASSERT_OK(store().put_object("o.pickled", big, ObjectFormat::pickle).get(kWait));
  ASSERT_OK(store().put_object("o.raw", "raw").get(kWait));
  auto text = store().get_stored_object("o.text").get(kWait);
  ASSERT_OK(text);
  EXPECT_EQ(text->bytes, "h\xc3\xa9llo");
  EXPECT_EQ(text->format, ObjectFormat::utf8);
  auto pickled = store().get_stored_object("o.pickled").get(kWait);
  ASSERT_OK(pickled);
  EXPECT_EQ(pickled->bytes, big);
  EXPECT_EQ(pickled->format, ObjectFormat::pickle);
  EXPECT_EQ(store().get_stored_object("o.raw").get(kWait)->format, ObjectFormat::bytes);
  auto listed = store().list("o").get(kWait);
  ASSERT_OK(listed);
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_EQ((*listed)[0].object_format, ObjectFormat::pickle);  // o.pickled
  EXPECT_EQ((*listed)[1].object_format, ObjectFormat::bytes);   // o.raw
  EXPECT_EQ((*listed)[2].object_format, ObjectFormat::utf8);    // o.text
  EXPECT_ERROR(store().put_object("o.bad", "x", static_cast<ObjectFormat>(7)).get(kWait),
               Errc::invalid_argument, "unknown object format 7");
  EXPECT_ERROR(store().get_stored_object("o.none").get(kWait), Errc::not_found, "o.none");
}

// Without authentication, a store reachable from other hosts says so
// when it starts; one on loopback says nothing.
TEST(StoreListen, BeyondLoopbackItWarnsThatAnyoneCanReachIt) {
  std::ostringstream seen;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(seen);
  auto logger = log::get("network");
  logger->sinks().push_back(sink);
  {
    StoreOptions loopback;
    loopback.listen = "127.0.0.1:0";
    auto quiet = Store::embedded(loopback);
    ASSERT_OK(quiet);
    EXPECT_EQ(seen.str().find("not loopback"), std::string::npos) << seen.str();
    StoreOptions every;
    every.listen = "0.0.0.0:0";
    auto exposed = Store::embedded(every);
    ASSERT_OK(exposed);
    EXPECT_NE(seen.str().find("the store listens on 0.0.0.0:"), std::string::npos) << seen.str();
    EXPECT_NE(seen.str().find("without authentication"), std::string::npos);
  }
  logger->sinks().pop_back();
}

// A cache-style store: with eviction "lru" a full volume makes room by
// removing the least recently used keys put on their own; state dicts stay.
TEST(StoreEviction, AFullVolumeDropsTheLeastRecentlyUsedKeys) {
  StoreOptions o;
  o.limits.volume_capacity_bytes = std::uint64_t{1} << 20;  // four 256 KiB tensors
  o.limits.eviction = "lru";
  auto store = Store::embedded(o);
  ASSERT_OK(store);
  std::vector<float> chunk(64 * 1024, 1.0f);  // 256 KiB
  const auto view = TensorView::of(chunk.data(), {64 * 1024});
  std::vector<std::int32_t> small(1024, 7);
  StateDict sd;
  ASSERT_OK(sd.insert("w", TensorView::of(small.data(), {1024})));
  ASSERT_OK(store->state_dicts().put("model", sd).get(kWait));  // a state dict is never evicted
  ASSERT_EQ(
      store->state_dicts().publish("pub", sd, PublishOptions::by_copy()).get(kWait)->version(),
      1u);  // nor a version pointer
  for (int i = 0; i < 3; ++i) ASSERT_OK(store->put("k" + std::to_string(i), view).get(kWait));
  // The fourth and fifth do not fit: k0, then k1 go (put first, never read since).
  ASSERT_OK(store->put("k3", view).get(kWait));
  EXPECT_FALSE(*store->exists("k0").get(kWait));
  ASSERT_OK(store->put("k4", view).get(kWait));
  EXPECT_FALSE(*store->exists("k1").get(kWait));
  for (const char* k : {"k2", "k3", "k4"}) EXPECT_TRUE(*store->exists(k).get(kWait)) << k;
  EXPECT_ERROR(store->get("k0").get(kWait), Errc::not_found, "k0");
  std::vector<std::int32_t> back(1024, 0);
  StateDict into;
  ASSERT_OK(into.insert("w", TensorView::of(back.data(), {1024})));
  ASSERT_OK(store->state_dicts().get_into("model", into).get(kWait));
  EXPECT_EQ(back[1023], 7);
  EXPECT_EQ(*store->state_dicts().latest("pub").get(kWait), 1u);
  // A put larger than the whole volume evicts what it can and still fails,
  // saying how full the volume is.
  std::vector<float> huge(512 * 1024, 2.0f);  // 2 MiB
  EXPECT_ERROR(store->put("huge", TensorView::of(huge.data(), {512 * 1024})).get(kWait),
               Errc::out_of_capacity, "is full");
  // Without eviction a full volume refuses.
  StoreOptions strict = o;
  strict.limits.eviction = "none";
  auto refusing = Store::embedded(strict);
  ASSERT_OK(refusing);
  for (int i = 0; i < 4; ++i) ASSERT_OK(refusing->put("k" + std::to_string(i), view).get(kWait));
  EXPECT_ERROR(refusing->put("k4", view).get(kWait), Errc::out_of_capacity, "is full");
  EXPECT_TRUE(*refusing->exists("k0").get(kWait));
  StoreOptions bad = o;
  bad.limits.eviction = "fifo";
  EXPECT_ERROR(Store::embedded(bad), Errc::invalid_argument, "eviction must be");
}

// Eviction never takes a key a reader holds: a view (get_view) pins its
// version in the volume, so the least recently used key that no reader
// holds goes instead; once the view is gone, its key can go too.
TEST(StoreEviction, AKeyAReaderHoldsIsNotEvicted) {
  StoreOptions o;
  o.limits.volume_capacity_bytes = std::uint64_t{1} << 20;  // four 256 KiB tensors
  o.limits.eviction = "lru";
  auto store = Store::embedded(o);
  ASSERT_OK(store);
  std::vector<std::vector<float>> values;
  for (int i = 0; i < 6; ++i) values.emplace_back(64 * 1024, static_cast<float>(i));  // 256 KiB
  auto put = [&](int i) {
    return store->put("k" + std::to_string(i), TensorView::of(values[i].data(), {64 * 1024}))
        .get(kWait);
  };
  ASSERT_OK(put(0));
  auto view = store->get("k0", ReadOptions::mapped()).get(kWait);  // a reader holds k0 from here
  ASSERT_OK(view);
  for (int i = 1; i < 4; ++i) ASSERT_OK(put(i));  // k0 is now the least recently used
  ASSERT_OK(put(4));                              // full: k1 goes, not the held k0
  EXPECT_TRUE(*store->exists("k0").get(kWait));
  EXPECT_FALSE(*store->exists("k1").get(kWait));
  EXPECT_EQ(std::memcmp(view->data(), values[0].data(), view->nbytes()), 0);
  // The reader lets go: k0, still the least recently used, goes next.
  *view = Tensor();
  ASSERT_OK(put(5));
  EXPECT_FALSE(*store->exists("k0").get(kWait));
  for (const char* k : {"k2", "k3", "k4", "k5"}) EXPECT_TRUE(*store->exists(k).get(kWait)) << k;
}

TEST_F(StoreTest, BatchPutAndGet) {
  std::vector<std::vector<float>> data;
  std::vector<std::pair<std::string, TensorView>> items;
  for (int i = 0; i < 20; ++i) data.push_back(iota_floats(100 + i, static_cast<float>(i)));
  for (int i = 0; i < 20; ++i) {
    items.emplace_back("batch." + std::to_string(i), TensorView::of(data[i].data(), {100 + i}));
  }
  ASSERT_OK(store().put_batch(items).get(kWait));
  std::vector<std::string> keys;
  for (auto& [k, v] : items) keys.push_back(k);
  auto got = store().get_batch(keys).get(kWait);
  ASSERT_OK(got);
  ASSERT_EQ(got->size(), 20u);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ((*got)[i].numel(), 100 + i);
    EXPECT_EQ(std::memcmp((*got)[i].data(), data[i].data(), data[i].size() * 4), 0) << i;
  }
  EXPECT_ERROR(store().get_batch({"batch.0", "nope"}).get(kWait), Errc::not_found, "'nope'");
}

TEST_F(StoreTest, BadInputIsRejectedAtOnceWithTheKeyNamed) {
  float x = 1;
  EXPECT_ERROR(store().put("", TensorView::of(&x, {})).get(kWait), Errc::invalid_argument,
               "key is empty");
  EXPECT_ERROR(store().put(std::string("a\0b", 3), TensorView::of(&x, {})).get(kWait),
               Errc::invalid_argument, "NUL");
  EXPECT_ERROR(store().put(std::string(5000, 'k'), TensorView::of(&x, {})).get(kWait),
               Errc::invalid_argument, "longer than");
  EXPECT_ERROR(store().put("nulldata", TensorView(nullptr, DType::float32, {4})).get(kWait),
               Errc::invalid_argument, "put 'nulldata': null data");
  // Host memory labelled cuda:0: refused whether CUDA works here or not
  // (tests/cuda covers real device memory).
  if (cuda::status().ok()) {
    EXPECT_ERROR(
        store().put("gpu", TensorView(&x, DType::float32, {}, {}, Device::cuda(0))).get(kWait),
        Errc::invalid_argument, "put 'gpu': the memory at");
  } else {
    EXPECT_ERROR(
        store().put("gpu", TensorView(&x, DType::float32, {}, {}, Device::cuda(0))).get(kWait),
        Errc::unavailable, "put 'gpu': device cuda:0: CUDA is not usable here");
  }
  EXPECT_ERROR(
      store().put_batch({{"d", TensorView::of(&x, {})}, {"d", TensorView::of(&x, {})}}).get(kWait),
      Errc::invalid_argument, "'d' appears twice");
  EXPECT_ERROR(store().get("").get(kWait), Errc::invalid_argument, "get: key is empty");
  EXPECT_FALSE(*store().exists("nulldata").get(kWait));
}

// The options structs of put, get and get_into, and of the state-dict
// reads: combinations that cannot be are refused at once, naming the key,
// and leave the store unchanged.
TEST_F(StoreTest, OptionsThatCannotGoTogetherAreRefusedWithTheKeyNamed) {
  std::vector<float> w = iota_floats(8), dst(8, -1.0f);
  ASSERT_OK(store().put("w", TensorView::of(w.data(), {8})).get(kWait));
  const auto half = TensorSlice::make({8}, {0}, {4}).value();
  const auto rows = Placement::make({2}, {DimPlacement::shard(0)}).value();

  PutOptions both = PutOptions::box(half);
  both.placement = rows;
  EXPECT_ERROR(store().put("s", TensorView::of(w.data(), {4}), both).get(kWait),
               Errc::invalid_argument, "put 's': both a slice and a placement");
  PutOptions stray;
  stray.rank = 1;
  EXPECT_ERROR(store().put("s", TensorView::of(w.data(), {8}), stray).get(kWait),
               Errc::invalid_argument, "put 's': a global shape or rank without a placement");
  EXPECT_FALSE(*store().exists("s").get(kWait));

  EXPECT_ERROR(store().get("w", ReadOptions::converting()).get(kWait), Errc::invalid_argument,
               "get 'w': cast converts into a destination: use get_into");
  ReadOptions view_of_box = ReadOptions::box(half);
  view_of_box.view = true;
  EXPECT_ERROR(store().get("w", view_of_box).get(kWait), Errc::invalid_argument,
               "get 'w': a view of a slice");
  EXPECT_ERROR(
      store().get_into("w", TensorView::of(dst.data(), {8}), ReadOptions::mapped()).get(kWait),
      Errc::invalid_argument, "get_into 'w': a view is get()'s");
  ReadOptions cast_box = ReadOptions::box(half);
  cast_box.cast = true;
  EXPECT_ERROR(store().get_into("w", TensorView::of(dst.data(), {4}), cast_box).get(kWait),
               Errc::unsupported, "get_into 'w': cast reads whole keys, not a slice");
  EXPECT_EQ(dst, std::vector<float>(8, -1.0f));

  // The same options, each alone, read what they say.
  auto box = store().get("w", ReadOptions::box(half)).get(kWait);
  ASSERT_OK(box);
  EXPECT_EQ(box->shape(), (Shape{4}));
  ASSERT_OK(
      store().get_into("w", TensorView::of(dst.data(), {4}), ReadOptions::box(half)).get(kWait));
  EXPECT_EQ(std::vector<float>(dst.begin(), dst.begin() + 4),
            std::vector<float>(w.begin(), w.begin() + 4));

  StateDict sd;
  ASSERT_OK(sd.insert("x", TensorView::of(w.data(), {8})));
  ASSERT_OK(store().state_dicts().publish("p", sd, PublishOptions::by_copy()).get(kWait));
  auto boxes = StateDictReadOptions::of_boxes({{"x", half}});
  EXPECT_ERROR(store().state_dicts().get_latest_into("p", sd, boxes).get(kWait),
               Errc::invalid_argument, "'p': boxes are read by get_into, not by a version read");
  EXPECT_ERROR(store().state_dicts().get_next_into("p", sd, 0, 1s, boxes).get(kWait),
               Errc::invalid_argument, "'p': boxes are read by get_into, not by a version read");
  boxes.cast = true;
  EXPECT_ERROR(store().state_dicts().get_into("p/v1", sd, boxes).get(kWait), Errc::unsupported,
               "'p/v1': cast reads whole entries, not boxes");
}

// A facet is a handle onto its store: after close() its calls answer
// shutdown, as the store's own do.
TEST_F(StoreTest, FacetsAnswerShutdownOnceTheStoreIsClosed) {
  auto dicts = store().state_dicts();
  auto admin = store().admin();
  ASSERT_OK(admin.stats().get(kWait));
  store().close();
  StateDict sd;
  EXPECT_ERROR(dicts.get("k").get(kWait), Errc::shutdown, "");
  EXPECT_ERROR(dicts.publish("p", sd).get(kWait), Errc::shutdown, "");
  EXPECT_ERROR(admin.stats().get(kWait), Errc::shutdown, "");
  EXPECT_EQ(admin.port(), 0);
}

TEST_F(StoreTest, KeysExistsAndRemove) {
  float x = 1;
  for (const char* k :
       {"model.layers.0.w", "model.layers.1.w", "model.layers_extra", "model/emb"}) {
    ASSERT_OK(store().put(k, TensorView::of(&x, {})).get(kWait));
  }
  EXPECT_EQ(*store().keys("model.layers").get(kWait),
            (std::vector<std::string>{"model.layers.0.w", "model.layers.1.w"}));
  EXPECT_EQ(store().keys().get(kWait)->size(), 4u);
  auto listed = store().list("model.layers").get(kWait);
  ASSERT_OK(listed);
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].key, "model.layers.0.w");
  EXPECT_EQ((*listed)[0].dtype, DType::float32);
  EXPECT_EQ((*listed)[0].shape, Shape{});
  EXPECT_EQ((*listed)[0].nbytes, 4u);
  EXPECT_EQ((*listed)[0].shards, 1u);
  EXPECT_FALSE((*listed)[0].is_object);
  EXPECT_GT((*listed)[1].version, (*listed)[0].version);
  EXPECT_TRUE(*store().exists("model/emb").get(kWait));
  ASSERT_OK(store().remove("model/emb").get(kWait));
  EXPECT_FALSE(*store().exists("model/emb").get(kWait));
  EXPECT_ERROR(store().get("model/emb").get(kWait), Errc::not_found, "model/emb");
  EXPECT_ERROR(store().remove("model/emb").get(kWait), Errc::not_found, "'model/emb'");
  EXPECT_EQ(*store().remove_batch({"model.layers.0.w", "missing", "model.layers.1.w"}).get(kWait),
            2u);
  EXPECT_EQ(*store().keys().get(kWait), std::vector<std::string>{"model.layers_extra"});
}

class SmallStoreTest : public StoreTest {
  StoreOptions options() override {
    StoreOptions o;
    o.limits.volume_capacity_bytes = 1 << 20;
    return o;
  }
};

TEST_F(SmallStoreTest, FullVolumeAnswersOutOfCapacityAndStaysUsable) {
  std::vector<std::uint8_t> big(2 << 20), small(1000, 3);
  auto r = store()
               .put("big", TensorView::of(big.data(), {static_cast<std::int64_t>(big.size())}))
               .get(kWait);
  EXPECT_ERROR(r, Errc::out_of_capacity, "volume 'volume-0' is full");
  EXPECT_FALSE(*store().exists("big").get(kWait));
  ASSERT_OK(store().put("small", TensorView::of(small.data(), {1000})).get(kWait));
  EXPECT_EQ(store().admin().stats().get(kWait)->front().bytes_held, 1000u);
}

TEST(StoreOptions, InvalidOptionsAreRejectedWithTheFieldNamed) {
  StoreOptions o;
  o.placement.num_volumes = 0;
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument,
               "StoreOptions: placement.num_volumes must be in [1, 1024], got 0");
  o = StoreOptions{};
  o.limits.connect_timeout = std::chrono::milliseconds(0);
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "limits.connect_timeout");
  o = StoreOptions{};
  o.limits.reconnect_timeout = std::chrono::milliseconds(-1);
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument,
               "limits.reconnect_timeout must not be negative, got -1 ms");
  o = StoreOptions{};
  o.transport.rpc_chunk_bytes = 100;
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "rpc_chunk_bytes");
  o = StoreOptions{};
  o.placement.strategy = "random";
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "unknown strategy 'random'");
  o = StoreOptions{};
  o.transport.name = "carrier-pigeon";
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "no transport named 'carrier-pigeon'");
  for (const auto& [name, status] : Store::Admin::transport_status()) {
    if (status.ok()) continue;  // rdma on a host without a device
    o = StoreOptions{};
    o.transport.name = name;
    EXPECT_ERROR(Store::embedded(o), Errc::unsupported,
                 "transport '" + name + "' is unavailable here: " + status.message());
  }
  // Which transports move GPU tensors without host staging, and why not:
  // every transport is listed; those that copy host memory only say so;
  // shm and cuda-ipc follow CUDA itself.
  const auto gpu = Store::Admin::gpu_transport_status();
  EXPECT_EQ(gpu.size(), Store::Admin::transport_status().size());
  for (const auto& [name, status] : gpu) {
    if (name == "tcp" || name == "rpc" || name == "cma") {
      EXPECT_ERROR(status, Errc::unsupported, name + " copies host memory only");
    } else if (name == "shm" || name == "cuda-ipc") {
      EXPECT_EQ(status.ok(), cuda::status().ok()) << name << ": " << status.message();
    } else if (name == "rdma" && !cuda::status().ok()) {
      EXPECT_FALSE(status.ok()) << "GPUDirect RDMA without CUDA";
    }
  }
  o = StoreOptions{};
  o.log_level = "chatty";
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "chatty");
  o = StoreOptions{};
  o.limits.request_timeout = 0ms;
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "request_timeout");
  o = StoreOptions{};
  o.transport.tcp_streams = 0;
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "tcp_streams");
  o = StoreOptions{};
  o.transport.tcp_chunk_bytes = 1000;
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "tcp_chunk_bytes");
  o = StoreOptions{};
  o.transport.shm_max_mappings = 70000;
  EXPECT_ERROR(Store::embedded(o), Errc::invalid_argument, "shm_max_mappings");
}

TEST(StoreOptions, EnvironmentForcesATransportAndIsValidated) {
  ::setenv("MESHSTORE_TRANSPORT", "carrier-pigeon", 1);
  EXPECT_ERROR(Store::embedded(), Errc::invalid_argument, "MESHSTORE_TRANSPORT");
  ::setenv("MESHSTORE_TRANSPORT", "tcp", 1);
  {
    auto store = Store::embedded().value();
    std::vector<float> w(1 << 16, 3.0f);  // 256 KiB: moved by the transport
    ASSERT_OK(store.put("w", TensorView::of(w.data(), {1 << 16})).get(kWait));
    std::vector<float> back(1 << 16, 0.0f);
    ASSERT_OK(store.get_into("w", TensorView::of(back.data(), {1 << 16})).get(kWait));
    EXPECT_EQ(back, w);
  }
  ::unsetenv("MESHSTORE_TRANSPORT");
}

TEST(StoreOptions, ForcedRpcTransportWorks) {
  StoreOptions o;
  o.transport.name = "rpc";
  o.placement.strategy = "controller_colocated";
  o.placement.num_volumes = 2;
  auto store = Store::embedded(o);
  ASSERT_OK(store);
  float x = 2.5f;
  ASSERT_OK(store->put("x", TensorView::of(&x, {})).get(kWait));
  EXPECT_EQ(*store->get("x").get(kWait)->data_as<float>(), 2.5f);
  EXPECT_EQ(store->admin().stats().get(kWait)->size(), 2u);
}

TEST(StoreLifecycle, ClosedStoreAnswersShutdown) {
  auto store = Store::embedded().value();
  store.close();
  store.close();  // idempotent
  EXPECT_TRUE(store.closed());
  float x = 1;
  EXPECT_ERROR(store.put("k", TensorView::of(&x, {})).get(kWait), Errc::shutdown, "closed");
  EXPECT_ERROR(store.get("k").get(kWait), Errc::shutdown, "closed");
  EXPECT_ERROR(store.keys().get(kWait), Errc::shutdown, "closed");
}

TEST(StoreLifecycle, CloseWithRequestsInFlightEndsThemWithAnError) {
  StoreOptions o;
  o.transport.rpc_chunk_bytes = 64 << 10;  // many chunks, so transfers are surely in flight
  auto store = Store::embedded(o).value();
  std::vector<std::uint8_t> data(32 << 20, 1);
  std::vector<Future<void>> puts;
  for (int i = 0; i < 8; ++i) {
    puts.push_back(
        store.put("k" + std::to_string(i),
                  TensorView::of(data.data(), {static_cast<std::int64_t>(data.size())})));
  }
  store.close();
  for (auto& f : puts) {
    auto r = f.get(kWait);  // completes: never a hang
    ASSERT_TRUE(f.ready());
    if (!r.ok()) {
      EXPECT_TRUE(r.status().code() == Errc::shutdown || r.status().code() == Errc::unavailable)
          << r.status().to_string();
    }
  }
}

TEST(StoreLifecycle, MovedStoreKeepsWorkingAndTheHuskAnswersShutdown) {
  auto a = Store::embedded().value();
  Store b = std::move(a);
  float x = 4;
  ASSERT_OK(b.put("k", TensorView::of(&x, {})).get(kWait));
  EXPECT_EQ(*b.get("k").get(kWait)->data_as<float>(), 4.0f);
  EXPECT_TRUE(a.closed());  // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_ERROR(a.get("k").get(kWait), Errc::shutdown, "moved from");
  EXPECT_ERROR(a.admin().stats().get(kWait), Errc::shutdown, "moved from");
  a.close();
}

TEST(StoreLifecycle, ContinuationsMayCallTheStoreWhileItCloses) {
  // A continuation that runs on the store's threads during close() must get
  // an answer (Errc::shutdown), not block the shutdown it runs inside.
  auto store = Store::embedded().value();
  float x = 1;
  std::vector<Future<std::vector<std::string>>> nested;
  std::mutex mu;  // guards nested
  std::vector<Future<void>> chained;
  for (int i = 0; i < 16; ++i) {
    chained.push_back(store.put("k" + std::to_string(i), TensorView::of(&x, {})).then([&] {
      auto f = store.keys();
      std::lock_guard<std::mutex> lock(mu);
      nested.push_back(f);
    }));
  }
  store.close();
  for (auto& f : chained) EXPECT_TRUE(f.wait_for(kWait));
  std::lock_guard<std::mutex> lock(mu);
  for (auto& f : nested) EXPECT_TRUE(f.wait_for(kWait));
}

TEST(StoreLifecycle, AStoreClosesWhileTheThreadThatMadeItLivesOn) {
  // A service makes its store on one thread and closes it from another,
  // the first still running (a pool thread). CAF leaves a reference to the
  // actor system in every thread that spawns an actor; the store must not
  // leave one behind, or close() waits for that thread forever (the test
  // would then end by its timeout).
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<Store>> made;
  bool closed = false;
  std::thread maker([&] {
    auto s = Store::embedded();
    std::unique_lock<std::mutex> lock(mu);
    made.emplace(std::move(s));
    cv.notify_all();
    cv.wait(lock, [&] { return closed; });  // lives on until the store is closed
  });
  Result<Store> store = Status(Errc::internal, "not made");
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kWait, [&] { return made.has_value(); }));
    store = std::move(*made);
  }
  ASSERT_OK(store);
  float x = 2;
  ASSERT_OK(store->put("x", TensorView::of(&x, {})).get(kWait));
  store->close();
  {
    std::lock_guard<std::mutex> lock(mu);
    closed = true;
  }
  cv.notify_all();
  maker.join();
  EXPECT_ERROR(store->get("x").get(kWait), Errc::shutdown, "");
}

TEST(StoreLifecycle, AStoreMadeOnAnotherStoresThreadClosesFirst) {
  // A continuation of store a (on one of a's threads) makes store b; b is
  // closed first, while a's threads live on. Making b must leave a's thread
  // holding a's reference again, not b's, or b's close() waits for a's
  // thread forever (the test would then end by its timeout).
  auto a = Store::embedded();
  ASSERT_OK(a);
  float x = 3;
  std::optional<Result<Store>> b;
  ASSERT_OK(
      a->put("x", TensorView::of(&x, {})).then([&] { b.emplace(Store::embedded()); }).get(kWait));
  ASSERT_TRUE(b.has_value());
  ASSERT_OK(*b);
  ASSERT_OK((*b)->put("y", TensorView::of(&x, {})).get(kWait));
  (*b)->close();
  EXPECT_OK(a->get("x").get(kWait));
  a->close();
}

TEST_F(StoreTest, FuturesAreUsableFromForeignThreads) {
  // Threads the store does not own issue calls, chain continuations and
  // wait; continuations run on the store's threads.
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> v(64, static_cast<float>(t));
      const std::string key = "thread." + std::to_string(t);
      auto chained = store().put(key, TensorView::of(v.data(), {64})).then([this, key] {
        return store().get(key);
      });
      auto r = chained.get(kWait);
      if (r.ok() && r->data_as<float>()[63] == static_cast<float>(t)) ++done;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(done.load(), 4);
}

TEST_F(StoreTest, ConcurrentWritersAndReadersNeverSeeATornValue) {
  // 8 threads hammer one key: writers put tensors whose every element equals
  // the writer's stamp; readers check each value they get is uniform.
  constexpr int kElems = 1 << 16;  // 256 KiB: several rpc chunks are not needed for tearing to show
  constexpr int kRounds = 40;
  std::atomic<int> torn{0}, reads{0}, errors{0};
  {
    std::vector<float> init(kElems, 0.0f);
    ASSERT_OK(store().put("hot", TensorView::of(init.data(), {kElems})).get(kWait));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> buf(kElems);
      for (int i = 0; i < kRounds; ++i) {
        if (t % 2 == 0) {
          std::fill(buf.begin(), buf.end(), static_cast<float>(t * 1000 + i));
          if (!store().put("hot", TensorView::of(buf.data(), {kElems})).get(kWait).ok()) ++errors;
        } else {
          if (!store().get_into("hot", TensorView::of(buf.data(), {kElems})).get(kWait).ok()) {
            ++errors;
            continue;
          }
          ++reads;
          for (float x : buf) {
            if (x != buf[0]) {
              ++torn;
              break;
            }
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(reads.load(), 4 * kRounds);
  // Every replaced version was freed: only the last one is held.
  EXPECT_EQ(store().admin().stats().get(kWait)->front().objects, 1u);
}

TEST_F(StoreTest, ReadersAcrossAnOverwriteGetOneCompleteVersion) {
  std::vector<float> v1(1 << 20, 1.0f), v2(1 << 20, 2.0f), dst(1 << 20);
  ASSERT_OK(store().put("v", TensorView::of(v1.data(), {1 << 20})).get(kWait));
  auto put2 = store().put("v", TensorView::of(v2.data(), {1 << 20}));
  auto got = store().get_into("v", TensorView::of(dst.data(), {1 << 20}));
  ASSERT_OK(put2.get(kWait));
  ASSERT_OK(got.get(kWait));
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [&](float x) { return x == dst[0]; }));
  EXPECT_TRUE(dst[0] == 1.0f || dst[0] == 2.0f);
}

}  // namespace
}  // namespace meshstore
