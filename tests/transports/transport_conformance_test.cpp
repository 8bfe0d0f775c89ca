// One conformance suite, run against every transport built into this binary
// (rpc, shm, tcp today; rdma, cma and cuda join when built) and tcp with
// encryption. Two levels:
// the transport contract itself (a server exposing regions, a client moving
// bytes in and out of them), and the store forced onto each transport, so
// every user-visible tensor shape goes through every byte path.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/cuda_emulation.hpp"
#include "meshstore/internal/memory.hpp"
#include "meshstore/store.hpp"
#include "meshstore/transports/registry.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"
#include "testing/region_ref.hpp"
#include "testing/test_util.hpp"

namespace meshstore::transports {
namespace {

using testing::kWait;
using namespace std::chrono_literals;

// MESHSTORE_TEST_EMULATED_CUDA=N runs the cuda-ipc cases on N emulated
// devices (ctest's "emulated." entries; docs/gpu.md), so they run in every
// build. Set before main, before anything asks about CUDA.
[[maybe_unused]] const bool kEmulatedCuda = [] {
  const char* n = std::getenv("MESHSTORE_TEST_EMULATED_CUDA");
  if (!n || !*n) return false;
  if (auto s = internal::cuda::emulate_devices(std::atoi(n)); !s.ok()) {
    std::fprintf(stderr, "emulated CUDA devices: %s\n", s.to_string().c_str());
    std::abort();
  }
  return true;
}();

// A test-name-safe transport name ("cuda-ipc" -> "cuda_ipc").
std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  std::replace(name.begin(), name.end(), '+', '_');
  return name;
}

// Every built transport, and the variants that change their byte path:
// "tcp+encrypted" is tcp with TransportConfig::tcp_encrypt.
constexpr const char* kEncrypted = "+encrypted";
std::vector<std::string> variants() {
  auto names = builtin_registry().names();
  names.push_back(std::string("tcp") + kEncrypted);
  return names;
}
// The transport of a variant, and whether it encrypts.
std::pair<std::string, bool> transport_of(const std::string& variant) {
  const auto plus = variant.find('+');
  if (plus == std::string::npos) return {variant, false};
  return {variant.substr(0, plus), variant.substr(plus) == kEncrypted};
}

void fill(std::vector<std::byte>& v, unsigned seed) {
  std::mt19937 gen(seed);
  for (auto& b : v) b = static_cast<std::byte>(gen());
}

// A volume's side without the volume actor: regions in a table, allocated
// where the transport needs them (shared memory for shm), served by the
// transport's server; the client reaches it through the transport's client.
class TransportConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    runtime_ = internal::ActorRuntime::create({}).value();
    regions_ = std::make_shared<RegionTable>();
    config_.rpc_chunk_bytes = 64 << 10;  // small chunks so transfers cross chunk edges
    config_.rpc_chunks_in_flight = 3;
    config_.tcp_chunk_bytes = 64 << 10;
    config_.tcp_streams = 3;
    config_.shm_parallel_copy_bytes = 1 << 20;
    config_.request_timeout = 20s;
    const auto [transport, encrypted] = transport_of(GetParam());
    config_.tcp_encrypt = encrypted;
    auto factory = builtin_registry().find(transport).value();
    if (factory.available) {
      if (auto s = factory.available(); !s.ok()) GTEST_SKIP() << GetParam() << ": " << s.message();
    }
    one_sided_ = factory.capabilities.one_sided;
    ServerContext sc{&runtime_->system(), regions_, config_, "v", "127.0.0.1"};
    server_ = factory.make_server(sc).value();
    allocator_ = server_->allocator();
    if (!allocator_ && factory.capabilities.maps_memory) {
      // A transport that maps host objects but places none (cuda-ipc): in a
      // volume its shm server places them, so one does here too.
      placer_ = builtin_registry().find("shm").value().make_server(sc).value();
      allocator_ = placer_->allocator();
    }
    client_ = factory.make_client(ClientContext{&runtime_->system(), config_}, server_->endpoint())
                  .value();
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    placer_.reset();
    regions_.reset();
    allocator_.reset();
    runtime_.reset();
  }
  // A zeroed region of `n` bytes and the reference a client gets for it.
  std::pair<std::shared_ptr<Region>, wire::RegionRef> add_region(std::size_t n) {
    const std::uint64_t id = next_id_++;
    std::shared_ptr<Region> r;
    if (allocator_) {
      auto m = allocator_->allocate(n).value();
      r = std::make_shared<Region>(id, m.memory, n, m.segment, m.segment_offset);
    } else {
      r = std::make_shared<Region>(id, internal::allocate_aligned(n), n);
    }
    if (n) std::memset(r->data(), 0, n);
    regions_->add(r);
    // As a volume does: its shm server places the region (every volume that
    // offers cuda-ipc offers shm), then this transport's server describes it.
    auto ref = r->segment().empty()
                   ? testing::region_ref(id, n)
                   : testing::shm_region_ref(id, n, r->segment(), r->segment_offset());
    EXPECT_OK(server_->describe(*r, ref));
    return {r, ref};
  }

  std::unique_ptr<internal::ActorRuntime> runtime_;
  std::shared_ptr<RegionTable> regions_;
  std::shared_ptr<RegionAllocator> allocator_;
  TransportConfig config_;
  std::unique_ptr<TransportServer> server_;
  std::unique_ptr<TransportServer> placer_;  // places host regions for server_, where it cannot
  std::unique_ptr<Transport> client_;
  bool one_sided_ = false;
  std::uint64_t next_id_ = 1;
};

