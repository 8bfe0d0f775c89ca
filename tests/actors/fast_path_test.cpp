// The fast path for small gets (issue 26; StoreOptions::fast_path): a
// small whole key whose location a process knows, on a volume of its host,
// is read on the caller's thread over a shared-memory ring to the volume.
// Through the public API: the values and errors are those of the actor
// path, and Store::fast_path_stats() says which path served each call.
// Channels/FastPathOver.* run over every channel (the ring, tcp and
// encrypted tcp); FastPath.* are the ring's own or the options'. Then
// FastPath itself, against a ring whose volume end the test plays:
// replies that are corrupt are refused.
#include "meshstore/client/fast_path.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/store.hpp"
#include "meshstore/transports/shm/ring.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"
#include "meshstore/transports/transport.hpp"
#include "testing/pidfd.hpp"
#include "testing/racing_readers.hpp"
#include "testing/read_back.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::kWait;

// Waits (bounded) until `store` has a ring to a volume: the client opens
// it in the background once it first reaches the volume.
bool has_ring(const Store& store) {
  return eventually([&] { return store.admin().fast_path_stats().rings >= 1; }, 10s);
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

// A store others connect to (its volume in this process), and a client of
// it without a volume: a writer and a reader in two clients.
StoreOptions listening() {
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  return o;
}
StoreOptions tool() {
  StoreOptions o;
  o.placement.host_volumes = false;
  return o;
}

TensorView bytes_view(std::vector<std::uint8_t>& v) {
  return TensorView(v.data(), DType::uint8, {static_cast<std::int64_t>(v.size())});
}

// Every size is put on the caller's thread over the ring, and every size a
// slot carries is read there too: straight from the volume's shared memory
// where the put's answer said where the object lies and the volume's
// process can be watched (pidfd), else over the ring.
TEST(FastPath, EverySizeIsPutOnTheCallersThread) {
  auto store = Store::embedded().value();
  std::vector<std::uint8_t> first = pattern(4, 1);
  ASSERT_OK(store.put("first", bytes_view(first)).get(kWait));
  ASSERT_TRUE(has_ring(store));
  const std::size_t limit = protocol::limits::kRingReadBytes;
  for (std::size_t n : {std::size_t{1}, std::size_t{64}, std::size_t{4096}, limit}) {
    SCOPED_TRACE(n);
    const std::string key = "k" + std::to_string(n);
    auto src = pattern(n, static_cast<std::uint8_t>(n));
    const auto before = store.admin().fast_path_stats().hits;
    const auto direct = store.admin().fast_path_stats().direct_reads;
    const auto puts = store.admin().fast_path_stats().puts;
    ASSERT_OK(store.put(key, bytes_view(src)).get(kWait));
    testing::expect_reads_back(store, key, src);
    ASSERT_OK(store.put_object("o" + key, std::string(src.begin(), src.end()), ObjectFormat::pickle)
                  .get(kWait));
    auto o = store.get_stored_object("o" + key).get(kWait);
    ASSERT_OK(o);
    EXPECT_EQ(o->bytes, std::string(src.begin(), src.end()));
    EXPECT_EQ(o->format, ObjectFormat::pickle);
    EXPECT_EQ(store.admin().fast_path_stats().hits, before + 3)
        << "not served on the caller's thread";
    EXPECT_EQ(store.admin().fast_path_stats().direct_reads,
              direct + (testing::have_pidfd() ? 3 : 0));
    EXPECT_EQ(store.admin().fast_path_stats().puts, puts + 2) << "not put over the ring";
  }
  // Larger than a slot carries: staged at the volume, written straight
  // into its memory and committed over the ring, with no upper bound (the
  // last is put by several threads of the copy engine). Each is read
  // directly, at any size, where the volume's process can be watched (the
  // largest split over the copy engine too), else by the actors.
  for (std::size_t n :
       {limit + 1, std::size_t{256} << 10, std::size_t{1} << 20, (std::size_t{8} << 20) + 1}) {
    SCOPED_TRACE(n);
    auto big = pattern(n, static_cast<std::uint8_t>(n >> 10));
    const auto before = store.admin().fast_path_stats();
    ASSERT_OK(store.put("big", bytes_view(big)).get(kWait));
    std::vector<std::uint8_t> dst(big.size(), 0);
    ASSERT_OK(store.get_into("big", bytes_view(dst)).get(kWait));
    EXPECT_EQ(dst, big);
    const bool direct = testing::have_pidfd();
    EXPECT_EQ(store.admin().fast_path_stats().puts, before.puts + 1) << "not put over the ring";
    EXPECT_EQ(store.admin().fast_path_stats().hits, before.hits + (direct ? 1 : 0));
    EXPECT_EQ(store.admin().fast_path_stats().direct_reads, before.direct_reads + (direct ? 1 : 0));
    EXPECT_EQ(store.admin().fast_path_stats().misses, before.misses + (direct ? 0 : 1));
  }
  // Nothing of the process is left in /dev/shm once the store closes.
  store.close();
  EXPECT_TRUE(transports::shm::own_segments().empty());
}

TEST(FastPath, TheVolumesSmallOpThreadIsNamedForProfilers) {
  const int before = testing::threads_named("ms.small_ops");
  auto store = Store::embedded().value();
  ASSERT_OK(store.put_object("k", "v").get(kWait));
  ASSERT_TRUE(has_ring(store));
  EXPECT_TRUE(testing::eventually([&] { return testing::threads_named("ms.small_ops") > before; }));
  store.close();
}

TEST(FastPath, ASpinOutsideZeroToOneSecondIsRefused) {
  for (const auto spin : {std::chrono::microseconds(-1), std::chrono::microseconds(1000001)}) {
    StoreOptions o;
    o.transport.fast_path_spin = spin;
    EXPECT_ERROR(Store::embedded(o).status(), Errc::invalid_argument, "fast_path_spin");
  }
}

TEST(FastPath, FromEnvRefusesABadSpinByName) {
  // A launch environment of one rank; the store is never started, since
  // the variable is refused first.
  const std::vector<std::pair<const char*, const char*>> launch = {{"RANK", "0"},
                                                                   {"WORLD_SIZE", "1"},
                                                                   {"LOCAL_RANK", "0"},
                                                                   {"LOCAL_WORLD_SIZE", "1"},
                                                                   {"MASTER_ADDR", "127.0.0.1"},
                                                                   {"MASTER_PORT", "29999"}};
  for (const auto& [k, v] : launch) ::setenv(k, v, 1);
  for (const char* bad : {"fifty", "50us", "-1", "1000001"}) {
    ::setenv("MESHSTORE_FAST_PATH_SPIN_US", bad, 1);
    EXPECT_ERROR(Store::from_env().status(), Errc::invalid_argument, "MESHSTORE_FAST_PATH_SPIN_US")
        << bad;
  }
  ::unsetenv("MESHSTORE_FAST_PATH_SPIN_US");
  for (const auto& [k, v] : launch) ::unsetenv(k);
}

// The tests that hold for every fast path: the shm ring ("", the chosen
// transport on one host) and the tcp transport's small operations ("tcp",
// as across hosts: every test forces tcp, so the volume is reached as one
// on another host would be). "tcp-encrypted": tcp with encrypt_tcp
// (sealed records).
class FastPathOver : public ::testing::TestWithParam<const char*> {
 protected:
  StoreOptions over(StoreOptions o) const {
    const std::string p = GetParam();
    o.transport.name = p == "tcp-encrypted" ? "tcp" : p;
    o.security.encrypt_tcp = p == "tcp-encrypted";
    return o;
  }
  StoreOptions writer_options() const { return over(listening()); }
  StoreOptions reader_options() const { return over(tool()); }
  // Whether a get above one message (up to 8 MiB) is checked over the
  // channel, then read with the transport's bulk read (two-sided
  // transports: tcp, rpc).
  bool bulk_reads() const {
    const std::string p = GetParam();
    return p == "tcp" || p == "tcp-encrypted" || p == "rpc";
  }
};

// A client's first put has the client pick its volume and open the
// channel to it (from the fast path's waiting thread), then takes that
// channel: every put of a fresh client goes over it, the first included.
// The store's own client and another one connected to it each put once,
// right away, and read the other's value back.
TEST_P(FastPathOver, AClientsFirstPutTakesTheChannel) {
  auto store = Store::embedded(writer_options()).value();
  std::vector<float> w(15, 2.5f);
  ASSERT_OK(store.put("w", TensorView::of(w.data(), {3, 5})).get(kWait));
  EXPECT_EQ(store.admin().fast_path_stats().puts, 1u) << "the first put took the actors";
  EXPECT_GE(store.admin().fast_path_stats().rings, 1u);
  auto other = Store::connect(store.admin().address(), reader_options()).value();
  ASSERT_OK(other.put_object("o", "first").get(kWait));
  EXPECT_EQ(other.admin().fast_path_stats().puts, 1u) << "the first put took the actors";
  auto o = store.get_object("o").get(kWait);
  ASSERT_OK(o);
  EXPECT_EQ(*o, "first");
  std::vector<float> out(15, 0.0f);
  ASSERT_OK(other.get_into("w", TensorView::of(out.data(), {3, 5})).get(kWait));
  EXPECT_EQ(out, w);
  other.close();
}

// A call the channel cannot serve is answered as the actors answer it:
// another dtype or shape, the wrong kind or a missing key is refused and
// writes nothing into the caller's buffer; a strided destination takes the
// actors and gets the same bytes.
TEST_P(FastPathOver, ErrorsAreTheActorPathsAndNothingIsWritten) {
  auto store = Store::embedded(writer_options()).value();
  std::vector<float> w(15, 2.5f);
  ASSERT_OK(store.put("w", TensorView::of(w.data(), {3, 5})).get(kWait));
  ASSERT_OK(store.put_object("obj", "bytes").get(kWait));
  ASSERT_TRUE(has_ring(store));
  // Served: the right dtype and shape.
  std::vector<float> out(15, 0.0f);
  ASSERT_OK(store.get_into("w", TensorView::of(out.data(), {3, 5})).get(kWait));
  EXPECT_EQ(out, w);
  const auto hits = store.admin().fast_path_stats().hits;
  // Not served, and refused exactly as the actor path refuses.
  std::vector<double> wrong_dtype(15, -1.0);
  EXPECT_ERROR(store.get_into("w", TensorView::of(wrong_dtype.data(), {3, 5})).get(kWait),
               Errc::dtype_mismatch, "'w'");
  EXPECT_EQ(wrong_dtype, std::vector<double>(15, -1.0));
  std::vector<float> wrong_shape(15, -1.0f);
  EXPECT_ERROR(store.get_into("w", TensorView::of(wrong_shape.data(), {5, 3})).get(kWait),
               Errc::shape_mismatch, "'w'");
  EXPECT_EQ(wrong_shape, std::vector<float>(15, -1.0f));
  EXPECT_ERROR(store.get_object("w").get(kWait), Errc::wrong_kind, "holds a tensor");
  EXPECT_ERROR(store.get("obj").get(kWait), Errc::wrong_kind, "holds an object");
  EXPECT_ERROR(store.get("missing").get(kWait), Errc::not_found, "no key 'missing'");
  EXPECT_EQ(store.admin().fast_path_stats().hits, hits);
  // A strided destination takes the actor path and gets the same bytes.
  std::vector<float> wide(30, 0.0f);
  auto strided = TensorView(wide.data(), DType::float32, {3, 5}, {10, 1});
  ASSERT_OK(store.get_into("w", strided).get(kWait));
  EXPECT_EQ(wide[10], 2.5f);
  EXPECT_EQ(wide[5], 0.0f);
  // Removed by this client: gone from the fast path before remove completes.
  ASSERT_OK(store.remove("w").get(kWait));
  EXPECT_ERROR(store.get_into("w", TensorView::of(out.data(), {3, 5})).get(kWait), Errc::not_found,
               "no key 'w'");
  // A closed store answers shutdown, as before.
  store.close();
  EXPECT_ERROR(store.get_object("obj").get(kWait), Errc::shutdown, "");
  EXPECT_EQ(store.admin().fast_path_stats().rings, 0u);
}

// A strided host source is packed on the caller's thread and put over the
// channel like a contiguous one: small, its packed bytes inline; large,
// packed straight into the staged object (shm) or packed, then sent.
TEST_P(FastPathOver, AStridedSourceIsPackedAndPutOverTheChannel) {
  auto store = Store::embedded(writer_options()).value();
  for (const std::int64_t rows : {std::int64_t{4}, std::int64_t{64} << 10}) {
    // Every other column of a rows x 4 grid: rows x 2, row stride 4.
    std::vector<float> grid(static_cast<std::size_t>(rows * 4));
    for (std::size_t i = 0; i < grid.size(); ++i) grid[i] = static_cast<float>(i);
    const TensorView strided(grid.data(), DType::float32, {rows, 2}, {4, 2});
    const auto before = store.admin().fast_path_stats();
    ASSERT_OK(store.put("strided", strided).get(kWait));
    EXPECT_EQ(store.admin().fast_path_stats().puts, before.puts + 1) << rows << " rows";
    std::vector<float> back(static_cast<std::size_t>(rows * 2), -1.0f);
    ASSERT_OK(store.get_into("strided", TensorView::of(back.data(), {rows, 2})).get(kWait));
    for (std::int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(back[static_cast<std::size_t>(2 * r)], static_cast<float>(4 * r)) << r;
      ASSERT_EQ(back[static_cast<std::size_t>(2 * r + 1)], static_cast<float>(4 * r + 2)) << r;
    }
  }
}

// Threads of one process share its channel to a volume, one request at a
// time; each gets its own value.
TEST_P(FastPathOver, ConcurrentCallersShareTheChannel) {
  auto store = Store::embedded(writer_options()).value();
  constexpr int kThreads = 4;
  for (int t = 0; t < kThreads; ++t) {
    auto v = pattern(1000 + t, static_cast<std::uint8_t>(t));
    ASSERT_OK(store.put("k" + std::to_string(t), bytes_view(v)).get(kWait));
  }
  ASSERT_TRUE(has_ring(store));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto want = pattern(1000 + t, static_cast<std::uint8_t>(t));
      std::vector<std::uint8_t> dst(want.size());
      for (int i = 0; i < 200; ++i) {
        std::fill(dst.begin(), dst.end(), 0);
        auto s = store.get_into("k" + std::to_string(t), bytes_view(dst)).get(kWait);
        if (!s.ok() || dst != want) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(store.admin().fast_path_stats().hits, std::uint64_t{kThreads} * 200);
}

// A reader in one client, a writer in another: the reader's known location
// goes stale when the writer overwrites or removes the key; it is located
// again, never read.
TEST_P(FastPathOver, AStaleLocationIsLocatedAgainNotRead) {
  auto writer = Store::embedded(writer_options()).value();
  auto reader = Store::connect(writer.admin().address(), reader_options()).value();
  std::vector<std::uint8_t> v(4096, 1);
  ASSERT_OK(writer.put("k", bytes_view(v)).get(kWait));
  std::vector<std::uint8_t> dst(4096, 0);
  ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));  // learns where "k" is
  ASSERT_TRUE(has_ring(reader));
  ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));
  EXPECT_EQ(reader.admin().fast_path_stats().hits, 1u);
  std::fill(v.begin(), v.end(), 2);
  ASSERT_OK(writer.put("k", bytes_view(v)).get(kWait));
  // Until the volume has dropped the old object the reader may still get
  // the old value (a read racing a put may); then it must get the new one.
  ASSERT_TRUE(eventually(
      [&] {
        std::fill(dst.begin(), dst.end(), 0);
        EXPECT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));
        EXPECT_TRUE(testing::uniform(dst)) << "torn value";
        EXPECT_TRUE(dst[0] == 1 || dst[0] == 2) << int(dst[0]);
        return dst[0] == 2;
      },
      10s));
  EXPECT_GE(reader.admin().fast_path_stats().stale, 1u);
  // Located afresh: the ring serves the new object.
  const auto hits = reader.admin().fast_path_stats().hits;
  ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));
  EXPECT_EQ(dst[0], 2);
  EXPECT_EQ(reader.admin().fast_path_stats().hits, hits + 1);
  // Removed by the writer: not_found once the volume dropped it.
  ASSERT_OK(writer.remove("k").get(kWait));
  ASSERT_TRUE(eventually(
      [&] {
        return reader.get_into("k", bytes_view(dst)).get(kWait).status().code() == Errc::not_found;
      },
      10s));
}

