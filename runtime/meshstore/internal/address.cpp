#include "meshstore/internal/address.hpp"

#include <arpa/inet.h>

#include <cstdlib>

#include "meshstore/logging.hpp"

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
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return bad("has an unclosed or empty '['");
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const long v = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || v < 0 || v > 65535) return bad("has no valid port");
  return Address{host, static_cast<std::uint16_t>(v)};
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "ip6-localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

bool warn_if_exposed(const std::string& host, std::uint16_t port, const std::string& what,
                     bool tls) {
  if (is_loopback_host(host)) return false;
  if (tls) {
    log::get("network")->info("{} listens on {}:{} with mutual TLS", what,
                              host.empty() ? std::string("*") : host, port);
    return false;
  }
  log::get("network")->warn(
      "{} listens on {}:{}, which is not loopback, without authentication or encryption: "
      "anyone who reaches that port can read, overwrite and remove every key (and, for an "
      "agent, start processes). Listen on 127.0.0.1 unless other hosts must connect, and then "
      "only on a trusted network, or give it TLS options (docs/security.md)",
      what, host.empty() ? std::string("*") : host, port);
  return true;
}

}  // namespace meshstore::internal
