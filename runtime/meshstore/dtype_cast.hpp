#pragma once

// Casts between floating dtypes, for moving tensors in a narrower dtype than
// they are held in (fp32 master weights published as bf16). Rounding is
// round-to-nearest-even, bit-exact with PyTorch's and numpy's conversions;
// NaN stays NaN (quiet), overflow becomes infinity.

#include <cstdint>

#include "meshstore/result.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore {

/// float32 -> bfloat16 bits, round to nearest even.
std::uint16_t float_to_bfloat16(float x) noexcept;
/// float32 -> IEEE float16 bits, round to nearest even (subnormals kept).
std::uint16_t float_to_float16(float x) noexcept;
/// bfloat16 bits -> float32 (exact).
float bfloat16_to_float(std::uint16_t h) noexcept;
/// IEEE float16 bits -> float32 (exact).
float float16_to_float(std::uint16_t h) noexcept;

/// Whether cast_to() converts `from` into `to`: the same dtype, or float32
/// to and from bfloat16 and float16.
bool can_cast(DType from, DType to) noexcept;

/// Writes the elements of `src` (any strides) converted to `to` into the
/// contiguous memory at `dst` (numel x dtype_size(to) bytes).
/// Errc::unsupported for a pair can_cast() refuses, naming both.
Status cast_to(const TensorView& src, DType to, void* dst);

}  // namespace meshstore