// A read that starts after an overwrite returned finds the new value,
// never the one it replaced, though the reader still knows where the old
// one lay (point 4 of the data path's argument): the put's answer waits
// until the old object is retired (its tag cleared, gets no longer serve
// it), which the controller does itself when the volume is in its process.
// Both kinds of put over the channel: in one request (4 KiB), and staged,
// written and committed (256 KiB and 2 MiB; read directly over the ring;
// over tcp and rpc in one reply, or checked and then read in bulk above
// one message; by the actors over cma).
TEST_P(FastPathOver, AReadAfterAnOverwriteReturnedNeverFindsTheOldValue) {
  auto writer = Store::embedded(writer_options()).value();
  auto reader = Store::connect(writer.admin().address(), reader_options()).value();
  for (const std::size_t n : {std::size_t{4096}, std::size_t{256} << 10, std::size_t{2} << 20}) {
    SCOPED_TRACE(n);
    const std::string key = "k" + std::to_string(n);
    std::vector<std::uint8_t> v(n, 0);
    ASSERT_OK(writer.put(key, bytes_view(v)).get(kWait));
    std::vector<std::uint8_t> dst(v.size());
    ASSERT_OK(reader.get_into(key, bytes_view(dst)).get(kWait));  // learns where it is
    ASSERT_TRUE(has_ring(reader));
    ASSERT_TRUE(has_ring(writer));
    const auto puts = writer.admin().fast_path_stats().puts;
    const auto stale = reader.admin().fast_path_stats().stale;
    constexpr int kRounds = 200;
    for (int round = 1; round <= kRounds; ++round) {
      std::fill(v.begin(), v.end(), static_cast<std::uint8_t>(round));
      ASSERT_OK(writer.put(key, bytes_view(v)).get(kWait));
      ASSERT_OK(reader.get_into(key, bytes_view(dst)).get(kWait));
      ASSERT_TRUE(testing::uniform(dst)) << "torn value in round " << round;
      ASSERT_EQ(int(dst[0]), round) << "the value this round's put replaced";
    }
    EXPECT_EQ(writer.admin().fast_path_stats().puts, puts + kRounds) << "not put over the channel";
    if (n <= protocol::limits::kRingReadBytes || std::string(GetParam()).empty() ||
        (n > transports::kMaxSmallOpBytes && bulk_reads())) {
      EXPECT_GE(reader.admin().fast_path_stats().stale, stale + 1)
          << "never read where the old value lay";
    }
  }
}

