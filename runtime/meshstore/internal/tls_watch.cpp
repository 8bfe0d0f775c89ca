#include "meshstore/internal/tls_watch.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>

#include "meshstore/logging.hpp"

namespace meshstore::internal {

namespace {

std::atomic<int> g_watching{0};

struct Failure {
  std::uint64_t seq = 0;
  std::uint16_t peer_port = 0;
  std::string reason;
};

struct Failures {
  std::mutex mu;  // guards all below
  std::uint64_t next_seq = 1;
  std::deque<Failure> recent;  // the last kKeep
};
constexpr std::size_t kKeep = 64;

Failures& failures() {
  static auto* f = new Failures();  // never destroyed: CAF's threads may outlive statics
  return *f;
}

// "10.0.0.5:41234" for a socket's peer (or its own end), "" when unknown.
std::string endpoint(int fd, bool peer, std::uint16_t* port_out) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) return std::string();
  char host[INET6_ADDRSTRLEN] = {0};
  std::uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  } else {
    return std::string();
  }
  if (port_out != nullptr) *port_out = port;
  return ss.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + std::to_string(port)
                                  : std::string(host) + ":" + std::to_string(port);
}

// What the watch keeps with each SSL object (OpenSSL's ex_data, freed with
// it): the peer's address, taken while the socket is surely connected (a
// refused peer may have closed it by the time the failure is noted), and
// whether the failure was reported already (CAF calls SSL_accept again on
// the next event and gets the same failure).
struct SessionNote {
  std::string peer;
  std::uint16_t peer_port = 0;
  bool reported = false;
};

int note_index() {
  static const int index = SSL_get_ex_new_index(
      0, nullptr, nullptr, nullptr, [](void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
        delete static_cast<SessionNote*>(ptr);
      });
  return index;
}

// The note of `ssl`, made (with the peer's address) on first sight.
SessionNote* session_note(SSL* ssl) {
  auto* n = static_cast<SessionNote*>(SSL_get_ex_data(ssl, note_index()));
  if (n != nullptr) return n;
  n = new SessionNote();
  n->peer = endpoint(SSL_get_fd(ssl), true, &n->peer_port);
  if (SSL_set_ex_data(ssl, note_index(), n) != 1) {
    delete n;
    return nullptr;
  }
  return n;
}

bool contains(const char* text, const char* part) {
  return text != nullptr && std::strstr(text, part) != nullptr;
}

// Whether a failed call only saw the peer close the connection: a plain
// EOF, or OpenSSL 3's "unexpected eof while reading" (a close without
// close_notify, which is how CAF ends a connection).
bool peer_closed(int ssl_error) {
  if (ssl_error == SSL_ERROR_SYSCALL) return true;
  return ssl_error == SSL_ERROR_SSL &&
         contains(ERR_reason_error_string(ERR_peek_last_error()), "unexpected eof");
}

// What a fatal result of an OpenSSL call on `ssl` means, in the words an
// operator needs. Reads OpenSSL's error queue without consuming it: CAF
// calls SSL_get_error afterwards and must see the same queue.
std::string describe(SSL* ssl, int ssl_error) {
  if (peer_closed(ssl_error)) {
    return "the peer closed the connection during the TLS handshake (a peer that does not "
           "speak TLS, that refused our certificate, or a port probe)";
  }
  return describe_handshake_failure(ssl, ERR_reason_error_string(ERR_peek_last_error()));
}

}  // namespace

std::string describe_handshake_failure(SSL* ssl, const char* reason) {
  const std::string detail = reason != nullptr ? reason : "no detail from OpenSSL";
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK || contains(reason, "certificate verify failed")) {
    std::string subject;
    if (STACK_OF(X509)* chain = SSL_get_peer_cert_chain(ssl); chain && sk_X509_num(chain) > 0) {
      char buf[256] = {0};
      X509_NAME_oneline(X509_get_subject_name(sk_X509_value(chain, 0)), buf, sizeof(buf));
      subject = std::string(" (subject ") + buf + ")";
    }
    return "its certificate" + subject +
           " does not verify under our CA file: " + X509_verify_cert_error_string(verify);
  }
  if (contains(reason, "peer did not return a certificate") ||
      (contains(reason, "certificate required") && SSL_is_server(ssl))) {
    return "it presented no certificate (" + detail + ")";
  }
  if (contains(reason, "alert")) {
    return "it refused our certificate or our TLS settings (" + detail +
           "): is ours signed by the CA it trusts?";
  }
  if (contains(reason, "wrong version number") || contains(reason, "packet length too long") ||
      contains(reason, "http request") || contains(reason, "unknown protocol") ||
      contains(reason, "record layer failure")) {
    return "it does not speak TLS (" + detail + "): is it started without TLS options?";
  }
  return "the TLS handshake failed: " + detail;
}

