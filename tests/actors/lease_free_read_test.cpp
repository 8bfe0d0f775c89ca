// Lease-free reads (docs/internals/data-path.md, "Lease-free reads"): a client that
// knows where an object lies on a volume of its host (its own put, an
// earlier lease) copies it straight out of shared memory, checked by the
// object's tag before and after, without asking the volume. The same
// results as the leased way; a replaced or changing object is read again
// the leased way, never returned.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "meshstore/store.hpp"
#include "testing/pidfd.hpp"
#include "testing/racing_readers.hpp"
#include "testing/read_back.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::kWait;
using testing::uniform;

// Larger than the fast path's ring serves: these reads take the actors.
constexpr std::size_t kBytes = 1 << 20;

TensorView bytes_view(std::vector<std::uint8_t>& v) {
  return TensorView(v.data(), DType::uint8, {static_cast<std::int64_t>(v.size())});
}

std::uint64_t leases_of(Store& store) {
  auto stats = store.admin().stats().get(kWait);
  return stats.ok() && !stats->empty() ? stats->front().leases : 999;
}

using testing::have_pidfd;

class LeaseFreeRead : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_pidfd()) GTEST_SKIP() << "no pidfd_open here: lease-free reads are off";
  }
};

StoreOptions shm() {
  StoreOptions o;
  o.transport.name = "shm";
  return o;
}

// A store others connect to (its volume in this process, over shm unless
// `base` says otherwise), and a client of it without a volume.
std::pair<Store, Store> writer_and_reader(const StoreOptions& base = shm()) {
  auto wo = base;
  wo.listen = "127.0.0.1:0";
  auto writer = Store::embedded(wo).value();
  auto ro = base;
  ro.placement.host_volumes = false;
  auto reader = Store::connect(writer.admin().address(), ro).value();
  return {std::move(writer), std::move(reader)};
}

TEST_F(LeaseFreeRead, AClientReadsWhatItPutWithoutALease) {
  auto store = Store::embedded(shm()).value();
  std::vector<std::uint8_t> v(kBytes);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>(i * 13);
  ASSERT_OK(store.put("w", bytes_view(v)).get(kWait));
  std::vector<std::uint8_t> back(kBytes, 0);
  ASSERT_OK(store.get_into("w", bytes_view(back)).get(kWait));
  EXPECT_EQ(back, v);
  EXPECT_EQ(store.admin().fast_path_stats().lease_free_reads, 1u);
  EXPECT_EQ(store.admin().fast_path_stats().lease_free_stale, 0u);
  // get() into new memory too; a view needs its lease (it pins the version).
  auto copy = store.get("w").get(kWait);
  ASSERT_OK(copy);
  EXPECT_EQ(std::memcmp(copy->data(), v.data(), kBytes), 0);
  EXPECT_EQ(store.admin().fast_path_stats().lease_free_reads, 2u);
  {
    auto view = store.get("w", ReadOptions::mapped()).get(kWait);
    ASSERT_OK(view);
    EXPECT_EQ(leases_of(store), 1u);
    EXPECT_EQ(store.admin().fast_path_stats().lease_free_reads, 2u);
  }
  // A state dict's packed bucket, read back by its writer.
  std::vector<std::vector<float>> tensors(50, std::vector<float>(1024));
  StateDict sd, into;
  std::vector<std::vector<float>> dst(50, std::vector<float>(1024, 0.0f));
  for (int t = 0; t < 50; ++t) {
    std::fill(tensors[t].begin(), tensors[t].end(), static_cast<float>(t));
    ASSERT_OK(sd.insert("t." + std::to_string(t), TensorView::of(tensors[t].data(), {1024})));
    ASSERT_OK(into.insert("t." + std::to_string(t), TensorView::of(dst[t].data(), {1024})));
  }
  ASSERT_OK(store.state_dicts().put("sd", sd).get(kWait));
  const auto before = store.admin().fast_path_stats().lease_free_reads;
  ASSERT_OK(store.state_dicts().get_into("sd", into).get(kWait));
  EXPECT_EQ(dst, tensors);
  EXPECT_GT(store.admin().fast_path_stats().lease_free_reads, before);
}

// A reader in one client, a writer in another: the reader learns where the
// object lies from the controller's record (the writer's staging told it)
// and reads it lease-free from the first read; the writer's overwrite
// returns once the old object's tag is cleared, so the reader's next read
// goes the leased way, finds it gone, locates the new version and returns
// it.
TEST_F(LeaseFreeRead, AReplacedObjectIsNotReadOnceTheOverwriteReturned) {
  auto [writer, reader] = writer_and_reader();
  std::vector<std::uint8_t> v(kBytes, 1), dst(kBytes, 0);
  ASSERT_OK(writer.put("k", bytes_view(v)).get(kWait));
  ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));  // located, then lease-free
  EXPECT_EQ(reader.admin().fast_path_stats().lease_free_reads, 1u);
  ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));  // from its cache
  EXPECT_EQ(reader.admin().fast_path_stats().lease_free_reads, 2u);
  EXPECT_EQ(dst[0], 1);
  std::fill(v.begin(), v.end(), 2);
  ASSERT_OK(writer.put("k", bytes_view(v)).get(kWait));
  // The overwrite returned once the volume had dropped the old object: the
  // reader's next read gets the new value.
  std::fill(dst.begin(), dst.end(), 0);
  ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));
  EXPECT_TRUE(uniform(dst)) << "torn value";
  EXPECT_EQ(dst[0], 2);
  // It found the old object's tag cleared first: only the leased way
  // locates afresh.
  EXPECT_GE(reader.admin().fast_path_stats().lease_free_stale, 1u);
  // The new version's place came with its record: lease-free again.
  const auto served = reader.admin().fast_path_stats().lease_free_reads;
  ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));
  EXPECT_EQ(dst[0], 2);
  EXPECT_EQ(reader.admin().fast_path_stats().lease_free_reads, served + 1);
  // Removed by the writer: the remove returned once the volume dropped it.
  ASSERT_OK(writer.remove("k").get(kWait));
  EXPECT_ERROR(reader.get_into("k", bytes_view(dst)).get(kWait), Errc::not_found, "k");
}

