#include "meshstore/transports/rpc/rpc_transport.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/memory.hpp"
#include "meshstore/transports/registry.hpp"
#include "testing/test_util.hpp"

namespace meshstore::transports {
namespace {

// An rpc endpoint with no actor (selection looks at the name only).
EndpointInfo rpc_endpoint() {
  EndpointInfo e;
  e.transport = "rpc";
  return e;
}

// A descriptor naming region `id` of `n` bytes (the other fields unused by rpc).
wire::RegionRef ref(std::uint64_t id, std::uint64_t n) {
  wire::RegionRef r;
  r.region_id = id;
  r.nbytes = n;
  return r;
}

using testing::kWait;

// A volume's side without the volume actor: regions in a table, served by
// the rpc server; the client talks to it through the rpc transport.
class RpcTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_ = internal::ActorRuntime::create({}).value();
    regions_ = std::make_shared<RegionTable>();
    config_.rpc_chunk_bytes = 4096;  // small chunks so every test crosses chunk edges
    config_.rpc_chunks_in_flight = 3;
    auto factory = rpc::rpc_factory();
    server_ =
        factory.make_server(ServerContext{&runtime_->system(), regions_, config_, "v"}).value();
    client_ = factory.make_client(ClientContext{&runtime_->system(), config_}, server_->endpoint())
                  .value();
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    runtime_.reset();
  }
  std::shared_ptr<Region> add_region(std::uint64_t id, std::size_t n) {
    auto r = std::make_shared<Region>(id, internal::allocate_aligned(n), n);
    std::memset(r->data(), 0, n);
    regions_->add(r);
    return r;
  }

  std::unique_ptr<internal::ActorRuntime> runtime_;
  std::shared_ptr<RegionTable> regions_;
  TransportConfig config_;
  std::unique_ptr<TransportServer> server_;
  std::unique_ptr<Transport> client_;
};

TEST_F(RpcTransportTest, OddSizesRoundTrip) {
  for (std::size_t n : {std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{4097},
                        std::size_t{3 * 4096 + 17}, std::size_t{1} << 20}) {
    auto region = add_region(n, n);
    std::vector<std::byte> src(n), dst(n);
    for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<std::byte>(i * 131 + 7);
    ASSERT_OK(client_->write(ref(region->id(), n), 0, src.data(), n).get(kWait)) << n;
    EXPECT_EQ(std::memcmp(region->data(), src.data(), n), 0) << n;
    ASSERT_OK(client_->read(ref(region->id(), n), 0, dst.data(), n).get(kWait)) << n;
    EXPECT_EQ(src, dst) << n;
  }
}

TEST_F(RpcTransportTest, WritesAtAnOffset) {
  auto region = add_region(1, 10000);
  std::vector<std::byte> src(5000, std::byte{0x5a});
  ASSERT_OK(client_->write(ref(1, 10000), 3000, src.data(), src.size()).get(kWait));
  EXPECT_EQ(region->data()[2999], std::byte{0});
  EXPECT_EQ(region->data()[3000], std::byte{0x5a});
  EXPECT_EQ(region->data()[7999], std::byte{0x5a});
  EXPECT_EQ(region->data()[8000], std::byte{0});
}

TEST_F(RpcTransportTest, ManyTransfersInFlight) {
  constexpr int kN = 32;
  std::vector<std::shared_ptr<Region>> regions;
  std::vector<std::vector<std::byte>> srcs;
  std::vector<Future<void>> writes;
  for (int i = 0; i < kN; ++i) {
    regions.push_back(add_region(100 + i, 9000));
    srcs.emplace_back(9000, static_cast<std::byte>(i));
  }
  for (int i = 0; i < kN; ++i)
    writes.push_back(client_->write(ref(100u + i, 9000), 0, srcs[i].data(), 9000));
  ASSERT_OK(gather(std::move(writes)).get(kWait));
  for (int i = 0; i < kN; ++i)
    EXPECT_EQ(std::memcmp(regions[i]->data(), srcs[i].data(), 9000), 0) << i;
}

TEST_F(RpcTransportTest, OutOfRangeIsRejectedBeforeAnyByteMoves) {
  auto region = add_region(1, 100);
  std::vector<std::byte> buf(200);
  EXPECT_ERROR(client_->write(ref(1, 100), 50, buf.data(), 60).get(kWait), Errc::out_of_range,
               "outside region 1");
  EXPECT_ERROR(client_->read(ref(1, 100), 0, buf.data(), 200).get(kWait), Errc::out_of_range,
               "outside region 1");
}

TEST_F(RpcTransportTest, TheServerChecksBoundsToo) {
  // A client that believes the region is larger than it is.
  auto region = add_region(1, 100);
  std::vector<std::byte> buf(200);
  EXPECT_ERROR(client_->write(ref(1, 200), 0, buf.data(), 200).get(kWait), Errc::out_of_range,
               "of 100 bytes");
}

TEST_F(RpcTransportTest, GoneRegionIsNotFound) {
  std::vector<std::byte> buf(10);
  { add_region(9, 10); }  // dropped at once: nobody owns it
  EXPECT_ERROR(client_->read(ref(9, 10), 0, buf.data(), 10).get(kWait), Errc::not_found,
               "region 9");
}

