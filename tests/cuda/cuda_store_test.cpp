// CUDA device tensors through the store (docs/gpu.md). Built in every
// build and run twice by CTest:
// - on real GPUs: every test skips, naming the reason, where CUDA cannot be
//   used (no driver, no device);
// - on emulated devices (MESHSTORE_TEST_EMULATED_CUDA=N, "emulated." in the
//   test names): device memory the CPU cannot touch, so every device path
//   of the store, cuda-ipc's included, runs on machines without a GPU.
//
// The binary is also its own peer process: `meshstore_cuda_tests --peer-get
// ADDRESS KEY N` connects to the store at ADDRESS, reads KEY (N float32s)
// into device memory and checks it holds 0.5 * i.
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/checkpoint.hpp"
#include "meshstore/client/fast_path.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/internal/cuda_emulation.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/store.hpp"
#include "meshstore/tensor.hpp"
#include "testing/revoke_race.hpp"
#include "testing/subprocess.hpp"
#include "testing/temp_dir.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using namespace std::chrono_literals;
using testing::kWait;

#define SKIP_WITHOUT_CUDA()                                            \
  do {                                                                 \
    if (auto s = cuda::status(); !s.ok()) GTEST_SKIP() << s.message(); \
  } while (0)

// Device memory for a test, freed at the end of its scope.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    auto p = internal::cuda::device_alloc(n, 0);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (p.ok()) p_ = std::move(p).value();
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_.get(); }
  void free() { p_.reset(); }
  void upload(const void* src) const { ASSERT_OK(internal::cuda::copy_bytes(p_.get(), src, n_)); }
  std::vector<std::uint8_t> download() const {
    std::vector<std::uint8_t> out(n_);
    EXPECT_OK(internal::cuda::copy_bytes(out.data(), p_.get(), n_));
    return out;
  }
  TensorView view(DType d, Shape shape, Strides strides = {}, int device = 0) const {
    return TensorView(p_.get(), d, std::move(shape), std::move(strides), Device::cuda(device));
  }

 private:
  std::shared_ptr<std::byte> p_;
  std::size_t n_;
};

// Downloaded bytes as the float32s they hold.
std::vector<float> as_floats(const std::vector<std::uint8_t>& raw) {
  std::vector<float> out(raw.size() / 4);
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

std::vector<std::uint8_t> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>(rng());
  return out;
}

// copy_pieces, the batched copy behind state dicts of small device
// tensors: pieces of every size (a byte to several kernel chunks), at odd
// device addresses and odd host offsets, both ways; a couple of pieces
// (one copy each) and none. Bytes outside the pieces stay as they were on
// the device.
TEST(CudaCopies, ManyPiecesCrossBothWaysIntact) {
  SKIP_WITHOUT_CUDA();
  const std::vector<std::size_t> sizes = {1,    3,    15,    16,    17,     255,
                                          4096, 4099, 65536, 65537, 200003, 7};
  std::vector<internal::cuda::DevicePiece> pieces;
  std::size_t device_end = 0, host_end = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::size_t dev_at = device_end + i % 5, host_at = host_end + (i * 3) % 16;
    pieces.push_back(internal::cuda::DevicePiece{nullptr, host_at, sizes[i], 0});
    device_end = dev_at + sizes[i];
    host_end = host_at + sizes[i];
    pieces.back().device_ptr = reinterpret_cast<void*>(dev_at);  // made absolute below
  }
  const auto original = random_bytes(device_end, 5);
  DeviceBuffer dev(device_end);
  dev.upload(original.data());
  for (auto& p : pieces) {
    p.device_ptr =
        static_cast<std::byte*>(dev.get()) + reinterpret_cast<std::uintptr_t>(p.device_ptr);
  }
  std::vector<std::uint8_t> host(host_end, 0);
  ASSERT_OK(internal::cuda::copy_pieces(reinterpret_cast<std::byte*>(host.data()), pieces, true));
  for (const auto& p : pieces) {
    const auto dev_at = static_cast<std::size_t>(static_cast<std::byte*>(p.device_ptr) -
                                                 static_cast<std::byte*>(dev.get()));
    ASSERT_EQ(std::memcmp(host.data() + p.offset, original.data() + dev_at, p.n), 0)
        << p.n << " bytes to the host";
  }
  // Back the other way, each piece's bytes changed; between them the
  // device keeps its own.
  for (auto& b : host) b = static_cast<std::uint8_t>(b ^ 0xa5);
  ASSERT_OK(internal::cuda::copy_pieces(reinterpret_cast<std::byte*>(host.data()), pieces, false));
  auto expect = original;
  for (const auto& p : pieces) {
    const auto dev_at = static_cast<std::size_t>(static_cast<std::byte*>(p.device_ptr) -
                                                 static_cast<std::byte*>(dev.get()));
    std::memcpy(expect.data() + dev_at, host.data() + p.offset, p.n);
  }
  EXPECT_EQ(dev.download(), expect);
  // Two pieces (below the batch: a copy each), then none.
  const std::vector<internal::cuda::DevicePiece> two(pieces.begin(), pieces.begin() + 2);
  std::vector<std::uint8_t> small(host_end, 0);
  ASSERT_OK(internal::cuda::copy_pieces(reinterpret_cast<std::byte*>(small.data()), two, true));
  EXPECT_EQ(std::memcmp(small.data() + two[1].offset, host.data() + two[1].offset, two[1].n), 0);
  EXPECT_OK(internal::cuda::copy_pieces(reinterpret_cast<std::byte*>(small.data()), {}, true));
}

// What a state dict's checks of its device views remember between views:
// a view is known only when it lies wholly within one allocation found on
// its own device.
TEST(CudaCopies, KnownAllocationsHoldOnlyWhatLiesWithin) {
  internal::cuda::KnownAllocations known;
  EXPECT_FALSE(known.holds(0x1000, 1, 0));
  known.add(0x1000, 0x100, 0);
  known.add(0x4000, 0x10, 1);
  EXPECT_TRUE(known.holds(0x1000, 0x100, 0));  // the whole allocation
  EXPECT_TRUE(known.holds(0x10ff, 1, 0));      // its last byte
  EXPECT_FALSE(known.holds(0x10ff, 2, 0));     // one byte past its end
  EXPECT_FALSE(known.holds(0x1100, 1, 0));     // just after it
  EXPECT_FALSE(known.holds(0x0fff, 1, 0));     // just before it
  EXPECT_FALSE(known.holds(0x1000, 0x10, 1));  // another device
  EXPECT_TRUE(known.holds(0x4008, 8, 1));
  EXPECT_FALSE(known.holds(0x2000, 1, 0));  // between the two
  // A view, by its first byte and the bytes it spans.
  auto* at = reinterpret_cast<void*>(std::uintptr_t{0x1010});
  EXPECT_TRUE(known.holds(TensorView(at, DType::float32, {4}, {}, Device::cuda(0))));
  EXPECT_FALSE(known.holds(TensorView(at, DType::float32, {64}, {}, Device::cuda(0))));
  EXPECT_TRUE(known.holds(TensorView(at, DType::float32, {4, 4}, {1, 4}, Device::cuda(0))));
  EXPECT_FALSE(known.holds(TensorView(at, DType::float32, {4}, {}, Device::cuda(1))));
}

