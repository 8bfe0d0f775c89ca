// The shared-memory ring (transports/shm/ring.hpp): messages both ways
// between threads and between processes, the limits it enforces, what a
// corrupt or hostile segment gets (an error, never a crash), a dead or
// departed peer, and the segment's cleanup.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/transports/shm/peer_memory.hpp"
#include "meshstore/transports/shm/ring.hpp"
#include "testing/pipe.hpp"
#include "testing/shm_resize.hpp"

namespace meshstore::transports::shm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Clock::time_point in(std::chrono::milliseconds d) { return Clock::now() + d; }

std::unique_ptr<Ring> make(Ring::Options o = {}) {
  auto r = Ring::create(o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

// Both ends of a ring in this process: `slots` slots of `slot_bytes`; and,
// with `scribble`, a third mapping of its segment, opened while it still
// has a name (the server end unlinks it as it attaches).
struct Ends {
  std::unique_ptr<Ring> client, server;
  std::unique_ptr<Segment> scribble;
};
Ends both_ends(std::uint32_t slots = 64, std::uint32_t slot_bytes = 8192, bool scribble = false) {
  Ring::Options o;
  o.slots = slots;
  o.slot_bytes = slot_bytes;
  Ends e;
  e.client = make(o);
  if (scribble) {
    auto seg = Segment::open(e.client->name());
    EXPECT_TRUE(seg.ok()) << seg.status().to_string();
    if (seg.ok()) e.scribble = std::move(seg).value();
  }
  auto server = Ring::attach(e.client->name(), getpid());
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  if (server.ok()) e.server = std::move(server).value();
  return e;
}

std::vector<std::byte> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(seed + i * 31);
  return v;
}

// The queue indices of ring `name` as another mapping of the segment sees
// them: what a hostile peer can scribble on. Offsets follow ring.cpp's
// layout: a 64-byte header, two queues of 256 bytes (tail, then head at
// +64), then the slots.
struct Scribbler {
  std::unique_ptr<Segment> seg;
  explicit Scribbler(const std::string& name) {
    auto s = Segment::open(name);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    seg = std::move(s).value();
  }
  explicit Scribbler(std::unique_ptr<Segment>& mapped) : seg(std::move(mapped)) {}
  std::byte* header() { return seg->data(); }
  std::atomic<std::uint32_t>& tail(int queue) {
    return *reinterpret_cast<std::atomic<std::uint32_t>*>(seg->data() + 64 + queue * 256);
  }
};

TEST(ShmRing, RequestsAndRepliesOfEverySizeRoundTripBetweenThreads) {
  Ends ends = both_ends(8, 4096);
  auto& client = ends.client;
  auto& server = ends.server;
  ASSERT_TRUE(server);
  std::thread echo([&] {
    for (int i = 0; i < 500; ++i) {
      auto m = server->receive(in(10s));
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      ASSERT_TRUE(server->send(m->tag + 1, m->bytes.data(), m->bytes.size(), in(10s)).ok());
    }
  });
  for (int i = 0; i < 500; ++i) {
    const std::size_t n = static_cast<std::size_t>(i * 37) % 4097;  // 0 .. slot_bytes
    const auto bytes = pattern(n, static_cast<std::uint8_t>(i));
    ASSERT_TRUE(client->send(1000 + i, bytes.data(), n, in(10s)).ok());
    auto reply = client->receive(in(10s));
    ASSERT_TRUE(reply.ok()) << reply.status().to_string();
    EXPECT_EQ(reply->tag, static_cast<std::uint64_t>(1001 + i));
    EXPECT_EQ(reply->bytes, bytes) << "message " << i << " of " << n << " bytes";
  }
  echo.join();
}

TEST(ShmRing, MessagesQueueUpInOrderUntilTheQueueIsFull) {
  Ends ends = both_ends(4, 64);
  auto& client = ends.client;
  auto& server = ends.server;
  ASSERT_TRUE(server);
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(client->send(i, &i, sizeof(i), in(1s)).ok());
  // Full: the fifth waits for room, and gets none before its deadline.
  std::uint64_t five = 5;
  const auto full = client->send(5, &five, sizeof(five), in(50ms));
  EXPECT_EQ(full.code(), Errc::timeout) << full.to_string();
  for (std::uint64_t i = 0; i < 4; ++i) {
    auto m = server->receive(in(1s));
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->tag, i);
  }
  // Room again; and a sender blocked on a full queue is woken by a read.
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(client->send(i, &i, sizeof(i), in(1s)).ok());
  std::thread reader([&] {
    std::this_thread::sleep_for(20ms);
    EXPECT_TRUE(server->receive(in(1s)).ok());
  });
  EXPECT_TRUE(client->send(5, &five, sizeof(five), in(5s)).ok());
  reader.join();
}

