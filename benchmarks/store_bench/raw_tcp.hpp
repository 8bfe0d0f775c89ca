#pragma once
// The raw-TCP baseline: the same bytes between the same two processes over
// a bare loopback stream, served by the peer process and timed by the
// client.
#include <cstddef>
#include <cstdint>

namespace meshstore::bench {

/// Listens on a free loopback port, which it writes to `port`; returns the
/// listening socket. Exits the program if it cannot.
int raw_listen(std::uint16_t& port);

/// The peer's side: serves the connections of `lfd` until accept fails.
/// Per connection, requests {u64 bytes, u64 mode}: mode 0 = take the bytes
/// then answer one byte, mode 1 = send the bytes. One warm buffer.
void raw_serve(int lfd);

/// The client's side: a raw stream to the peer's raw_serve on `port`, timed
/// one way at a time. Not thread-safe; owns its socket.
class RawTcp {
 public:
  explicit RawTcp(std::uint16_t port);
  ~RawTcp();
  RawTcp(const RawTcp&) = delete;
  RawTcp& operator=(const RawTcp&) = delete;
  /// Seconds to send `n` bytes and hear they all arrived.
  double send(const void* p, std::size_t n);
  /// Seconds to ask for and receive `n` bytes.
  double recv(void* p, std::size_t n);

 private:
  [[noreturn]] static void fail(const char* what);
  int fd_;
};

}  // namespace meshstore::bench