TEST_P(TransportConformance, OddSizesRoundTrip) {
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{4097},
                        std::size_t{(64 << 10) + 1}, std::size_t{3 << 20} + 5}) {
    auto [region, ref] = add_region(n);
    std::vector<std::byte> src(n), dst(n);
    fill(src, static_cast<unsigned>(n));
    ASSERT_OK(client_->write(ref, 0, src.data(), n).get(kWait)) << n;
    EXPECT_EQ(std::memcmp(region->data(), src.data(), n), 0) << n;
    ASSERT_OK(client_->read(ref, 0, dst.data(), n).get(kWait)) << n;
    EXPECT_EQ(src, dst) << n;
  }
}

TEST_P(TransportConformance, EmptyTransferCompletesAndTouchesNothing) {
  auto [region, ref] = add_region(0);
  std::byte b{0x11};
  ASSERT_OK(client_->write(ref, 0, &b, 0).get(kWait));
  ASSERT_OK(client_->read(ref, 0, &b, 0).get(kWait));
  EXPECT_EQ(b, std::byte{0x11});
}

TEST_P(TransportConformance, PartialRangesAtOffsets) {
  auto [region, ref] = add_region(100000);
  std::vector<std::byte> src(50000, std::byte{0x5a});
  ASSERT_OK(client_->write(ref, 30000, src.data(), src.size()).get(kWait));
  EXPECT_EQ(region->data()[29999], std::byte{0});
  EXPECT_EQ(region->data()[30000], std::byte{0x5a});
  EXPECT_EQ(region->data()[79999], std::byte{0x5a});
  EXPECT_EQ(region->data()[80000], std::byte{0});
  std::vector<std::byte> back(20001);
  ASSERT_OK(client_->read(ref, 79990, back.data(), back.size()).get(kWait));
  EXPECT_EQ(back[9], std::byte{0x5a});
  EXPECT_EQ(back[10], std::byte{0});
}

TEST_P(TransportConformance, TheLastOwnerMayLetGoInsideACompletion) {
  // A store's client drops its connection (and with it the transport) in
  // whatever continuation runs last, which may run on the transport's own
  // thread: destroying the transport there must neither hang nor abort
  // (tcp once joined its worker from that worker: std::terminate).
  const std::size_t n = std::size_t{3} << 20;  // many chunks: not done at once
  auto [region, ref] = add_region(n);
  std::vector<std::byte> dst(n);
  std::shared_ptr<Transport> owner(std::move(client_));
  Promise<void> released;
  auto done = released.future();
  auto fut = owner->read(ref, 0, dst.data(), n);
  fut.on_complete([owner, &released](const Result<void>& r) mutable {
    owner.reset();  // not the last owner yet: the test still holds one
    released.set(r);
  });
  owner.reset();  // now the callback's copy is the last one
  ASSERT_OK(done.get(kWait));
}

TEST_P(TransportConformance, ManyTransfersInFlight) {
  constexpr int kN = 48;
  std::vector<std::pair<std::shared_ptr<Region>, wire::RegionRef>> regions;
  std::vector<std::vector<std::byte>> srcs;
  std::vector<Future<void>> writes;
  for (int i = 0; i < kN; ++i) {
    regions.push_back(add_region(300000 + i));
    srcs.emplace_back(300000 + i);
    fill(srcs.back(), i);
  }
  for (int i = 0; i < kN; ++i) {
    writes.push_back(client_->write(regions[i].second, 0, srcs[i].data(), srcs[i].size()));
  }
  for (auto& w : writes) ASSERT_OK(w.get(kWait));
  std::vector<std::vector<std::byte>> dsts(kN);
  std::vector<Future<void>> reads;
  for (int i = 0; i < kN; ++i) {
    dsts[i].resize(srcs[i].size());
    reads.push_back(client_->read(regions[i].second, 0, dsts[i].data(), dsts[i].size()));
  }
  for (auto& r : reads) ASSERT_OK(r.get(kWait));
  for (int i = 0; i < kN; ++i) EXPECT_EQ(srcs[i], dsts[i]) << i;
}