TEST_F(RpcTransportTest, ZeroBytesCompleteAtOnce) {
  EXPECT_OK(client_->write(ref(1, 0), 0, nullptr, 0).get(kWait));
}

TEST_F(RpcTransportTest, StoppedServerTurnsTransfersIntoErrors) {
  auto region = add_region(1, 1 << 16);
  server_->shutdown();
  std::vector<std::byte> buf(1 << 16);
  auto r = client_->read(ref(1, 1 << 16), 0, buf.data(), buf.size()).get(kWait);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.status().code() == Errc::unavailable || r.status().code() == Errc::transport_error)
      << r.status().to_string();
}

TEST(TransportConfig, ValidatesRanges) {
  TransportConfig c;
  EXPECT_OK(c.validate());
  c.rpc_chunk_bytes = std::size_t{2} << 30;
  EXPECT_ERROR(c.validate(), Errc::invalid_argument, "rpc_chunk_bytes");
  c = TransportConfig{};
  c.rpc_chunks_in_flight = 0;
  EXPECT_ERROR(c.validate(), Errc::invalid_argument, "rpc_chunks_in_flight");
  for (const auto spin : {std::chrono::microseconds(-1), std::chrono::microseconds(1000001)}) {
    c = TransportConfig{};
    c.small_ops_spin = spin;
    EXPECT_ERROR(c.validate(), Errc::invalid_argument, "small_ops_spin");
  }
  c.small_ops_spin = std::chrono::microseconds(0);
  EXPECT_OK(c.validate());
}

TEST(TransportRegistry, RejectsDuplicatesAndNamesWhatItHas) {
  TransportRegistry reg;
  ASSERT_OK(reg.add(rpc::rpc_factory()));
  EXPECT_ERROR(reg.add(rpc::rpc_factory()), Errc::invalid_argument, "already registered");
  TransportFactory nameless;
  EXPECT_ERROR(reg.add(nameless), Errc::invalid_argument, "empty");
  EXPECT_ERROR(reg.find("carrier-pigeon"), Errc::not_found, "built: rpc");
  // Built-in transports, best first: shm, cuda-ipc (when built: below shm,
  // so asked for by name) and cma on one host, rdma (when built) and tcp
  // across hosts, rpc everywhere.
  auto names = builtin_registry().names();
  const auto optional = [&](const std::string& n) {
    names.erase(std::remove(names.begin(), names.end(), n), names.end());
  };
  const auto at = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) - names.begin();
  };
  if (std::find(names.begin(), names.end(), "cuda-ipc") != names.end()) {
    EXPECT_EQ(at("cuda-ipc"), at("shm") + 1);
  }
  optional("rdma");
  optional("cuda-ipc");
  EXPECT_EQ(names, (std::vector<std::string>{"shm", "cma", "tcp", "rpc"}));
}

TEST(SelectTransport, ForcedTransportNeverFallsBack) {
  auto& reg = builtin_registry();
  std::vector<EndpointInfo> offered{rpc_endpoint()};
  EXPECT_EQ(select_transport(reg, offered, "", "volume-0")->transport, "rpc");
  EXPECT_EQ(select_transport(reg, offered, "rpc", "volume-0")->transport, "rpc");
  EXPECT_ERROR(select_transport(reg, offered, "shm", "volume-0"), Errc::unsupported, "forced");
  EXPECT_ERROR(select_transport(reg, {}, "", "volume-7"), Errc::unsupported, "volume-7");
}

TEST(SelectTransport, ShmOnlyForTheSameHostAndUser) {
  auto& reg = builtin_registry();
  auto server = reg.find("shm")->make_server(ServerContext{}).value();
  EndpointInfo here = server->endpoint();
  EndpointInfo rpc = rpc_endpoint();
  // Same host: shm wins over rpc.
  EXPECT_EQ(select_transport(reg, {rpc, here}, "", "v")->transport, "shm");
  // Another host (same hostname is not enough: the identity differs).
  EndpointInfo remote = here;
  remote.host_id = "another-boot-id/net:1.2/shm:3.4";
  EXPECT_EQ(select_transport(reg, {rpc, remote}, "", "v")->transport, "rpc");
  EXPECT_ERROR(select_transport(reg, {rpc, remote}, "shm", "v"), Errc::unsupported, "another host");
  // Another user on this host cannot map our 0600 segments.
  EndpointInfo other_user = here;
  other_user.address = other_user.address.substr(0, other_user.address.rfind(';')) + ";uid=99999";
  EXPECT_ERROR(select_transport(reg, {other_user}, "shm", "v"), Errc::unsupported, "another user");
  EXPECT_ERROR(select_transport(reg, {other_user}, "", "v"), Errc::unsupported, "another user");
}

TEST(SelectTransport, EnvironmentNamesTheForcedTransport) {
  ::setenv("MESHSTORE_TRANSPORT", "rpc", 1);
  EXPECT_EQ(transport_from_env(), "rpc");
  ::unsetenv("MESHSTORE_TRANSPORT");
  EXPECT_EQ(transport_from_env(), "");
}

}  // namespace
}  // namespace meshstore::transports
