#pragma once

#include <cstdint>
#include <string_view>

namespace meshstore {

/// What a byte object's bytes are, stored with it so that a reader in
/// another language gives back what was put (Python: bytes, str, or the
/// unpickled object). C++ readers see the same bytes whatever the format.
/// The values are stable: they travel in the wire schema.
enum class ObjectFormat : std::uint8_t {
  bytes = 0,   ///< opaque bytes
  utf8 = 1,    ///< text, UTF-8 encoded
  pickle = 2,  ///< a Python pickle (meshstore's Python package writes these)
};

/// "bytes", "utf8" or "pickle".
constexpr std::string_view object_format_name(ObjectFormat f) noexcept {
  switch (f) {
    case ObjectFormat::bytes:
      return "bytes";
    case ObjectFormat::utf8:
      return "utf8";
    case ObjectFormat::pickle:
      return "pickle";
  }
  return "unknown";
}

}  // namespace meshstore
