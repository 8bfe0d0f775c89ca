// The client's one location cache (client/location_cache.hpp),
// shared by the client actor and the callers' threads: the newer of two
// records wins, a read on the caller's thread sees only whole keys, a
// stale object is forgotten only while the cache still names it, and the
// cache stays bounded.
#include "meshstore/client/location_cache.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace meshstore::client {
namespace {

wire::KeyRecord whole(const std::string& key, std::uint64_t version, std::uint64_t object,
                      const std::string& volume = "v0") {
  wire::KeyRecord r;
  r.key = key;
  r.version = version;
  r.dtype = DType::float32;
  r.shape = {4};
  r.shards.push_back(wire::ShardRecord{TensorSlice::full(r.shape), volume, object, 16});
  return r;
}

TEST(LocationCache, TheNewerOfTwoRecordsWinsWhicheverComesLast) {
  LocationCache cache;
  cache.put(whole("k", 7, 70));
  cache.put(whole("k", 5, 50));  // a locate answer that crossed a put
  ASSERT_TRUE(cache.version("k"));
  EXPECT_EQ(*cache.version("k"), 7u);
  EXPECT_EQ(cache.entry("k")->object_id, 70u);
  cache.put(whole("k", 9, 90));
  EXPECT_EQ(cache.find("k")->shards.front().object_id, 90u);
  EXPECT_FALSE(cache.find("other"));
  EXPECT_FALSE(cache.version("other"));
}

TEST(LocationCache, OnlyAWholeKeyHasAnEntryForTheCallersThread) {
  LocationCache cache;
  auto sharded = whole("sharded", 3, 30);
  sharded.shape = {8};
  sharded.shards.front().slice = TensorSlice::make({8}, {0}, {4}).value();
  sharded.shards.push_back(
      wire::ShardRecord{TensorSlice::make({8}, {4}, {4}).value(), "v1", 31, 16});
  cache.put(sharded);
  EXPECT_TRUE(cache.find("sharded"));
  EXPECT_FALSE(cache.entry("sharded")) << "two shards: the actors read it";
  cache.put(whole("w", 1, 10));
  auto e = cache.entry("w");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->volume_id, "v0");
  EXPECT_EQ(e->nbytes, 16u);
  EXPECT_EQ(e->dtype, DType::float32);
  // A newer record of the key with several shards takes the entry away.
  auto resharded = sharded;
  resharded.key = "w";
  resharded.version = 2;
  cache.put(resharded);
  EXPECT_FALSE(cache.entry("w"));
}

TEST(LocationCache, AStaleObjectIsForgottenOnlyWhileTheCacheStillNamesIt) {
  LocationCache cache;
  cache.put(whole("k", 1, 10));
  cache.put(whole("k", 2, 20));  // a newer put by this client
  cache.erase_object("k", 10);   // a reader of the old object found it gone
  EXPECT_TRUE(cache.entry("k")) << "the newer location stays";
  cache.erase_object("k", 20);
  EXPECT_FALSE(cache.find("k"));
}

TEST(LocationCache, ErasuresByKeyPrefixAndVolume) {
  LocationCache cache;
  cache.put(whole("sd/a", 1, 1));
  cache.put(whole("sd/b", 1, 2));
  cache.put(whole("other", 1, 3, "v1"));
  cache.put(whole("x", 1, 4));
  cache.erase_under("sd/");
  EXPECT_FALSE(cache.find("sd/a"));
  EXPECT_FALSE(cache.find("sd/b"));
  EXPECT_TRUE(cache.find("other"));
  cache.erase_on_volume("v1");
  EXPECT_FALSE(cache.find("other"));
  EXPECT_TRUE(cache.find("x"));
  cache.erase("x");
  EXPECT_FALSE(cache.find("x"));
  cache.put(whole("y", 1, 5));
  cache.clear();
  EXPECT_FALSE(cache.find("y"));
}

TEST(LocationCache, ANewKeyThatFindsItFullDropsEverythingFirst) {
  LocationCache cache(3);
  for (int i = 0; i < 3; ++i) cache.put(whole("k" + std::to_string(i), 1, i + 1));
  cache.put(whole("k0", 2, 9));  // an update takes no room
  EXPECT_TRUE(cache.find("k2"));
  cache.put(whole("k3", 1, 4));
  EXPECT_FALSE(cache.find("k0"));
  EXPECT_FALSE(cache.find("k2"));
  EXPECT_TRUE(cache.find("k3"));
}

TEST(LocationCache, TheActorAndCallersThreadsShareItSafely) {
  LocationCache cache(64);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    while (!stop.load()) {
      for (int i = 0; i < 100; ++i) {
        auto e = cache.entry("k" + std::to_string(i));
        // Every entry seen is one that was put: its object names its version.
        if (e && e->object_id != e->version * 1000 + static_cast<std::uint64_t>(i)) ++bad;
      }
    }
  });
  for (std::uint64_t v = 1; v <= 200; ++v) {
    for (int i = 0; i < 100; ++i) {
      cache.put(whole("k" + std::to_string(i), v, v * 1000 + i));
      if (i % 7 == 0) cache.erase_under("k" + std::to_string(i));
    }
  }
  stop.store(true);
  reader.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace meshstore::client