// A store that moved GPU tensors and lent one (direct publishing) closes in
// order: it stops every volume it made, its GPU lending volume too, and
// nothing is lost, so nothing warns (a user reading "volume ... went down"
// at every clean exit would learn to ignore it). Whether the controller
// and the client see the lending volume stop before they stop themselves
// is a race (cuda_bench hit it about one run in six), so five closes.
TEST(CudaClose, ClosingTheStoreWarnsOfNothing) {
  SKIP_WITHOUT_CUDA();
  std::ostringstream seen;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(seen);
  sink->set_level(spdlog::level::warn);
  auto controller = log::get("controller");
  auto client = log::get("client");
  controller->sinks().push_back(sink);
  client->sinks().push_back(sink);
  const auto bytes = random_bytes(4096, 3);
  DeviceBuffer a(bytes.size());
  a.upload(bytes.data());
  StateDict sd;
  ASSERT_OK(sd.insert("a", a.view(DType::uint8, {4096})));
  PublishOptions po;
  po.mode = PublishMode::direct;
  po.put.pack_max_tensor_bytes = 0;  // lend even a small tensor
  for (int round = 0; round < 5; ++round) {
    auto store = Store::embedded(StoreOptions{});
    ASSERT_OK(store);
    auto pub = store->state_dicts().publish("lent", sd, po).get(kWait);
    ASSERT_OK(pub);
    ASSERT_EQ(pub->mode(), PublishMode::direct);
    ASSERT_OK(pub->reclaim().get(kWait));
    store->close();
  }
  controller->sinks().pop_back();
  client->sinks().pop_back();
  EXPECT_EQ(seen.str(), "");
}

// The store under test, with each transport the client may be forced to.
class CudaStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_CUDA();
    StoreOptions o;
    o.transport.name = GetParam();
    auto s = Store::embedded(o);
    if (!s.ok() && s.status().code() == Errc::unsupported) GTEST_SKIP() << s.status().message();
    ASSERT_OK(s);
    store_ = std::make_unique<Store>(std::move(s).value());
  }
  Store& store() { return *store_; }
  std::unique_ptr<Store> store_;
};

TEST_P(CudaStoreTest, DeviceRoundTripsEveryDType) {
  for (DType d : all_dtypes()) {
    const std::string key = "dev/" + std::string(dtype_name(d));
    const Shape shape{37, 29};  // odd sizes: no accidental alignment
    const std::size_t n = 37 * 29 * dtype_size(d);
    const auto bytes = random_bytes(n, static_cast<unsigned>(d) + 1);
    DeviceBuffer src(n), dst(n);
    src.upload(bytes.data());
    ASSERT_OK(store().put(key, src.view(d, shape)).get(kWait)) << key;
    ASSERT_OK(store().get_into(key, dst.view(d, shape)).get(kWait)) << key;
    EXPECT_EQ(dst.download(), bytes) << key;
    // The stored bytes are the device's, as a CPU reader sees them.
    auto host = store().get(key).get(kWait);
    ASSERT_OK(host);
    EXPECT_EQ(std::memcmp(host->data(), bytes.data(), n), 0) << key;
  }
}

TEST_P(CudaStoreTest, DeviceAndHostMix) {
  const auto bytes = random_bytes(4096 * 4, 7);
  // CPU in, GPU out.
  ASSERT_OK(
      store()
          .put("h2d", TensorView(const_cast<std::uint8_t*>(bytes.data()), DType::float32, {4096}))
          .get(kWait));
  DeviceBuffer dst(bytes.size());
  ASSERT_OK(store().get_into("h2d", dst.view(DType::float32, {4096})).get(kWait));
  EXPECT_EQ(dst.download(), bytes);
  // GPU in, CPU out (get_into and get).
  DeviceBuffer src(bytes.size());
  src.upload(bytes.data());
  ASSERT_OK(store().put("d2h", src.view(DType::float32, {4096})).get(kWait));
  std::vector<std::uint8_t> back(bytes.size());
  ASSERT_OK(store().get_into("d2h", TensorView(back.data(), DType::float32, {4096})).get(kWait));
  EXPECT_EQ(back, bytes);
  // A batch with both kinds of destination.
  std::vector<std::uint8_t> cpu_dst(bytes.size());
  DeviceBuffer gpu_dst(bytes.size());
  ASSERT_OK(store()
                .get_into_batch({{"h2d", gpu_dst.view(DType::float32, {4096})},
                                 {"d2h", TensorView(cpu_dst.data(), DType::float32, {4096})}})
                .get(kWait));
  EXPECT_EQ(gpu_dst.download(), bytes);
  EXPECT_EQ(cpu_dst, bytes);
}

TEST_P(CudaStoreTest, NonContiguousDeviceViews) {
  // A 64 x 48 float32 matrix on the device; its transpose is a strided view.
  constexpr std::int64_t R = 64, C = 48;
  std::vector<float> m(R * C);
  std::iota(m.begin(), m.end(), 0.0f);
  DeviceBuffer src(m.size() * 4);
  src.upload(m.data());
  const TensorView t = src.view(DType::float32, {C, R}, {1, C});  // transposed
  ASSERT_FALSE(t.is_contiguous());
  ASSERT_OK(store().put("t", t).get(kWait));
  auto got = store().get("t").get(kWait);
  ASSERT_OK(got);
  ASSERT_EQ(got->shape(), (Shape{C, R}));
  const float* g = got->data_as<float>();
  for (std::int64_t i = 0; i < C; ++i) {
    for (std::int64_t j = 0; j < R; ++j) ASSERT_EQ(g[i * R + j], m[j * C + i]) << i << "," << j;
  }
  // get_into a strided device destination: columns 8..23 of a 64 x 48
  // buffer filled with -1; nothing outside them may change.
  std::vector<float> cols(R * 16);
  for (std::size_t i = 0; i < cols.size(); ++i) cols[i] = static_cast<float>(i) + 0.25f;
  ASSERT_OK(store().put("cols", TensorView::of(cols.data(), {R, 16})).get(kWait));
  std::vector<float> minus(R * C, -1.0f);
  DeviceBuffer dst(minus.size() * 4);
  dst.upload(minus.data());
  auto narrowed = dst.view(DType::float32, {R, C}).narrow(1, 8, 16);
  ASSERT_OK(narrowed);
  ASSERT_OK(store().get_into("cols", *narrowed).get(kWait));
  const auto raw = dst.download();
  std::vector<float> after(R * C);
  std::memcpy(after.data(), raw.data(), raw.size());
  for (std::int64_t i = 0; i < R; ++i) {
    for (std::int64_t j = 0; j < C; ++j) {
      const float want = (j >= 8 && j < 24) ? cols[i * 16 + (j - 8)] : -1.0f;
      ASSERT_EQ(after[i * C + j], want) << i << "," << j;
    }
  }
}

