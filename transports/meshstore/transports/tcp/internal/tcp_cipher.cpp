#include "meshstore/transports/tcp/internal/tcp_cipher.hpp"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <climits>
#include <cstring>

namespace meshstore::transports::tcp {
namespace {

constexpr std::size_t kNonceBytes = 12;

Status openssl_error(const char* what) {
  char buf[256] = {};
  const unsigned long e = ERR_get_error();
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return Status(Errc::internal, std::string("tcp encryption: ") + what + " failed" +
                                    (e ? std::string(": ") + buf : ""));
}

Result<std::string> random_bytes(std::size_t n) {
  std::string s(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(s.data()), static_cast<int>(n)) != 1) {
    return openssl_error("drawing random bytes");
  }
  return s;
}

// HKDF-SHA256(key; salt = client_salt || server_salt; info) -> 32 bytes.
Result<std::string> hkdf(const std::string& key, const std::string& salt, const std::string& info) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (!kdf) return openssl_error("fetching HKDF");
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (!ctx) return openssl_error("creating an HKDF context");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_KEY, const_cast<char*>(key.data()), key.size()),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()), salt.size()),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size()),
                         OSSL_PARAM_construct_end()};
  std::string out(kKeyBytes, '\0');
  const int rc =
      EVP_KDF_derive(ctx, reinterpret_cast<unsigned char*>(out.data()), out.size(), params);
  EVP_KDF_CTX_free(ctx);
  if (rc != 1) return openssl_error("deriving a connection key");
  return out;
}

}  // namespace

Result<std::string> random_key() { return random_bytes(kKeyBytes); }
Result<std::string> random_salt() { return random_bytes(kSaltBytes); }

Result<RecordCipher> RecordCipher::derive(const std::string& key, const std::string& client_salt,
                                          const std::string& server_salt, Direction direction,
                                          bool seal) {
  if (key.size() != kKeyBytes || client_salt.size() != kSaltBytes ||
      server_salt.size() != kSaltBytes) {
    return Status(Errc::invalid_argument, "tcp encryption: a key of " + std::to_string(kKeyBytes) +
                                              " bytes and salts of " + std::to_string(kSaltBytes) +
                                              " bytes are needed");
  }
  const std::string info = direction == Direction::to_server ? "meshstore tcp v2 to server"
                                                             : "meshstore tcp v2 to client";
  auto derived = hkdf(key, client_salt + server_salt, info);
  if (!derived.ok()) return derived.status();
  RecordCipher c;
  c.ctx_.reset(EVP_CIPHER_CTX_new());
  if (!c.ctx_) return openssl_error("creating a cipher context");
  const auto* k = reinterpret_cast<const unsigned char*>(derived->data());
  const int rc = seal ? EVP_EncryptInit_ex(c.ctx_.get(), EVP_aes_256_gcm(), nullptr, k, nullptr)
                      : EVP_DecryptInit_ex(c.ctx_.get(), EVP_aes_256_gcm(), nullptr, k, nullptr);
  if (rc != 1) return openssl_error("setting the AES-256-GCM key");
  c.direction_ = direction;
  c.seal_ = seal;
  return c;
}

Status RecordCipher::begin() {
  if (counter_ == UINT64_MAX) {
    return Status(Errc::protocol_error, "tcp encryption: the connection used up its nonces");
  }
  unsigned char nonce[kNonceBytes];
  const auto dir = static_cast<std::uint32_t>(direction_);
  const std::uint64_t n = counter_++;
  std::memcpy(nonce, &dir, 4);
  std::memcpy(nonce + 4, &n, 8);
  const int rc = seal_ ? EVP_EncryptInit_ex(ctx_.get(), nullptr, nullptr, nullptr, nonce)
                       : EVP_DecryptInit_ex(ctx_.get(), nullptr, nullptr, nullptr, nonce);
  return rc == 1 ? Status() : openssl_error("starting a record");
}

Status RecordCipher::update(const std::byte* in, std::byte* out, std::size_t n) {
  // EVP takes int lengths: feed at most 1 GiB at a time.
  constexpr std::size_t kStep = std::size_t{1} << 30;
  while (n > 0) {
    const int step = static_cast<int>(std::min(n, kStep));
    int written = 0;
    auto* o = reinterpret_cast<unsigned char*>(out);
    const auto* i = reinterpret_cast<const unsigned char*>(in);
    const int rc = seal_ ? EVP_EncryptUpdate(ctx_.get(), o, &written, i, step)
                         : EVP_DecryptUpdate(ctx_.get(), o, &written, i, step);
    if (rc != 1 || written != step) return openssl_error("encrypting or decrypting");
    in += step;
    out += step;
    n -= static_cast<std::size_t>(step);
  }
  return Status();
}

Status RecordCipher::seal_tag(std::uint8_t tag[kTagBytes]) {
  int written = 0;
  unsigned char rest[16];
  if (EVP_EncryptFinal_ex(ctx_.get(), rest, &written) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, tag) != 1) {
    return openssl_error("sealing a record");
  }
  return Status();
}

Status RecordCipher::open_tag(const std::uint8_t tag[kTagBytes]) {
  if (EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes,
                          const_cast<std::uint8_t*>(tag)) != 1) {
    return openssl_error("setting a record's tag");
  }
  int written = 0;
  unsigned char rest[16];
  if (EVP_DecryptFinal_ex(ctx_.get(), rest, &written) != 1) {
    ERR_clear_error();
    return Status(Errc::unauthenticated,
                  "tcp encryption: a record failed authentication (its AES-GCM tag does not "
                  "match: the bytes were altered on the way, or sealed under another key)");
  }
  return Status();
}

}  // namespace meshstore::transports::tcp
