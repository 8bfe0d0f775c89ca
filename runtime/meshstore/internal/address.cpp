#include "meshstore/internal/address.hpp"

#include <cstdlib>

namespace meshstore::internal {

Result<Address> parse_address(const std::string& text) {
  const auto colon = text.rfind(':');
  auto bad = [&](const std::string& why) {
    return Status(Errc::invalid_argument,
                  "address '" + text + "' " + why + " (expected HOST:PORT)");
  };
  if (colon == std::string::npos) return bad("has no port");
  if (colon == 0) return bad("has no host");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const long v = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || v < 0 || v > 65535) return bad("has no valid port");
  return Address{host, static_cast<std::uint16_t>(v)};
}

}  // namespace meshstore::internal
