#pragma once

// One tcp transport connection's records, in the clear or sealed
// (tcp_cipher.hpp). The protocol sends fixed records (a request header, a
// reply header, a reply's message, a payload chunk) whose lengths both
// sides know from what came before; a sealed record is the ciphertext of
// the same length followed by a kTagBytes tag. Payloads are sealed through
// a small scratch buffer (never in the caller's memory) and opened in
// place where they land.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "meshstore/transports/tcp/internal/tcp_cipher.hpp"

namespace meshstore::transports::tcp {

/// Sends or receives exactly `n` bytes of a socket; false on error or EOF
/// (errno set; 0 for EOF).
bool send_all(int fd, const void* p, std::size_t n);
bool recv_all(int fd, void* p, std::size_t n);

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

  /// Sends `n` bytes as one record.
  Io send(const void* p, std::size_t n);
  /// Receives one record of `n` bytes into `p` (opened in place).
  Io recv(void* p, std::size_t n);
  /// Receives one record of `n` bytes and throws it away (a refused
  /// write's payload); a sealed one is still checked.
  Io drain(std::uint64_t n);

 private:
  Io seal_and_send(const std::byte* p, std::size_t n);

  int fd_;
  std::optional<RecordCipher> out_, in_;
  std::vector<std::byte> scratch_;
};

}  // namespace meshstore::transports::tcp