// One writer replaces a key continuously while readers in another client
// read it over their channel: every value read is one the writer wrote
// whole. 16 KiB goes in one reply (or a direct read over the ring); 2 MiB
// is checked over the channel and read in bulk over tcp and rpc.
TEST_P(FastPathOver, AWriterRacingReadersNeverShowsATornValue) {
  auto writer = Store::embedded(writer_options()).value();
  auto reader = Store::connect(writer.admin().address(), reader_options()).value();
  for (const std::size_t bytes : {std::size_t{16} << 10, std::size_t{2} << 20}) {
    SCOPED_TRACE(bytes);
    const std::string key = "k" + std::to_string(bytes);
    std::vector<std::uint8_t> v(bytes, 1);
    ASSERT_OK(writer.put(key, bytes_view(v)).get(kWait));
    std::vector<std::uint8_t> dst(bytes);
    ASSERT_OK(reader.get_into(key, bytes_view(dst)).get(kWait));
    ASSERT_TRUE(has_ring(reader));
    const auto before = reader.admin().fast_path_stats();
    const auto seen = testing::race_readers(
        bytes, 2,
        [&](std::vector<std::uint8_t>& mine) {
          return reader.get_into(key, bytes_view(mine)).get(kWait).status();
        },
        [&](const std::function<void()>& pace) {
          for (int i = 2; i < 200; ++i) {
            std::fill(v.begin(), v.end(), static_cast<std::uint8_t>(i));
            pace();
            ASSERT_OK(writer.put(key, bytes_view(v)).get(kWait));
          }
        });
    EXPECT_EQ(seen.torn, 0);
    EXPECT_EQ(seen.failed, 0);
    EXPECT_GT(seen.reads, 0);
    // The readers went to the channel (served, or told their location was
    // stale by a writer faster than them), unless it is cma's and above
    // one message (the actors')...
    const bool over_channel = bytes <= transports::kMaxSmallOpBytes / 2 || bulk_reads() ||
                              std::string(GetParam()).empty();
    const auto s = reader.admin().fast_path_stats();
    if (over_channel) {
      EXPECT_GT(s.hits + s.stale, before.hits + before.stale);
    }
    // ...and once the writer stops, it serves the last value. Until the
    // volume has processed the controller's release of the object the
    // reader last located, that object (a complete older version) may still
    // be read (documented: a read racing a put may return the previous
    // version); its release turns the next read stale, located afresh.
    EXPECT_TRUE(eventually(
        [&] {
          const auto hits = reader.admin().fast_path_stats().hits;
          EXPECT_OK(reader.get_into(key, bytes_view(dst)).get(kWait));
          EXPECT_TRUE(testing::uniform(dst)) << "torn value";
          const bool served = reader.admin().fast_path_stats().hits == hits + 1;
          return (served || !over_channel) && dst[0] == 199;
        },
        10s));
    EXPECT_EQ(dst, std::vector<std::uint8_t>(bytes, 199));
  }
}