TEST_P(CudaStoreTest, StateDictsWithDeviceTensors) {
  const auto a = random_bytes(1 << 20, 11), b = random_bytes(4096, 12);
  DeviceBuffer da(a.size());
  da.upload(a.data());
  StateDict sd;
  ASSERT_OK(sd.insert("a", da.view(DType::bfloat16, {512, 1024})));  // on the device
  ASSERT_OK(sd.insert("b", TensorView(const_cast<std::uint8_t*>(b.data()), DType::uint8, {4096})));
  ASSERT_OK(sd.insert("step", Value::int64(42)));
  ASSERT_OK(store().state_dicts().put("sd", sd).get(kWait));

  DeviceBuffer ra(a.size()), rb(b.size());
  StateDict into;
  ASSERT_OK(into.insert("a", ra.view(DType::bfloat16, {512, 1024})));
  ASSERT_OK(into.insert("b", rb.view(DType::uint8, {4096})));
  ASSERT_OK(into.insert("step", Value::int64(0)));
  ASSERT_OK(store().state_dicts().get_into("sd", into).get(kWait));
  EXPECT_EQ(ra.download(), a);
  EXPECT_EQ(rb.download(), b);
  EXPECT_EQ(into.find("step")->value->as_int64(), 42);

  // Versions: publish from the device, follow into the device.
  ASSERT_OK(store().state_dicts().publish("w", sd, PublishOptions::by_copy()).get(kWait));
  DeviceBuffer na(a.size()), nb(b.size());
  StateDict next;
  ASSERT_OK(next.insert("a", na.view(DType::bfloat16, {512, 1024})));
  ASSERT_OK(next.insert("b", nb.view(DType::uint8, {4096})));
  ASSERT_OK(next.insert("step", Value::int64(0)));
  auto v = store().state_dicts().get_next_into("w", next, 0, 30s).get(kWait);
  ASSERT_OK(v);
  EXPECT_EQ(*v, 1u);
  EXPECT_EQ(na.download(), a);
  EXPECT_EQ(nb.download(), b);
}

// A state dict of many small device tensors, as a model's norms and
// biases are: packed into one bucket, each tensor crosses to the host and
// back in one batched copy per call (copy_pieces), whatever its size and
// its place in its allocation. Mixed with tensors that are not packed (a
// large one) or not contiguous (a transposed view), and host tensors.
TEST_P(CudaStoreTest, ManySmallDeviceTensorsCrossInOneBatch) {
  constexpr std::size_t kTensors = 300;
  std::vector<std::vector<std::uint8_t>> bytes;
  std::vector<std::size_t> at;  // each tensor's place in one allocation: odd offsets
  std::size_t total = 0;
  for (std::size_t i = 0; i < kTensors; ++i) {
    const std::size_t n = 1 + (i * 7919) % 5000;
    bytes.push_back(random_bytes(n, static_cast<unsigned>(i) + 100));
    at.push_back(total + i % 3);
    total = at.back() + n;
  }
  const auto big = random_bytes(std::size_t{2} << 20, 7);
  std::vector<float> m(64 * 32);
  std::iota(m.begin(), m.end(), 0.0f);
  DeviceBuffer src(total), dbig(big.size()), dm(m.size() * 4);
  std::vector<std::uint8_t> flat(total, 0);
  for (std::size_t i = 0; i < kTensors; ++i)
    std::copy(bytes[i].begin(), bytes[i].end(), flat.begin() + static_cast<std::ptrdiff_t>(at[i]));
  src.upload(flat.data());
  dbig.upload(big.data());
  dm.upload(m.data());
  auto piece = [](const DeviceBuffer& buf, std::size_t off, std::size_t n) {
    return TensorView(static_cast<std::byte*>(buf.get()) + off, DType::uint8,
                      {static_cast<std::int64_t>(n)}, {}, Device::cuda(0));
  };
  StateDict sd;
  for (std::size_t i = 0; i < kTensors; ++i) {
    ASSERT_OK(sd.insert("t" + std::to_string(i), piece(src, at[i], bytes[i].size())));
  }
  ASSERT_OK(sd.insert("big", dbig.view(DType::uint8, {static_cast<std::int64_t>(big.size())})));
  ASSERT_OK(sd.insert("mt", dm.view(DType::float32, {32, 64}, {1, 32})));  // transposed
  const std::uint32_t host_value = 77;
  ASSERT_OK(
      sd.insert("host", TensorView(const_cast<std::uint32_t*>(&host_value), DType::uint32, {1})));
  ASSERT_OK(store().state_dicts().put("many", sd).get(kWait));

  DeviceBuffer dst(total), rbig(big.size()), rm(m.size() * 4);
  std::vector<std::uint8_t> zeros(total, 0);
  dst.upload(zeros.data());
  StateDict into;
  for (std::size_t i = 0; i < kTensors; ++i) {
    ASSERT_OK(into.insert("t" + std::to_string(i), piece(dst, at[i], bytes[i].size())));
  }
  ASSERT_OK(into.insert("big", rbig.view(DType::uint8, {static_cast<std::int64_t>(big.size())})));
  ASSERT_OK(into.insert("mt", rm.view(DType::float32, {32, 64}, {1, 32})));
  std::uint32_t host_back = 0;
  ASSERT_OK(into.insert("host", TensorView(&host_back, DType::uint32, {1})));
  ASSERT_OK(store().state_dicts().get_into("many", into).get(kWait));
  EXPECT_EQ(dst.download(), flat);  // every tensor in its place, the gaps untouched
  EXPECT_EQ(rbig.download(), big);
  EXPECT_EQ(as_floats(rm.download()), m);
  EXPECT_EQ(host_back, host_value);
}

// Bigger than one staging piece (64 MiB) and not a multiple of it: over
// tcp, rpc and cma the bytes go through page-locked host memory in pieces;
// over shm and cuda-ipc in one CUDA copy, through a mapping that is
// page-locked from its second GPU copy on (the overwrite below reuses the
// segment of the first version).
TEST_P(CudaStoreTest, LargeTensorsMoveWholeEveryTime) {
  const std::size_t n = (std::size_t{150} << 20) + 3;
  for (unsigned round = 0; round < 3; ++round) {
    const auto bytes = random_bytes(n, 100 + round);
    DeviceBuffer src(n), dst(n);
    src.upload(bytes.data());
    const Shape shape{static_cast<std::int64_t>(n)};
    ASSERT_OK(store().put("big", src.view(DType::uint8, shape)).get(kWait)) << round;
    ASSERT_OK(store().get_into("big", dst.view(DType::uint8, shape)).get(kWait)) << round;
    EXPECT_TRUE(dst.download() == bytes) << "round " << round;
  }
}

// Boxes are cut out of their shards on the host, then copied to the GPU:
// whole tensors and boxes of them, into device memory, over every transport.
TEST_P(CudaStoreTest, ShardedTensorsReadIntoDeviceMemory) {
  constexpr std::int64_t R = 8, C = 6;
  std::vector<float> m(R * C);
  std::iota(m.begin(), m.end(), 0.0f);
  // Two row shards, the second put from the GPU.
  DeviceBuffer lower(R / 2 * C * 4);
  lower.upload(m.data() + R / 2 * C);
  auto top = TensorSlice::make({R, C}, {0, 0}, {R / 2, C});
  auto bottom = TensorSlice::make({R, C}, {R / 2, 0}, {R / 2, C});
  ASSERT_OK(top);
  ASSERT_OK(bottom);
  ASSERT_OK(
      store().put("m", TensorView::of(m.data(), {R / 2, C}), PutOptions::box(*top)).get(kWait));
  ASSERT_OK(store()
                .put("m", lower.view(DType::float32, {R / 2, C}), PutOptions::box(*bottom))
                .get(kWait));
  DeviceBuffer whole(m.size() * 4);
  ASSERT_OK(store().get_into("m", whole.view(DType::float32, {R, C})).get(kWait));
  auto raw = whole.download();
  std::vector<float> got(m.size());
  std::memcpy(got.data(), raw.data(), raw.size());
  EXPECT_EQ(got, m);
  // A box across both shards: rows 2..5, columns 1..3.
  auto box = TensorSlice::make({R, C}, {2, 1}, {4, 3});
  ASSERT_OK(box);
  DeviceBuffer part(4 * 3 * 4);
  ASSERT_OK(
      store().get_into("m", part.view(DType::float32, {4, 3}), ReadOptions::box(*box)).get(kWait));
  raw = part.download();
  std::vector<float> cut(12);
  std::memcpy(cut.data(), raw.data(), raw.size());
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(cut[r * 3 + c], m[(2 + r) * C + 1 + c]) << r << "," << c;
  }
}