TEST_P(TransportConformance, RangeOutsideTheRegionIsOutOfRange) {
  auto [region, ref] = add_region(4096);
  std::vector<std::byte> buf(8192);
  EXPECT_ERROR(client_->write(ref, 1, buf.data(), 4096).get(kWait), Errc::out_of_range, "outside");
  EXPECT_ERROR(client_->read(ref, 4097, buf.data(), 0).get(kWait), Errc::out_of_range, "outside");
  EXPECT_ERROR(client_->read(ref, 0, buf.data(), 8192).get(kWait), Errc::out_of_range, "outside");
  EXPECT_EQ(region->data()[0], std::byte{0});  // nothing written
}

TEST_P(TransportConformance, RegionThatIsGoneIsNotFound) {
  // Never staged: an id the server does not know, a segment that never was.
  const auto ghost =
      testing::shm_region_ref(424242, 4096, std::string(shm::kSegmentPrefix) + "0-0.0.424242");
  std::vector<std::byte> buf(4096);
  EXPECT_ERROR(client_->read(ghost, 0, buf.data(), buf.size()).get(kWait), Errc::not_found, "");
  EXPECT_ERROR(client_->write(ghost, 0, buf.data(), buf.size()).get(kWait), Errc::not_found, "");
}

TEST_P(TransportConformance, TransferAfterAnErrorStillWorks) {
  auto [region, ref] = add_region(1 << 20);
  std::vector<std::byte> src(1 << 20), dst(1 << 20);
  fill(src, 3);
  const auto ghost =
      testing::shm_region_ref(999999, 1 << 20, std::string(shm::kSegmentPrefix) + "0-0.0.999999");
  EXPECT_FALSE(client_->write(ghost, 0, src.data(), src.size()).get(kWait).ok());
  ASSERT_OK(client_->write(ref, 0, src.data(), src.size()).get(kWait));
  ASSERT_OK(client_->read(ref, 0, dst.data(), dst.size()).get(kWait));
  EXPECT_EQ(src, dst);
}

TEST_P(TransportConformance, StoppedServerTurnsTransfersIntoErrors) {
  if (one_sided_) {
    GTEST_SKIP() << GetParam() << " is one-sided: the volume's server takes no part in a transfer";
  }
  auto [region, ref] = add_region(1 << 16);
  server_->shutdown();
  std::vector<std::byte> buf(1 << 16);
  auto r = client_->read(ref, 0, buf.data(), buf.size()).get(kWait);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().code() == Errc::unavailable || r.status().code() == Errc::transport_error)
      << r.status().to_string();
}

TEST_P(TransportConformance, OneGibibyteRoundTrip) {
  const std::size_t n = std::size_t{1} << 30;
  auto [region, ref] = add_region(n);
  std::vector<std::byte> buf(n);
  for (std::size_t i = 0; i < n; i += 4096) buf[i] = static_cast<std::byte>((i >> 12) * 7 + 1);
  buf[n - 1] = std::byte{0x77};
  ASSERT_OK(client_->write(ref, 0, buf.data(), n).get(kWait));
  EXPECT_EQ(std::memcmp(region->data(), buf.data(), n), 0);
  std::vector<std::byte> back(n);
  ASSERT_OK(client_->read(ref, 0, back.data(), n).get(kWait));
  EXPECT_EQ(std::memcmp(back.data(), buf.data(), n), 0);
}

INSTANTIATE_TEST_SUITE_P(Built, TransportConformance, ::testing::ValuesIn(variants()), param_name);

// -- the store forced onto each transport ---------------------------------

class StoreOverTransport : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto [transport, encrypted] = transport_of(GetParam());
    for (const auto& [name, status] : Store::Admin::transport_status()) {
      if (name == transport && !status.ok()) GTEST_SKIP() << name << ": " << status.message();
    }
    StoreOptions o;
    o.transport.name = transport;
    o.security.encrypt_tcp = encrypted;
    store_ = std::make_unique<Store>(Store::embedded(o).value());
  }
  void TearDown() override { store_.reset(); }
  std::unique_ptr<Store> store_;
};