// FastPath against a ring whose volume end the test plays.
// A get of a whole key whose reply fits one message of the channel takes
// it, once the key's location is known: over tcp's small operations or
// actor messages, up to 1 MiB (less the reply's header). A larger key, up
// to 8 MiB (limits::kSnapshotHereBytes), is checked over the channel, then
// read with a two-sided transport's bulk read (tcp, rpc), on the caller's
// thread too; over cma (one-sided), and above 8 MiB, it takes the actors
// (a lease, and the transport's read). (Over a ring every such get is a
// direct read: not this test's.)
TEST_P(FastPathOver, AGetWhoseReplyFitsOneMessageTakesTheChannel) {
  if (std::string(GetParam()).empty()) GTEST_SKIP() << "over a ring, gets are direct reads";
  auto store = Store::embedded(writer_options()).value();
  auto other = Store::connect(store.admin().address(), reader_options()).value();
  const std::size_t message = transports::kMaxSmallOpBytes - protocol::fast_get::kReplyHeaderBytes;
  const std::size_t here = protocol::limits::kSnapshotHereBytes;
  for (const std::size_t n : {protocol::limits::kRingReadBytes + 1, std::size_t{512} << 10, message,
                              message + 1, here, here + 1}) {
    SCOPED_TRACE(n);
    const std::string key = "m" + std::to_string(n);
    auto src = pattern(n, static_cast<std::uint8_t>(n % 251));
    ASSERT_OK(store.put(key, bytes_view(src)).get(kWait));
    std::vector<std::uint8_t> dst(n, 0);
    ASSERT_OK(other.get_into(key, bytes_view(dst)).get(kWait));  // located by the actors
    EXPECT_EQ(dst, src);
    ASSERT_TRUE(has_ring(other));
    const auto before = other.admin().fast_path_stats();
    std::fill(dst.begin(), dst.end(), std::uint8_t{0});
    ASSERT_OK(other.get_into(key, bytes_view(dst)).get(kWait));
    EXPECT_EQ(dst, src);
    auto got = other.get(key).get(kWait);
    ASSERT_OK(got);
    ASSERT_EQ(got->nbytes(), n);
    EXPECT_EQ(std::memcmp(got->data(), src.data(), n), 0);
    const auto after = other.admin().fast_path_stats();
    if (n <= message || (bulk_reads() && n <= here)) {
      EXPECT_EQ(after.hits, before.hits + 2) << "not over the channel";
      EXPECT_EQ(after.misses, before.misses) << "left to the actors";
    } else {
      EXPECT_EQ(after.hits, before.hits) << "larger than a message, yet over the channel";
    }
  }
  other.close();
}

// Puts of every size go over the channel to the client's volume, which
// commits them at the controller: the value is then the key's on every
// path, for this client (its fast and its actor path) and for another.
TEST_P(FastPathOver, PutsOfEverySizeGoOverTheChannelAndEveryPathReadsThem) {
  auto store = Store::embedded(writer_options()).value();
  std::vector<std::uint8_t> first = pattern(4, 1);
  ASSERT_OK(store.put("first", bytes_view(first)).get(kWait));  // finds the volume
  ASSERT_TRUE(has_ring(store));
  auto other = Store::connect(store.admin().address(), reader_options()).value();
  const std::size_t limit = protocol::limits::kRingReadBytes;
  for (std::size_t n : {std::size_t{1}, std::size_t{4096}, limit}) {
    SCOPED_TRACE(n);
    const std::string key = "p" + std::to_string(n);
    for (std::uint8_t round = 0; round < 3; ++round) {  // overwrites too
      auto src = pattern(n, static_cast<std::uint8_t>(n + round));
      const auto puts = store.admin().fast_path_stats().puts;
      ASSERT_OK(store.put(key, bytes_view(src)).get(kWait));
      EXPECT_EQ(store.admin().fast_path_stats().puts, puts + 1);
      std::vector<std::uint8_t> dst(n, 0);
      const auto hits = store.admin().fast_path_stats().hits;
      ASSERT_OK(store.get_into(key, bytes_view(dst)).get(kWait));  // the fast path
      EXPECT_EQ(store.admin().fast_path_stats().hits, hits + 1);
      EXPECT_EQ(dst, src);
      auto batch = store.get_batch({key, "first"}).get(kWait);  // the actor path
      ASSERT_OK(batch);
      ASSERT_EQ(batch->front().nbytes(), n);
      EXPECT_EQ(std::memcmp(batch->front().data(), src.data(), n), 0);
      auto seen = other.get(key).get(kWait);  // another client
      ASSERT_OK(seen);
      ASSERT_EQ(seen->nbytes(), n);
      EXPECT_EQ(std::memcmp(seen->data(), src.data(), n), 0);
    }
  }
  // Objects too, with their format, read again on the other client's own
  // channel once it has learnt where the object lies.
  const auto puts = store.admin().fast_path_stats().puts;
  ASSERT_OK(store.put_object("o", "text", ObjectFormat::utf8).get(kWait));
  EXPECT_EQ(store.admin().fast_path_stats().puts, puts + 1);
  for (int read = 0; read < 2; ++read) {
    ASSERT_TRUE(read == 0 || has_ring(other));
    const auto hits = other.admin().fast_path_stats().hits;
    auto o = other.get_stored_object("o").get(kWait);
    ASSERT_OK(o);
    EXPECT_EQ(o->bytes, "text");
    EXPECT_EQ(o->format, ObjectFormat::utf8);
    if (read == 1) {
      EXPECT_EQ(other.admin().fast_path_stats().hits, hits + 1) << "not on its channel";
    }
  }
  // More than one request carries: staged at the volume, written (copied
  // into its memory, or sent with tcp) and committed over the channel. The
  // last is more than the caller's thread waits for over tcp: sent from
  // the client's waiting thread.
  for (const std::size_t n : {std::size_t{protocol::limits::kRingReadBytes + 1},
                              std::size_t{2} << 20, protocol::limits::kStagedAheadBytes + 1}) {
    SCOPED_TRACE(n);
    auto big = pattern(n, static_cast<std::uint8_t>(n));
    const auto before = store.admin().fast_path_stats();
    ASSERT_OK(store.put("big", bytes_view(big)).get(kWait));
    EXPECT_EQ(store.admin().fast_path_stats().puts, before.puts + 1) << "not over the channel";
    testing::expect_reads_back(other, "big", big);
  }
  // An object larger than one request keeps its format on that route.
  const std::string pickled(std::size_t{200} << 10, 'p');
  const auto objects_before = store.admin().fast_path_stats().puts;
  ASSERT_OK(store.put_object("big-object", pickled, ObjectFormat::pickle).get(kWait));
  EXPECT_EQ(store.admin().fast_path_stats().puts, objects_before + 1) << "not over the channel";
  auto object = other.get_stored_object("big-object").get(kWait);
  ASSERT_OK(object);
  EXPECT_EQ(object->bytes, pickled);
  EXPECT_EQ(object->format, ObjectFormat::pickle);
  // A key another client overwrote, then this one: its own value wins.
  std::vector<std::uint8_t> theirs = pattern(8, 50), mine = pattern(8, 90);
  ASSERT_OK(other.put("shared", bytes_view(theirs)).get(kWait));
  ASSERT_OK(store.put("shared", bytes_view(mine)).get(kWait));
  std::vector<std::uint8_t> back(8, 0);
  ASSERT_OK(store.get_into("shared", bytes_view(back)).get(kWait));
  EXPECT_EQ(back, mine);
  auto keys = other.keys("").get(kWait);
  ASSERT_OK(keys);
  EXPECT_EQ(std::count(keys->begin(), keys->end(), "shared"), 1);
  other.close();
  store.close();
}

