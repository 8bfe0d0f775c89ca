// The one-sided protocol's shared parts and the cma transport's failure
// cases; the contract itself (sizes, ranges, many transfers, 1 GiB, a
// store over it) is the conformance suite, which runs against cma too.

#include "meshstore/transports/cma/cma_transport.hpp"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/transports/host_identity.hpp"
#include "meshstore/transports/one_sided.hpp"
#include "testing/region_ref.hpp"
#include "testing/test_util.hpp"

namespace meshstore::transports {
namespace {

using testing::kWait;

// -- one_sided ----------------------------------------------------------------------

TEST(OneSided, PlanCutsDescribedRangesIntoPieces) {
  std::vector<std::byte> local(100);
  auto ref = testing::one_sided_region_ref(7, 1000, "rdma", 0x10000, 42);
  auto pieces = one_sided::plan(ref, "rdma", 900, local.data(), 100, 30, "read");
  ASSERT_OK(pieces);
  ASSERT_EQ(pieces->size(), 4u);
  EXPECT_EQ((*pieces)[0].remote, 0x10000u + 900);
  EXPECT_EQ((*pieces)[3].remote, 0x10000u + 990);
  EXPECT_EQ((*pieces)[3].length, 10u);
  EXPECT_EQ((*pieces)[3].local, local.data() + 90);
  EXPECT_EQ((*pieces)[2].key, 42u);
  EXPECT_ERROR(one_sided::plan(ref, "rdma", 901, local.data(), 100, 30, "read"), Errc::out_of_range,
               "read: bytes [901, 1001) outside region 7");
  // Another transport's description is not this one's.
  EXPECT_ERROR(one_sided::plan(ref, "cma", 0, local.data(), 10, 30, "read"), Errc::not_found,
               "read of region 7: the volume never described it");
  ref.described.clear();
  EXPECT_ERROR(one_sided::plan(ref, "rdma", 0, local.data(), 10, 30, "read"), Errc::not_found,
               "read of region 7: the volume never described it");
  EXPECT_TRUE(one_sided::plan(ref, "rdma", 0, local.data(), 0, 30, "read")->empty());
}

// A description comes from a peer: one cut short, one too long and one
// with address 0 are protocol errors naming the region and the transport.
TEST(OneSided, MalformedDescriptionsAreRefused) {
  std::vector<std::byte> local(100);
  auto ref = testing::region_ref(9, 1000);
  ref.described["cma"] = one_sided::describe(0x10000, 0).substr(0, 12);
  EXPECT_ERROR(one_sided::plan(ref, "cma", 0, local.data(), 10, 30, "read"), Errc::protocol_error,
               "read of region 9: the volume's cma description is cut short");
  ref.described["cma"] = one_sided::describe(0x10000, 0) + "x";
  EXPECT_ERROR(one_sided::plan(ref, "cma", 0, local.data(), 10, 30, "read"), Errc::protocol_error,
               "read of region 9: the volume's cma description has 1 bytes too many");
  ref.described["cma"] = one_sided::describe(0, 0);
  EXPECT_ERROR(one_sided::plan(ref, "cma", 0, local.data(), 10, 30, "read"), Errc::protocol_error,
               "gives address 0");
}

TEST(OneSided, RunCompletesWithTheFirstErrorAndSkipsTheRest) {
  std::vector<one_sided::Piece> pieces(40, one_sided::Piece{nullptr, 0, 0, std::size_t{1} << 20});
  std::atomic<int> moved{0};
  auto ok = one_sided::run(pieces, 4, 0, [&](const one_sided::Piece*, std::size_t k) {
    moved += static_cast<int>(k);
    return Status();
  });
  ASSERT_OK(ok.get(kWait));
  EXPECT_EQ(moved.load(), 40);
  auto bad = one_sided::run(pieces, 4, 0, [&](const one_sided::Piece* p, std::size_t) {
    return p == nullptr ? Status() : Status(Errc::transport_error, "batch failed");
  });
  EXPECT_ERROR(bad.get(kWait), Errc::transport_error, "batch failed");
  // Small transfers run on the calling thread.
  const auto caller = std::this_thread::get_id();
  std::thread::id ran;
  ASSERT_OK(one_sided::run({one_sided::Piece{nullptr, 0, 0, 10}}, 4, 1 << 20,
                           [&](const one_sided::Piece*, std::size_t) {
                             ran = std::this_thread::get_id();
                             return Status();
                           })
                .get(kWait));
  EXPECT_EQ(ran, caller);
}

TEST(OneSided, RegistrationsAreCachedByBuffer) {
  std::vector<std::uint64_t> dropped;
  std::uint64_t next = 100;
  auto cache = std::make_unique<one_sided::RegistrationCache>(
      [&](std::byte*, std::size_t) -> Result<std::uint64_t> { return next++; },
      [&](std::uint64_t key) { dropped.push_back(key); });
  std::vector<std::byte> a(64), b(64);
  EXPECT_EQ(*cache->key_for(a.data(), 64), 100u);
  EXPECT_EQ(*cache->key_for(a.data(), 64), 100u);  // the next version: same memory, same key
  EXPECT_EQ(*cache->key_for(b.data(), 64), 101u);
  EXPECT_EQ(cache->registrations(), 2u);
  EXPECT_EQ(*cache->key_for(a.data(), 32), 102u);  // reused for another size
  EXPECT_EQ(dropped, std::vector<std::uint64_t>{100});
  cache->forget(b.data());
  EXPECT_EQ(dropped, (std::vector<std::uint64_t>{100, 101}));
  EXPECT_EQ(cache->size(), 1u);
  cache.reset();  // the rest go with the cache
  EXPECT_EQ(dropped, (std::vector<std::uint64_t>{100, 101, 102}));
  one_sided::RegistrationCache failing(
      [](std::byte*, std::size_t) -> Result<std::uint64_t> {
        return Status(Errc::unavailable, "no device");
      },
      [](std::uint64_t) {});
  EXPECT_ERROR(failing.key_for(a.data(), 64), Errc::unavailable, "no device");
  EXPECT_EQ(failing.size(), 0u);
}

// -- cma ----------------------------------------------------------------------------

class Cma : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_ = internal::ActorRuntime::create({}).value();
    factory_ = cma::cma_factory();
    ServerContext sc{&runtime_->system(), std::make_shared<RegionTable>(), {}, "v", "127.0.0.1"};
    server_ = factory_.make_server(sc).value();
  }
  std::unique_ptr<Transport> client(const EndpointInfo& ep) {
    return factory_.make_client(ClientContext{&runtime_->system(), {}}, ep).value();
  }
  // A descriptor of `n` bytes at `p` in this process.
  wire::RegionRef describe(std::byte* p, std::size_t n) {
    Region region(1, std::shared_ptr<std::byte>(p, [](std::byte*) {}), n);
    auto ref = testing::region_ref(1, n);
    EXPECT_OK(server_->describe(region, ref));
    return ref;
  }
  std::unique_ptr<internal::ActorRuntime> runtime_;
  TransportFactory factory_;
  std::unique_ptr<TransportServer> server_;
};

