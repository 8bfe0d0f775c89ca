#pragma once
// The tcp transport's wire: the hello, the request and reply headers, and
// the socket options both ends set. Shared by its server (tcp_server.cpp)
// and its client (tcp_transport.cpp); docs/transports.md, "tcp", describes
// the protocol. Private to the transport.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "meshstore/status.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::transports::tcp {

inline constexpr char kMagic[4] = {'M', 'S', 'T', 'C'};
inline constexpr std::uint32_t kVersion = 1;           // in the clear
inline constexpr std::uint32_t kVersionEncrypted = 2;  // sealed records
inline constexpr std::size_t kSecretBytes = 32;
inline constexpr std::size_t kHelloBytes = sizeof(kMagic) + 4 + kSecretBytes;

// The server's answer to a hello.
enum Verdict : std::uint8_t {
  kAccepted = 0,
  kRefused = 1,             // not a hello, or the wrong secret
  kEncryptionRequired = 2,  // a hello in the clear to a server that encrypts
  kNotEncrypting = 3,       // an encrypted hello to a server that does not
};
inline constexpr std::uint32_t kOpWrite = 1;
inline constexpr std::uint32_t kOpRead = 2;
inline constexpr std::uint32_t kOpSmall = 3;  // a small operation (SmallOps)
inline constexpr std::uint32_t kMaxMessage = 4096;

struct RequestHeader {
  std::uint32_t op;
  std::uint32_t reserved;
  std::uint64_t region;
  std::uint64_t offset;
  std::uint64_t length;
};
static_assert(sizeof(RequestHeader) == 32, "wire layout");

struct ReplyHeader {
  std::uint32_t code;
  std::uint32_t message_length;
};
static_assert(sizeof(ReplyHeader) == 8, "wire layout");

inline std::string errno_text(int e) { return std::strerror(e); }

inline void set_timeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

inline void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Probes an idle connection, so a server thread waiting on a client whose
// host vanished (no FIN, no RST) gives up after about a minute.
inline void set_keepalive(int fd) {
  int one = 1, idle = 30, interval = 5, count = 6;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

inline std::string random_secret() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string s(kSecretBytes, '0');
  for (auto& c : s) c = hex[rd() & 15u];
  return s;
}

inline bool same_secret(const char* a, const std::string& b) {
  unsigned diff = 0;
  for (std::size_t i = 0; i < kSecretBytes; ++i) diff |= static_cast<unsigned>(a[i] ^ b[i]);
  return diff == 0;
}

/// Starts a tcp server for `ctx` (tcp_server.cpp): listening on
/// ctx.bind_host, on a port of the kernel's choosing.
Result<std::unique_ptr<TransportServer>> start_server(const ServerContext& ctx);

}  // namespace meshstore::transports::tcp
