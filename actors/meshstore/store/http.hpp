#pragma once

// The HTTP a store process speaks to its operators (docs/operations.md):
// a small server for /metrics, /healthz and /readyz, and the GET that
// `meshstore top` and the tests scrape with. Both on Boost.Beast (Debian's
// libboost-dev), over TLS with the store's certificates when they are
// given. (Debian 12's civetweb cannot serve TLS: it looks up OpenSSL 1.1's
// SSL_get_peer_certificate in OpenSSL 3 and calls a null pointer on the
// first connection; civetweb issue #1334.)

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "meshstore/status.hpp"
#include "meshstore/tls.hpp"

namespace meshstore::store {

/// One request as a handler sees it.
struct HttpAsk {
  std::string path;        ///< the target without its query
  bool certified = false;  ///< the client showed a certificate the CA signed (TLS only)
};

/// A handler's answer: always a complete body, then the connection closes.
struct HttpAnswer {
  int status = 200;
  std::string body;
  std::string type = "text/plain; charset=utf-8";
};

/// Answers requests on any of the server's threads.
using HttpHandler = std::function<HttpAnswer(const HttpAsk&)>;

/// A running server: GETs go to the handler, other methods get 405. Stops at once when destroyed,
/// waiting for the answers in flight.
class HttpServer {
 public:
  /// Listens on `address` ("HOST:PORT", port 0 picks a free one), with
  /// `threads` threads answering. With `tls` enabled it speaks only TLS,
  /// presenting tls.certificate, and asks each client for a certificate
  /// tls.ca_file signed (optional: a handler sees whether it came).
  /// Errc::invalid_argument for a bad address or TLS files,
  /// Errc::unavailable when it cannot listen ("cannot serve WHAT on ADDR:
  /// why", `what` naming what it serves).
  static Result<std::unique_ptr<HttpServer>> start(const std::string& what,
                                                   const std::string& address,
                                                   const TlsOptions& tls, HttpHandler handler,
                                                   int threads = 2);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Where it listens, as "HOST:PORT" with the port it got.
  const std::string& address() const { return address_; }
  /// The port it got.
  std::uint16_t port() const { return port_; }
  /// "https" over TLS, else "http".
  const char* scheme() const { return tls_ ? "https" : "http"; }

 private:
  struct Net;
  HttpServer() = default;

  std::unique_ptr<Net> net_;
  std::string address_;
  std::uint16_t port_ = 0;
  bool tls_ = false;
};

/// One HTTP GET answered, as a scraper sees it (`meshstore top`, tests).
struct HttpReply {
  int status = 0;  ///< 0 when no answer came (`error` says why)
  std::string body;
  std::string error;
};

/// GET `path` from "HOST:PORT", waiting at most `timeout_ms` for the whole
/// exchange. With `tls` enabled: over TLS, checking the server's
/// certificate against tls.ca_file and showing tls.certificate (none when
/// only ca_file is set, as a health probe). `error` says why when no
/// answer came: a refused handshake, a timeout, a bad file.
HttpReply http_get(const std::string& address, const std::string& path, int timeout_ms = 10000,
                   const TlsOptions& tls = {});

}  // namespace meshstore::store
