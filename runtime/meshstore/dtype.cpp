#include <array>
#include <string>

#include "meshstore/tensor.hpp"

namespace meshstore {
namespace {

struct DTypeInfo {
  DType dtype;
  std::size_t size;
  std::string_view name;
  std::string_view safetensors;
};

constexpr std::array<DTypeInfo, 15> kInfo = {{
    {DType::boolean, 1, "bool", "BOOL"},
    {DType::uint8, 1, "uint8", "U8"},
    {DType::int8, 1, "int8", "I8"},
    {DType::int16, 2, "int16", "I16"},
    {DType::int32, 4, "int32", "I32"},
    {DType::int64, 8, "int64", "I64"},
    {DType::uint16, 2, "uint16", "U16"},
    {DType::uint32, 4, "uint32", "U32"},
    {DType::uint64, 8, "uint64", "U64"},
    {DType::float16, 2, "float16", "F16"},
    {DType::bfloat16, 2, "bfloat16", "BF16"},
    {DType::float32, 4, "float32", "F32"},
    {DType::float64, 8, "float64", "F64"},
    {DType::float8_e4m3fn, 1, "float8_e4m3fn", "F8_E4M3"},
    {DType::float8_e5m2, 1, "float8_e5m2", "F8_E5M2"},
}};

const DTypeInfo* info(DType d) noexcept {
  auto i = static_cast<std::size_t>(d);
  return i < kInfo.size() ? &kInfo[i] : nullptr;
}

}  // namespace

const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> all = [] {
    std::vector<DType> v;
    for (const auto& i : kInfo) v.push_back(i.dtype);
    return v;
  }();
  return all;
}

std::size_t dtype_size(DType d) noexcept {
  const auto* i = info(d);
  return i ? i->size : 0;
}

std::string_view dtype_name(DType d) noexcept {
  const auto* i = info(d);
  return i ? i->name : "invalid_dtype";
}

std::string_view dtype_safetensors_name(DType d) noexcept {
  const auto* i = info(d);
  return i ? i->safetensors : "INVALID";
}

Result<DType> parse_dtype(std::string_view text) {
  for (const auto& i : kInfo) {
    if (text == i.name || text == i.safetensors) return i.dtype;
  }
  return Status(Errc::invalid_argument,
                "unknown dtype '" + std::string(text) +
                    "' (expected a name such as 'bfloat16' or a safetensors name such as 'BF16')");
}

bool is_valid_dtype(std::uint32_t value) noexcept { return value < kInfo.size(); }

}  // namespace meshstore