// A put over the channel commits only over the version of the key its
// writer saw last, so a put that reaches the controller late can never
// roll the key back: after another client's put, the next one is refused,
// then goes over the channel again unfenced (and writes all the same).
TEST_P(FastPathOver, APutOverTheChannelNeverCommitsOverAVersionItsWriterDidNotSee) {
  auto store = Store::embedded(writer_options()).value();
  std::vector<std::uint8_t> first = pattern(64, 1), theirs = pattern(64, 50),
                            mine = pattern(64, 90), again = pattern(64, 120);
  ASSERT_OK(store.put("first", bytes_view(first)).get(kWait));  // finds the volume
  ASSERT_TRUE(has_ring(store));
  auto other = Store::connect(store.admin().address(), reader_options()).value();
  auto puts = store.admin().fast_path_stats().puts;
  ASSERT_OK(store.put("k", bytes_view(first)).get(kWait));
  ASSERT_EQ(store.admin().fast_path_stats().puts, puts + 1);
  ASSERT_OK(other.put("k", bytes_view(theirs)).get(kWait));
  puts = store.admin().fast_path_stats().puts;
  // Commits the controller was asked for (refused ones too).
  auto commits = [&] { return store.admin().controller_counters().get(kWait)->notify_put_batch; };
  auto asked = commits();
  ASSERT_OK(store.put("k", bytes_view(mine)).get(kWait));
  EXPECT_EQ(commits(), asked + 2) << "not refused over a version it never saw, then put unfenced";
  EXPECT_EQ(store.admin().fast_path_stats().puts, puts + 1) << "not over the channel";
  puts = store.admin().fast_path_stats().puts;
  asked = commits();
  for (Store* s : {&store, &other}) {
    std::vector<std::uint8_t> back(64, 0);
    ASSERT_OK(s->get_into("k", bytes_view(back)).get(kWait));
    EXPECT_EQ(back, mine);
  }
  ASSERT_OK(store.put("k", bytes_view(again)).get(kWait));
  EXPECT_EQ(store.admin().fast_path_stats().puts, puts + 1);
  EXPECT_EQ(commits(), asked + 1);
  testing::expect_reads_back(other, "k", again);
  other.close();
  store.close();
}

// A put_batch goes over the channel as one commit: its keys staged,
// written and committed together (all or none), then read back by another
// client; put again, into the objects its last commit staged ahead. After
// another client's put of one of its keys, the batch's commit is refused
// (it holds only over the versions its writer saw), and it goes over the
// channel again unfenced, whole: its values win.
TEST_P(FastPathOver, APutBatchGoesOverTheChannelAsOneCommit) {
  auto store = Store::embedded(writer_options()).value();
  std::vector<std::uint8_t> first = pattern(4, 1);
  ASSERT_OK(store.put("first", bytes_view(first)).get(kWait));  // finds the volume
  ASSERT_TRUE(has_ring(store));
  auto other = Store::connect(store.admin().address(), reader_options()).value();
  const std::vector<std::size_t> sizes = {64, 4096, std::size_t{100} << 10, std::size_t{1} << 20};
  std::vector<std::vector<std::uint8_t>> values(sizes.size());
  auto put_batch = [&](std::uint8_t seed) {
    std::vector<std::pair<std::string, TensorView>> items;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      values[i] = pattern(sizes[i], static_cast<std::uint8_t>(seed + i));
      items.emplace_back("b" + std::to_string(i), bytes_view(values[i]));
    }
    const auto before = store.admin().fast_path_stats().puts;
    EXPECT_OK(store.put_batch(std::move(items)).get(kWait));
    return store.admin().fast_path_stats().puts - before;
  };
  auto reads_back = [&](Store& s) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      testing::expect_reads_back(s, "b" + std::to_string(i), values[i]);
    }
  };
  EXPECT_EQ(put_batch(10), 1u) << "not one commit over the channel";
  reads_back(other);
  EXPECT_EQ(put_batch(20), 1u);
  reads_back(other);
  std::vector<std::uint8_t> theirs = pattern(sizes[1], 99);
  ASSERT_OK(other.put("b1", bytes_view(theirs)).get(kWait));
  const auto asked = store.admin().controller_counters().get(kWait)->notify_put_batch;
  EXPECT_EQ(put_batch(30), 1u) << "not over the channel";
  EXPECT_EQ(store.admin().controller_counters().get(kWait)->notify_put_batch, asked + 2)
      << "not refused over a version it never saw, then put unfenced";
  reads_back(other);
  reads_back(store);
  EXPECT_EQ(put_batch(40), 1u);
  reads_back(other);
  other.close();
  store.close();
}

// A put_batch whose commit is larger than one message of its channel
// (6,000 keys of 200 characters: 2.5 MiB of records, over a ring slot and
// over a tcp small op) is still one commit over the channel, its request
// and the volume's reply in parts; every key reads back in another client.
TEST_P(FastPathOver, APutBatchLargerThanAMessageIsOneCommitInParts) {
  auto store = Store::embedded(writer_options()).value();
  std::vector<std::uint8_t> first = pattern(4, 1);
  ASSERT_OK(store.put("first", bytes_view(first)).get(kWait));  // finds the volume
  ASSERT_TRUE(has_ring(store));
  constexpr int kKeys = 6000;
  std::vector<std::vector<std::uint8_t>> values(kKeys);
  std::vector<std::pair<std::string, TensorView>> items;
  auto key = [](int i) { return std::string(196, 'k') + std::to_string(1000 + i); };
  for (int i = 0; i < kKeys; ++i) {
    values[i] = pattern(8 + i % 5, static_cast<std::uint8_t>(i));
    items.emplace_back(key(i), bytes_view(values[i]));
  }
  const auto before = store.admin().fast_path_stats();
  const auto asked = store.admin().controller_counters().get(kWait)->notify_put_batch;
  ASSERT_OK(store.put_batch(std::move(items)).get(kWait));
  EXPECT_EQ(store.admin().fast_path_stats().puts, before.puts + 1) << "not over the channel";
  EXPECT_EQ(store.admin().controller_counters().get(kWait)->notify_put_batch, asked + 1)
      << "not one commit";
  auto other = Store::connect(store.admin().address(), reader_options()).value();
  for (int i = 0; i < kKeys; i += 599) testing::expect_reads_back(other, key(i), values[i]);
  testing::expect_reads_back(other, key(kKeys - 1), values[kKeys - 1]);
  auto keys = other.keys().get(kWait);
  ASSERT_OK(keys);
  EXPECT_EQ(keys->size(), kKeys + 1u);
  other.close();
  store.close();
}

