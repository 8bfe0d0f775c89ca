#pragma once

#include <cstdint>
#include <string>

#include "meshstore/result.hpp"

namespace meshstore::internal {

/// A host and a port, as "HOST:PORT" or "[V6]:PORT" write them.
struct Address {
  std::string host;  ///< without the brackets of an IPv6 literal
  std::uint16_t port = 0;
};

/// Parses "HOST:PORT" or "[V6]:PORT" (port 0 allowed: listen on a free
/// one). Errc::invalid_argument naming the text and what is wrong.
Result<Address> parse_address(const std::string& text);

}  // namespace meshstore::internal