// A state dict wholly on the GPU: large entries go to the client as they
// are, small ones are packed on the host, float32 ones cast to bfloat16 on
// the host; read back whole and as boxes into device memory.
TEST_P(CudaStoreTest, DeviceStateDictEntriesPackedCastAndWhole) {
  const auto big = random_bytes(std::size_t{4} << 20, 21), small = random_bytes(1024, 22);
  std::vector<float> f(1 << 16);
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = 0.25f * static_cast<float>(i % 256);
  DeviceBuffer dbig(big.size()), dsmall(small.size()), df(f.size() * 4);
  dbig.upload(big.data());
  dsmall.upload(small.data());
  df.upload(f.data());
  StateDict sd;
  ASSERT_OK(sd.insert("big", dbig.view(DType::uint8, {1024, 4096})));
  ASSERT_OK(sd.insert("small", dsmall.view(DType::uint8, {1024})));
  ASSERT_OK(sd.insert("f", df.view(DType::float32, {256, 256})));
  StateDictPutOptions cast;
  cast.transfer_dtype = DType::bfloat16;
  ASSERT_OK(store().state_dicts().put("sd", sd, cast).get(kWait));

  DeviceBuffer rbig(big.size()), rsmall(small.size()), rf(f.size() * 2);
  StateDict into;
  ASSERT_OK(into.insert("big", rbig.view(DType::uint8, {1024, 4096})));
  ASSERT_OK(into.insert("small", rsmall.view(DType::uint8, {1024})));
  ASSERT_OK(into.insert("f", rf.view(DType::bfloat16, {256, 256})));
  ASSERT_OK(store().state_dicts().get_into("sd", into).get(kWait));
  EXPECT_TRUE(rbig.download() == big);
  EXPECT_EQ(rsmall.download(), small);
  // 0.25 * k (k < 256: 8 significant bits) is exact in bfloat16: the top half
  // of the float32.
  const auto fb = rf.download();
  for (std::size_t i = 0; i < f.size(); i += 997) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &f[i], 4);
    std::uint16_t top = 0;
    std::memcpy(&top, fb.data() + 2 * i, 2);
    EXPECT_EQ(top, bits >> 16) << i;
  }

  // Boxes: rows 100..109 of the big entry, bytes 10..29 of the packed one.
  auto big_box = TensorSlice::make({1024, 4096}, {100, 0}, {10, 4096});
  auto small_box = TensorSlice::make({1024}, {10}, {20});
  ASSERT_OK(big_box);
  ASSERT_OK(small_box);
  DeviceBuffer bb(10 * 4096), sb(20), fa(f.size() * 2);
  StateDict boxes_into;
  ASSERT_OK(boxes_into.insert("big", bb.view(DType::uint8, {10, 4096})));
  ASSERT_OK(boxes_into.insert("small", sb.view(DType::uint8, {20})));
  ASSERT_OK(boxes_into.insert("f", fa.view(DType::bfloat16, {256, 256})));
  ASSERT_OK(
      store()
          .state_dicts()
          .get_into("sd", boxes_into,
                    StateDictReadOptions::of_boxes({{"big", *big_box}, {"small", *small_box}}))
          .get(kWait));
  const auto bbytes = bb.download();
  EXPECT_TRUE(std::equal(bbytes.begin(), bbytes.end(), big.begin() + 100 * 4096));
  const auto sbytes = sb.download();
  EXPECT_TRUE(std::equal(sbytes.begin(), sbytes.end(), small.begin() + 10));
  EXPECT_EQ(fa.download(), fb);
}

// The other state dict calls take device tensors as well: a sharded put
// from two ranks' device memory (one box replicated on both, so its bytes
// are checksummed), a streamed read, and the latest of two versions, each
// read into device memory.
TEST_P(CudaStoreTest, ShardedStreamedAndLatestStateDictsOnTheDevice) {
  constexpr std::int64_t R = 64, C = 32;
  std::vector<float> m(R * C), rep(16);
  std::iota(m.begin(), m.end(), 0.0f);
  std::iota(rep.begin(), rep.end(), 100.0f);
  DeviceBuffer dm(m.size() * 4), drep(rep.size() * 4);
  dm.upload(m.data());
  drep.upload(rep.data());
  for (std::int64_t rank = 0; rank < 2; ++rank) {
    auto rows = TensorSlice::make({R, C}, {rank * (R / 2), 0}, {R / 2, C});
    auto whole = TensorSlice::make({16}, {0}, {16});
    ASSERT_OK(rows);
    ASSERT_OK(whole);
    StateDict local;
    auto* first_row = static_cast<std::byte*>(dm.get()) + rank * (R / 2) * C * 4;
    ASSERT_OK(
        local.insert("m", TensorView(first_row, DType::float32, {R / 2, C}, {}, Device::cuda(0))));
    ASSERT_OK(local.insert("rep", drep.view(DType::float32, {16})));
    const std::map<std::string, RankShard> layout{{"m", RankShard{*rows, 1}},
                                                  {"rep", RankShard{*whole, 2}}};
    ASSERT_OK(store().state_dicts().put_sharded("sh", local, layout, rank).get(kWait)) << rank;
  }
  DeviceBuffer rm(m.size() * 4), rrep(rep.size() * 4);
  StateDict into;
  ASSERT_OK(into.insert("m", rm.view(DType::float32, {R, C})));
  ASSERT_OK(into.insert("rep", rrep.view(DType::float32, {16})));
  ASSERT_OK(store().state_dicts().get_into("sh", into).get(kWait));
  EXPECT_EQ(as_floats(rm.download()), m);
  EXPECT_EQ(as_floats(rrep.download()), rep);

  // Streamed, then the latest of two published versions.
  StateDict sd;
  ASSERT_OK(sd.insert("m", dm.view(DType::float32, {R, C})));
  ASSERT_OK(sd.insert("rep", drep.view(DType::float32, {16})));
  ASSERT_OK(store().state_dicts().put("st", sd).get(kWait));
  DeviceBuffer sm(m.size() * 4), srep(rep.size() * 4);
  StateDict streamed;
  ASSERT_OK(streamed.insert("m", sm.view(DType::float32, {R, C})));
  ASSERT_OK(streamed.insert("rep", srep.view(DType::float32, {16})));
  ASSERT_OK(store().state_dicts().stream_into("st", streamed, 10s).get(kWait));
  EXPECT_EQ(as_floats(sm.download()), m);
  EXPECT_EQ(as_floats(srep.download()), rep);

  ASSERT_OK(store().state_dicts().publish("lw", sd, PublishOptions::by_copy()).get(kWait));
  std::vector<float> twice(m.size());
  for (std::size_t i = 0; i < m.size(); ++i) twice[i] = 2 * m[i];
  dm.upload(twice.data());
  ASSERT_OK(store().state_dicts().publish("lw", sd, PublishOptions::by_copy()).get(kWait));
  DeviceBuffer lm(m.size() * 4), lrep(rep.size() * 4);
  StateDict latest;
  ASSERT_OK(latest.insert("m", lm.view(DType::float32, {R, C})));
  ASSERT_OK(latest.insert("rep", lrep.view(DType::float32, {16})));
  auto v = store().state_dicts().get_latest_into("lw", latest).get(kWait);
  ASSERT_OK(v);
  EXPECT_EQ(*v, 2u);
  EXPECT_EQ(as_floats(lm.download()), twice);
  EXPECT_EQ(as_floats(lrep.download()), rep);
}