// A shard of a sharded key is one commit over the channel too, its bytes
// inline when they fit one request (rows of a small tensor), else written
// into an object its volume staged (4 MiB); the key commits, as the
// actors' put_shards commits it, once every client's shards cover it, and
// until then a read names what is missing. Replicas of one box must agree.
TEST_P(FastPathOver, ShardsOfAShardedKeyGoOverTheChannelAndCommitOnceCovered) {
  auto store = Store::embedded(writer_options()).value();
  auto other = Store::connect(store.admin().address(), reader_options()).value();
  for (const std::int64_t rows : {std::int64_t{4}, std::int64_t{1024}}) {
    SCOPED_TRACE(rows);
    const Shape shape{rows, 1024};
    auto whole = Tensor::empty(DType::float32, shape).value();
    for (std::int64_t i = 0; i < whole.numel(); ++i) {
      whole.data_as<float>()[i] = static_cast<float>(i % 977) + static_cast<float>(rows);
    }
    const auto placement = Placement::make({2}, {DimPlacement::shard(0)}).value();
    const std::string key = "sharded" + std::to_string(rows);
    auto put_rank = [&](Store& s, std::int64_t rank) {
      const auto box = placement.slice_for(shape, rank).value();
      const auto bytes = static_cast<std::size_t>(box.numel()) * 4;
      const auto* from = whole.data_as<float>() + box.offsets()[0] * shape[1];
      const auto before = s.admin().fast_path_stats();
      EXPECT_OK(s.put(key, TensorView::of(const_cast<float*>(from), box.local_shape()),
                      PutOptions::shard(shape, placement, rank))
                    .get(kWait));
      EXPECT_EQ(s.admin().fast_path_stats().puts, before.puts + 1)
          << "rank " << rank << ", " << bytes;
    };
    put_rank(store, 0);
    EXPECT_ERROR(other.get(key).get(kWait), Errc::partially_committed, "missing");
    put_rank(other, 1);
    for (Store* s : {&store, &other}) {
      auto back = s->get(key).get(kWait);
      ASSERT_OK(back);
      EXPECT_EQ(std::memcmp(back->data(), whole.data(), whole.nbytes()), 0);
    }
  }
  // Two replicas of one box with different bytes: refused, as the actors
  // refuse them.
  const auto replicated = Placement::make({2}, {DimPlacement::replicate()}).value();
  std::vector<float> a(8, 1.0f), b(8, 2.0f);
  ASSERT_OK(
      store.put("rep", TensorView::of(a.data(), {8}), PutOptions::shard(Shape{8}, replicated, 0))
          .get(kWait));
  EXPECT_ERROR(
      other.put("rep", TensorView::of(b.data(), {8}), PutOptions::shard(Shape{8}, replicated, 1))
          .get(kWait),
      Errc::invalid_argument, "hold different bytes");
  other.close();
  store.close();
}

// StoreOptions::transport.fast_path_spin sets how long both ends of the channel spin
// (the volume's small-op service or tcp connection, and the caller waiting for
// its answer). Timing is not asserted: whatever the spin, a writer and a
// reader in two clients serve puts and gets over their channels with the
// same results. (That a tcp server end spins as long as configured:
// TcpSmallOpsSpin in tcp_hostile_test.cpp.)
TEST_P(FastPathOver, AnySpinServesTheSameResults) {
  for (const auto spin : {std::chrono::microseconds(0), std::chrono::microseconds(2000)}) {
    SCOPED_TRACE(spin.count());
    auto wo = writer_options();
    wo.transport.fast_path_spin = spin;
    auto writer = Store::embedded(wo).value();
    auto ro = reader_options();
    ro.transport.fast_path_spin = spin;
    auto reader = Store::connect(writer.admin().address(), ro).value();
    auto first = pattern(64, 9);
    ASSERT_OK(writer.put("k", bytes_view(first)).get(kWait));  // finds the volume
    ASSERT_TRUE(has_ring(writer));
    std::vector<std::uint8_t> dst(first.size());
    ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));  // learns where it is
    ASSERT_TRUE(has_ring(reader));
    for (int i = 0; i < 20; ++i) {
      auto v = pattern(4096, static_cast<std::uint8_t>(i));
      ASSERT_OK(writer.put("k", bytes_view(v)).get(kWait));
      dst.assign(v.size(), 0);
      ASSERT_OK(reader.get_into("k", bytes_view(dst)).get(kWait));
      ASSERT_EQ(dst, v);
    }
    EXPECT_GT(writer.admin().fast_path_stats().puts, 0u)
        << "the writer's puts went over its channel";
    // Each put replaces the object the reader knew: its gets go over the
    // channel and find it stale (then locate afresh), or hit.
    const auto r = reader.admin().fast_path_stats();
    EXPECT_GT(r.hits + r.stale, 0u) << "the reader's gets went over its channel";
  }
}

