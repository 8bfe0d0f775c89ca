// Reading in another dtype (ReadOptions::cast): a bfloat16 or float16 key
// read straight into a float32 destination, and a float32 key into a
// bfloat16 one, converted as the bytes are copied. Checked bit for bit
// against conversions written here independently of the store's (IEEE
// decoding, and round-to-nearest-even on the bits), over every byte path:
// the shared-memory mapping, the tcp and rpc transports (through a bounded
// scratch buffer, so a large tensor crosses several of its pieces), and
// small tensors that travel inline.

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "meshstore/store.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

using testing::kWait;

// float32 -> bfloat16 bits: round to nearest, ties to even; NaN stays a
// quiet NaN.
std::uint16_t reference_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);
  const std::uint32_t bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + bias) >> 16);
}

float reference_from_bf16(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// IEEE half -> float32, by its fields.
float reference_from_f16(std::uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float v;
  if (exponent == 0) {
    v = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    v = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
  }
  return sign ? -v : v;
}

bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, 4) == 0;
}

// Floats that exercise the rounding: ties, values just off ties, signed
// zeros, subnormals, infinities, NaN, the largest finite, and random ones.
std::vector<float> hard_floats(std::size_t n) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.5f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min()};
  for (std::uint32_t bits : {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f817fffu, 0x7f7f8000u}) {
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);  // ties (to even, both ways), just above and below one, overflow to inf
  }
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::uint32_t> any;
  while (v.size() < n) {
    std::uint32_t bits = any(gen);
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  return v;
}

class CastRead : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    StoreOptions o;
    o.transport.name = GetParam();
    store_ = std::make_unique<Store>(Store::embedded(o).value());
  }
  void TearDown() override { store_.reset(); }
  std::unique_ptr<Store> store_;
};

// 3 M elements: 6 MiB of bf16, more than one 4 MiB scratch piece; and 100
// elements, which travel inline.
TEST_P(CastRead, Bfloat16IntoFloat32IsExact) {
  for (std::size_t n : {std::size_t{100}, std::size_t{3} << 20}) {
    const auto values = hard_floats(n);
    std::vector<std::uint16_t> stored(n);
    for (std::size_t i = 0; i < n; ++i) stored[i] = reference_bf16(values[i]);
    const auto len = static_cast<std::int64_t>(n);
    ASSERT_OK(store_->put("w", TensorView(stored.data(), DType::bfloat16, {len})).get(kWait));
    std::vector<float> into(n, -7.0f);
    ASSERT_OK(store_->get_into("w", TensorView::of(into.data(), {len}), ReadOptions::converting())
                  .get(kWait));
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(same_bits(into[i], reference_from_bf16(stored[i]))) << n << " element " << i;
    }
  }
}

TEST_P(CastRead, Float32IntoBfloat16RoundsToNearestEven) {
  const std::size_t n = std::size_t{3} << 20;
  auto values = hard_floats(n);
  const auto len = static_cast<std::int64_t>(n);
  ASSERT_OK(store_->put("w", TensorView::of(values.data(), {len})).get(kWait));
  std::vector<std::uint16_t> into(n, 0xdead);
  ASSERT_OK(store_
                ->get_into("w", TensorView(into.data(), DType::bfloat16, {len}),
                           ReadOptions::converting())
                .get(kWait));
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isnan(values[i])) {
      ASSERT_TRUE(std::isnan(reference_from_bf16(into[i]))) << i;
    } else {
      ASSERT_EQ(into[i], reference_bf16(values[i])) << "element " << i << " = " << values[i];
    }
  }
}

TEST_P(CastRead, Float16IntoFloat32IsExact) {
  std::vector<std::uint16_t> stored(1 << 16);
  for (std::size_t i = 0; i < stored.size(); ++i) stored[i] = static_cast<std::uint16_t>(i);
  const auto len = static_cast<std::int64_t>(stored.size());
  ASSERT_OK(store_->put("h", TensorView(stored.data(), DType::float16, {len})).get(kWait));
  std::vector<float> into(stored.size());
  ASSERT_OK(store_->get_into("h", TensorView::of(into.data(), {len}), ReadOptions::converting())
                .get(kWait));
  for (std::size_t i = 0; i < stored.size(); ++i) {
    ASSERT_TRUE(same_bits(into[i], reference_from_f16(stored[i]))) << "bits " << i;
  }
}

