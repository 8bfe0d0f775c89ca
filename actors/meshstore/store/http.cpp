// HttpServer and http_get on Boost.Beast: one request per connection,
// plain or TLS (http.hpp).

#include "meshstore/store/http.hpp"

#include <openssl/ssl.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshstore/internal/address.hpp"
#include "meshstore/internal/tls_watch.hpp"
#include "meshstore/logging.hpp"

namespace meshstore::store {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// A client has this long for its whole request (and a TLS handshake).
constexpr auto kRequestTimeout = std::chrono::seconds(10);
// A scrape's answer is read up to this size.
constexpr std::uint64_t kMaxBody = 64ull << 20;

std::string join(const std::string& host, unsigned port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// The TLS context of either side: this process's certificate and key,
// and the CA that signs the peer's. A server asks for the client's
// certificate but does not insist (a handler sees whether it came); a
// client insists on the server's.
Result<std::unique_ptr<asio::ssl::context>> tls_context(const TlsOptions& tls, bool server) {
  // A client with a CA alone checks the server and shows no certificate.
  const bool ca_only = !server && tls.certificate.empty() && tls.key.empty();
  if (!ca_only) MESHSTORE_RETURN_IF_ERROR(check_tls(tls));
  using ctx_t = asio::ssl::context;
  auto ctx = std::make_unique<ctx_t>(server ? ctx_t::tls_server : ctx_t::tls_client);
  error_code ec;
  auto failed = [&](const std::string& file) {
    return Status(Errc::invalid_argument, "TLS: " + file + ": " + ec.message());
  };
  ctx->set_options(ctx_t::default_workarounds | ctx_t::no_sslv2 | ctx_t::no_sslv3 |
                       ctx_t::no_tlsv1 | ctx_t::no_tlsv1_1,
                   ec);
  if (!ca_only) {
    if (ctx->use_certificate_chain_file(tls.certificate, ec); ec) return failed(tls.certificate);
    if (ctx->use_private_key_file(tls.key, ctx_t::pem, ec); ec) return failed(tls.key);
  }
  if (ctx->load_verify_file(tls.ca_file, ec); ec) return failed(tls.ca_file);
  ctx->set_verify_mode(asio::ssl::verify_peer, ec);
  return ctx;
}

HttpAnswer answer_of(const HttpHandler& handler, const http::request<http::empty_body>& req,
                     bool certified) {
  if (req.method() != http::verb::get) return {405, "only GET is served\n"};
  HttpAsk ask;
  ask.path = std::string(req.target().substr(0, req.target().find('?')));
  ask.certified = certified;
  try {
    return handler(ask);
  } catch (const std::exception& e) {
    return {500, std::string("internal error: ") + e.what() + "\n"};
  }
}

// One connection: the TLS handshake (over TLS), one request, its answer,
// then close.
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Stream stream, std::shared_ptr<const HttpHandler> handler)
      : stream_(std::move(stream)), handler_(std::move(handler)) {}

  void run() {
    beast::get_lowest_layer(stream_).expires_after(kRequestTimeout);
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](error_code ec) {
                                if (!ec) {
                                  self->read();
                                } else {
                                  self->refused(ec);
                                }
                              });
    } else {
      read();
    }
  }

 private:
  void read() {
    http::async_read(stream_, buffer_, request_,
                     [self = this->shared_from_this()](error_code ec, std::size_t) {
                       if (!ec) self->answer();
                     });
  }

  void answer() {
    auto a = answer_of(*handler_, request_, certified());
    response_ =
        http::response<http::string_body>(static_cast<http::status>(a.status), request_.version());
    response_.set(http::field::content_type, a.type);
    response_.set(http::field::cache_control, "no-cache");
    response_.keep_alive(false);
    response_.body() = std::move(a.body);
    response_.prepare_payload();
    http::async_write(
        stream_, response_,
        [self = this->shared_from_this()](error_code, std::size_t) { self->close(); });
  }

  // A failed handshake: a peer that went away says nothing; one refused
  // (no TLS, a certificate the CA did not sign) is logged and counted.
  void refused(const error_code& ec) {
    if (ec == asio::error::operation_aborted || ec == asio::error::eof ||
        ec == asio::ssl::error::stream_truncated || ec == beast::error::timeout) {
      return;
    }
    internal::count_tls_refusal();
    error_code ignored;
    const auto& socket = beast::get_lowest_layer(stream_).socket();
    const auto peer = socket.remote_endpoint(ignored);
    log::get("tls")->warn("refused an HTTPS connection from {} to port {}: {}",
                          join(peer.address().to_string(), peer.port()),
                          socket.local_endpoint(ignored).port(),
                          internal::describe_handshake_failure(
                              stream_.native_handle(),
                              ec.category() == asio::error::get_ssl_category()
                                  ? ERR_reason_error_string(static_cast<unsigned long>(ec.value()))
                                  : nullptr));
  }

  // A client certificate the CA signed: a wrong one fails the handshake,
  // so one that is there was verified.
  bool certified() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      return SSL_get0_peer_certificate(stream_.native_handle()) != nullptr &&
             SSL_get_verify_result(stream_.native_handle()) == X509_V_OK;
    } else {
      return false;
    }
  }

  void close() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      stream_.async_shutdown([self = this->shared_from_this()](error_code) {
        error_code ignored;
        beast::get_lowest_layer(self->stream_).socket().close(ignored);
      });
    } else {
      error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
  }

  Stream stream_;
  std::shared_ptr<const HttpHandler> handler_;
  beast::flat_buffer buffer_;
  http::request<http::empty_body> request_;
  http::response<http::string_body> response_;
};

}  // namespace