TEST_F(Cma, ReadsAndWritesTheVolumesMemoryDirectly) {
  std::vector<std::byte> volume(1 << 20, std::byte{7}), mine(1 << 20);
  const auto ref = describe(volume.data(), volume.size());
  EXPECT_EQ(ref.described.at("cma"),
            one_sided::describe(reinterpret_cast<std::uint64_t>(volume.data()), 0));
  auto c = client(server_->endpoint());
  ASSERT_OK(c->read(ref, 0, mine.data(), mine.size()).get(kWait));
  EXPECT_EQ(mine, volume);
  std::fill(mine.begin(), mine.end(), std::byte{9});
  ASSERT_OK(c->write(ref, 100, mine.data(), 50).get(kWait));
  EXPECT_EQ(volume[99], std::byte{7});
  EXPECT_EQ(volume[100], std::byte{9});
  EXPECT_EQ(volume[150], std::byte{7});
  EXPECT_TRUE(c->capabilities().one_sided);
}

TEST_F(Cma, ARegionNoLongerMappedIsNotFound) {
  const long page = ::sysconf(_SC_PAGESIZE);
  void* p = ::mmap(nullptr, static_cast<std::size_t>(page), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const auto ref = describe(static_cast<std::byte*>(p), static_cast<std::size_t>(page));
  ::munmap(p, static_cast<std::size_t>(page));
  std::vector<std::byte> buf(static_cast<std::size_t>(page));
  EXPECT_ERROR(client(server_->endpoint())->read(ref, 0, buf.data(), buf.size()).get(kWait),
               Errc::not_found, "the memory is no longer mapped there (the region is gone)");
}

TEST_F(Cma, ADeadVolumeProcessIsUnavailable) {
  // A process that exited: its pid names nothing (or, reused, another
  // process, whose start time differs).
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  EndpointInfo ep = server_->endpoint();
  const auto pid_at = ep.address.find(";pid=");
  const auto end = ep.address.find(';', pid_at + 1);
  ep.address =
      ep.address.substr(0, pid_at) + ";pid=" + std::to_string(child) + ep.address.substr(end);
  std::vector<std::byte> volume(4096), buf(4096);
  const auto ref = describe(volume.data(), volume.size());
  EXPECT_ERROR(client(ep)->read(ref, 0, buf.data(), buf.size()).get(kWait), Errc::unavailable,
               "in process " + std::to_string(child) + ": the volume's process is gone");
}

TEST_F(Cma, AnotherUserIsNotPermitted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another user";
  std::vector<std::byte> volume(4096, std::byte{1});
  const auto ref = describe(volume.data(), volume.size());
  const EndpointInfo ep = server_->endpoint();
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    // The client, as nobody: the kernel refuses to attach to root's process.
    ::close(pipefd[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    auto c = cma::cma_factory().make_client(ClientContext{nullptr, {}}, ep);
    std::vector<std::byte> buf(4096);
    const Status s =
        c.ok() ? (*c)->read(ref, 0, buf.data(), buf.size()).get(kWait).status() : c.status();
    const std::string text = s.to_string();
    (void)!::write(pipefd[1], text.data(), text.size());
    ::_exit(0);
  }
  ::close(pipefd[1]);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof(buf))) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(text.find("unavailable"), std::string::npos) << text;
  EXPECT_NE(text.find("not permitted (the volume runs as another user"), std::string::npos) << text;
}

TEST_F(Cma, SelectionNamesWhyAPairCannotUseIt) {
  EndpointInfo ep = server_->endpoint();
  EXPECT_OK(factory_.can_serve(ep));
  EndpointInfo other_host = ep;
  other_host.host_id = "elsewhere";
  EXPECT_ERROR(factory_.can_serve(other_host), Errc::unsupported, "the volume is on another host");
  EndpointInfo other_user = ep;
  other_user.address = ep.address.substr(0, ep.address.find(";uid=")) + ";uid=12345";
  EXPECT_ERROR(factory_.can_serve(other_user), Errc::unsupported,
               "the volume runs as another user (uid 12345");
  EndpointInfo other_ns = ep;
  other_ns.address = "pidns=pid:[1];" + ep.address.substr(ep.address.find(";pid=") + 1);
  EXPECT_ERROR(factory_.can_serve(other_ns), Errc::unsupported, "another pid namespace");
  EndpointInfo garbled = ep;
  garbled.address = "nonsense";
  EXPECT_ERROR(factory_.can_serve(garbled), Errc::invalid_argument, "is malformed");
}

}  // namespace
}  // namespace meshstore::transports