// A bf16 state dict (fp32 master weights published with transfer_dtype)
// read into fp32 buffers: a tensor stored alone (3 M elements), one packed
// with the small ones, a strided destination, and a value.
TEST_P(CastRead, ABfloat16StateDictReadsIntoFloat32Buffers) {
  const std::size_t n = std::size_t{3} << 20;
  auto big = hard_floats(n);
  auto small = hard_floats(300);
  std::vector<float> strided_src = hard_floats(64 * 64);
  StateDict sd;
  ASSERT_OK(sd.insert("big", TensorView::of(big.data(), {static_cast<std::int64_t>(n)})));
  ASSERT_OK(sd.insert("small", TensorView::of(small.data(), {300})));
  ASSERT_OK(sd.insert("square", TensorView::of(strided_src.data(), {64, 64})));
  ASSERT_OK(sd.insert("step", Value::int64(5)));
  StateDictPutOptions po;
  po.transfer_dtype = DType::bfloat16;
  ASSERT_OK(store_->state_dicts().publish("w", sd, PublishOptions::by_copy(1, po)).get(kWait));

  std::vector<float> big_in(n, -7.0f), small_in(300, -7.0f), square_in(2 * 64 * 64, -7.0f);
  StateDict dst;
  ASSERT_OK(dst.insert("big", TensorView::of(big_in.data(), {static_cast<std::int64_t>(n)})));
  ASSERT_OK(dst.insert("small", TensorView::of(small_in.data(), {300})));
  // Every other float of a wider buffer: a strided destination.
  ASSERT_OK(dst.insert("square", TensorView(square_in.data(), DType::float32, {64, 64}, {128, 2})));
  ASSERT_OK(dst.insert("step", Value::int64(0)));
  EXPECT_ERROR(store_->state_dicts().get_latest_into("w", dst).get(kWait), Errc::dtype_mismatch,
               "ReadOptions::cast converts");
  EXPECT_EQ(big_in[0], -7.0f);  // untouched
  auto v = store_->state_dicts()
               .get_latest_into("w", dst, StateDictReadOptions::converting())
               .get(kWait);
  ASSERT_OK(v);
  EXPECT_EQ(*v, 1u);
  auto expect = [](float f) { return reference_from_bf16(reference_bf16(f)); };
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(same_bits(big_in[i], expect(big[i]))) << "big " << i;
  }
  for (std::size_t i = 0; i < 300; ++i) {
    ASSERT_TRUE(same_bits(small_in[i], expect(small[i]))) << "small " << i;
  }
  for (std::size_t i = 0; i < 64 * 64; ++i) {
    ASSERT_TRUE(same_bits(square_in[2 * i], expect(strided_src[i]))) << "square " << i;
    ASSERT_EQ(square_in[2 * i + 1], -7.0f) << "square gap " << i;
  }
  EXPECT_EQ(dst.find("step")->value->as_int64(), 5);

  // The worker loop: a reader waiting for the next version, which needs a
  // conversion, reads it once committed.
  std::fill(big_in.begin(), big_in.end(), -7.0f);
  auto next =
      store_->state_dicts().get_next_into("w", dst, 1, kWait, StateDictReadOptions::converting());
  for (auto& f : big) f = -f;
  ASSERT_OK(store_->state_dicts().publish("w", sd, PublishOptions::by_copy(1, po)).get(kWait));
  auto v2 = next.get(kWait);
  ASSERT_OK(v2);
  EXPECT_EQ(*v2, 2u);
  for (std::size_t i = 0; i < n; i += 997) {
    ASSERT_TRUE(same_bits(big_in[i], expect(big[i]))) << "next big " << i;
  }
  // And the plain get.
  std::fill(small_in.begin(), small_in.end(), 0.0f);
  ASSERT_OK(
      store_->state_dicts().get_into("w/v2", dst, StateDictReadOptions::converting()).get(kWait));
  for (std::size_t i = 0; i < 300; ++i) {
    ASSERT_TRUE(same_bits(small_in[i], expect(small[i]))) << "get small " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, CastRead, ::testing::Values("shm", "tcp", "rpc"),
                         [](const auto& info) { return info.param; });

TEST(CastReadRefusals, WithoutCastADtypeDifferenceIsAMismatchThatSaysSo) {
  auto store = Store::embedded({});
  ASSERT_OK(store);
  std::vector<std::uint16_t> stored(64, 0x3f80);
  ASSERT_OK(store->put("w", TensorView(stored.data(), DType::bfloat16, {64})).get(kWait));
  std::vector<float> into(64, -1.0f);
  EXPECT_ERROR(store->get_into("w", TensorView::of(into.data(), {64})).get(kWait),
               Errc::dtype_mismatch, "ReadOptions::cast converts");
  EXPECT_EQ(into[0], -1.0f);  // untouched
  // Only float pairs convert.
  std::vector<std::int32_t> ints(64);
  EXPECT_ERROR(
      store->get_into("w", TensorView::of(ints.data(), {64}), ReadOptions::converting()).get(kWait),
      Errc::dtype_mismatch, "destination int32");
  // A strided destination gets the converted elements in place.
  std::vector<float> wide(128, -1.0f);
  ASSERT_OK(store
                ->get_into("w", TensorView(wide.data(), DType::float32, {64}, {2}),
                           ReadOptions::converting())
                .get(kWait));
  for (std::size_t i = 0; i < 128; ++i) EXPECT_EQ(wide[i], i % 2 ? -1.0f : 1.0f) << i;
}

TEST(CastReadRefusals, ABoxOrAShardedKeyIsNotCastYet) {
  auto store = Store::embedded({});
  ASSERT_OK(store);
  std::vector<std::uint16_t> stored(64, 0x3f80);
  ASSERT_OK(store->put("w", TensorView(stored.data(), DType::bfloat16, {8, 8})).get(kWait));
  std::vector<float> row(8);
  auto box = TensorSlice::make({8, 8}, {0, 0}, {1, 8}).value();
  EXPECT_ERROR(
      store->get_into("w", TensorView::of(row.data(), {1, 8}), ReadOptions::box(box)).get(kWait),
      Errc::dtype_mismatch, "destination float32");
  // Put in two row shards.
  for (std::int64_t first : {0, 4}) {
    auto half = TensorSlice::make({8, 8}, {first, 0}, {4, 8}).value();
    ASSERT_OK(
        store->put("s", TensorView(stored.data(), DType::bfloat16, {4, 8}), PutOptions::box(half))
            .get(kWait));
  }
  std::vector<float> whole(64);
  EXPECT_ERROR(store->get_into("s", TensorView::of(whole.data(), {8, 8}), ReadOptions::converting())
                   .get(kWait),
               Errc::unsupported, "a cast read takes a whole key stored whole");
}

}  // namespace
}  // namespace meshstore