// One writer replaces a key continuously (the volume reuses the released
// segments for the next versions) while two threads of another client read
// it: every value read is one the writer wrote whole.
TEST_F(LeaseFreeRead, AWriterRacingReadersNeverShowsATornValue) {
  auto [writer, reader] = writer_and_reader();
  std::vector<std::uint8_t> v(kBytes, 1);
  ASSERT_OK(writer.put("k", bytes_view(v)).get(kWait));
  const auto seen = testing::race_readers(
      kBytes, 2,
      [&](std::vector<std::uint8_t>& mine) {
        return reader.get_into("k", bytes_view(mine)).get(kWait).status();
      },
      [&](const std::function<void()>& pace) {
        for (int i = 2; i < 120; ++i) {
          std::fill(v.begin(), v.end(), static_cast<std::uint8_t>(i));
          pace();
          ASSERT_OK(writer.put("k", bytes_view(v)).get(kWait));
        }
      });
  EXPECT_EQ(seen.torn, 0);
  EXPECT_EQ(seen.failed, 0);
  EXPECT_GT(seen.reads, 0);
  // Once the writer stops, the last value, then lease-free.
  std::vector<std::uint8_t> dst(kBytes);
  ASSERT_TRUE(eventually(
      [&] {
        EXPECT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));
        EXPECT_TRUE(uniform(dst)) << "torn value";
        return dst[0] == 119;
      },
      10s));
  const auto served = reader.admin().fast_path_stats().lease_free_reads;
  ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));
  EXPECT_EQ(dst[0], 119);
  EXPECT_EQ(reader.admin().fast_path_stats().lease_free_reads, served + 1);
}

// Direct reads (docs/internals/data-path-small-ops.md, "Direct reads"): a get, get_into or
// get_object of a whole key of any size whose place the client knows is
// copied on the caller's thread, checked by the object's tag, with no
// ring and no actor.
using DirectRead = LeaseFreeRead;

std::uint64_t direct_reads(const Store& s) { return s.admin().fast_path_stats().direct_reads; }

// Once `reader` reached the volume of `writer`, it opens the volume's ring
// in the background, and keeps the places it learns beside it: waits
// (bounded) for the ring.
bool ring_open(Store& writer, Store& reader) {
  std::vector<std::uint8_t> first(16, 1);
  if (!writer.put("first", bytes_view(first)).get(kWait).ok()) return false;
  if (!reader.get_into("first", bytes_view(first)).get(kWait).ok()) return false;
  return eventually([&] { return reader.admin().fast_path_stats().rings >= 1; }, 10s);
}

// At every size: above the 8 MiB they once stopped at, and above the
// 64 MiB where the actors take a lease (the copy split over the copy
// engine, the caller's thread taking a share).
TEST_F(DirectRead, AClientReadsItsOwnPutsOnItsThreadAtEverySize) {
  auto store = Store::embedded(shm()).value();
  ASSERT_TRUE(ring_open(store, store));
  for (std::size_t n :
       {std::size_t{256} << 10, (std::size_t{8} << 20) + 1, (std::size_t{64} << 20) + 3}) {
    SCOPED_TRACE(n);
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + n);
    const std::string key = "w" + std::to_string(n);
    ASSERT_OK(store.put(key, bytes_view(v)).get(kWait));
    const auto before = store.admin().fast_path_stats();
    testing::expect_reads_back(store, key, v);
    const auto after = store.admin().fast_path_stats();
    // Both lease-free, on the caller's thread.
    EXPECT_EQ(after.lease_free_reads, before.lease_free_reads + 2);
    EXPECT_EQ(after.direct_reads, before.direct_reads + 2);
    EXPECT_EQ(after.hits, before.hits + 2);
    EXPECT_EQ(leases_of(store), 0u);
  }
  // A byte object too.
  const std::string big(std::size_t{1} << 20, 'x');
  ASSERT_OK(store.put_object("o", big, ObjectFormat::utf8).get(kWait));
  const auto before = direct_reads(store);
  auto o = store.get_stored_object("o").get(kWait);
  ASSERT_OK(o);
  EXPECT_EQ(o->bytes, big);
  EXPECT_EQ(o->format, ObjectFormat::utf8);
  EXPECT_EQ(direct_reads(store), before + 1);
  // A read the key's dtype or shape does not fit is the actors' to refuse.
  std::vector<float> wrong(16);
  EXPECT_ERROR(store.get_into("o", TensorView::of(wrong.data(), {16})).get(kWait), Errc::wrong_kind,
               "");
  EXPECT_EQ(direct_reads(store), before + 1);
}

// A large key (split over the copy engine as it is read) replaced over and
// over by another client while two threads read it directly: a read whose
// object changed during its copy is found stale and read afresh by the
// actors, so every value read is one the writer put whole.
TEST_F(DirectRead, AWriterRacingReadersOfALargeKeyNeverShowsATornValue) {
  auto [writer, reader] = writer_and_reader();
  ASSERT_TRUE(ring_open(writer, reader));
  constexpr std::size_t kLarge = (std::size_t{24} << 20) + 5;
  std::vector<std::uint8_t> v(kLarge, 1);
  ASSERT_OK(writer.put("big", bytes_view(v)).get(kWait));
  const auto seen = testing::race_readers(
      kLarge, 2,
      [&](std::vector<std::uint8_t>& mine) {
        return reader.get_into("big", bytes_view(mine)).get(kWait).status();
      },
      [&](const std::function<void()>& pace) {
        for (int i = 2; i < 40; ++i) {
          std::fill(v.begin(), v.end(), static_cast<std::uint8_t>(i));
          pace();
          ASSERT_OK(writer.put("big", bytes_view(v)).get(kWait));
        }
      });
  EXPECT_EQ(seen.torn, 0);
  EXPECT_EQ(seen.failed, 0);
  EXPECT_GT(seen.reads, 0);
  // Once the writer stops: the last value, read directly.
  std::vector<std::uint8_t> dst(kLarge);
  ASSERT_TRUE(eventually(
      [&] {
        EXPECT_OK(reader.get_into("big", bytes_view(dst)).get(kWait));
        EXPECT_TRUE(testing::uniform(dst)) << "torn value";
        return dst[0] == 39;
      },
      10s));
  const auto direct = direct_reads(reader);
  ASSERT_OK(reader.get_into("big", bytes_view(dst)).get(kWait));
  EXPECT_EQ(dst[0], 39);
  EXPECT_EQ(direct_reads(reader), direct + 1);
}

// Another client's small objects: one put inline (at most 64 KiB, staged by
// the volume with the bytes of its request) and one put over the writer's
// ring. Each record says where the volume placed the object, so the
// reader's first read (located at the controller) takes no lease, and the
// next one, from its cache, is direct. (Direct reads go through the
// volume's ring's channel, which the reader opens in the background once it
// reaches the volume: the test waits for it.)
TEST_F(DirectRead, AnotherClientsSmallPutsAreReadWithoutALeaseFromTheFirstRead) {
  auto [writer, reader] = writer_and_reader();
  ASSERT_TRUE(ring_open(writer, reader));
  for (std::size_t n : {std::size_t{62} << 10, std::size_t{4} << 10}) {
    SCOPED_TRACE(n);
    const std::string key = "k" + std::to_string(n);
    std::vector<std::uint8_t> v(n, static_cast<std::uint8_t>(n >> 10)), dst(n, 0);
    ASSERT_OK(writer.put(key, bytes_view(v)).get(kWait));
    const auto lease_free = reader.admin().fast_path_stats().lease_free_reads;
    ASSERT_OK(reader.get_into(key, bytes_view(dst)).get(kWait));  // located, then lease-free
    EXPECT_EQ(dst, v);
    EXPECT_EQ(reader.admin().fast_path_stats().lease_free_reads, lease_free + 1);
    const auto before = direct_reads(reader);
    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_OK(reader.get_into(key, bytes_view(dst)).get(kWait));
    EXPECT_EQ(dst, v);
    EXPECT_EQ(direct_reads(reader), before + 1);
  }
}