TEST(ShmRing, ABadOptionOrAnOversizedMessageIsRefused) {
  Ring::Options o;
  o.slots = 0;
  EXPECT_EQ(Ring::create(o).status().code(), Errc::invalid_argument);
  o.slots = 8;
  o.slot_bytes = 16;
  auto bad = Ring::create(o);
  EXPECT_EQ(bad.status().code(), Errc::invalid_argument);
  EXPECT_NE(bad.status().message().find("slot_bytes"), std::string::npos);
  o.slot_bytes = 128;
  auto client = make(o);
  std::vector<std::byte> big(129);
  const auto s = client->send(1, big.data(), big.size(), in(1s));
  EXPECT_EQ(s.code(), Errc::invalid_argument);
  EXPECT_NE(s.message().find("129 bytes exceeds its slots of 128"), std::string::npos)
      << s.to_string();
}

TEST(ShmRing, AttachingToWhatIsNotARingIsRefused) {
  EXPECT_EQ(Ring::attach("not-ours", getpid()).status().code(), Errc::invalid_argument);
  EXPECT_EQ(Ring::attach(process_prefix() + "ring.no-such", getpid()).status().code(),
            Errc::not_found);
  auto client = make();
  // Another creator than the one named.
  EXPECT_EQ(Ring::attach(client->name(), getpid() + 1).status().code(), Errc::unavailable);
  // A wrong magic, then a header whose sizes do not match the segment.
  Scribbler s(client->name());
  auto* magic = reinterpret_cast<std::uint64_t*>(s.header());
  const std::uint64_t good = *magic;
  *magic = 42;
  auto other = Ring::attach(client->name(), getpid());
  EXPECT_EQ(other.status().code(), Errc::protocol_error);
  EXPECT_NE(other.status().message().find("bad magic"), std::string::npos);
  *magic = good;
  auto* slots = reinterpret_cast<std::uint32_t*>(s.header() + 12);
  *slots += 1;
  auto resized = Ring::attach(client->name(), getpid());
  EXPECT_EQ(resized.status().code(), Errc::protocol_error);
  EXPECT_NE(resized.status().message().find("layout needs"), std::string::npos)
      << resized.status().to_string();
  *slots -= 1;
  // A second server end: the first took the name as it attached.
  auto first = Ring::attach(client->name(), getpid());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_FALSE(segment_exists(client->name()));
  auto second = Ring::attach(client->name(), getpid());
  EXPECT_EQ(second.status().code(), Errc::not_found) << second.status().to_string();
}

TEST(ShmRing, ACorruptEntryOrIndexIsAnErrorNotACrash) {
  Ends ends = both_ends(4, 64, true);
  auto& client = ends.client;
  auto& server = ends.server;
  ASSERT_TRUE(server && ends.scribble);
  Scribbler s(ends.scribble);
  // A tail far past the head: the server refuses the queue.
  s.tail(0).store(1000);
  auto m = server->receive(in(1s));
  EXPECT_EQ(m.status().code(), Errc::protocol_error);
  EXPECT_NE(m.status().message().find("slots past head"), std::string::npos)
      << m.status().to_string();
  s.tail(0).store(0);
  // An entry whose length exceeds its slot: written by a "client" that
  // lies, read by the server as any entry.
  std::uint64_t x = 7;
  ASSERT_TRUE(client->send(1, &x, sizeof(x), in(1s)).ok());
  const std::size_t header = 64, queues = 512;  // ring.cpp's layout: queue 0's first slot
  auto* length = reinterpret_cast<std::uint32_t*>(s.seg->data() + header + queues);
  *length = 1u << 30;
  auto lie = server->receive(in(1s));
  EXPECT_EQ(lie.status().code(), Errc::protocol_error);
  EXPECT_NE(lie.status().message().find("its slot holds 64"), std::string::npos)
      << lie.status().to_string();
}

