#include "meshstore/transports/tcp/internal/tcp_channel.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace meshstore::transports::tcp {
namespace {

// Sealed payloads go out through this much scratch at a time: small enough
// to stay in cache between the cipher and the socket.
constexpr std::size_t kScratchBytes = std::size_t{256} << 10;

}  // namespace

bool send_all(int fd, const void* p, std::size_t n, bool more) {
  const auto* c = static_cast<const char*>(p);
  const int flags = MSG_NOSIGNAL | (more ? MSG_MORE : 0);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, flags);
    if (k < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, c, n, MSG_WAITALL);
    if (k < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (k == 0) {
      errno = 0;
      return false;
    }
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool spin_until_readable(int fd, std::chrono::microseconds spin) {
  const auto until = std::chrono::steady_clock::now() + spin;
  char c;
  do {
    const ssize_t k = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k >= 0) return true;  // a byte, or the peer closed: a receive will not sleep
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

Channel::Channel(int fd, RecordCipher out, RecordCipher in)
    : fd_(fd), out_(std::move(out)), in_(std::move(in)) {}

Io Channel::send(const void* p, std::size_t n, bool more) {
  if (!out_) return send_all(fd_, p, n, more) ? Io::ok : Io::failed;
  return seal_and_send(static_cast<const std::byte*>(p), n, more);
}

Io Channel::seal_and_send(const std::byte* p, std::size_t n, bool more) {
  // A cipher failure is not a socket's: report it as a failed send with no
  // errno, which ends the connection like a close.
  if (!out_->begin().ok()) return errno = 0, Io::failed;
  if (scratch_.empty()) scratch_.resize(std::min(kScratchBytes, std::max<std::size_t>(n, 64)));
  while (n > 0) {
    if (scratch_.size() < std::min(n, kScratchBytes)) scratch_.resize(std::min(n, kScratchBytes));
    const std::size_t k = std::min(n, scratch_.size());
    if (!out_->update(p, scratch_.data(), k).ok()) return errno = 0, Io::failed;
    if (!send_all(fd_, scratch_.data(), k, true)) return Io::failed;  // its tag follows
    p += k;
    n -= k;
  }
  std::uint8_t tag[kTagBytes];
  if (!out_->seal_tag(tag).ok()) return errno = 0, Io::failed;
  return send_all(fd_, tag, sizeof(tag), more) ? Io::ok : Io::failed;
}

Io Channel::recv(void* p, std::size_t n) {
  if (!in_) return recv_all(fd_, p, n) ? Io::ok : Io::failed;
  // Opened piece by piece as it lands, while the piece is still in cache.
  if (!in_->begin().ok()) return errno = 0, Io::failed;
  auto* b = static_cast<std::byte*>(p);
  while (n > 0) {
    const std::size_t k = std::min(n, kScratchBytes);
    if (!recv_all(fd_, b, k)) return Io::failed;
    if (!in_->update(b, b, k).ok()) return errno = 0, Io::failed;
    b += k;
    n -= k;
  }
  std::uint8_t tag[kTagBytes];
  if (!recv_all(fd_, tag, sizeof(tag))) return Io::failed;
  return in_->open_tag(tag).ok() ? Io::ok : Io::forged;
}

Io Channel::drain(std::uint64_t n) {
  if (scratch_.size() < kScratchBytes) scratch_.resize(kScratchBytes);
  if (in_ && !in_->begin().ok()) return errno = 0, Io::failed;
  while (n > 0) {
    const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, scratch_.size()));
    if (!recv_all(fd_, scratch_.data(), k)) return Io::failed;
    if (in_ && !in_->update(scratch_.data(), scratch_.data(), k).ok()) {
      return errno = 0, Io::failed;
    }
    n -= k;
  }
  if (!in_) return Io::ok;
  std::uint8_t tag[kTagBytes];
  if (!recv_all(fd_, tag, sizeof(tag))) return Io::failed;
  return in_->open_tag(tag).ok() ? Io::ok : Io::forged;
}

}  // namespace meshstore::transports::tcp