// A batch is served directly when every key is; else the actors read all
// of it (the same values).
TEST_F(DirectRead, ABatchIsServedDirectlyWhenEveryKeyIs) {
  auto [store, other] = writer_and_reader();
  ASSERT_TRUE(ring_open(store, store));
  std::vector<std::vector<std::uint8_t>> values;
  for (int i = 0; i < 3; ++i) {
    values.emplace_back(std::size_t{300} << 10, static_cast<std::uint8_t>(i + 1));
    ASSERT_OK(store.put("b" + std::to_string(i), bytes_view(values.back())).get(kWait));
  }
  std::vector<std::vector<std::uint8_t>> dsts(3, std::vector<std::uint8_t>(values[0].size(), 0));
  auto items = [&] {
    std::vector<std::pair<std::string, TensorView>> out;
    for (int i = 0; i < 3; ++i) out.emplace_back("b" + std::to_string(i), bytes_view(dsts[i]));
    return out;
  };
  auto before = store.admin().fast_path_stats();
  ASSERT_OK(store.get_into_batch(items()).get(kWait));
  EXPECT_EQ(dsts, values);
  auto tensors = store.get_batch({"b0", "b1", "b2"}).get(kWait);
  ASSERT_OK(tensors);
  ASSERT_EQ(tensors->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(std::memcmp((*tensors)[i].data(), values[i].data(), values[i].size()), 0);
  }
  EXPECT_EQ(store.admin().fast_path_stats().direct_reads, before.direct_reads + 6);
  EXPECT_EQ(store.admin().fast_path_stats().misses, before.misses);
  // One key overwritten by another client: the whole batch takes the
  // actors, once the volume dropped what this client's cache names.
  std::fill(values[1].begin(), values[1].end(), 9);
  ASSERT_OK(other.put("b1", bytes_view(values[1])).get(kWait));
  before = store.admin().fast_path_stats();
  for (auto& d : dsts) std::fill(d.begin(), d.end(), 0);
  ASSERT_TRUE(eventually(
      [&] {
        EXPECT_OK(store.get_into_batch(items()).get(kWait));
        return dsts == values;
      },
      10s));
  EXPECT_GT(
      store.admin().fast_path_stats().lease_free_stale + store.admin().fast_path_stats().misses,
      before.lease_free_stale + before.misses);
}

// The store holding the volume closes: its objects' tags are cleared as
// their memory goes, so the reader's next read is no direct copy of the
// old bytes but the actors' error. (A killed volume's tags stay as they
// were; its process watch stops direct reads then: the fault matrix's
// "volume get" cell, and shm_transport_test's process watch.)
TEST_F(DirectRead, AReaderOfAClosedStoreGetsAnErrorNotTheOldBytes) {
  auto [writer, reader] = writer_and_reader();
  ASSERT_TRUE(ring_open(writer, reader));
  std::vector<std::uint8_t> v(std::size_t{1} << 20, 5), dst(v.size(), 0);
  ASSERT_OK(writer.put("k", bytes_view(v)).get(kWait));
  ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));
  ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));
  const auto served = direct_reads(reader);
  EXPECT_GE(served, 1u);
  writer.close();
  std::fill(dst.begin(), dst.end(), 0);
  EXPECT_FALSE(reader.get_into("k", bytes_view(dst)).get(kWait).ok());
  EXPECT_EQ(direct_reads(reader), served);
}

// Direct state-dict reads (docs/internals/data-path-small-ops.md,
// "Direct state-dict reads"): get_state_dict_into of a layout read before, whose manifest and
// buckets lie on volumes of this host at places the client knows, copies
// them all on the caller's thread as one snapshot, every tag checked before
// the first copy and after the last.
using DirectStateDict = LeaseFreeRead;

// A state dict of `n` tensors of `bytes` each over one buffer, every byte
// `fill`: a read that mixes two puts of it shows as a buffer not uniform.
struct Dict {
  std::vector<std::uint8_t> buf;
  StateDict sd;
  Dict(int n, std::size_t bytes, std::uint8_t fill) : buf(n * bytes, fill) {
    for (int i = 0; i < n; ++i) {
      EXPECT_OK(sd.insert(
          "layer" + std::to_string(i) + ".w",
          TensorView(buf.data() + i * bytes, DType::uint8, {static_cast<std::int64_t>(bytes)})));
    }
  }
};

// Reads state dict `key` (a Dict of `n` tensors of `bytes`) into `buf`.
Status read_over(Store& store, const std::string& key, std::vector<std::uint8_t>& buf, int n,
                 std::size_t bytes) {
  StateDict sd;
  for (int i = 0; i < n; ++i) {
    MESHSTORE_RETURN_IF_ERROR(sd.insert(
        "layer" + std::to_string(i) + ".w",
        TensorView(buf.data() + i * bytes, DType::uint8, {static_cast<std::int64_t>(bytes)})));
  }
  return store.state_dicts().get_into(key, sd).get(kWait).status();
}

std::uint64_t direct_state_dicts(const Store& s) {
  return s.admin().fast_path_stats().direct_state_dicts;
}

// Three buckets (so three objects and the manifest in one snapshot).
StateDictPutOptions three_buckets() {
  StateDictPutOptions o;
  o.pack_bucket_bytes = 100 * 4096;
  return o;
}

// Two threads of `reader` read "sd" (a Dict of `n` tensors of `bytes`)
// while `writer` puts `src` in three buckets with every byte `first`, then
// first + 1, ..., up to `last` (excluded): what they saw.
testing::RaceCounts race_a_writer(Store& writer, Store& reader, Dict& src, int n, std::size_t bytes,
                                  int first, int last) {
  return testing::race_readers(
      n * bytes, 2,
      [&](std::vector<std::uint8_t>& mine) { return read_over(reader, "sd", mine, n, bytes); },
      [&](const std::function<void()>& pace) {
        for (int i = first; i < last; ++i) {
          std::fill(src.buf.begin(), src.buf.end(), static_cast<std::uint8_t>(i));
          pace();
          ASSERT_OK(writer.state_dicts().put("sd", src.sd, three_buckets()).get(kWait));
        }
      });
}