INSTANTIATE_TEST_SUITE_P(Transports, CudaStoreTest,
                         ::testing::Values("", "rpc", "tcp", "shm", "cma", "cuda-ipc"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string name = p.param.empty() ? "chosen" : p.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

class CudaErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_CUDA();
    store_ = std::make_unique<Store>(Store::embedded().value());
  }
  Store& store() { return *store_; }
  std::unique_ptr<Store> store_;
};

TEST_F(CudaErrorsTest, BadDeviceViewsAreRefusedAndNothingIsStored) {
  DeviceBuffer buf(1024);
  // A device that does not exist.
  const int n = cuda::device_count();
  EXPECT_ERROR(store().put("w", buf.view(DType::float32, {256}, {}, n)).get(kWait),
               Errc::invalid_argument, "device cuda:" + std::to_string(n) + " does not exist");
  // Host memory labelled as device memory.
  std::vector<float> host(256);
  EXPECT_ERROR(store()
                   .put("w", TensorView(host.data(), DType::float32, {256}, {}, Device::cuda(0)))
                   .get(kWait),
               Errc::invalid_argument, "is not CUDA device memory");
  // A view far longer than its allocation (4 MiB, viewed as 64 MiB): its
  // last byte lies in no allocation.
  DeviceBuffer four(std::size_t{4} << 20);
  EXPECT_ERROR(store().put("w", four.view(DType::float32, {std::int64_t{16} << 20})).get(kWait),
               Errc::invalid_argument, "runs past the end of its allocation on cuda:0");
  // A view from one allocation into another: its first and last bytes are
  // both device memory on cuda:0, yet the memory between is not one buffer.
  DeviceBuffer other(1024);
  auto* lo = static_cast<std::byte*>(std::min(buf.get(), other.get()));
  auto* hi = static_cast<std::byte*>(std::max(buf.get(), other.get()));
  const auto across = static_cast<std::int64_t>(hi - lo) + 1;
  EXPECT_ERROR(
      store().put("w", TensorView(lo, DType::uint8, {across}, {}, Device::cuda(0))).get(kWait),
      Errc::invalid_argument, "into another allocation");
  // Freed device memory.
  void* stale = buf.get();
  buf.free();
  EXPECT_ERROR(
      store().put("w", TensorView(stale, DType::float32, {256}, {}, Device::cuda(0))).get(kWait),
      Errc::invalid_argument, "is not CUDA device memory");
  EXPECT_ERROR(store()
                   .get_into("w", TensorView(stale, DType::float32, {256}, {}, Device::cuda(0)))
                   .get(kWait),
               Errc::invalid_argument, "get_into 'w'");
  StateDict sd;
  ASSERT_OK(sd.insert("x", TensorView(stale, DType::float32, {256}, {}, Device::cuda(0))));
  EXPECT_ERROR(store().state_dicts().put("sd", sd).get(kWait), Errc::invalid_argument,
               "put_state_dict 'x'");
  // None of it stored anything.
  auto exists = store().exists("w").get(kWait);
  ASSERT_OK(exists);
  EXPECT_FALSE(*exists);
  EXPECT_FALSE(*store().exists("sd").get(kWait));
}

TEST_F(CudaErrorsTest, AFailedReadLeavesTheDeviceDestinationUntouched) {
  std::vector<float> ones(64, 1.0f);
  DeviceBuffer dst(ones.size() * 4);
  dst.upload(ones.data());
  EXPECT_ERROR(store().get_into("ghost", dst.view(DType::float32, {64})).get(kWait),
               Errc::not_found, "'ghost'");
  std::vector<float> wrong(32);
  ASSERT_OK(store().put("short", TensorView::of(wrong.data(), {32})).get(kWait));
  EXPECT_ERROR(store().get_into("short", dst.view(DType::float32, {64})).get(kWait),
               Errc::shape_mismatch, "'short'");
  const auto raw = dst.download();
  std::vector<float> after(64);
  std::memcpy(after.data(), raw.data(), raw.size());
  EXPECT_EQ(after, ones);
}

// Checkpoints straight from and into GPU memory: a state dict of device
// tensors (one strided) saved as safetensors, read back whole, as a box and
// one tensor at a time into device memory; a freed destination is refused
// before anything is written.
TEST(CudaPersistence, DeviceStateDictsSaveAndLoad) {
  SKIP_WITHOUT_CUDA();
  testing::TempDir dir;
  constexpr std::int64_t R = 64, C = 48;
  std::vector<float> m(R * C);
  std::iota(m.begin(), m.end(), 0.0f);
  DeviceBuffer dm(m.size() * 4);
  dm.upload(m.data());
  StateDict sd;
  ASSERT_OK(sd.insert("m", dm.view(DType::float32, {R, C})));
  ASSERT_OK(sd.insert("mt", dm.view(DType::float32, {C, R}, {1, C})));  // the transpose
  ASSERT_OK(sd.insert("step", Value::int64(7)));
  const std::string file = dir.path() + "/gpu.safetensors";
  ASSERT_OK(save_state_dict(sd, file));

  auto ck = safetensors::open_checkpoint(file);
  ASSERT_OK(ck);
  DeviceBuffer rm(m.size() * 4), rmt(m.size() * 4);
  StateDict into;
  ASSERT_OK(into.insert("m", rm.view(DType::float32, {R, C})));
  ASSERT_OK(into.insert("mt", rmt.view(DType::float32, {C, R})));
  ASSERT_OK(into.insert("step", Value::int64(0)));
  ASSERT_OK(read_state_dict_into(*ck, into));
  EXPECT_EQ(as_floats(rm.download()), m);
  const auto mt = as_floats(rmt.download());
  for (std::int64_t r = 0; r < C; ++r) {
    for (std::int64_t c = 0; c < R; ++c) ASSERT_EQ(mt[r * R + c], m[c * C + r]) << r << "," << c;
  }
  EXPECT_EQ(into.find("step")->value->as_int64(), 7);

  // A rank's box, into a strided device view (every other column).
  auto box = TensorSlice::make({R, C}, {8, 0}, {4, C});
  ASSERT_OK(box);
  DeviceBuffer wide(4 * 2 * C * 4);
  ASSERT_OK(read_tensor_into(*ck, "m", wide.view(DType::float32, {4, C}, {2 * C, 2}), &*box));
  const auto w = as_floats(wide.download());
  for (std::int64_t r = 0; r < 4; ++r) {
    for (std::int64_t c = 0; c < C; ++c) ASSERT_EQ(w[r * 2 * C + 2 * c], m[(8 + r) * C + c]);
  }

  // A freed destination: refused, naming it, and nothing else written.
  std::vector<float> ones(m.size(), 1.0f);
  rm.upload(ones.data());
  DeviceBuffer gone(m.size() * 4);
  void* stale = gone.get();
  gone.free();
  StateDict bad;
  ASSERT_OK(bad.insert("m", rm.view(DType::float32, {R, C})));
  ASSERT_OK(bad.insert("mt", TensorView(stale, DType::float32, {C, R}, {}, Device::cuda(0))));
  EXPECT_ERROR(read_state_dict_into(*ck, bad), Errc::invalid_argument, "'mt'");
  EXPECT_EQ(as_floats(rm.download()), ones);
}

