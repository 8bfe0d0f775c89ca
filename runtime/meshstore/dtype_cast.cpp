#include <cstring>
#include <vector>

#include "meshstore/tensor.hpp"

namespace meshstore {

std::uint16_t float_to_bfloat16(float x) noexcept {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // NaN: keep it quiet
  }
  const std::uint32_t bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + bias) >> 16);
}

std::uint16_t float_to_float16(float x) noexcept {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  std::uint32_t mant = bits & 0x7fffffu;
  const int exp = static_cast<int>((bits >> 23) & 0xffu);
  if (exp == 0xff) {  // infinity or NaN (kept quiet)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  }
  const int e = exp - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow
  if (e <= 0) {                                                    // subnormal or zero
    if (e < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    std::uint32_t half = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = sign | (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  // A carry out of the mantissa bumps the exponent: correct, up to infinity.
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<std::uint16_t>(half);
}

float bfloat16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float float16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | ((112u - static_cast<std::uint32_t>(e)) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bool can_cast(DType from, DType to) noexcept {
  if (from == to) return true;
  const bool narrow = to == DType::bfloat16 || to == DType::float16;
  const bool wide_from = from == DType::bfloat16 || from == DType::float16;
  return (from == DType::float32 && narrow) || (wide_from && to == DType::float32);
}

Status cast_to(const TensorView& src, DType to, void* dst) {
  const DType from = src.dtype();
  if (!can_cast(from, to)) {
    return Status(Errc::unsupported, "cannot cast " + std::string(dtype_name(from)) + " to " +
                                         std::string(dtype_name(to)) +
                                         " (casts: float32 <-> bfloat16, float32 <-> float16)");
  }
  if (from == to) {
    pack_to(src, dst);
    return Status();
  }
  // Contiguous elements of the source first (a no-op copy for most).
  const auto n = static_cast<std::size_t>(src.numel());
  std::vector<std::byte> packed;
  const void* p = src.data();
  if (!src.is_contiguous()) {
    packed.resize(src.nbytes());
    pack_to(src, packed.data());
    p = packed.data();
  }
  if (from == DType::float32) {
    const auto* in = static_cast<const float*>(p);
    auto* out = static_cast<std::uint16_t*>(dst);
    if (to == DType::bfloat16) {
      for (std::size_t i = 0; i < n; ++i) out[i] = float_to_bfloat16(in[i]);
    } else {
      for (std::size_t i = 0; i < n; ++i) out[i] = float_to_float16(in[i]);
    }
    return Status();
  }
  const auto* in = static_cast<const std::uint16_t*>(p);
  auto* out = static_cast<float*>(dst);
  if (from == DType::bfloat16) {
    for (std::size_t i = 0; i < n; ++i) out[i] = bfloat16_to_float(in[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = float16_to_float(in[i]);
  }
  return Status();
}

}  // namespace meshstore