TEST_F(DirectStateDict, AClientReadsItsOwnStateDictOnItsThread) {
  auto store = Store::embedded(shm()).value();
  ASSERT_TRUE(ring_open(store, store));
  Dict src(300, 4096, 0), dst(300, 4096, 0);
  for (std::size_t i = 0; i < src.buf.size(); ++i) src.buf[i] = static_cast<std::uint8_t>(i * 31);
  ASSERT_OK(store.state_dicts().put("sd", src.sd, three_buckets()).get(kWait));
  // The first read plans with the stored manifest (the actors); the next
  // ones know it, and are direct.
  ASSERT_OK(store.state_dicts().get_into("sd", dst.sd).get(kWait));
  EXPECT_EQ(dst.buf, src.buf);
  for (int round = 0; round < 3; ++round) {
    std::fill(dst.buf.begin(), dst.buf.end(), 0);
    const auto before = store.admin().fast_path_stats();
    ASSERT_OK(store.state_dicts().get_into("sd", dst.sd).get(kWait));
    EXPECT_EQ(dst.buf, src.buf);
    const auto after = store.admin().fast_path_stats();
    EXPECT_EQ(after.direct_state_dicts, before.direct_state_dicts + 1);
    EXPECT_EQ(after.lease_free_reads, before.lease_free_reads + 1);
    EXPECT_EQ(leases_of(store), 0u);
    // A new version of the same layout, put by this client: read directly.
    for (auto& b : src.buf) b = static_cast<std::uint8_t>(b + 1);
    ASSERT_OK(store.state_dicts().put("sd", src.sd, three_buckets()).get(kWait));
    const auto direct = direct_state_dicts(store);
    ASSERT_OK(store.state_dicts().get_into("sd", dst.sd).get(kWait));
    EXPECT_EQ(dst.buf, src.buf);
    EXPECT_EQ(direct_state_dicts(store), direct + 1);
  }
}

// Another client overwrites the state dict this one read: the next read
// finds the places it knew dropped, and the actors read the new version;
// the old one is never returned after the overwrite returned.
TEST_F(DirectStateDict, AStateDictAnotherClientReplacedIsReadAfreshNeverTheOldOne) {
  auto [writer, reader] = writer_and_reader();
  ASSERT_TRUE(ring_open(writer, reader));
  Dict src(300, 4096, 1), dst(300, 4096, 0);
  ASSERT_OK(writer.state_dicts().put("sd", src.sd, three_buckets()).get(kWait));
  ASSERT_OK(reader.state_dicts().get_into("sd", dst.sd).get(kWait));  // learns the places
  ASSERT_TRUE(eventually(
      [&] {
        const auto direct = direct_state_dicts(reader);
        EXPECT_OK(reader.state_dicts().get_into("sd", dst.sd).get(kWait));
        return direct_state_dicts(reader) == direct + 1;
      },
      10s));
  EXPECT_EQ(dst.buf, src.buf);
  for (std::uint8_t v = 2; v < 6; ++v) {
    std::fill(src.buf.begin(), src.buf.end(), v);
    ASSERT_OK(writer.state_dicts().put("sd", src.sd, three_buckets()).get(kWait));
    const auto before = reader.admin().fast_path_stats();
    std::fill(dst.buf.begin(), dst.buf.end(), 0);
    ASSERT_OK(reader.state_dicts().get_into("sd", dst.sd).get(kWait));
    EXPECT_EQ(dst.buf, src.buf) << "version " << int(v);
    // Not direct: the places it knew were dropped (stale), or forgotten
    // by the read before (miss).
    EXPECT_EQ(reader.admin().fast_path_stats().direct_state_dicts, before.direct_state_dicts);
  }
}

// A writer replaces a three-bucket state dict continuously while two
// threads of another client read it: every read is one version whole.
TEST_F(DirectStateDict, AWriterRacingReadersNeverShowsATornStateDict) {
  auto [writer, reader] = writer_and_reader();
  ASSERT_TRUE(ring_open(writer, reader));
  constexpr int kTensors = 300;
  constexpr std::size_t kBytesEach = 4096;
  Dict src(kTensors, kBytesEach, 1);
  ASSERT_OK(writer.state_dicts().put("sd", src.sd, three_buckets()).get(kWait));
  const auto before = direct_state_dicts(reader);
  const auto seen = race_a_writer(writer, reader, src, kTensors, kBytesEach, 2, 150);
  EXPECT_EQ(seen.torn, 0);
  EXPECT_EQ(seen.failed, 0);
  EXPECT_GT(seen.reads, 0);
  // Once the writer stops: the last version, directly.
  Dict dst(kTensors, kBytesEach, 0);
  ASSERT_TRUE(eventually(
      [&] {
        const auto direct = direct_state_dicts(reader);
        EXPECT_OK(reader.state_dicts().get_into("sd", dst.sd).get(kWait));
        EXPECT_TRUE(uniform(dst.buf)) << "torn state dict";
        return dst.buf[0] == 149 && direct_state_dicts(reader) == direct + 1;
      },
      10s));
  EXPECT_GT(direct_state_dicts(reader), before);
}

// A state dict of more than limits::kSnapshotHereBytes (8 MiB) is read
// directly too, once its layout is known: copied on the client's waiting
// thread, its caller answered from there.
TEST_F(DirectStateDict, ALargeStateDictIsReadDirectlyOnTheWaitingThread) {
  auto store = Store::embedded(shm()).value();
  ASSERT_TRUE(ring_open(store, store));
  // 9 MiB: three tensors of 3 MiB, each an object of its own.
  Dict big(3, std::size_t{3} << 20, 7), big_dst(3, std::size_t{3} << 20, 0);
  ASSERT_OK(store.state_dicts().put("big", big.sd).get(kWait));
  ASSERT_OK(store.state_dicts().get_into("big", big_dst.sd).get(kWait));  // learns the layout
  EXPECT_EQ(big_dst.buf, big.buf);
  std::fill(big.buf.begin(), big.buf.end(), 9);
  ASSERT_OK(store.state_dicts().put("big", big.sd).get(kWait));
  const auto before = direct_state_dicts(store);
  ASSERT_OK(store.state_dicts().get_into("big", big_dst.sd).get(kWait));
  EXPECT_EQ(big_dst.buf, big.buf);
  EXPECT_EQ(direct_state_dicts(store), before + 1);
}

