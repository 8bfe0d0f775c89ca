// The shm transport's own promises, beyond the conformance suite: segment
// reuse across versions, a bounded client mapping cache, and no leaks (what a
// crashed process leaves is collected).

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <new>
#include <set>
#include <thread>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/store.hpp"
#include "meshstore/transports/registry.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"
#include "testing/pidfd.hpp"
#include "testing/region_ref.hpp"
#include "testing/test_util.hpp"

namespace meshstore::transports::shm {
namespace {

using testing::kWait;

// Lines of /proc/self/maps that map a meshstore segment.
int mapped_segments() {
  std::ifstream in("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.find("/dev/shm/meshstore.") != std::string::npos) ++n;
  }
  return n;
}

// The segments this process made, as a set.
std::set<std::string> segments_now() {
  auto names = own_segments();
  return std::set<std::string>(names.begin(), names.end());
}

TEST(ShmTransport, NextVersionOfTheSameSizeReusesTheSegment) {
  StoreOptions o;
  o.transport.name = "shm";
  auto store = Store::embedded(o).value();
  std::vector<float> w(1 << 18, 1.0f);
  auto view = TensorView::of(w.data(), {1 << 18});
  std::set<std::string> steady;
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(store.put("w", view).get(kWait));
    if (i == 2) steady = segments_now();
  }
  // From the third version on, each lands in memory a replaced version (or
  // the staging kept for the next put) left, alternating through the
  // volume's pool: no new segment.
  EXPECT_EQ(segments_now(), steady);
  // A different size needs new memory.
  std::vector<float> big(1 << 19, 2.0f);
  ASSERT_OK(store.put("w", TensorView::of(big.data(), {1 << 19})).get(kWait));
  std::vector<float> back(1 << 19, 0.0f);
  ASSERT_OK(store.get_into("w", TensorView::of(back.data(), {1 << 19})).get(kWait));
  EXPECT_EQ(back, big);
  std::set<std::string> fresh;
  for (const auto& name : segments_now()) {
    if (!steady.count(name)) fresh.insert(name);
  }
  ASSERT_FALSE(fresh.empty()) << "the larger version found no new memory";
  // remove() frees the removed version's segment at once (no reader holds it).
  ASSERT_OK(store.remove("w").get(kWait));
  auto holds_fresh = [&] {
    auto now = segments_now();
    return std::any_of(fresh.begin(), fresh.end(), [&](const auto& n) { return now.count(n); });
  };
  // The controller tells the volume after answering us: poll, bounded.
  for (int i = 0; i < 500 && holds_fresh(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(holds_fresh()) << "remove left its segment behind";
}

TEST(ShmTransport, ClientKeepsAtMostTheConfiguredMappings) {
  auto runtime = internal::ActorRuntime::create({}).value();
  auto regions = std::make_shared<RegionTable>();
  TransportConfig config;
  config.shm_max_mappings = 2;
  auto factory = builtin_registry().find("shm").value();
  auto server =
      factory.make_server(ServerContext{&runtime->system(), regions, config, "v"}).value();
  auto client =
      factory.make_client(ClientContext{&runtime->system(), config}, server->endpoint()).value();
  std::vector<std::shared_ptr<Region>> held;
  const int before = mapped_segments();
  std::vector<std::byte> buf(1 << 16, std::byte{3});
  for (int round = 0; round < 3; ++round) {
    for (std::uint64_t id = 1; id <= 5; ++id) {
      if (round == 0) {
        auto m = server->allocator()->allocate(buf.size()).value();
        held.push_back(
            std::make_shared<Region>(id, m.memory, buf.size(), m.segment, m.segment_offset));
        regions->add(held.back());
      }
      const auto& r = held[id - 1];
      ASSERT_OK(
          client
              ->write(testing::shm_region_ref(id, buf.size(), r->segment(), r->segment_offset()), 0,
                      buf.data(), buf.size())
              .get(kWait));
      EXPECT_EQ(r->data()[100], std::byte{3});
    }
  }
  // The volume side maps its 5 segments; the client at most 2 of them.
  EXPECT_LE(mapped_segments() - before, 5 + 2);
  client.reset();
  server.reset();
  held.clear();
  EXPECT_EQ(mapped_segments(), before);
}

using testing::have_pidfd;

// An shm server (a volume's side) and a client of it, in one runtime.
struct ServerAndClient {
  std::unique_ptr<internal::ActorRuntime> runtime = internal::ActorRuntime::create({}).value();
  TransportConfig config;
  std::unique_ptr<TransportServer> server =
      builtin_registry()
          .find("shm")
          .value()
          .make_server(
              ServerContext{&runtime->system(), std::make_shared<RegionTable>(), config, "v"})
          .value();
  std::unique_ptr<Transport> client =
      builtin_registry()
          .find("shm")
          .value()
          .make_client(ClientContext{&runtime->system(), config}, server->endpoint())
          .value();
};

// The tag in front of each region the server allocates: the client sees
// what the volume writes there, and finds none where no server header is
// (a segment of someone else's, another offset, a wrong magic number).
TEST(ShmTransport, AClientSeesTheObjectTagTheVolumeWrites) {
  // The tag shows only while the volume's process is watched (pidfd).
  if (!have_pidfd()) GTEST_SKIP() << "no pidfd_open here: lease-free reads are off";
  ServerAndClient shm;
  auto& server = shm.server;
  auto& client = shm.client;
  auto m = server->allocator()->allocate(4096).value();
  ASSERT_NE(m.object_tag, nullptr);
  EXPECT_EQ(m.segment_offset, kSlabHeaderBytes + kObjectHeaderBytes);  // a slab's first slot
  EXPECT_EQ(m.object_tag->load(), 0u);                                 // no object yet
  const auto ref = testing::shm_region_ref(7, 4096, m.segment, m.segment_offset);
  auto tag = client->tagged_bytes(ref).tag;
  ASSERT_NE(tag, nullptr);
  EXPECT_EQ(tag->load(), 0u);
  m.object_tag->store(7);
  EXPECT_EQ(tag->load(), 7u);
  m.object_tag->store(0);
  EXPECT_EQ(tag->load(), 0u);
  // The region's bytes beside it, as a direct read copies them.
  std::memset(m.memory.get(), 0x3c, 4096);
  const auto at = client->tagged_bytes(ref);
  ASSERT_NE(at.tag, nullptr);
  ASSERT_NE(at.data, nullptr);
  EXPECT_EQ(at.tag.get(), tag.get());
  EXPECT_EQ(at.data[0], std::byte{0x3c});
  EXPECT_EQ(at.data[4095], std::byte{0x3c});
  // Elsewhere in the segment, or larger than it: none.
  EXPECT_EQ(client->tagged_bytes(testing::shm_region_ref(7, 4096, m.segment, 0)).tag, nullptr);
  EXPECT_EQ(client->tagged_bytes(testing::shm_region_ref(7, 4096, m.segment, 0)).data, nullptr);
  EXPECT_EQ(client->tagged_bytes(testing::shm_region_ref(7, 8192, m.segment, m.segment_offset)).tag,
            nullptr);
  // A segment of the server's without its header (as a crafted record
  // could name): none, even at the header's offset. Nor one of anybody
  // else's (a publisher's own buffers, say), with a header or not.
  const std::string address = server->endpoint().address;
  const std::string mine = address.substr(0, address.find(';')) + "999999";
  auto plain = Segment::create(mine, 8192).value();
  std::memset(plain->data(), 0x5a, plain->size());
  EXPECT_EQ(client->tagged_bytes(testing::shm_region_ref(7, 4096, mine, kObjectHeaderBytes)).tag,
            nullptr);
  const std::string theirs = process_prefix() + "not-a-region.1";
  auto other = Segment::create(theirs, kObjectHeaderBytes + 4096).value();
  new (other->data()) ObjectHeader{kObjectHeaderMagic, {7}};
  EXPECT_EQ(client->tagged_bytes(testing::shm_region_ref(7, 4096, theirs, kObjectHeaderBytes)).tag,
            nullptr);
  // A gone segment: none (the read goes the leased way, which reports it).
  EXPECT_EQ(client
                ->tagged_bytes(testing::shm_region_ref(7, 4096, process_prefix() + "gone.1",
                                                       kObjectHeaderBytes))
                .tag,
            nullptr);
}

// Small regions share slabs: a volume of many small keys maps few segments
// (the kernel allows 65,530 mappings per process by default) and a new
// key's region costs no segment of its own. Each slot has its own tag; a
// freed slot serves the next region of its size; a region above
// kMaxSlabRegionBytes gets a segment of its own. A place that does not
// fit a slab's layout (between slots, past a slot's end) shows no tag.
TEST(ShmTransport, SmallRegionsShareSlabsEachWithItsOwnTag) {
  if (!have_pidfd()) GTEST_SKIP() << "no pidfd_open here: lease-free reads are off";
  ServerAndClient shm;
  auto& server = shm.server;
  auto& client = shm.client;
  std::vector<RegionMemory> small;
  std::set<std::string> segments;
  for (int i = 0; i < 200; ++i) {
    small.push_back(server->allocator()->allocate(1000).value());
    segments.insert(small.back().segment);
  }
  EXPECT_LE(segments.size(), 4u) << "200 regions of 1,000 bytes";
  for (std::size_t i = 0; i < small.size(); ++i) {
    small[i].object_tag->store(i + 1);
    std::memset(small[i].memory.get(), static_cast<int>(i % 251), 1000);
  }
  for (std::size_t i = 0; i < small.size(); ++i) {
    const auto ref =
        testing::shm_region_ref(i + 1, 1000, small[i].segment, small[i].segment_offset);
    const auto at = client->tagged_bytes(ref);
    ASSERT_NE(at.tag, nullptr) << i;
    EXPECT_EQ(at.tag->load(), i + 1);
    EXPECT_EQ(at.data[0], static_cast<std::byte>(i % 251));
    EXPECT_EQ(at.data[999], static_cast<std::byte>(i % 251));
  }
  const auto& first = small.front();
  for (const std::uint64_t off : {first.segment_offset + 64, first.segment_offset - 32}) {
    EXPECT_EQ(client->tagged_bytes(testing::shm_region_ref(1, 8, first.segment, off)).tag, nullptr)
        << "between slots, at " << off;
  }
  EXPECT_EQ(
      client
          ->tagged_bytes(testing::shm_region_ref(1, 64 << 10, first.segment, first.segment_offset))
          .tag,
      nullptr)
      << "past its slot";
  // A freed slot (its tag cleared first, as the volume does) serves the
  // next region of its size.
  const std::string where = small[7].segment;
  const std::uint64_t offset = small[7].segment_offset;
  small[7].object_tag->store(0);
  small.erase(small.begin() + 7);
  auto again = server->allocator()->allocate(1000).value();
  EXPECT_EQ(again.segment, where);
  EXPECT_EQ(again.segment_offset, offset);
  EXPECT_EQ(again.object_tag->load(), 0u);
  // A large region: a segment of its own, its header first.
  auto large = server->allocator()->allocate(kMaxSlabRegionBytes + 1).value();
  EXPECT_EQ(large.segment_offset, kObjectHeaderBytes);
  EXPECT_EQ(segments.count(large.segment), 0u);
  large.object_tag->store(99);
  const auto at = client->tagged_bytes(
      testing::shm_region_ref(99, kMaxSlabRegionBytes + 1, large.segment, large.segment_offset));
  ASSERT_NE(at.tag, nullptr);
  EXPECT_EQ(at.tag->load(), 99u);
}

// The layout check a client applies to a place before it trusts a tag
// there: a region's own segment (header at 0), or a slot of a slab whose
// header names its slot size; anything else is refused.
TEST(ShmTransport, PlacesThatDoNotFitASegmentsLayoutAreRefused) {
  std::vector<std::byte> seg(kSlabHeaderBytes + 4 * 256, std::byte{0});
  new (seg.data()) SlabHeader{kSlabMagic, 256};
  const std::size_t size = seg.size();
  EXPECT_EQ(object_header_at(seg.data(), size, kSlabHeaderBytes + kObjectHeaderBytes, 192),
            static_cast<std::int64_t>(kSlabHeaderBytes));
  EXPECT_EQ(object_header_at(seg.data(), size, kSlabHeaderBytes + 256 + kObjectHeaderBytes, 1),
            static_cast<std::int64_t>(kSlabHeaderBytes + 256));
  EXPECT_EQ(object_header_at(seg.data(), size, kSlabHeaderBytes + kObjectHeaderBytes, 193), -1);
  EXPECT_EQ(object_header_at(seg.data(), size, kSlabHeaderBytes + 128 + kObjectHeaderBytes, 1), -1);
  EXPECT_EQ(object_header_at(seg.data(), size, 32, 1), -1);         // before any header
  EXPECT_EQ(object_header_at(seg.data(), size, size + 64, 0), -1);  // past the end
  EXPECT_EQ(object_header_at(seg.data(), size, size - 8, 16), -1);  // runs past the end
  EXPECT_EQ(object_header_at(seg.data(), size, kObjectHeaderBytes, 4096 - 64), -1);  // too long
  EXPECT_EQ(object_header_at(seg.data(), size, kObjectHeaderBytes, 100), 0);  // a one-region place
  new (seg.data()) SlabHeader{kSlabMagic ^ 1, 256};  // no slab: no slot place
  EXPECT_EQ(object_header_at(seg.data(), size, kSlabHeaderBytes + kObjectHeaderBytes, 8), -1);
  new (seg.data()) SlabHeader{kSlabMagic, 100};  // a slot size not of whole headers
  EXPECT_EQ(object_header_at(seg.data(), size, kSlabHeaderBytes + kObjectHeaderBytes, 8), -1);
}

// Lease-free reads trust a tag only while the process that clears it
// lives: the watch sees a killed process as gone before it is reaped, and
// a pid whose start time differs as another process.
TEST(ShmTransport, AProcessWatchSeesItsProcessExit) {
  if (!have_pidfd()) GTEST_SKIP() << "no pidfd_open here: nothing to watch with";
  EXPECT_TRUE(ProcessWatch::of_segment_prefix(process_prefix())->alive());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  ProcessWatch watch(child);
  EXPECT_TRUE(watch.alive());
  ASSERT_EQ(kill(child, SIGKILL), 0);
  EXPECT_TRUE(testing::eventually([&] { return !watch.alive(); }, kWait));  // a zombie now
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_FALSE(watch.alive());
  EXPECT_FALSE(ProcessWatch(child).alive());  // reaped: nothing to watch
  EXPECT_FALSE(ProcessWatch(getpid(), "1").alive()) << "another start time is another process";
  EXPECT_EQ(ProcessWatch::of_segment_prefix("meshstore.x-1."), nullptr);
  EXPECT_EQ(ProcessWatch::of_segment_prefix("other.1-1."), nullptr);
}

TEST(ShmTransport, VolumesCanStayOutOfSharedMemory) {
  StoreOptions o;
  o.transport.shared_memory_volumes = false;  // a container with a tiny /dev/shm
  auto store = Store::embedded(o).value();
  std::vector<float> w(1 << 18, 6.0f);
  ASSERT_OK(store.put("w", TensorView::of(w.data(), {1 << 18})).get(kWait));
  std::vector<float> back(1 << 18, 0.0f);
  ASSERT_OK(store.get_into("w", TensorView::of(back.data(), {1 << 18})).get(kWait));
  EXPECT_EQ(back, w);
  EXPECT_TRUE(own_segments().empty());
  o.transport.name = "shm";
  auto forced = Store::embedded(o).value();
  EXPECT_ERROR(forced.put("w", TensorView::of(w.data(), {1 << 18})).get(kWait), Errc::unsupported,
               "offers only [cma, tcp, rpc]");
}

TEST(ShmTransport, FullSharedMemoryIsOutOfCapacityNotACrash) {
  // Larger than /dev/shm can hold: posix_fallocate refuses, no SIGBUS later.
  auto seg = Segment::create(process_prefix() + "huge.1", std::size_t{1} << 50);
  EXPECT_ERROR(seg, Errc::out_of_capacity, "/dev/shm");
  EXPECT_FALSE(segment_exists(process_prefix() + "huge.1"));
}

TEST(ShmTransport, SegmentThatVanishedIsNotFound) {
  EXPECT_ERROR(Segment::open("meshstore.0-0.0.does-not-exist"), Errc::not_found, "gone");
}

}  // namespace
}  // namespace meshstore::transports::shm

namespace meshstore::transports::shm {
namespace {

std::uint64_t leases_of(Store& store) {
  auto stats = store.admin().stats().get(testing::kWait);
  return stats.ok() && !stats->empty() ? stats->front().leases : 999;
}

TEST(GetView, ZeroCopyReadOnlyAndPinsItsVersion) {
  StoreOptions o;
  o.transport.name = "shm";
  auto store = Store::embedded(o).value();
  std::vector<float> v1(1 << 18, 1.0f), v2(1 << 18, 2.0f);
  ASSERT_OK(store.put("w", TensorView::of(v1.data(), {1 << 18})).get(testing::kWait));
  auto view = store.get("w", ReadOptions::mapped()).get(testing::kWait);
  ASSERT_OK(view);
  EXPECT_TRUE(view->read_only());
  EXPECT_EQ(view->shape(), (Shape{1 << 18}));
  EXPECT_EQ(view->data_as<float>()[12345], 1.0f);
  EXPECT_EQ(leases_of(store), 1u);
  // A new version and a remove do not touch what the view shows.
  ASSERT_OK(store.put("w", TensorView::of(v2.data(), {1 << 18})).get(testing::kWait));
  ASSERT_OK(store.remove("w").get(testing::kWait));
  EXPECT_EQ(view->data_as<float>()[(1 << 18) - 1], 1.0f);
  // The last copy going closes the lease (through the client actor).
  Tensor copy = *view;
  view = Result<Tensor>(Status(Errc::not_found, "dropped"));
  EXPECT_EQ(copy.data_as<float>()[0], 1.0f);
  copy = Tensor();
  for (int i = 0; i < 500 && leases_of(store) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // bounded poll of a stat
  }
  EXPECT_EQ(leases_of(store), 0u);
}

TEST(GetView, AViewOutlivesItsStore) {
  Tensor view;
  {
    StoreOptions o;
    o.transport.name = "shm";
    auto store = Store::embedded(o).value();
    std::vector<float> w(1 << 18, 9.0f);
    ASSERT_OK(store.put("w", TensorView::of(w.data(), {1 << 18})).get(testing::kWait));
    view = store.get("w", ReadOptions::mapped()).get(testing::kWait).value();
    ASSERT_TRUE(view.read_only());
  }  // the store shuts down (without waiting for the view) and unlinks its segments
  EXPECT_TRUE(own_segments().empty());
  EXPECT_EQ(view.data_as<float>()[(1 << 18) - 1], 9.0f);  // the mapping is still ours
}

TEST(GetView, WritingThroughAViewFaults) {
  StoreOptions o;
  o.transport.name = "shm";
  auto store = Store::embedded(o).value();
  std::vector<float> w(1 << 18, 1.0f);
  ASSERT_OK(store.put("w", TensorView::of(w.data(), {1 << 18})).get(testing::kWait));
  auto view = store.get("w", ReadOptions::mapped()).get(testing::kWait).value();
  EXPECT_DEATH(view.data_as<float>()[0] = 5.0f, "");
}

TEST(GetView, CopiesWhereNoMappingIsPossible) {
  for (const char* transport : {"tcp", "rpc"}) {
    StoreOptions o;
    o.transport.name = transport;
    auto store = Store::embedded(o).value();
    std::vector<float> w(1 << 18, 4.0f);
    ASSERT_OK(store.put("w", TensorView::of(w.data(), {1 << 18})).get(testing::kWait));
    auto view = store.get("w", ReadOptions::mapped()).get(testing::kWait);
    ASSERT_OK(view) << transport;
    EXPECT_FALSE(view->read_only()) << transport;
    EXPECT_EQ(view->data_as<float>()[777], 4.0f);
    EXPECT_EQ(leases_of(store), 0u) << transport;
  }
  // Small tensors travel inline: a copy too.
  auto store = Store::embedded().value();
  float x = 3;
  ASSERT_OK(store.put("x", TensorView::of(&x, {})).get(testing::kWait));
  auto v = store.get("x", ReadOptions::mapped()).get(testing::kWait);
  ASSERT_OK(v);
  EXPECT_EQ(*v->data_as<float>(), 3.0f);
  EXPECT_ERROR(store.get("nope", ReadOptions::mapped()).get(testing::kWait), Errc::not_found,
               "nope");
}

}  // namespace
}  // namespace meshstore::transports::shm