INSTANTIATE_TEST_SUITE_P(Channels, FastPathOver,
                         ::testing::Values("", "tcp", "tcp-encrypted", "cma", "rpc"),
                         [](const auto& info) {
                           std::string n = *info.param ? info.param : "ring";
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// A full volume refuses a put over the channel, and that refusal is the
// put's answer (out_of_capacity, naming the volume; nothing stored), with
// no second attempt through the actors. A strided view goes over the ring,
// packed.
TEST(FastPath, AFullVolumesRefusalOverTheChannelIsThePutsAnswer) {
  StoreOptions o;
  o.limits.volume_capacity_bytes = 48 << 10;
  auto store = Store::embedded(o).value();
  std::vector<std::uint8_t> first = pattern(4, 1);
  ASSERT_OK(store.put("first", bytes_view(first)).get(kWait));
  ASSERT_TRUE(has_ring(store));
  const auto puts = store.admin().fast_path_stats().puts;
  std::vector<std::uint8_t> big = pattern(protocol::limits::kRingReadBytes + 1, 3);
  EXPECT_ERROR(store.put("big", bytes_view(big)).get(kWait), Errc::out_of_capacity,
               "volume 'volume-0' is full");
  std::vector<std::uint8_t> most = pattern(40 << 10, 4);
  ASSERT_OK(store.put("most", bytes_view(most)).get(kWait));  // over the ring
  EXPECT_ERROR(store.put("more", bytes_view(most)).get(kWait), Errc::out_of_capacity, "put 'more'");
  EXPECT_EQ(store.exists("more").get(kWait).value(), false);
  std::vector<float> grid(16, 1.0f);
  TensorView strided(grid.data(), DType::float32, {4, 2}, {4, 2});
  ASSERT_OK(store.put("strided", strided).get(kWait));
  EXPECT_EQ(store.admin().fast_path_stats().puts, puts + 2);  // "most" and "strided"
  store.close();
}

// A channel that fails (here its ring, overwritten under both ends, which
// each then take as closed by the other) is dropped, and the client opens
// a new one: the put that found it broken before its commit left goes
// over the new channel, as do the puts after it.
TEST(FastPath, AChannelThatFailedIsOpenedAgain) {
  StoreOptions o;
  o.transport.name = "shm";
  auto store = Store::embedded(o).value();
  std::vector<std::uint8_t> v = pattern(64, 1), back(64, 0);
  ASSERT_OK(store.put("k", bytes_view(v)).get(kWait));
  ASSERT_TRUE(has_ring(store));
  // The ring's name is unlinked once the volume attached it: found among
  // this process's mappings (the client's end, and the volume's in this
  // process: the same pages). Written through /proc/self/mem, not
  // memset: the volume drops its end (and unmaps it) as soon as it sees
  // the ring overwritten, and a write into a mapping gone fails there
  // instead of ending the test with SIGSEGV. One write reaches both ends.
  std::ifstream maps("/proc/self/maps");
  const int mem = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  ASSERT_GE(mem, 0) << std::strerror(errno);
  std::string line;
  int broken = 0;
  while (std::getline(maps, line)) {
    if (line.find("/dev/shm/meshstore.") == std::string::npos ||
        line.find(".ring.") == std::string::npos) {
      continue;
    }
    std::uintptr_t begin = 0, end = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR, &begin, &end), 2) << line;
    const std::vector<char> ones(end - begin, static_cast<char>(0xff));
    if (::pwrite(mem, ones.data(), ones.size(), static_cast<off_t>(begin)) ==
        static_cast<ssize_t>(ones.size())) {
      ++broken;
    }
  }
  ::close(mem);
  ASSERT_GE(broken, 1) << "no ring mapped";
  for (std::uint8_t round = 2; round < 6; ++round) {  // the first finds the ring broken
    const auto before = store.admin().fast_path_stats().puts;
    v = pattern(64, round);
    ASSERT_OK(store.put("k", bytes_view(v)).get(kWait));
    EXPECT_EQ(store.admin().fast_path_stats().puts, before + 1)
        << "put " << int(round) << " not over a channel";
    ASSERT_OK(store.get_into("k", bytes_view(back)).get(kWait));
    EXPECT_EQ(back, v);
  }
  EXPECT_TRUE(has_ring(store));
}

// A full volume refuses a put over the channel; with LRU eviction the
// controller makes room there and the put goes over the channel again: it
// succeeds and the oldest key goes. Without eviction the put fails, saying
// the volume is full.
TEST(FastPath, APutAFullVolumeRefusesEvictsAndTakesTheChannelAgain) {
  StoreOptions o;
  o.limits.volume_capacity_bytes = 48 << 10;
  o.limits.eviction = "lru";
  auto store = Store::embedded(o).value();
  std::vector<std::uint8_t> first = pattern(40 << 10, 1), second = pattern(40 << 10, 2);
  ASSERT_OK(store.put("first", bytes_view(first)).get(kWait));
  ASSERT_TRUE(has_ring(store));
  const auto before = store.admin().fast_path_stats();
  ASSERT_OK(store.put("second", bytes_view(second)).get(kWait));
  EXPECT_EQ(store.admin().fast_path_stats().puts, before.puts + 1);
  EXPECT_FALSE(store.exists("first").get(kWait).value());
  std::vector<std::uint8_t> back(second.size(), 0);
  ASSERT_OK(store.get_into("second", bytes_view(back)).get(kWait));
  EXPECT_EQ(back, second);
  // Staged rather than inline (more than a request carries): the same.
  o.limits.volume_capacity_bytes = 96 << 10;
  auto staged = Store::embedded(o).value();
  std::vector<std::uint8_t> big_first = pattern(80 << 10, 4), big_second = pattern(80 << 10, 5);
  ASSERT_OK(staged.put("first", bytes_view(big_first)).get(kWait));
  const auto staged_before = staged.admin().fast_path_stats();
  ASSERT_OK(staged.put("second", bytes_view(big_second)).get(kWait));
  EXPECT_EQ(staged.admin().fast_path_stats().puts, staged_before.puts + 1);
  EXPECT_FALSE(staged.exists("first").get(kWait).value());
  testing::expect_reads_back(staged, "second", big_second);
  store.close();
  staged.close();
  o.limits.eviction = "none";
  auto strict = Store::embedded(o).value();
  ASSERT_OK(strict.put("first", bytes_view(big_first)).get(kWait));
  EXPECT_ERROR(strict.put("second", bytes_view(big_second)).get(kWait), Errc::out_of_capacity,
               "is full");
  EXPECT_TRUE(strict.exists("first").get(kWait).value());
}

// The client's end of a channel against a volume end the test plays: over
// a shared-memory ring, and over a remote channel (what tcp's small-op
// connection is to the client: transports::SmallOps, here in memory, the
// request framed with the client's token).
class FakeRemote final : public transports::SmallOps {
 public:
  struct End {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<std::vector<std::byte>> request, reply;
    bool closed = false;
  };
  explicit FakeRemote(std::shared_ptr<End> end) : end_(std::move(end)) {}
  Result<std::vector<std::byte>> exchange(const std::byte* request, std::size_t n,
                                          std::chrono::steady_clock::time_point deadline) override {
    std::unique_lock<std::mutex> lock(end_->mu);
    if (end_->closed) return Status(Errc::unavailable, "the volume closed the connection");
    end_->request.emplace(request, request + n);
    end_->reply.reset();
    end_->cv.notify_all();
    if (!end_->cv.wait_until(lock, deadline, [&] { return end_->reply || end_->closed; })) {
      return Status(Errc::timeout, "no reply");
    }
    if (!end_->reply) return Status(Errc::unavailable, "the volume closed the connection");
    auto out = std::move(*end_->reply);
    end_->reply.reset();
    return out;
  }

 private:
  std::shared_ptr<End> end_;
};