// What a direct read does not take goes to the actors, with the same
// result: a destination of another dtype (a cast read) or a box, of a
// tensor stored as an object of its own. A box of a packed tensor is
// direct: its bucket is read whole, then the box cut.
TEST_F(DirectStateDict, ReadsItCannotServeTakeTheActors) {
  auto store = Store::embedded(shm()).value();
  ASSERT_TRUE(ring_open(store, store));
  // A float32 tensor of 128 KiB (an object of its own), read as bfloat16
  // (ReadOptions::cast). (A packed one is direct: its bucket is read
  // whole, then converted.)
  std::vector<float> f(32768, 1.5f);
  std::vector<std::uint16_t> bf(32768, 0);
  StateDict fsd, bsd;
  ASSERT_OK(fsd.insert("w", TensorView::of(f.data(), {32768})));
  ASSERT_OK(bsd.insert("w", TensorView(bf.data(), DType::bfloat16, {32768})));
  ASSERT_OK(store.state_dicts().put("f", fsd).get(kWait));
  const auto cast = StateDictReadOptions::converting();
  // Boxes of a packed tensor (4 KiB) and of one stored alone (128 KiB).
  auto boxed_read = [&](const std::string& key, std::size_t bytes, std::uint8_t fill) {
    Dict d(2, bytes, fill);
    EXPECT_OK(store.state_dicts().put(key, d.sd).get(kWait));
    return d;
  };
  Dict packed = boxed_read("packed", 4096, 3), alone = boxed_read("alone", 128 << 10, 4);
  auto read_box = [&](const std::string& key, Dict& d) {
    const std::int64_t n = static_cast<std::int64_t>(d.buf.size() / 2);
    std::vector<std::uint8_t> half(n / 2, 0), rest(n, 0);
    StateDict sd;
    EXPECT_OK(sd.insert("layer0.w", TensorView(half.data(), DType::uint8, {n / 2})));
    EXPECT_OK(sd.insert("layer1.w", TensorView(rest.data(), DType::uint8, {n})));
    std::map<std::string, TensorSlice> boxes{
        {"layer0.w", TensorSlice::make({n}, {n / 4}, {n / 2}).value()}};
    EXPECT_OK(
        store.state_dicts().get_into(key, sd, StateDictReadOptions::of_boxes(boxes)).get(kWait));
    EXPECT_EQ(half, std::vector<std::uint8_t>(half.size(), d.buf[0]));
    EXPECT_EQ(rest, std::vector<std::uint8_t>(rest.size(), d.buf[0]));
  };
  for (int round = 0; round < 2; ++round) {  // the second with every layout known
    SCOPED_TRACE(round);
    auto before = direct_state_dicts(store);
    ASSERT_OK(store.state_dicts().get_into("f", bsd, cast).get(kWait));
    EXPECT_EQ(bf, std::vector<std::uint16_t>(bf.size(), 0x3fc0));  // 1.5 in bfloat16
    read_box("alone", alone);
    EXPECT_EQ(direct_state_dicts(store), before);
    read_box("packed", packed);
    EXPECT_EQ(direct_state_dicts(store), before + (round == 1 ? 1 : 0));
  }
}

// State dict puts on the caller's thread
// (docs/internals/data-path-small-ops.md, "Puts on the caller's thread"):
// where the client has a channel to its volume, put_state_dict writes into
// objects the volume staged for it and commits them over the channel; a
// layout put again has its next objects staged by that same request.
// Channels/StateDictPutOver.* run over every channel: the ring (the objects
// written in the volume's shared memory), tcp and encrypted tcp (the objects
// sent with the tcp transport). RingPut.* are the ring's own: publishes and
// latest reads, which read the version pointer's tag.
using RingPut = LeaseFreeRead;

class StateDictPutOver : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (ring() && !have_pidfd()) GTEST_SKIP() << "no pidfd_open here: lease-free reads are off";
  }
  bool ring() const { return std::string(GetParam()) == "ring"; }
  StoreOptions options() const {
    const std::string p = GetParam();
    StoreOptions o;
    o.transport.name = ring() ? "shm" : p == "tcp_encrypted" ? "tcp" : p;
    o.security.encrypt_tcp = p == "tcp_encrypted";
    return o;
  }
};

std::uint64_t state_dict_puts(const Store& s) {
  return s.admin().fast_path_stats().state_dict_puts;
}

// How `publish` (a publish by `s`) went: "one request" (the version, the
// pointer's move and the retirement in one commit over the channel, from
// the pointer `s` last saw), "actors" (the pointer read at the controller,
// then the version and the move as two commits over the channel), or
// "other" (counted neither way).
template <class Publish>
std::string publish_route(const Store& s, const Publish& publish) {
  const auto before = s.admin().fast_path_stats();
  publish();
  const auto after = s.admin().fast_path_stats();
  const auto versions = after.state_dict_puts - before.state_dict_puts;
  const auto moves = after.puts - before.puts;
  if (versions == 1 && moves == 0) return "one request";
  if (versions == 1 && moves == 1) return "actors";
  return "other: " + std::to_string(versions) + " versions, " + std::to_string(moves) + " moves";
}

// Objects staged on `store`'s volume now (999: no answer).
std::uint64_t staged_on(Store& store) {
  auto stats = store.admin().stats().get(kWait);
  return stats.ok() && !stats->empty() ? stats->front().staged : 999;
}

// Puts `d` under `key` with every byte `v`: whether the put went over the
// channel (the caller's thread).
bool put_over_the_channel(Store& store, const std::string& key, Dict& d, std::uint8_t v) {
  std::fill(d.buf.begin(), d.buf.end(), v);
  const auto before = state_dict_puts(store);
  EXPECT_OK(store.state_dicts().put(key, d.sd, three_buckets()).get(kWait));
  return state_dict_puts(store) == before + 1;
}

// Publishes `d` under `prefix` (keep 2, three buckets) with every byte
// `v`: the version it got, 0 after a failure (reported).
std::uint64_t publish_filled(Store& store, const std::string& prefix, Dict& d, std::uint8_t v) {
  std::fill(d.buf.begin(), d.buf.end(), v);
  auto n = store.state_dicts()
               .publish(prefix, d.sd, PublishOptions::by_copy(2, three_buckets()))
               .get(kWait);
  EXPECT_OK(n);
  return n.ok() ? n->version() : 0;
}

// The objects of one version of a Dict put with three_buckets(): its
// manifest and three buckets.
constexpr std::uint64_t kObjects = 4;

