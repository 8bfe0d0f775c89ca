#pragma once

// One tcp transport connection's records, in the clear or sealed
// (tcp_cipher.hpp). The protocol sends fixed records (a request header, a
// reply header, a reply's message, a payload chunk) whose lengths both
// sides know from what came before; a sealed record is the ciphertext of
// the same length followed by a kTagBytes tag. Payloads are sealed through
// a small scratch buffer (never in the caller's memory) and opened in
// place where they land.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "meshstore/transports/tcp/internal/tcp_cipher.hpp"

namespace meshstore::transports::tcp {

/// Sends or receives exactly `n` bytes of a socket; false on error or EOF
/// (errno set; 0 for EOF). `more`: more bytes follow at once (MSG_MORE), so
/// the kernel sends them together with the next send's instead of waking
/// the peer for a segment of their own.
bool send_all(int fd, const void* p, std::size_t n, bool more = false);
bool recv_all(int fd, void* p, std::size_t n);

/// Spins (non-blocking peeks, no sleep) until `fd` has a byte to read or
/// `spin` passed: a receive that follows then finds its bytes without
/// putting the thread to sleep, which a 2-vCPU VM makes costly to wake
/// (20-80 us when the other vCPU idles). True when readable.
bool spin_until_readable(int fd, std::chrono::microseconds spin);

/// What a record's transfer came to.
enum class Io {
  ok,
  failed,  ///< the socket failed or closed (errno says why; 0 for EOF)
  forged,  ///< a sealed record's tag did not match
};

/// The records of one connection. Not thread-safe: one thread serves a
/// connection at a time.
class Channel {
 public:
  /// A connection in the clear.
  explicit Channel(int fd) : fd_(fd) {}
  /// A sealed connection: `out` seals what this side sends, `in` opens what
  /// it receives.
  Channel(int fd, RecordCipher out, RecordCipher in);

  int fd() const noexcept { return fd_; }
  bool encrypted() const noexcept { return out_.has_value(); }

  /// Sends `n` bytes as one record; `more`: another record follows at
  /// once (a header before its payload), sent in the same segments.
  Io send(const void* p, std::size_t n, bool more = false);
  /// Receives one record of `n` bytes into `p` (opened in place).
  Io recv(void* p, std::size_t n);
  /// Receives one record of `n` bytes and throws it away (a refused
  /// write's payload); a sealed one is still checked.
  Io drain(std::uint64_t n);

 private:
  Io seal_and_send(const std::byte* p, std::size_t n, bool more);

  int fd_;
  std::optional<RecordCipher> out_, in_;
  std::vector<std::byte> scratch_;
};

}  // namespace meshstore::transports::tcp