// A sharded save of device tensors (one strided): each box is packed from
// the GPU and written into the final file.
TEST(CudaPersistence, ASaveShardedOfDeviceTensorsWritesTheirBytes) {
  SKIP_WITHOUT_CUDA();
  testing::TempDir dir;
  constexpr std::int64_t R = 16, C = 12;
  std::vector<float> m(R * C);
  std::iota(m.begin(), m.end(), 0.0f);
  DeviceBuffer dm(m.size() * 4);
  dm.upload(m.data());
  StateDict local;
  ASSERT_OK(local.insert("m", dm.view(DType::float32, {R, C})));
  ASSERT_OK(local.insert("mt", dm.view(DType::float32, {C, R}, {1, C})));
  const auto one = Placement::make({1}, {DimPlacement::shard(0)}).value();
  ASSERT_OK(save_sharded(dir.path(), local, {{"m", one}, {"mt", one}}, 0, 1));
  auto ck = safetensors::open_checkpoint(dir.path());
  ASSERT_OK(ck);
  const auto* saved = static_cast<const float*>(ck->files[0].view("m")->data());
  EXPECT_EQ(std::vector<float>(saved, saved + m.size()), m);
  const auto* t = static_cast<const float*>(ck->files[0].view("mt")->data());
  for (std::int64_t r = 0; r < C; ++r) {
    for (std::int64_t c = 0; c < R; ++c) ASSERT_EQ(t[r * R + c], m[c * C + r]) << r << "," << c;
  }
}

// Two processes: this one puts from its GPU into the store it hosts; the
// peer (this binary, --peer-get) reads into its own GPU memory.
TEST(CudaTwoProcesses, APeerReadsIntoItsOwnDeviceMemory) {
  SKIP_WITHOUT_CUDA();
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  auto store = Store::embedded(o);
  ASSERT_OK(store);
  constexpr std::int64_t n = (std::int64_t{64} << 20) / 4;  // 64 MiB: several transport pieces
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(i % 4096);
  DeviceBuffer src(v.size() * 4);
  src.upload(v.data());
  ASSERT_OK(store->put("big", src.view(DType::float32, {n})).get(kWait));
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  // The object is host memory (a put over shm stages it): every transport
  // reads it, cuda-ipc straight from the mapping into the peer's GPU.
  for (const std::string transport : {"", "tcp", "cuda-ipc"}) {
    testing::Child peer(
        {self, "--peer-get", store->admin().address(), "big", std::to_string(n), transport});
    ASSERT_TRUE(peer.wait(120s)) << peer.output();
    EXPECT_EQ(peer.exit_code(), 0) << "transport '" << transport << "': " << peer.output();
  }
}

// A whole key read into GPU memory takes the fast path: its bytes come
// straight from the volume's shared memory, one host-to-device copy on the
// caller's thread, no actor (a direct read, counted as one). At any size,
// into host memory too, and again once the mapping is page-locked. A key another client overwrote
// is found stale, never read: the actors read the new bytes into the same memory.
TEST(CudaFastPath, SmallReadsIntoGpuMemoryComeStraightFromTheVolume) {
  SKIP_WITHOUT_CUDA();
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  auto store = Store::embedded(o);
  ASSERT_OK(store);
  for (const std::size_t n : {std::size_t{4}, std::size_t{4096}, std::size_t{1} << 20,
                              std::size_t{8} << 20, std::size_t{24} << 20}) {
    const std::string key = "small/" + std::to_string(n);
    const auto bytes = random_bytes(n, static_cast<unsigned>(n % 1000) + 3);
    const auto len = static_cast<std::int64_t>(n);
    ASSERT_OK(
        store->put(key, TensorView(const_cast<std::uint8_t*>(bytes.data()), DType::uint8, {len}))
            .get(kWait));
    // The ring opens in the background once the client reached its volume.
    ASSERT_TRUE(testing::eventually([&] { return store->admin().fast_path_stats().rings >= 1; }));
    DeviceBuffer dst(n);
    for (int round = 0; round < 3; ++round) {  // the third through a page-locked mapping
      const auto before = store->admin().fast_path_stats();
      ASSERT_OK(store->get_into(key, dst.view(DType::uint8, {len})).get(kWait)) << key;
      EXPECT_EQ(dst.download(), bytes) << key;
      const auto after = store->admin().fast_path_stats();
      EXPECT_EQ(after.direct_reads, before.direct_reads + 1) << key << " round " << round;
      EXPECT_EQ(after.misses, before.misses) << key;
    }
    std::vector<std::uint8_t> host(n);
    const auto before = store->admin().fast_path_stats();
    ASSERT_OK(store->get_into(key, TensorView(host.data(), DType::uint8, {len})).get(kWait));
    EXPECT_EQ(host, bytes) << key;
    EXPECT_EQ(store->admin().fast_path_stats().direct_reads, before.direct_reads + 1)
        << key << " into host memory";
  }
  // Another client overwrites one: this client's cached location is stale.
  StoreOptions co;
  auto other = Store::connect(store->admin().address(), co);
  ASSERT_OK(other);
  const auto newer = random_bytes(4096, 99);
  ASSERT_OK(other
                ->put("small/4096",
                      TensorView(const_cast<std::uint8_t*>(newer.data()), DType::uint8, {4096}))
                .get(kWait));
  DeviceBuffer dst(4096);
  const auto before = store->admin().fast_path_stats();
  ASSERT_OK(store->get_into("small/4096", dst.view(DType::uint8, {4096})).get(kWait));
  EXPECT_EQ(dst.download(), newer);
  EXPECT_EQ(store->admin().fast_path_stats().stale, before.stale + 1);
  other->close();
}

