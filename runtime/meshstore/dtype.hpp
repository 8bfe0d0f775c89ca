#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "meshstore/result.hpp"

namespace meshstore {

/// Element types. Values are stable (they travel in the wire schema).
/// float8_e4m3fn and float8_e5m2 are opaque 1-byte types: stored and moved,
/// never interpreted.
enum class DType : std::uint8_t {
  boolean = 0,
  uint8 = 1,
  int8 = 2,
  int16 = 3,
  int32 = 4,
  int64 = 5,
  uint16 = 6,
  uint32 = 7,
  uint64 = 8,
  float16 = 9,
  bfloat16 = 10,
  float32 = 11,
  float64 = 12,
  float8_e4m3fn = 13,
  float8_e5m2 = 14,
};

/// Every dtype, in enum order.
const std::vector<DType>& all_dtypes();

/// Bytes per element.
std::size_t dtype_size(DType d) noexcept;

/// The meshstore (and PyTorch) name, for example "bfloat16".
std::string_view dtype_name(DType d) noexcept;

/// The safetensors name, for example "BF16", "F8_E4M3".
std::string_view dtype_safetensors_name(DType d) noexcept;

/// Parses a meshstore name ("bfloat16") or a safetensors name ("BF16").
/// Fails with Errc::invalid_argument naming the text.
Result<DType> parse_dtype(std::string_view text);

/// True when `value` is a defined DType enumerator (for values read off a wire).
bool is_valid_dtype(std::uint32_t value) noexcept;

}  // namespace meshstore
