// libFuzzer target for the safetensors header parser: any bytes must give
// either a clear error or a header whose tensors lie inside the input, never
// a crash or an out-of-bounds read. Built with clang when it is present
// (fuzz/CMakeLists.txt); ctest runs it for a short while (fuzz label).

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "meshstore/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view image(reinterpret_cast<const char*>(data), size);
  auto header = meshstore::safetensors::parse_file_image(image, "fuzz");
  if (!header.ok()) {
    if (header.status().message().empty()) std::abort();  // every error says what is wrong
    return 0;
  }
  // What a valid header promises: the tensors tile the data exactly.
  std::uint64_t at = 0;
  for (const auto& t : header->tensors) {
    if (t.begin != at || t.end < t.begin) std::abort();
    at = t.end;
  }
  if (header->data_start + at != size) std::abort();
  return 0;
}
