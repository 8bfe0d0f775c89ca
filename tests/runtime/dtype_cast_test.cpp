#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "meshstore/tensor.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Independent oracles: the nearest representable value computed in double,
// ties to the even encoding.
std::uint16_t bf16_oracle(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint16_t lo = static_cast<std::uint16_t>((bits >> 16) & 0x7fffu);  // toward zero
  const double ax = std::fabs(static_cast<double>(x));
  const double vlo = std::fabs(static_cast<double>(bfloat16_to_float(lo)));
  const double vhi = lo == 0x7f7f ? std::ldexp(1.0, 128) : std::fabs(bfloat16_to_float(lo + 1));
  const double dlo = ax - vlo, dhi = vhi - ax;
  const bool up = dhi < dlo || (dhi == dlo && (lo & 1u));
  return static_cast<std::uint16_t>(sign | (up ? lo + 1 : lo));
}

std::uint16_t f16_oracle(float x) {
  static const std::vector<double> finite = [] {
    std::vector<double> v;
    for (std::uint32_t h = 0; h < 0x7c00u; ++h)
      v.push_back(float16_to_float(static_cast<std::uint16_t>(h)));
    return v;
  }();
  const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double ax = std::fabs(static_cast<double>(x));
  if (ax >= 65520.0) return sign | 0x7c00u;  // at or past max + half an ulp
  auto it = std::lower_bound(finite.begin(), finite.end(), ax);
  if (it == finite.end()) return sign | 0x7bffu;  // above max, below the halfway point
  auto hi = static_cast<std::uint16_t>(it - finite.begin());
  if (*it == ax) return sign | hi;
  const auto lo = static_cast<std::uint16_t>(hi - 1);
  const double dlo = ax - finite[lo], dhi = finite[hi] - ax;
  const bool up = dhi < dlo || (dhi == dlo && (lo & 1u));
  return sign | (up ? hi : lo);
}

TEST(DTypeCast, Float32ToBFloat16IsRoundToNearestEven) {
  std::mt19937 gen(7);
  for (int i = 0; i < 300000; ++i) {
    const float x = from_bits(gen());
    if (std::isnan(x)) continue;
    ASSERT_EQ(float_to_bfloat16(x), bf16_oracle(x)) << std::hexfloat << x;
  }
  // Ties: exactly halfway between two bf16 values go to the even one.
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f808000u)), 0x3f80u);  // 1.00390625 -> 1.0
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f818000u)), 0x3f82u);  // odd neighbour rounds up
  EXPECT_EQ(float_to_bfloat16(from_bits(0x7f7fffffu)), 0x7f80u);  // max float -> inf
  EXPECT_EQ(float_to_bfloat16(-0.0f), 0x8000u);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {  // every bf16 survives the round trip
    const float f = bfloat16_to_float(static_cast<std::uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bfloat16(f), h);
    }
  }
}

TEST(DTypeCast, Float32ToFloat16IsRoundToNearestEvenWithSubnormals) {
  std::mt19937 gen(11);
  for (int i = 0; i < 300000; ++i) {
    // Mostly exponents where float16 lives, some everywhere.
    std::uint32_t b = gen();
    if (i % 4 != 0) b = (b & 0x807fffffu) | ((96u + (gen() % 48u)) << 23);
    const float x = from_bits(b);
    if (std::isnan(x)) continue;
    ASSERT_EQ(float_to_float16(x), f16_oracle(x)) << std::hexfloat << x;
  }
  EXPECT_EQ(float_to_float16(65504.0f), 0x7bffu);               // max
  EXPECT_EQ(float_to_float16(65520.0f), 0x7c00u);               // halfway past max -> inf
  EXPECT_EQ(float_to_float16(std::ldexp(1.0f, -24)), 0x0001u);  // smallest subnormal
  EXPECT_EQ(float_to_float16(std::ldexp(1.0f, -25)), 0x0000u);  // halfway to it: even (0)
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = float16_to_float(static_cast<std::uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_float16(f), h);
    }
  }
}

TEST(DTypeCast, CastToHandlesStridesAndRefusesOtherPairs) {
  std::vector<float> a = {1.0f, 2.5f, -3.0f, 1e-3f, 65504.0f, 7.0f};
  auto t = TensorView::of(a.data(), {2, 3}).transpose(0, 1).value();  // 3 x 2, strided
  std::vector<std::uint16_t> out(6);
  ASSERT_OK(cast_to(t, DType::bfloat16, out.data()));
  EXPECT_EQ(out[0], float_to_bfloat16(1.0f));
  EXPECT_EQ(out[1], float_to_bfloat16(1e-3f));  // [0][1] of the transpose = a[3]
  std::vector<float> back(6);
  ASSERT_OK(cast_to(TensorView(out.data(), DType::bfloat16, {6}), DType::float32, back.data()));
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_ERROR(cast_to(t, DType::int32, out.data()), Errc::unsupported,
               "cannot cast float32 to int32");
  EXPECT_TRUE(can_cast(DType::float16, DType::float32));
  EXPECT_FALSE(can_cast(DType::float64, DType::bfloat16));
}

}  // namespace
}  // namespace meshstore