TEST_P(StateDictPutOver, ALayoutPutAgainIsWrittenIntoObjectsStagedByThePutBefore) {
  auto [writer, reader] = writer_and_reader(options());
  ASSERT_TRUE(ring_open(writer, writer));
  Dict src(300, 4096, 1), dst(300, 4096, 0);
  ASSERT_TRUE(put_over_the_channel(writer, "sd", src, 1));
  EXPECT_EQ(staged_on(writer), 0u) << "a layout put once keeps nothing staged";
  ASSERT_TRUE(put_over_the_channel(writer, "sd", src, 2));
  EXPECT_EQ(staged_on(writer), kObjects) << "the next put's objects";
  const auto volume_before = writer.admin().stats().get(kWait);
  ASSERT_OK(volume_before);
  for (std::uint8_t v = 3; v < 9; ++v) {
    SCOPED_TRACE(int(v));
    for (std::size_t i = 0; i < src.buf.size(); ++i) {
      src.buf[i] = static_cast<std::uint8_t>(v + i * 7);
    }
    const auto before = state_dict_puts(writer);
    ASSERT_OK(writer.state_dicts().put("sd", src.sd, three_buckets()).get(kWait));
    EXPECT_EQ(state_dict_puts(writer), before + 1);
    // Every path reads it at once: the writer itself (directly), and
    // another client (the actors, having located it afresh).
    std::fill(dst.buf.begin(), dst.buf.end(), 0);
    ASSERT_OK(writer.state_dicts().get_into("sd", dst.sd).get(kWait));
    EXPECT_EQ(dst.buf, src.buf);
    std::fill(dst.buf.begin(), dst.buf.end(), 0);
    ASSERT_OK(reader.state_dicts().get_into("sd", dst.sd).get(kWait));
    EXPECT_EQ(dst.buf, src.buf);
  }
  // What each put replaced went back, and one next put's objects stay
  // staged: the volume holds as much as before.
  const auto volume_after = writer.admin().stats().get(kWait);
  ASSERT_OK(volume_after);
  EXPECT_EQ(volume_after->front().objects, volume_before->front().objects);
  EXPECT_EQ(volume_after->front().bytes_held, volume_before->front().bytes_held);
  EXPECT_EQ(volume_after->front().staged, kObjects);
}

// A state dict of a few KiB takes the channel too (it once went inline
// through the actors): put, put again into what the first put staged
// ahead, each read back by another client.
TEST_P(StateDictPutOver, ASmallStateDictTakesTheChannelToo) {
  auto [writer, reader] = writer_and_reader(options());
  ASSERT_TRUE(ring_open(writer, writer));
  Dict src(4, 1024, 1), dst(4, 1024, 0);
  for (std::uint8_t v = 1; v < 4; ++v) {
    SCOPED_TRACE(int(v));
    ASSERT_TRUE(put_over_the_channel(writer, "small", src, v));
    std::fill(dst.buf.begin(), dst.buf.end(), 0);
    ASSERT_OK(reader.state_dicts().get_into("small", dst.sd).get(kWait));
    EXPECT_EQ(dst.buf, src.buf);
  }
}

// Another layout under the same key (a tensor more) goes over the channel as
// well: the old layout's staged objects are given back in its first
// request, and the new layout keeps objects staged once it is put again.
TEST_P(StateDictPutOver, AnotherLayoutGivesTheStagedObjectsOfTheOldOneBack) {
  auto store = Store::embedded(options()).value();
  ASSERT_TRUE(ring_open(store, store));
  Dict a(300, 4096, 1), b(301, 4096, 2), back(301, 4096, 0);
  ASSERT_TRUE(put_over_the_channel(store, "sd", a, 3));
  ASSERT_TRUE(put_over_the_channel(store, "sd", a, 4));
  ASSERT_EQ(staged_on(store), kObjects);
  ASSERT_TRUE(put_over_the_channel(store, "sd", b, 5));
  EXPECT_EQ(staged_on(store), 0u);
  ASSERT_OK(store.state_dicts().get_into("sd", back.sd).get(kWait));
  EXPECT_EQ(back.buf, b.buf);
  ASSERT_TRUE(put_over_the_channel(store, "sd", b, 6));
  const auto staged = staged_on(store);
  EXPECT_GE(staged, kObjects);  // its manifest and buckets
  EXPECT_LT(staged, 999u);
  ASSERT_OK(store.state_dicts().get_into("sd", back.sd).get(kWait));
  EXPECT_EQ(back.buf, b.buf);
}

// A client that keeps objects staged for its next put closes: they go back
// to the volume at once (not after its orphan grace), and the key is
// intact.
TEST_P(StateDictPutOver, AClosingClientGivesItsStagedObjectsBack) {
  auto [server, client] = writer_and_reader(options());
  ASSERT_TRUE(ring_open(server, client));
  Dict src(300, 4096, 1), dst(300, 4096, 0);
  // Its first put takes the actors (they pick its volume), then the channel.
  // Two state dicts: two stagings kept, given back in one request.
  for (const char* key : {"sd", "sd2"}) {
    ASSERT_OK(client.state_dicts().put(key, src.sd, three_buckets()).get(kWait));
    ASSERT_TRUE(put_over_the_channel(client, key, src, 1));
    ASSERT_TRUE(put_over_the_channel(client, key, src, 2));
  }
  ASSERT_EQ(staged_on(server), 2 * kObjects);
  client.close();
  EXPECT_EQ(staged_on(server), 0u) << "the staged objects outlived their client's store";
  for (const char* key : {"sd", "sd2"}) {
    ASSERT_OK(server.state_dicts().get_into(key, dst.sd).get(kWait));
    EXPECT_EQ(dst.buf, src.buf);
  }
}

// A put over the channel commits only if the state dict is still the version
// its writer last saw, so a commit that arrives late can never roll the key
// back: another writer's put in between has it refused, and it goes over
// the channel again unfenced (and writes all the same), into the objects
// it had staged. The channel serves the next put as before.
TEST_P(StateDictPutOver, APutOverTheChannelNeverCommitsOverAVersionItsWriterDidNotSee) {
  auto [writer, other] = writer_and_reader(options());
  ASSERT_TRUE(ring_open(writer, writer));
  Dict src(300, 4096, 1), theirs(300, 4096, 50), dst(300, 4096, 0);
  ASSERT_TRUE(put_over_the_channel(writer, "sd", src, 1));
  ASSERT_TRUE(put_over_the_channel(writer, "sd", src, 2));
  ASSERT_EQ(staged_on(writer), kObjects);
  ASSERT_OK(other.state_dicts().put("sd", theirs.sd, three_buckets()).get(kWait));
  // Its first put of the layout, refused (it never saw the key), then put
  // unfenced: nothing staged ahead for it, a layout put once.
  EXPECT_EQ(staged_on(writer), kObjects);
  // Commits the controller was asked for (refused ones too).
  auto commits = [&] { return writer.admin().controller_counters().get(kWait)->notify_put_batch; };
  const auto asked = commits();
  EXPECT_TRUE(put_over_the_channel(writer, "sd", src, 60)) << "not over the channel";
  EXPECT_EQ(commits(), asked + 2) << "not refused over a version it never saw, then put unfenced";
  for (Store* s : {&writer, &other}) {
    std::fill(dst.buf.begin(), dst.buf.end(), 0);
    ASSERT_OK(s->state_dicts().get_into("sd", dst.sd).get(kWait));
    EXPECT_EQ(dst.buf, src.buf);
  }
  // The refused commit's objects staged ahead go back to the volume as the
  // refusal reaches it (a message): the retry's are kept for the next put.
  EXPECT_TRUE(eventually([&] { return staged_on(writer) == kObjects; }))
      << staged_on(writer) << " objects staged";
  ASSERT_TRUE(put_over_the_channel(writer, "sd", src, 61));
  std::fill(dst.buf.begin(), dst.buf.end(), 0);
  ASSERT_OK(other.state_dicts().get_into("sd", dst.sd).get(kWait));
  EXPECT_EQ(dst.buf, src.buf);
}

