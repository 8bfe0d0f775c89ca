#include "meshstore/tls.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "meshstore/status.hpp"

namespace meshstore {

namespace {

constexpr const char* kCertEnv = "MESHSTORE_TLS_CERT";
constexpr const char* kKeyEnv = "MESHSTORE_TLS_KEY";
constexpr const char* kCaEnv = "MESHSTORE_TLS_CA";

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// OpenSSL's last error, as text, and the queue cleared.
std::string openssl_error() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? std::string("no detail from OpenSSL") : out;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct ChainFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};

Status bad(const std::string& what) { return Status(Errc::invalid_argument, "TLS: " + what); }

// Opens `path` for reading, or says why not ("TLS certificate '/x': No such file").
Result<std::unique_ptr<BIO, BioFree>> open_pem(const std::string& role, const std::string& path) {
  std::FILE* probe = std::fopen(path.c_str(), "rb");
  if (probe == nullptr) {
    return bad(role + " '" + path + "' cannot be read: " + std::strerror(errno));
  }
  std::fclose(probe);
  std::unique_ptr<BIO, BioFree> bio(BIO_new_file(path.c_str(), "rb"));
  if (!bio) return bad(role + " '" + path + "' cannot be opened: " + openssl_error());
  return bio;
}

}  // namespace

TlsOptions TlsOptions::from_env() {
  TlsOptions t;
  t.certificate = env_or_empty(kCertEnv);
  t.key = env_or_empty(kKeyEnv);
  t.ca_file = env_or_empty(kCaEnv);
  return t;
}

std::vector<std::pair<std::string, std::string>> TlsOptions::env() const {
  if (!enabled()) return {};
  return {{kCertEnv, certificate}, {kKeyEnv, key}, {kCaEnv, ca_file}};
}

Status check_tls(const TlsOptions& tls) {
  if (!tls.enabled()) return Status();
  std::string missing;
  for (const auto& [name, value] :
       {std::pair<const char*, const std::string*>{"certificate", &tls.certificate},
        {"key", &tls.key},
        {"ca_file", &tls.ca_file}}) {
    if (value->empty()) missing += missing.empty() ? name : std::string(", ") + name;
  }
  if (!missing.empty()) {
    return bad("certificate, key and ca_file must all be set to use TLS; missing: " + missing +
               " (MESHSTORE_TLS_CERT, MESHSTORE_TLS_KEY, MESHSTORE_TLS_CA)");
  }
  ERR_clear_error();

  auto cert_bio = open_pem("certificate", tls.certificate);
  if (!cert_bio.ok()) return cert_bio.status();
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(cert_bio->get(), nullptr, nullptr, nullptr));
  if (!cert) {
    return bad("certificate '" + tls.certificate +
               "' holds no PEM certificate: " + openssl_error());
  }
  // Any further certificates in the file are the chain up to the CA.
  std::unique_ptr<STACK_OF(X509), ChainFree> chain(sk_X509_new_null());
  while (X509* more = PEM_read_bio_X509(cert_bio->get(), nullptr, nullptr, nullptr)) {
    sk_X509_push(chain.get(), more);
  }
  ERR_clear_error();  // the end of the file reads as an error

  auto key_bio = open_pem("key", tls.key);
  if (!key_bio.ok()) return key_bio.status();
  // A passphrase callback that gives none: an encrypted key is refused here
  // rather than prompting on a terminal from inside the network layer.
  auto no_passphrase = [](char*, int, int, void*) -> int { return -1; };
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(key_bio->get(), nullptr, no_passphrase, nullptr));
  if (!key) {
    return bad("key '" + tls.key + "' holds no unencrypted PEM private key: " + openssl_error());
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return bad("key '" + tls.key + "' does not belong to certificate '" + tls.certificate + "'");
  }

  auto ca_bio = open_pem("ca_file", tls.ca_file);
  if (!ca_bio.ok()) return ca_bio.status();
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  if (!store || X509_STORE_load_file(store.get(), tls.ca_file.c_str()) != 1) {
    return bad("ca_file '" + tls.ca_file + "' holds no PEM CA certificate: " + openssl_error());
  }
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), chain.get()) != 1) {
    return Status(Errc::internal,
                  "TLS: cannot set up certificate verification: " + openssl_error());
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return bad("certificate '" + tls.certificate + "' does not verify under ca_file '" +
               tls.ca_file + "': " + X509_verify_cert_error_string(err) +
               " (peers would refuse it)");
  }
  return Status();
}

}  // namespace meshstore