// Destroyed in reverse: the threads (joined first), the acceptor, the
// io_context with the sessions its handlers hold, then what they use.
struct HttpServer::Net {
  std::shared_ptr<const HttpHandler> handler;
  std::unique_ptr<asio::ssl::context> tls;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer pause{io};
  std::vector<std::thread> threads;

  void accept() {
    acceptor.async_accept(asio::make_strand(io), [this](error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors, say: try again a moment later, not in a spin.
        log::get("store")->warn("http: accept failed: {}", ec.message());
        pause.expires_after(std::chrono::milliseconds(100));
        pause.async_wait([this](error_code e) {
          if (!e) accept();
        });
        return;
      }
      if (tls) {
        std::make_shared<Session<TlsStream>>(TlsStream(std::move(s), *tls), handler)->run();
      } else {
        std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(s)), handler)
            ->run();
      }
      accept();
    });
  }
};

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& what,
                                                      const std::string& address,
                                                      const TlsOptions& tls, HttpHandler handler,
                                                      int threads) {
  auto at = internal::parse_address(address);
  if (!at.ok()) return at.status().with_context(what);
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->net_ = std::make_unique<Net>();
  auto& net = *server->net_;
  net.handler = std::make_shared<const HttpHandler>(std::move(handler));
  if (tls.enabled()) {
    auto ctx = tls_context(tls, true);
    if (!ctx.ok()) return ctx.status().with_context(what);
    net.tls = std::move(ctx).value();
    server->tls_ = true;
  }
  error_code ec;
  auto cannot = [&](const std::string& why) {
    return Status(Errc::unavailable, "cannot serve " + what + " on " + address + ": " + why);
  };
  tcp::resolver resolver(net.io);
  auto found = resolver.resolve(at->host, std::to_string(at->port), tcp::resolver::passive, ec);
  if (ec || found.empty()) return cannot(ec ? ec.message() : "no such host");
  const tcp::endpoint where = found.begin()->endpoint();
  if (net.acceptor.open(where.protocol(), ec); ec) return cannot(ec.message());
  net.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (net.acceptor.bind(where, ec); ec) return cannot(ec.message());
  if (net.acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
    return cannot(ec.message());
  }
  server->port_ = net.acceptor.local_endpoint().port();
  server->address_ = join(at->host, server->port_);
  net.accept();
  for (int i = 0; i < std::max(1, threads); ++i) {
    net.threads.emplace_back([&net] { net.io.run(); });
  }
  return server;
}

HttpServer::~HttpServer() {
  if (!net_) return;
  net_->io.stop();
  for (auto& t : net_->threads) t.join();
}

namespace {

// Runs the io_context until the operation behind `f` is done, then gives
// its result (throwing boost::system::system_error for its error).
template <class F>
auto finish(asio::io_context& io, F&& f) {
  io.restart();
  io.run();
  return f.get();
}

template <class Stream>
void exchange(asio::io_context& io, Stream& stream, const http::request<http::empty_body>& req,
              HttpReply* out) {
  finish(io, http::async_write(stream, req, asio::use_future));
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxBody);
  finish(io, http::async_read(stream, buffer, parser, asio::use_future));
  out->status = static_cast<int>(parser.get().result_int());
  out->body = std::move(parser.get().body());
}

}  // namespace

HttpReply http_get(const std::string& address, const std::string& path, int timeout_ms,
                   const TlsOptions& tls) {
  HttpReply out;
  auto at = internal::parse_address(address);
  if (!at.ok()) {
    out.error = at.status().message();
    return out;
  }
  asio::io_context io;
  http::request<http::empty_body> req{http::verb::get, path, 11};
  req.set(http::field::host, address);
  req.set(http::field::user_agent, "meshstore");
  req.keep_alive(false);
  try {
    tcp::resolver resolver(io);
    const auto found = resolver.resolve(at->host, std::to_string(at->port));
    const auto deadline = std::chrono::milliseconds(timeout_ms);
    if (!tls.enabled()) {
      beast::tcp_stream stream(io);
      stream.expires_after(deadline);
      finish(io, stream.async_connect(found, asio::use_future));
      exchange(io, stream, req, &out);
      return out;
    }
    auto ctx = tls_context(tls, false);
    if (!ctx.ok()) {
      out.error = ctx.status().message();
      return out;
    }
    TlsStream stream(io, **ctx);
    beast::get_lowest_layer(stream).expires_after(deadline);
    finish(io, beast::get_lowest_layer(stream).async_connect(found, asio::use_future));
    finish(io, stream.async_handshake(asio::ssl::stream_base::client, asio::use_future));
    exchange(io, stream, req, &out);
  } catch (const boost::system::system_error& e) {
    out.status = 0;
    out.error = e.code().message();
  }
  return out;
}

}  // namespace meshstore::store
