#pragma once

#include <cstdint>
#include <string>

#include "meshstore/status.hpp"

namespace meshstore::internal {

/// A host and a port, as "HOST:PORT" or "[V6]:PORT" write them.
struct Address {
  std::string host;  ///< without the brackets of an IPv6 literal
  std::uint16_t port = 0;
};

/// Parses "HOST:PORT" or "[V6]:PORT" (port 0 allowed: listen on a free
/// one); the port is what follows the last ':', so "::1:80" reads as host
/// "::1" too. Errc::invalid_argument naming the text and what is wrong (no
/// port, no host, a bad port, an unclosed '[').
Result<Address> parse_address(const std::string& text);

/// The address of this host's interface that reaches `host`, found by
/// routing a connected UDP socket there (no packet is sent): what a peer
/// that reaches `host` can most likely reach this process on. "127.0.0.1"
/// when it cannot be found.
std::string local_address_towards(const std::string& host);

/// True for a host only this machine reaches: "localhost", 127.0.0.0/8
/// and ::1 (an empty host means every interface: false).
bool is_loopback_host(const std::string& host);

/// What anyone who reaches a control-plane port without TLS can do.
inline constexpr const char* kControlPlaneRisk =
    "read, overwrite and remove every key (and, for an agent, start processes)";

/// Logs a warning (component "network") when `what` listens on `host`,
/// port `port`, that host is not loopback and `tls` is off: there is then
/// no authentication, so whoever reaches the port can do `risk` ("anyone
/// who reaches that port can RISK"). Nothing for a loopback host; an info
/// line with TLS. Answers whether it warned.
bool warn_if_exposed(const std::string& host, std::uint16_t port, const std::string& what, bool tls,
                     const char* risk = kControlPlaneRisk);

}  // namespace meshstore::internal
