#pragma once

// Encryption of the tcp transport's bytes (TransportConfig::tcp_encrypt):
// AES-256-GCM records with OpenSSL's EVP interface. A volume that encrypts
// draws a 32-byte key and hands it to clients in its endpoint (an actor
// message: over TLS when the store runs TLS). Each connection derives its
// own pair of keys from it with HKDF-SHA256 over a salt from each side, so
// no (key, nonce) pair ever repeats across connections and a recorded
// connection cannot be replayed to a volume. Every record (a request
// header, a reply, a payload chunk) is sealed with a fresh nonce: the
// direction and a per-direction counter.

#include <openssl/evp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "meshstore/status.hpp"

namespace meshstore::transports::tcp {

/// Bytes of a volume's key, of each side's connection salt, of a record's tag.
constexpr std::size_t kKeyBytes = 32;
constexpr std::size_t kSaltBytes = 16;
constexpr std::size_t kTagBytes = 16;

/// A fresh random key (kKeyBytes) from OpenSSL's generator.
Result<std::string> random_key();
/// kSaltBytes random bytes.
Result<std::string> random_salt();

/// One direction of one encrypted connection: seals (or opens) records in
/// order, each under the nonce (direction, counter). A record may be fed in
/// pieces (update), so a large payload is sealed through a small scratch
/// buffer or opened in place where it landed. Not thread-safe: one per
/// connection direction, used by the thread serving that connection.
class RecordCipher {
 public:
  /// Direction of a connection: client to server, or server to client.
  enum class Direction : std::uint32_t { to_server = 1, to_client = 2 };

  /// The cipher for `direction`, keyed by HKDF-SHA256 of `key` with the
  /// two salts; `seal` = true encrypts, false decrypts.
  static Result<RecordCipher> derive(const std::string& key, const std::string& client_salt,
                                     const std::string& server_salt, Direction direction,
                                     bool seal);

  RecordCipher(RecordCipher&&) noexcept = default;
  RecordCipher& operator=(RecordCipher&&) noexcept = default;

  /// Starts the next record (the counter advances; it never wraps: a
  /// connection that would reuse a nonce fails instead).
  Status begin();
  /// Encrypts or decrypts `n` bytes of the record; `out` may equal `in`.
  Status update(const std::byte* in, std::byte* out, std::size_t n);
  /// Sealing: ends the record and writes its tag.
  Status seal_tag(std::uint8_t tag[kTagBytes]);
  /// Opening: ends the record; Errc::unauthenticated when `tag` does not
  /// match (the bytes were altered, or sealed under another key).
  Status open_tag(const std::uint8_t tag[kTagBytes]);

 private:
  struct CtxFree {
    void operator()(EVP_CIPHER_CTX* c) const noexcept { EVP_CIPHER_CTX_free(c); }
  };
  RecordCipher() = default;

  std::unique_ptr<EVP_CIPHER_CTX, CtxFree> ctx_;
  Direction direction_ = Direction::to_server;
  bool seal_ = true;
  std::uint64_t counter_ = 0;
};

}  // namespace meshstore::transports::tcp