TEST_P(StoreOverTransport, EveryDTypeRoundTrips) {
  for (DType dt : all_dtypes()) {
    const std::string key = "dtype." + std::string(dtype_name(dt));
    auto src = Tensor::empty(dt, {33, 65}).value();  // odd sizes, > 4 KiB for wide types
    auto* p = static_cast<unsigned char*>(src.data());
    for (std::size_t i = 0; i < src.nbytes(); ++i) p[i] = static_cast<unsigned char>(i * 31 + 7);
    ASSERT_OK(store_->put(key, src.view()).get(kWait)) << key;
    auto got = store_->get(key).get(kWait);
    ASSERT_OK(got) << key;
    EXPECT_EQ(got->dtype(), dt);
    EXPECT_EQ(got->shape(), src.shape());
    EXPECT_EQ(std::memcmp(got->data(), src.data(), src.nbytes()), 0) << key;
    auto into = Tensor::zeros(dt, {33, 65}).value();
    ASSERT_OK(store_->get_into(key, into.view()).get(kWait)) << key;
    EXPECT_EQ(std::memcmp(into.data(), src.data(), src.nbytes()), 0) << key;
  }
}

TEST_P(StoreOverTransport, EmptyAndZeroDimTensors) {
  std::vector<float> none;
  ASSERT_OK(store_->put("empty", TensorView(none.data(), DType::float32, {0, 16})).get(kWait));
  auto e = store_->get("empty").get(kWait);
  ASSERT_OK(e);
  EXPECT_EQ(e->shape(), (Shape{0, 16}));
  EXPECT_EQ(e->nbytes(), 0u);
  double x = 2.5;
  ASSERT_OK(store_->put("scalar", TensorView::of(&x, {})).get(kWait));
  double y = 0;
  ASSERT_OK(store_->get_into("scalar", TensorView::of(&y, {})).get(kWait));
  EXPECT_EQ(y, 2.5);
}

TEST_P(StoreOverTransport, NonContiguousViewsBothWays) {
  // 300 x 257 floats (> the inline limit, so the transport moves them).
  std::vector<float> a(300 * 257);
  std::iota(a.begin(), a.end(), 0.0f);
  auto t = TensorView::of(a.data(), {300, 257}).transpose(0, 1).value();  // 257 x 300
  ASSERT_OK(store_->put("t", t).get(kWait));
  auto got = store_->get("t").get(kWait);
  ASSERT_OK(got);
  ASSERT_EQ(got->shape(), (Shape{257, 300}));
  const float* g = got->data_as<float>();
  EXPECT_EQ(g[0 * 300 + 1], a[1 * 257 + 0]);
  EXPECT_EQ(g[256 * 300 + 299], a[299 * 257 + 256]);
  // get_into a strided destination: the transpose of a zeroed buffer.
  std::vector<float> b(300 * 257, 0.0f);
  auto bt = TensorView::of(b.data(), {300, 257}).transpose(0, 1).value();
  ASSERT_OK(store_->get_into("t", bt).get(kWait));
  EXPECT_EQ(a, b);
}

TEST_P(StoreOverTransport, TenThousandSmallTensors) {
  constexpr int kN = 10000;
  std::vector<std::vector<std::int32_t>> data(kN, std::vector<std::int32_t>(1024));
  std::vector<std::pair<std::string, TensorView>> items;
  for (int i = 0; i < kN; ++i) {
    std::fill(data[i].begin(), data[i].end(), i);
    items.emplace_back("small." + std::to_string(i), TensorView::of(data[i].data(), {1024}));
  }
  ASSERT_OK(store_->put_batch(items).get(120s));
  std::vector<std::vector<std::int32_t>> back(kN, std::vector<std::int32_t>(1024, -1));
  std::vector<std::pair<std::string, TensorView>> outs;
  for (int i = 0; i < kN; ++i) {
    outs.emplace_back("small." + std::to_string(i), TensorView::of(back[i].data(), {1024}));
  }
  ASSERT_OK(store_->get_into_batch(outs).get(120s));
  EXPECT_EQ(back, data);
  // A second version of everything reuses the first one's memory.
  ASSERT_OK(store_->put_batch(items).get(120s));
  EXPECT_EQ(store_->keys("small.").get(kWait)->size(), static_cast<std::size_t>(kN));
}

TEST_P(StoreOverTransport, RemoveAndCloseLeaveNoSharedMemory) {
  std::vector<float> w(1 << 18, 1.0f);  // 1 MiB: moved by the transport
  ASSERT_OK(store_->put("w", TensorView::of(w.data(), {1 << 18})).get(kWait));
  ASSERT_OK(store_->put("w", TensorView::of(w.data(), {1 << 18})).get(kWait));
  ASSERT_OK(store_->remove("w").get(kWait));
  ASSERT_OK(store_->put("v", TensorView::of(w.data(), {1 << 18})).get(kWait));
  store_.reset();  // shutdown
  EXPECT_EQ(shm::own_segments(), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Built, StoreOverTransport, ::testing::ValuesIn(variants()), param_name);

}  // namespace
}  // namespace meshstore::transports