// A publish runs on the caller's thread while the pointer this client last
// saw (its own publish, or its latest read) is still current: the version,
// the pointer's move and the retirement of what falls out commit over the
// ring in one request. Readers in another client get each version whole;
// what falls out of `keep` is gone. Another writer's publish in between
// sends the next one down the actors' publish, which reads the pointer
// afresh: the versions still count up one by one. A reader that read the
// latest version publishes over its ring too.
TEST_F(RingPut, APublishGoesOverTheRingWhileThePointerThisClientSawIsCurrent) {
  auto [writer, other] = writer_and_reader();
  ASSERT_TRUE(ring_open(writer, writer));
  Dict src(300, 4096, 1), dst(300, 4096, 0);
  auto publish = [&](Store& s, std::uint8_t v) { return publish_filled(s, "w", src, v); };
  ASSERT_EQ(publish(writer, 1), 1u);  // the pointer read at the controller
  for (std::uint8_t v = 2; v < 6; ++v) {
    SCOPED_TRACE(int(v));
    EXPECT_EQ(publish_route(writer, [&] { ASSERT_EQ(publish(writer, v), v); }), "one request");
    std::fill(dst.buf.begin(), dst.buf.end(), 0);
    auto latest = other.state_dicts().get_latest_into("w", dst.sd).get(kWait);
    ASSERT_OK(latest);
    EXPECT_EQ(*latest, v);
    EXPECT_EQ(dst.buf, src.buf);
    // keep = 2: version v - 2 went in the same step.
    EXPECT_FALSE(*writer.exists("w/v" + std::to_string(v - 2)).get(kWait));
    EXPECT_TRUE(*writer.exists("w/v" + std::to_string(v - 1)).get(kWait));
  }
  ASSERT_EQ(publish(other, 50), 6u);
  // Not over a pointer it never saw: the actors read the pointer afresh.
  EXPECT_EQ(publish_route(writer, [&] { ASSERT_EQ(publish(writer, 60), 7u); }), "actors");
  EXPECT_EQ(publish_route(writer, [&] { ASSERT_EQ(publish(writer, 61), 8u); }), "one request");
  auto latest = writer.state_dicts().get_latest_into("w", dst.sd).get(kWait);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 8u);
  EXPECT_EQ(dst.buf, src.buf);
  EXPECT_FALSE(*writer.exists("w/v6").get(kWait));
  // A client that read the latest publishes over its ring, though another
  // client moved the pointer last: its record of the pointer is current.
  ASSERT_TRUE(ring_open(writer, other));
  std::uint64_t v = 8;
  bool over_the_ring = false;  // its first publishes get it objects staged
  for (int i = 0; i < 3 && !over_the_ring; ++i) {
    over_the_ring = publish_route(other, [&] {
                      ASSERT_EQ(publish(other, static_cast<std::uint8_t>(70 + i)), ++v);
                    }) == "one request";
  }
  ASSERT_TRUE(over_the_ring);
  ASSERT_EQ(publish(writer, 80), ++v);
  ASSERT_EQ(*other.state_dicts().get_latest_into("w", dst.sd).get(kWait), v);
  EXPECT_EQ(dst.buf, src.buf);
  EXPECT_EQ(publish_route(other, [&] { ASSERT_EQ(publish(other, 81), ++v); }), "one request")
      << "a reader's publish did not take its ring";
  latest = writer.state_dicts().get_latest_into("w", dst.sd).get(kWait);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, v);
  EXPECT_EQ(dst.buf, src.buf);
}

// A reader reads the latest version with at most one request. Where it
// knows where the pointer lies (its own publish, or its last read) and the
// pointer's object is still the current one (its tag names it), it asks
// nobody: the pointer and the version are read on its own thread. Once the
// pointer moved (another client published), one request to the controller
// answers the pointer with where that version lies, and the version is
// copied straight out of the volume's memory. Every read is the version
// the pointer named when it looked, whole.
TEST_F(RingPut, ALatestReadAsksTheControllerOnlyOnceThePointerMoved) {
  auto [writer, reader] = writer_and_reader();
  ASSERT_TRUE(ring_open(writer, reader));
  ASSERT_TRUE(ring_open(writer, writer));
  Dict src(300, 4096, 1), dst(300, 4096, 0);
  ASSERT_OK(writer.state_dicts()
                .publish("w", src.sd, PublishOptions::by_copy(2, three_buckets()))
                .get(kWait));
  ASSERT_OK(reader.state_dicts().get_latest_into("w", dst.sd).get(kWait));  // plans the layout
  ASSERT_OK(writer.state_dicts().get_latest_into("w", dst.sd).get(kWait));
  EXPECT_EQ(dst.buf, src.buf);
  auto locates = [&] { return writer.admin().controller_counters().get(kWait)->locate; };
  // Reads `s`'s latest into dst: it must be version v, read directly after
  // `asked` requests to the controller.
  auto latest = [&](Store& s, std::uint64_t v, std::uint64_t asked) {
    std::fill(dst.buf.begin(), dst.buf.end(), 0);
    const auto direct = s.admin().fast_path_stats().direct_state_dicts;
    const auto before = locates();
    auto got = s.state_dicts().get_latest_into("w", dst.sd).get(kWait);
    ASSERT_OK(got);
    EXPECT_EQ(*got, v);
    EXPECT_EQ(dst.buf, src.buf);
    EXPECT_EQ(s.admin().fast_path_stats().direct_state_dicts, direct + 1) << "not read directly";
    EXPECT_EQ(locates(), before + asked);
  };
  for (std::uint8_t v = 2; v < 6; ++v) {
    SCOPED_TRACE(int(v));
    std::fill(src.buf.begin(), src.buf.end(), v);
    ASSERT_OK(writer.state_dicts()
                  .publish("w", src.sd, PublishOptions::by_copy(2, three_buckets()))
                  .get(kWait));
    latest(writer, v, 0);  // its own publish: it knows where everything lies
    latest(reader, v, 1);  // the pointer moved: one locate answers both
    latest(reader, v, 0);  // nothing moved: no request
    const auto before = locates();
    EXPECT_EQ(*reader.state_dicts().latest("w").get(kWait), v);
    EXPECT_EQ(locates(), before);
  }
}