namespace {

// Records, and on the accepting side logs, a failed OpenSSL call.
void note(SSL* ssl, int rc, bool handshake, const char* call) {
  if (g_watching.load(std::memory_order_relaxed) == 0) return;
  const int e = SSL_get_error(ssl, rc);
  if (e != SSL_ERROR_SSL && e != SSL_ERROR_SYSCALL) return;
  // A read that sees the peer go is a close, not a refusal.
  if (!handshake && peer_closed(e)) return;
  SessionNote* session = session_note(ssl);
  if (session != nullptr) {
    if (session->reported) return;
    session->reported = true;
  }
  const int fd = SSL_get_fd(ssl);
  // Not a connection of CAF's (those have a socket): one over memory
  // buffers, such as the HTTP server's (store/http.cpp), reports its own.
  if (fd < 0) return;
  std::uint16_t peer_port = session != nullptr ? session->peer_port : 0;
  std::string peer = session != nullptr ? session->peer : std::string();
  if (peer.empty()) peer = endpoint(fd, true, &peer_port);
  const std::string reason = describe(ssl, e);
  if (SSL_is_server(ssl)) {
    auto log = log::get("tls");
    if (!handshake) {
      log->warn("a TLS connection from {} failed: {}", peer, reason);
      return;
    }
    std::uint16_t local_port = 0;
    endpoint(fd, false, &local_port);
    if (peer_closed(e)) {
      log->info("a connection from {} to port {} ended during the TLS handshake", peer, local_port);
    } else {
      count_tls_refusal();
      log->warn("refused a connection from {} to port {}: {}", peer.empty() ? "?" : peer,
                local_port, reason);
    }
    return;
  }
  log::get("tls")->debug("{} to {} failed: {}", call, peer, reason);
  auto& f = failures();
  std::lock_guard<std::mutex> lock(f.mu);
  f.recent.push_back(Failure{f.next_seq++, peer_port, reason});
  if (f.recent.size() > kKeep) f.recent.pop_front();
}

// Notes the peer's address of a handshake while its socket is connected.
void first_sight(SSL* ssl) {
  if (g_watching.load(std::memory_order_relaxed) == 0) return;
  session_note(ssl);
}

template <class Fn>
Fn real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

std::atomic<std::uint64_t> g_refusals{0};  // tls_refusals()

}  // namespace

void count_tls_refusal() { g_refusals.fetch_add(1, std::memory_order_relaxed); }
std::uint64_t tls_refusals() { return g_refusals.load(std::memory_order_relaxed); }

void tls_watch_begin() { g_watching.fetch_add(1); }
void tls_watch_end() { g_watching.fetch_sub(1); }

std::uint64_t tls_failure_mark() {
  auto& f = failures();
  std::lock_guard<std::mutex> lock(f.mu);
  return f.next_seq;
}

std::string tls_failure_since(std::uint64_t mark, std::uint16_t port) {
  auto& f = failures();
  std::lock_guard<std::mutex> lock(f.mu);
  for (auto it = f.recent.rbegin(); it != f.recent.rend() && it->seq >= mark; ++it) {
    if (it->peer_port == port) return it->reason;
  }
  return std::string();
}

std::string handshake_failure(const std::string& what, const std::string& address, bool tls,
                              std::string reason) {
  if (reason.empty()) {
    reason = tls ? "the peer closed the connection during the TLS handshake: it does not speak "
                   "TLS, or it refused our certificate"
                 : "the peer closed the connection during the handshake: it requires TLS, "
                   "which this process was not given (TlsOptions, or MESHSTORE_TLS_CERT, "
                   "MESHSTORE_TLS_KEY, MESHSTORE_TLS_CA), or it is not a meshstore endpoint";
  }
  return "the " + what + " at " + address + " refused the connection: " + reason;
}

}  // namespace meshstore::internal

// The wrappers. CAF's OpenSSL module calls these three by name, so this
// process's definitions are the ones it reaches; each forwards to
// OpenSSL's own and only looks at a failure.
extern "C" {

int SSL_connect(SSL* ssl) {
  static const auto next = meshstore::internal::real<int (*)(SSL*)>("SSL_connect");
  meshstore::internal::first_sight(ssl);
  const int rc = next(ssl);
  if (rc <= 0) meshstore::internal::note(ssl, rc, true, "SSL_connect");
  return rc;
}

int SSL_accept(SSL* ssl) {
  static const auto next = meshstore::internal::real<int (*)(SSL*)>("SSL_accept");
  meshstore::internal::first_sight(ssl);
  const int rc = next(ssl);
  if (rc <= 0) meshstore::internal::note(ssl, rc, true, "SSL_accept");
  return rc;
}

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto next = meshstore::internal::real<int (*)(SSL*, void*, int)>("SSL_read");
  const int rc = next(ssl, buf, num);
  // CAF reads through SSL_read only once its own SSL_connect/SSL_accept
  // succeeded; in TLS 1.3 a server's refusal of our certificate arrives here.
  if (rc <= 0) meshstore::internal::note(ssl, rc, false, "SSL_read");
  return rc;
}

}  // extern "C"