class FastPathClientEnd : public ::testing::TestWithParam<const char*> {
 protected:
  static constexpr std::uint64_t kToken = 0x70c4e7;
  bool remote() const { return std::string(GetParam()) == "remote"; }
  void SetUp() override {
    if (remote()) {
      remote_ = std::make_shared<FakeRemote::End>();
      fast_.add_remote("v", std::make_unique<FakeRemote>(remote_), kToken);
    } else {
      transports::shm::Ring::Options o;
      o.slots = 4;
      o.slot_bytes = 1024;
      auto client = transports::shm::Ring::create(o);
      ASSERT_OK(client);
      auto server = transports::shm::Ring::attach((*client)->name(), ::getpid());
      ASSERT_OK(server);
      server_ = std::move(server).value();
      fast_.add_ring("v", std::move(client).value());
    }
    wire::KeyRecord r;
    r.key = "k";
    r.version = 3;
    r.shape = {4};
    r.shards.push_back(wire::ShardRecord{TensorSlice::full({4}), "v", 7, 4});
    fast_.cache().put(r);
  }
  // The volume end: takes the next request (without a remote channel's
  // token) and answers it with `reply`.
  void serve_one(const std::vector<std::byte>& reply) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    std::vector<std::byte> request;
    if (remote()) {
      std::unique_lock<std::mutex> lock(remote_->mu);
      if (!remote_->cv.wait_until(lock, deadline, [&] { return remote_->request.has_value(); })) {
        return;
      }
      request = std::move(*remote_->request);
      remote_->request.reset();
      std::uint64_t token = 0;
      ASSERT_GE(request.size(), sizeof token);
      std::memcpy(&token, request.data(), sizeof token);
      EXPECT_EQ(token, kToken) << "a remote request starts with the client's token";
      request.erase(request.begin(), request.begin() + sizeof token);
      remote_->reply = reply;
      remote_->cv.notify_all();
    } else {
      auto m = server_->receive(deadline);
      if (!m.ok()) return;
      request = m->bytes;
      (void)server_->send(m->tag, reply.data(), reply.size(), deadline);
    }
    auto req = protocol::fast_get::decode_request(request);
    EXPECT_OK(req);
    if (req.ok()) {
      EXPECT_EQ(req->object_id, 7u);
    }
  }
  // The volume closes its end of the channel.
  void close_volume_end() {
    if (remote()) {
      std::lock_guard<std::mutex> lock(remote_->mu);
      remote_->closed = true;
      remote_->cv.notify_all();
    } else {
      server_.reset();
    }
  }
  // Reads "k" while the test's volume end answers the request with `reply`;
  // the read's consumer takes the bytes when `take`.
  client::FastPath::Outcome read_answered_with(const std::vector<std::byte>& reply,
                                               std::string* got, bool take = true) {
    std::thread volume([&] { serve_one(reply); });
    auto out = fast_.read(
        "k", [](const client::FastPath::Entry&) { return true; },
        [got, take](const client::FastPath::Entry&, const std::byte* d, std::size_t n) {
          if (take) got->assign(reinterpret_cast<const char*>(d), n);
          return take;
        },
        10s);
    volume.join();
    return out;
  }

  client::FastPath fast_;
  std::unique_ptr<transports::shm::Ring> server_;
  std::shared_ptr<FakeRemote::End> remote_;
};

TEST_P(FastPathClientEnd, AGoodReplyIsServed) {
  std::string got;
  auto ok = protocol::fast_get::encode(protocol::fast_get::ReplyStatus::ok, "abcd", 4);
  EXPECT_EQ(read_answered_with(ok, &got), client::FastPath::Outcome::hit);
  EXPECT_EQ(got, "abcd");
  EXPECT_EQ(fast_.stats().hits, 1u);
}

// A consumer that cannot take the bytes (a failed copy into GPU memory)
// makes the read a miss: the caller takes the actor path, which writes the
// destination again and reports. The ring and the location stay.
TEST_P(FastPathClientEnd, BytesTheConsumerCannotTakeMakeTheReadAMiss) {
  std::string got;
  auto ok = protocol::fast_get::encode(protocol::fast_get::ReplyStatus::ok, "abcd", 4);
  EXPECT_EQ(read_answered_with(ok, &got, /*take=*/false), client::FastPath::Outcome::miss);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(fast_.stats().hits, 0u);
  EXPECT_EQ(fast_.stats().misses, 1u);
  EXPECT_EQ(fast_.stats().rings, 1u);
  EXPECT_EQ(read_answered_with(ok, &got), client::FastPath::Outcome::hit);
  EXPECT_EQ(got, "abcd");
}

TEST_P(FastPathClientEnd, StaleForgetsTheLocation) {
  std::string got;
  auto stale = protocol::fast_get::encode(protocol::fast_get::ReplyStatus::stale, nullptr, 0);
  EXPECT_EQ(read_answered_with(stale, &got), client::FastPath::Outcome::stale);
  EXPECT_TRUE(got.empty());
  // Forgotten: the next read does not reach the ring at all.
  EXPECT_EQ(
      fast_.read(
          "k", [](const client::FastPath::Entry&) { return true; },
          [](const client::FastPath::Entry&, const std::byte*, std::size_t) { return true; }, 1s),
      client::FastPath::Outcome::miss);
  EXPECT_EQ(fast_.stats().rings, 1u);  // the ring itself is fine
}

TEST_P(FastPathClientEnd, ACorruptReplyIsRefusedAndTheRingDropped) {
  std::string got;
  std::vector<std::byte> bad(12, std::byte{0xff});  // an unknown status
  EXPECT_EQ(read_answered_with(bad, &got), client::FastPath::Outcome::miss);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(fast_.stats().rings, 0u);
}

TEST_P(FastPathClientEnd, AReplyOfTheWrongSizeIsRefused) {
  std::string got;
  auto short_reply = protocol::fast_get::encode(protocol::fast_get::ReplyStatus::ok, "abc", 3);
  EXPECT_EQ(read_answered_with(short_reply, &got), client::FastPath::Outcome::miss);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(fast_.stats().rings, 0u);
}

TEST_P(FastPathClientEnd, AVolumeThatClosesItsEndTurnsReadsIntoMisses) {
  close_volume_end();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(
      fast_.read(
          "k", [](const client::FastPath::Entry&) { return true; },
          [](const client::FastPath::Entry&, const std::byte*, std::size_t) { return true; }, 30s),
      client::FastPath::Outcome::miss);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(fast_.stats().rings, 0u);
}

// A get's reply is one message of its channel: a key larger than that
// (a ring's slot, a small operation's 1 MiB across hosts) is not asked for
// there, nor is a sharded one.
TEST_P(FastPathClientEnd, ShardedKeysAndKeysLargerThanAMessageMissWithoutARequest) {
  wire::KeyRecord sharded;
  sharded.key = "s";
  sharded.version = 4;
  sharded.shape = {8};
  sharded.shards.push_back(wire::ShardRecord{TensorSlice::make({8}, {0}, {4}).value(), "v", 8, 16});
  sharded.shards.push_back(wire::ShardRecord{TensorSlice::make({8}, {4}, {4}).value(), "v", 9, 16});
  fast_.cache().put(sharded);
  const std::uint64_t message =
      remote() ? transports::kMaxSmallOpBytes - protocol::fast_get::kReplyHeaderBytes
               : protocol::limits::kRingReadBytes;
  wire::KeyRecord large;
  large.key = "l";
  large.version = 5;
  large.shape = {static_cast<std::int64_t>(message + 1)};
  large.shards.push_back(wire::ShardRecord{TensorSlice::full(large.shape), "v", 10, message + 1});
  fast_.cache().put(large);
  for (const char* key : {"s", "l"}) {
    EXPECT_EQ(
        fast_.read(
            key, [](const client::FastPath::Entry&) { return true; },
            [](const client::FastPath::Entry&, const std::byte*, std::size_t) { return true; }, 1s),
        client::FastPath::Outcome::miss)
        << key;
  }
  EXPECT_EQ(fast_.stats().rings, 1u) << "a request was sent, and failed";
}

INSTANTIATE_TEST_SUITE_P(Channels, FastPathClientEnd, ::testing::Values("ring", "remote"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace meshstore