// A writer putting over the channel while two threads of another client read:
// every read is one version whole.
TEST_P(StateDictPutOver, AWriterPuttingOverTheChannelNeverShowsReadersATornStateDict) {
  auto [writer, reader] = writer_and_reader(options());
  ASSERT_TRUE(ring_open(writer, writer));
  ASSERT_TRUE(ring_open(writer, reader));
  constexpr int kTensors = 300;
  constexpr std::size_t kBytesEach = 4096;
  Dict src(kTensors, kBytesEach, 1);
  ASSERT_TRUE(put_over_the_channel(writer, "sd", src, 2));
  const auto before = state_dict_puts(writer);
  const auto seen = race_a_writer(writer, reader, src, kTensors, kBytesEach, 3, 120);
  EXPECT_EQ(seen.torn, 0);
  EXPECT_EQ(seen.failed, 0);
  EXPECT_GT(seen.reads, 0);
  EXPECT_GT(state_dict_puts(writer), before);
  Dict dst(kTensors, kBytesEach, 0);
  ASSERT_OK(reader.state_dicts().get_into("sd", dst.sd).get(kWait));
  EXPECT_EQ(dst.buf, src.buf);
}

// A publish runs on the caller's thread from the pointer as this client
// last saw it: over a ring while its tag says it is current, over tcp as
// last seen (the commit's compare-and-set is the check). Readers in
// another client get each version whole. Another writer's publish in
// between sends the next one down the actors' publish, which reads the
// pointer afresh at the controller (over tcp after the channel's commit
// was refused), then puts the version and moves the pointer in two commits
// over the channel: the versions still count up one by one, and the one
// after goes over the channel in one request again.
TEST_P(StateDictPutOver, APublishGoesOverTheChannelFromThePointerItLastSaw) {
  auto [writer, other] = writer_and_reader(options());
  ASSERT_TRUE(ring_open(writer, writer));
  Dict src(300, 4096, 1), dst(300, 4096, 0);
  auto publish = [&](Store& s, std::uint8_t v) { return publish_filled(s, "w", src, v); };
  // The first version: the pointer read at the controller.
  EXPECT_EQ(publish_route(writer, [&] { ASSERT_EQ(publish(writer, 1), 1u); }), "actors");
  for (std::uint8_t v = 2; v < 5; ++v) {
    SCOPED_TRACE(int(v));
    EXPECT_EQ(publish_route(writer, [&] { ASSERT_EQ(publish(writer, v), v); }), "one request");
    auto latest = other.state_dicts().get_latest_into("w", dst.sd).get(kWait);
    ASSERT_OK(latest);
    EXPECT_EQ(*latest, v);
    EXPECT_EQ(dst.buf, src.buf);
    EXPECT_FALSE(*writer.exists("w/v" + std::to_string(v - 2)).get(kWait));  // keep = 2
  }
  ASSERT_EQ(publish(other, 50), 5u);
  // Not over a pointer it never saw: the actors read the pointer afresh.
  EXPECT_EQ(publish_route(writer, [&] { ASSERT_EQ(publish(writer, 60), 6u); }), "actors");
  EXPECT_EQ(publish_route(writer, [&] { ASSERT_EQ(publish(writer, 61), 7u); }), "one request")
      << "not over the channel again";
  auto latest = other.state_dicts().get_latest_into("w", dst.sd).get(kWait);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 7u);
  EXPECT_EQ(dst.buf, src.buf);
}

// A state dict larger than a staging kept ahead (16 MiB), and not worth a
// stream (one large tensor: readers could overlap nothing), takes the same
// route: over a ring copied on the caller's thread, over tcp sent from the
// client's waiting thread (the caller goes on meanwhile). Puts and
// publishes read back whole, in another client too.
TEST_P(StateDictPutOver, AStateDictLargerThanAKeptStagingTakesTheChannelToo) {
  auto [writer, reader] = writer_and_reader(options());
  ASSERT_TRUE(ring_open(writer, writer));
  constexpr int kTensors = 1;
  constexpr std::size_t kBytesEach = std::size_t{20} << 20;
  Dict src(kTensors, kBytesEach, 0), dst(kTensors, kBytesEach, 0);
  for (std::uint8_t v = 1; v < 4; ++v) {
    SCOPED_TRACE(int(v));
    for (std::size_t i = 0; i < src.buf.size(); i += 4096) src.buf[i] = v;
    const auto before = state_dict_puts(writer);
    ASSERT_OK(writer.state_dicts().put("big", src.sd).get(kWait));
    EXPECT_EQ(state_dict_puts(writer), before + 1) << "not over the channel";
    std::fill(dst.buf.begin(), dst.buf.end(), 0);
    ASSERT_OK(reader.state_dicts().get_into("big", dst.sd).get(kWait));
    EXPECT_EQ(dst.buf, src.buf);
    auto n = writer.state_dicts().publish("w", src.sd, PublishOptions::by_copy(1)).get(kWait);
    ASSERT_OK(n);
    EXPECT_EQ(n->version(), v);
    std::fill(dst.buf.begin(), dst.buf.end(), 0);
    auto latest = reader.state_dicts().get_latest_into("w", dst.sd).get(kWait);
    ASSERT_OK(latest);
    EXPECT_EQ(*latest, v);
    EXPECT_EQ(dst.buf, src.buf);
  }
  // The publishes after the first (the actors': no pointer yet) went over
  // the channel too.
  EXPECT_GE(state_dict_puts(writer), 3u + 2u);
}

// A store closed while such a put is in flight (over tcp, on the waiting
// thread) ends it before close returns: the put's future is complete, the
// put whole or not there at all, and nothing hangs.
TEST_P(StateDictPutOver, ClosingTheStoreEndsALargePutInFlight) {
  auto [server, client] = writer_and_reader(options());
  ASSERT_TRUE(ring_open(server, client));
  std::vector<std::uint8_t> first(16, 1);
  ASSERT_OK(client.put("first", bytes_view(first)).get(kWait));  // picks its volume
  Dict src(1, std::size_t{20} << 20, 7), dst(1, std::size_t{20} << 20, 0);
  auto put = client.state_dicts().put("big", src.sd);
  client.close();
  ASSERT_TRUE(put.ready()) << "close returned with the put still running";
  if (put.get(kWait).ok()) {
    ASSERT_OK(server.state_dicts().get_into("big", dst.sd).get(kWait));
    EXPECT_EQ(dst.buf, src.buf);
  } else {
    EXPECT_ERROR(server.state_dicts().get_into("big", dst.sd).get(kWait), Errc::not_found, "big");
  }
}

INSTANTIATE_TEST_SUITE_P(Channels, StateDictPutOver,
                         ::testing::Values("ring", "tcp", "tcp_encrypted", "cma", "rpc"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace meshstore
