#include "meshstore/internal/address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "meshstore/logging.hpp"

namespace meshstore::internal {

std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return "127.0.0.1";
  std::string out = "127.0.0.1";
  const int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char buf[INET6_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&local), len, buf, sizeof(buf), nullptr, 0,
                    NI_NUMERICHOST) == 0) {
      out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

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

bool warn_if_exposed(const std::string& host, std::uint16_t port, const std::string& what, bool tls,
                     const char* risk) {
  if (is_loopback_host(host)) return false;
  if (tls) {
    log::get("network")->info("{} listens on {}:{} with mutual TLS", what,
                              host.empty() ? std::string("*") : host, port);
    return false;
  }
  log::get("network")->warn(
      "{} listens on {}:{}, which is not loopback, without authentication or encryption: "
      "anyone who reaches that port can {}. Listen on 127.0.0.1 unless other hosts must "
      "connect, and then only on a trusted network, or give it TLS options (docs/security.md)",
      what, host.empty() ? std::string("*") : host, port, risk);
  return true;
}

}  // namespace meshstore::internal