TEST(ShmRing, ARequestWithoutAReplyTimesOut) {
  Ends ends = both_ends();
  auto& client = ends.client;
  auto& server = ends.server;
  ASSERT_TRUE(server);
  const auto t0 = Clock::now();
  auto m = client->receive(in(30ms));
  EXPECT_EQ(m.status().code(), Errc::timeout);
  EXPECT_GE(Clock::now() - t0, 30ms);
}

TEST(ShmRing, APeerThatClosesItsEndWakesItsWaitingPeer) {
  Ends ends = both_ends();
  auto& client = ends.client;
  auto& server = ends.server;
  ASSERT_TRUE(server);
  std::thread closer([&] {
    std::this_thread::sleep_for(30ms);
    server.reset();
  });
  auto m = client->receive(in(10s));
  closer.join();
  EXPECT_EQ(m.status().code(), Errc::unavailable);
  EXPECT_NE(m.status().message().find("server closed its end"), std::string::npos)
      << m.status().to_string();
  std::uint64_t x = 1;
  EXPECT_EQ(client->send(1, &x, sizeof(x), in(1s)).code(), Errc::unavailable);
}

TEST(ShmRing, AServerProcessKilledMidRequestIsNoticedWithinTheBound) {
  auto client = make();
  const std::string name = client->name();
  const pid_t me = getpid();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The server: answers one request, takes the second and dies unanswered.
    auto server = Ring::attach(name, me);
    if (!server.ok()) _exit(2);
    auto m = (*server)->receive(in(10s));
    if (!m.ok() || !(*server)->send(m->tag, m->bytes.data(), m->bytes.size(), in(10s)).ok()) {
      _exit(3);
    }
    (void)(*server)->receive(in(10s));
    kill(getpid(), SIGKILL);
  }
  const std::uint64_t x = 99;
  ASSERT_TRUE(client->send(1, &x, sizeof(x), in(10s)).ok());
  auto first = client->receive(in(10s));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_EQ(first->bytes.size(), sizeof(x));
  ASSERT_TRUE(client->send(2, &x, sizeof(x), in(10s)).ok());
  const auto t0 = Clock::now();
  auto second = client->receive(in(10s));
  const auto waited = Clock::now() - t0;
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(second.status().code(), Errc::unavailable) << second.status().to_string();
  EXPECT_NE(second.status().message().find("is gone"), std::string::npos);
  EXPECT_LT(waited, 5s);
}