// A put from GPU memory takes the client's channel at every size, as one
// from host memory does: up to a request's room its bytes go inline after
// one device-to-host copy into page-locked memory; larger ones are written
// into an object the volume staged (over shm one CUDA copy through the
// mapping; over tcp pipelined pieces through page-locked memory), then
// committed. Each counts as one put over the channel, and every way of
// reading returns the device's bytes.
class CudaChannelPut : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaChannelPut, PutsFromGpuMemoryOfEverySizeGoOverTheChannel) {
  SKIP_WITHOUT_CUDA();
  StoreOptions o;
  o.transport.name = GetParam();
  auto store = Store::embedded(o);
  ASSERT_OK(store);
  std::uint32_t first = 1;  // a first put finds the volume and makes the channel
  ASSERT_OK(store->put("first", TensorView(&first, DType::uint32, {1})).get(kWait));
  ASSERT_TRUE(testing::eventually([&] { return store->admin().fast_path_stats().rings >= 1; }));
  const std::size_t slot = protocol::limits::kRingReadBytes;
  for (const std::size_t n : {std::size_t{0}, std::size_t{4}, std::size_t{4096}, slot, slot + 4,
                              std::size_t{1} << 20, (std::size_t{4} << 20) + 12}) {
    const std::string key = "dev/" + std::to_string(n);
    const auto bytes = random_bytes(n, static_cast<unsigned>(n % 997) + 11);
    const auto len = static_cast<std::int64_t>(n);
    DeviceBuffer src(std::max<std::size_t>(n, 1)), dst(std::max<std::size_t>(n, 1));
    if (n > 0) src.upload(bytes.data());
    for (int round = 0; round < 2; ++round) {  // the second into what the first staged ahead
      const auto before = store->admin().fast_path_stats();
      ASSERT_OK(store->put(key, src.view(DType::uint8, {len})).get(kWait)) << key;
      const auto after = store->admin().fast_path_stats();
      EXPECT_EQ(after.puts, before.puts + 1) << key << " round " << round;
    }
    auto host = store->get(key).get(kWait);
    ASSERT_OK(host) << key;
    ASSERT_EQ(host->nbytes(), n);
    if (n == 0) continue;
    EXPECT_EQ(std::memcmp(host->data(), bytes.data(), n), 0) << key;
    ASSERT_OK(store->get_into(key, dst.view(DType::uint8, {len})).get(kWait)) << key;
    EXPECT_EQ(dst.download(), bytes) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(Channels, CudaChannelPut, ::testing::Values("shm", "tcp", "cuda-ipc"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Direct publishing of GPU memory (PublishMode::direct asked for): the
// version's object is the publisher's own device buffer, here at an offset
// inside its allocation, as a tensor carved from an allocator's block is.
// Readers on the host open it through cuda-ipc: this process, and a peer
// that opens the allocation's IPC handle and reads at the offset.
TEST(CudaDirectPublish, ADeviceTensorIsLentAndReadThroughCudaIpc) {
  SKIP_WITHOUT_CUDA();
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  auto store = Store::embedded(o);
  ASSERT_OK(store);
  constexpr std::int64_t n = (std::int64_t{8} << 20) / 4;
  std::vector<float> v(static_cast<std::size_t>(2 * n), -1.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(n + i)] = 0.5f * static_cast<float>(i % 4096);
  }
  DeviceBuffer buf(v.size() * 4);
  buf.upload(v.data());
  auto* second = static_cast<std::byte*>(buf.get()) + n * 4;
  StateDict sd;
  ASSERT_OK(sd.insert("w", TensorView(second, DType::float32, {n}, {}, Device::cuda(0))));
  std::vector<float> small(16, 2.0f);
  ASSERT_OK(sd.insert("small", TensorView::of(small.data(), {16})));  // packed: copied

  // The store does not pick it by itself: cuda-ipc reaches only this host.
  auto automatic = store->state_dicts().publish("auto", sd).get(kWait);
  ASSERT_OK(automatic);
  EXPECT_EQ(automatic->mode(), PublishMode::copy);

  PublishOptions po;
  po.mode = PublishMode::direct;
  auto pub = store->state_dicts().publish("gpu", sd, po).get(kWait);
  ASSERT_OK(pub);
  EXPECT_EQ(pub->mode(), PublishMode::direct);
  EXPECT_EQ(pub->lent_bytes(), static_cast<std::uint64_t>(n) * 4);
  auto got = store->get("gpu/v1/w").get(kWait);
  ASSERT_OK(got);
  EXPECT_EQ(0, std::memcmp(got->data(), v.data() + n, static_cast<std::size_t>(n) * 4));
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  testing::Child peer(
      {self, "--peer-get", store->admin().address(), "gpu/v1/w", std::to_string(n), ""});
  ASSERT_TRUE(peer.wait(120s)) << peer.output();
  EXPECT_EQ(peer.exit_code(), 0) << peer.output();

  // The object is the device buffer itself.
  const float marker = -3.0f;
  ASSERT_OK(internal::cuda::copy_bytes(second + 4 * 5, &marker, 4));
  auto again = store->get("gpu/v1/w").get(kWait);
  ASSERT_OK(again);
  EXPECT_EQ(again->data_as<float>()[5], marker);
  ASSERT_OK(pub->reclaim().get(kWait));
  EXPECT_TRUE(pub->returned().ready());

  // A store that forces a host-only transport cannot lend GPU memory.
  StoreOptions forced;
  forced.transport.name = "tcp";
  auto tcp = Store::embedded(forced);
  ASSERT_OK(tcp);
  EXPECT_ERROR(tcp->state_dicts().publish("gpu", sd, po).get(kWait), Errc::unsupported,
               "cannot serve GPU memory");
}

// A revocable loan of GPU memory (revoke_on_timeout): reads in flight when
// reclaim() revokes it, after which the publisher overwrites its buffer at
// once, return the published bytes or find the version gone; never a mix.
TEST(CudaDirectPublish, ARevokedDeviceLoanNeverGivesAReaderTheBytesWrittenAfterIt) {
  SKIP_WITHOUT_CUDA();
  auto store = Store::embedded();
  ASSERT_OK(store);
  constexpr std::int64_t n = (std::int64_t{64} << 20) / 4;
  DeviceBuffer buf(static_cast<std::size_t>(n) * 4);
  std::vector<float> host(static_cast<std::size_t>(n));
  StateDict sd;
  ASSERT_OK(sd.insert("w", buf.view(DType::float32, {n})));
  testing::race_revoke(
      *store, "gpu", sd, "w",
      [&](float x) {
        const std::vector<float> v(static_cast<std::size_t>(n), x);
        buf.upload(v.data());
      },
      host, 4, "device");
}

// Volumes kept out of shared memory (StoreOptions::transport.shared_memory_volumes =
// false) still serve a peer on the host, through the transport it picks
// itself: cuda-ipc moves host objects through the volume's shm, so such
// volumes must not offer it.
TEST(CudaTwoProcesses, VolumesWithoutSharedMemoryServeAPeer) {
  SKIP_WITHOUT_CUDA();
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  o.transport.shared_memory_volumes = false;
  auto store = Store::embedded(o);
  ASSERT_OK(store);
  constexpr std::int64_t n = (std::int64_t{1} << 20) / 4;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(i % 4096);
  }
  ASSERT_OK(store->put("host", TensorView::of(v.data(), {n})).get(kWait));
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  testing::Child peer(
      {self, "--peer-get", store->admin().address(), "host", std::to_string(n), ""});
  ASSERT_TRUE(peer.wait(120s)) << peer.output();
  EXPECT_EQ(peer.exit_code(), 0) << peer.output();
}

// Over cuda-ipc a device put stays in GPU memory of the volume's process;
// a peer on the host reads it with one device-to-device copy through a
// CUDA IPC handle. Transports that only reach host memory refuse it.
TEST(CudaTwoProcesses, CudaIpcKeepsDeviceObjectsOnTheGpu) {
  SKIP_WITHOUT_CUDA();
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  o.transport.name = "cuda-ipc";
  auto store = Store::embedded(o);
  ASSERT_OK(store);
  constexpr std::int64_t n = (std::int64_t{64} << 20) / 4;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(i % 4096);
  }
  DeviceBuffer src(v.size() * 4);
  src.upload(v.data());
  // Twice: the second version is a new allocation with its own IPC handle.
  ASSERT_OK(store->put("gpu", src.view(DType::float32, {n})).get(kWait));
  ASSERT_OK(store->put("gpu", src.view(DType::float32, {n})).get(kWait));
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  {
    testing::Child peer(
        {self, "--peer-get", store->admin().address(), "gpu", std::to_string(n), "cuda-ipc"});
    ASSERT_TRUE(peer.wait(120s)) << peer.output();
    EXPECT_EQ(peer.exit_code(), 0) << peer.output();
  }
  for (const std::string transport : {"tcp", "shm"}) {
    testing::Child peer(
        {self, "--peer-get", store->admin().address(), "gpu", std::to_string(n), transport});
    ASSERT_TRUE(peer.wait(120s)) << peer.output();
    EXPECT_EQ(peer.exit_code(), 3) << transport << ": " << peer.output();
    EXPECT_NE(peer.output().find("lives in GPU memory"), std::string::npos)
        << transport << ": " << peer.output();
  }
  // In the volume's own process cuda-ipc uses the device pointer itself.
  DeviceBuffer back(v.size() * 4);
  ASSERT_OK(store->get_into("gpu", back.view(DType::float32, {n})).get(kWait));
  std::vector<std::uint8_t> expect(v.size() * 4);
  std::memcpy(expect.data(), v.data(), expect.size());
  EXPECT_EQ(back.download(), expect);
  auto host = store->get("gpu").get(kWait);
  ASSERT_OK(host);
  EXPECT_EQ(std::memcmp(host->data(), v.data(), expect.size()), 0);
}

// The emulated devices behave as a GPU does where the store relies on it:
// the CPU cannot touch device memory, copies stay inside one allocation,
// freed memory is no longer device memory, an allocation belongs to one
// device, and host memory is page-locked once at a time.
TEST(CudaEmulation, DeviceMemoryBehavesAsOnAGpu) {
  if (!internal::cuda::emulating()) GTEST_SKIP() << "runs on emulated devices only";
  ASSERT_GE(cuda::device_count(), 2);
  auto one = internal::cuda::device_alloc(1000, 1);
  ASSERT_OK(one);
  auto* p = one->get();
  EXPECT_TRUE(internal::cuda::is_device_pointer(p + 999));
  EXPECT_FALSE(internal::cuda::is_device_pointer(p + 1000));
  EXPECT_ERROR(internal::cuda::check_device_view(
                   TensorView(p, DType::uint8, {1000}, {}, Device::cuda(0)), "view"),
               Errc::invalid_argument, "lies on cuda:1, the view says cuda:0");
  EXPECT_OK(internal::cuda::check_device_view(
      TensorView(p, DType::uint8, {1000}, {}, Device::cuda(1)), "view"));
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(
      {
        volatile std::byte b = p[0];
        (void)b;
      },
      "");
  std::vector<std::uint8_t> host(200);
  EXPECT_ERROR(internal::cuda::copy_bytes(host.data(), p + 900, 200), Errc::internal,
               "200 bytes from offset 900 of a 1000-byte allocation on cuda:1");
  EXPECT_ERROR(internal::cuda::device_alloc(8, 2), Errc::invalid_argument, "cuda:2");
  one->reset();
  EXPECT_FALSE(internal::cuda::is_device_pointer(p));

  std::vector<std::uint8_t> pageable(1 << 16);
  auto pinned = internal::cuda::register_host(pageable.data(), pageable.size());
  ASSERT_OK(pinned);
  EXPECT_ERROR(internal::cuda::register_host(pageable.data() + 4096, 4096), Errc::internal,
               "already mapped");
  pinned->reset();
  EXPECT_OK(internal::cuda::register_host(pageable.data() + 4096, 4096));
}

// Versions of a key put over cuda-ipc reuse the volume's GPU memory (its
// per-device pool): a trainer publishing every step makes no cudaMalloc or
// cudaFree per version. Counted on emulated devices, which count their
// allocations.
TEST(CudaIpc, VersionsReuseTheVolumesDeviceMemory) {
  SKIP_WITHOUT_CUDA();
  if (!internal::cuda::emulating()) GTEST_SKIP() << "counts emulated allocations";
  StoreOptions o;
  o.transport.name = "cuda-ipc";
  auto store = Store::embedded(o);
  ASSERT_OK(store);
  std::vector<float> v(1 << 16);
  DeviceBuffer src(v.size() * 4), back(v.size() * 4);
  const auto before = internal::cuda::emulated_allocations();
  for (int version = 1; version <= 6; ++version) {
    std::fill(v.begin(), v.end(), static_cast<float>(version));
    src.upload(v.data());
    ASSERT_OK(store->put("w", src.view(DType::float32, {std::int64_t{1} << 16})).get(kWait));
    ASSERT_OK(store->get_into("w", back.view(DType::float32, {std::int64_t{1} << 16})).get(kWait));
    const auto got = as_floats(back.download());
    ASSERT_EQ(got.front(), static_cast<float>(version));
    ASSERT_EQ(got.back(), static_cast<float>(version));
  }
  // Two allocations take turns: a version is staged while the previous one
  // is still committed.
  EXPECT_LE(internal::cuda::emulated_allocations() - before, 2u);
}

// A pointer inside a device allocation is found in its allocation: what
// cuda-ipc describes a lent tensor by (the handle names the allocation, the
// peer adds the offset). On a real GPU this is the driver's
// cuMemGetAddressRange, looked up through the runtime.
TEST(CudaIpc, APointerInsideAnAllocationIsFoundInIt) {
  SKIP_WITHOUT_CUDA();
  constexpr std::size_t n = std::size_t{3} << 20;
  DeviceBuffer buf(n);
  const auto base = reinterpret_cast<std::uintptr_t>(buf.get());
  for (const std::size_t at :
       {std::size_t{0}, std::size_t{4}, (std::size_t{1} << 20) + 12, n - 1}) {
    auto a = internal::cuda::allocation_of(reinterpret_cast<const std::byte*>(buf.get()) + at);
    ASSERT_OK(a) << "at " << at;
    EXPECT_EQ(a->first, base) << "at " << at;
    EXPECT_GE(a->second, n) << "at " << at;
  }
  // From a thread that made no CUDA call yet, as a volume actor's may be:
  // the driver's lookup needs the device's context made current there.
  Result<std::pair<std::uintptr_t, std::size_t>> fresh = Status(Errc::internal, "not run");
  std::thread([&] { fresh = internal::cuda::allocation_of(buf.get()); }).join();
  ASSERT_OK(fresh);
  EXPECT_EQ(fresh->first, base);
  std::vector<std::byte> host(64);
  EXPECT_FALSE(internal::cuda::allocation_of(host.data()).ok());
}

int peer_get(const std::string& address, const std::string& key, std::int64_t n,
             const std::string& transport) {
  StoreOptions o;
  o.transport.name = transport;
  o.placement.host_volumes = false;
  auto store = Store::connect(address, o);
  if (!store.ok()) {
    std::fprintf(stderr, "peer: %s\n", store.status().to_string().c_str());
    return 2;
  }
  DeviceBuffer dst(static_cast<std::size_t>(n) * 4);
  if (auto s = store->get_into(key, dst.view(DType::float32, {n})).get(kWait); !s.ok()) {
    std::fprintf(stderr, "peer: %s\n", s.status().to_string().c_str());
    return 3;
  }
  const auto raw = dst.download();
  const float* f = reinterpret_cast<const float*>(raw.data());
  for (std::int64_t i = 0; i < n; ++i) {
    if (f[i] != 0.5f * static_cast<float>(i % 4096)) {
      std::fprintf(stderr, "peer: element %lld is %f\n", static_cast<long long>(i), f[i]);
      return 4;
    }
  }
  store->close();
  return 0;
}

}  // namespace
}  // namespace meshstore

int main(int argc, char** argv) {
  // Before anything asks about CUDA; peers inherit it.
  if (const char* n = std::getenv("MESHSTORE_TEST_EMULATED_CUDA"); n && *n) {
    if (auto s = meshstore::internal::cuda::emulate_devices(std::atoi(n)); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.to_string().c_str());
      return 2;
    }
  }
  if (argc >= 5 && std::string(argv[1]) == "--peer-get") {
    return meshstore::peer_get(argv[2], argv[3], std::atoll(argv[4]), argc >= 6 ? argv[5] : "");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