TEST(ShmRing, TheSegmentGoesWithItsCreatorAndGcTakesAKilledCreators) {
  std::string name;
  {
    auto client = make();
    name = client->name();
    EXPECT_TRUE(segment_exists(name));
  }
  EXPECT_FALSE(segment_exists(name));
  // A creator killed with its ring open before any server attached: the
  // name stays until gc.
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipefd[0]);
    auto r = Ring::create({});
    if (!r.ok()) _exit(2);
    const std::string n = (*r)->name();
    if (write(pipefd[1], n.data(), n.size()) != static_cast<ssize_t>(n.size())) _exit(3);
    close(pipefd[1]);
    kill(getpid(), SIGKILL);
  }
  close(pipefd[1]);
  const std::string left = testing::read_to_end(pipefd[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_FALSE(left.empty());
  EXPECT_TRUE(segment_exists(left));
  const auto report = garbage_collect(false, child);
  EXPECT_FALSE(segment_exists(left));
  EXPECT_EQ(report.removed.size(), 1u);
}

TEST(ShmRing, AClientKilledAfterItsServerAttachedLeavesNothingBehind) {
  // The client, in a child: creates a ring, says its name, waits until the
  // server end (this process) has attached, and is killed.
  int named[2], attached[2];
  ASSERT_EQ(pipe(named), 0);
  ASSERT_EQ(pipe(attached), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(named[0]);
    close(attached[1]);
    auto r = Ring::create({});
    if (!r.ok()) _exit(2);
    const std::string n = (*r)->name();
    if (write(named[1], n.data(), n.size()) != static_cast<ssize_t>(n.size())) _exit(3);
    close(named[1]);
    char go = 0;
    if (read(attached[0], &go, 1) != 1) _exit(4);
    kill(getpid(), SIGKILL);
  }
  close(named[1]);
  close(attached[0]);
  const std::string name = testing::read_to_end(named[0]);
  ASSERT_FALSE(name.empty());
  auto server = Ring::attach(name, child);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  EXPECT_FALSE(segment_exists(name)) << "the server end took the name as it attached";
  ASSERT_EQ(write(attached[1], "x", 1), 1);
  close(attached[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  // The server learns its client is gone, closes its end, and with it the
  // last mapping goes: there is nothing for gc to find.
  auto m = (*server)->receive(in(10s));
  EXPECT_EQ(m.status().code(), Errc::unavailable) << m.status().to_string();
  server->reset();
  EXPECT_FALSE(segment_exists(name));
  EXPECT_TRUE(garbage_collect(true, child).removed.empty());
}

// What a volume's small-op service does: one thread polls many rings with
// try_receive() and sleeps on a doorbell their clients ring.
TEST(ShmRing, OneThreadServesManyRingsThroughTheirDoorbell) {
  auto bell = Doorbell::create();
  ASSERT_TRUE(bell.ok()) << bell.status().to_string();
  constexpr int kRings = 4, kRounds = 200;
  std::vector<Ends> rings;
  for (int i = 0; i < kRings; ++i) {
    rings.push_back(both_ends(4, 256));
    ASSERT_TRUE(rings.back().server);
    auto opened = Doorbell::open((*bell)->name());
    ASSERT_TRUE(opened.ok()) << opened.status().to_string();
    rings.back().client->use_doorbell(std::move(opened).value());
  }
  std::atomic<bool> stop{false};
  std::thread server([&] {
    auto poll = [&] {
      bool any = false;
      for (auto& r : rings) {
        auto m = r.server->try_receive();
        EXPECT_TRUE(m.ok()) << m.status().to_string();
        if (!m.ok() || !*m) continue;
        any = true;
        EXPECT_TRUE(
            r.server->send((*m)->tag, (*m)->bytes.data(), (*m)->bytes.size(), in(10s)).ok());
      }
      return any;
    };
    while (!stop.load()) {
      const auto seen = (*bell)->seq();
      if (!poll()) (*bell)->wait(seen, 10s, [&] { return stop.load() || poll(); });
    }
  });
  std::vector<std::thread> clients;
  std::atomic<int> echoed{0};
  for (int i = 0; i < kRings; ++i) {
    clients.emplace_back([&, i] {
      auto& client = rings[i].client;
      for (int k = 0; k < kRounds; ++k) {
        const auto bytes = pattern(100, static_cast<std::uint8_t>(i + k));
        if (!client->send(k, bytes.data(), bytes.size(), in(10s)).ok()) return;
        auto reply = client->receive(in(10s));
        if (reply.ok() && reply->tag == static_cast<std::uint64_t>(k) && reply->bytes == bytes) {
          echoed.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  stop.store(true);
  (*bell)->ring();
  server.join();
  // Each reply came within its 10 s deadline though the server slept on
  // the doorbell between requests: the clients' rings woke it.
  EXPECT_EQ(echoed.load(), kRings * kRounds);
}

TEST(ShmRing, TryReceiveTakesWhatIsQueuedThenSaysTheClientClosed) {
  Ends ends = both_ends(4, 64);
  ASSERT_TRUE(ends.server);
  auto none = ends.server->try_receive();
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(ends.server->has_message());
  std::uint64_t v = 42;
  ASSERT_TRUE(ends.client->send(7, &v, sizeof(v), in(1s)).ok());
  EXPECT_TRUE(ends.server->has_message());
  ends.client.reset();  // closed with a message still queued
  auto last = ends.server->try_receive();
  ASSERT_TRUE(last.ok()) << last.status().to_string();
  ASSERT_TRUE(last->has_value());
  EXPECT_EQ((*last)->tag, 7u);
  auto gone = ends.server->try_receive();
  EXPECT_EQ(gone.status().code(), Errc::unavailable) << gone.status().to_string();
  EXPECT_EQ(ends.server->alive().code(), Errc::unavailable);
}

TEST(ShmRing, TryReceiveReportsACorruptIndexAsAnError) {
  Ends ends = both_ends(4, 64, true);
  ASSERT_TRUE(ends.server);
  Scribbler s(ends.scribble);
  s.tail(0).store(1000);  // far past head
  EXPECT_TRUE(ends.server->has_message());
  auto m = ends.server->try_receive();
  EXPECT_EQ(m.status().code(), Errc::protocol_error) << m.status().to_string();
}

TEST(ShmRing, ADoorbellIsOpenedOnlyByTheNameOfOne) {
  EXPECT_EQ(Doorbell::open("not-ours").status().code(), Errc::invalid_argument);
  EXPECT_EQ(Doorbell::open("meshstore.1-1.bell.none").status().code(), Errc::not_found);
  Ends ends = both_ends();
  ASSERT_TRUE(ends.client);
  auto not_a_bell = Doorbell::open(ends.client->name());
  EXPECT_EQ(not_a_bell.status().code(), Errc::not_found)
      << "the ring's name went as its server attached: " << not_a_bell.status().to_string();
  auto seg = Segment::create(process_prefix() + "test.not-a-bell", 4096);
  ASSERT_TRUE(seg.ok());
  EXPECT_EQ(Doorbell::open((*seg)->name()).status().code(), Errc::protocol_error);
  // A doorbell's name goes with its server.
  std::string name;
  {
    auto bell = Doorbell::create();
    ASSERT_TRUE(bell.ok());
    name = (*bell)->name();
    EXPECT_TRUE(segment_exists(name));
  }
  EXPECT_FALSE(segment_exists(name));
}

}  // namespace
}  // namespace meshstore::transports::shm

// PeerMemory (transports/shm/peer_memory.hpp), what the ring's server end
// stands on: a fault in a guarded mapping of a
// segment truncated under it is survived and marks the guard; one anywhere
// else still ends the process as before.
namespace meshstore::transports::shm::peer {

TEST(PeerMemory, AnAccessPastATruncatedEndReadsZerosAndPoisonsTheGuard) {
  auto owner = Segment::create(process_prefix() + "peer-memory-test", 3 * 4096);
  ASSERT_TRUE(owner.ok()) << owner.status().to_string();
  std::memset((*owner)->data(), 0x5a, (*owner)->size());
  auto mapped = Segment::open((*owner)->name(), true);
  ASSERT_TRUE(mapped.ok()) << mapped.status().to_string();
  const volatile std::byte* p = (*mapped)->data();
  auto guard = PeerMemory::guard((*mapped)->data(), (*mapped)->size());
  ASSERT_NE(guard, nullptr);
  EXPECT_EQ(static_cast<int>(p[4096]), 0x5a);
  EXPECT_FALSE(guard->poisoned());
  const auto before = PeerMemory::faults_survived();
  testing::resize_segment((*owner)->name(), 0);
  EXPECT_EQ(static_cast<int>(p[4096 + 17]), 0);  // a page of zeros now
  EXPECT_EQ(static_cast<int>(p[2 * 4096]), 0);
  EXPECT_TRUE(guard->poisoned());
  EXPECT_EQ(PeerMemory::faults_survived(), before + 2);
  // A second guard starts clean.
  auto other = PeerMemory::guard((*owner)->data(), 4096);
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(other->poisoned());
}

// Guards are finite (1,024 at once): past that, guard() answers null (the
// mapping is unguarded, and a warning says so), and a guard that goes
// frees its slot for the next.
TEST(PeerMemory, GuardsRunOutAndComeBack) {
  static const std::byte page[4096] = {};
  std::vector<std::unique_ptr<PeerMemory>> held;
  for (int i = 0; i < 2000; ++i) {
    auto g = PeerMemory::guard(page, sizeof(page));
    if (!g) break;
    held.push_back(std::move(g));
  }
  EXPECT_GT(held.size(), 1000u);
  EXPECT_LE(held.size(), 1024u);
  EXPECT_EQ(PeerMemory::guard(page, sizeof(page)), nullptr);
  held.pop_back();
  auto again = PeerMemory::guard(page, sizeof(page));
  ASSERT_NE(again, nullptr);
  EXPECT_FALSE(again->poisoned());
  EXPECT_EQ(PeerMemory::guard(nullptr, 4096), nullptr);
  EXPECT_EQ(PeerMemory::guard(page, 0), nullptr);
}

TEST(PeerMemoryDeathTest, AFaultOutsideEveryGuardStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto owner = Segment::create(process_prefix() + "peer-memory-death", 4096);
        auto mapped = Segment::open((*owner)->name(), true);
        auto guard = PeerMemory::guard((*owner)->data(), 4096);  // another mapping
        testing::resize_segment((*owner)->name(), 0);
        const volatile std::byte* p = (*mapped)->data();
        std::printf("%d\n", static_cast<int>(p[0]));
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace meshstore::transports::shm::peer
