// The tcp transport's server: an accept thread, and a thread per
// connection serving writes into, reads out of and small operations on the
// volume's regions.

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "meshstore/internal/address.hpp"
#include "meshstore/internal/thread_name.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/transports/completion.hpp"
#include "meshstore/transports/host_identity.hpp"
#include "meshstore/transports/tcp/internal/tcp_channel.hpp"
#include "meshstore/transports/tcp/internal/tcp_wire.hpp"

namespace meshstore::transports::tcp {
namespace {

// -- server ---------------------------------------------------------------

class TcpServer final : public TransportServer {
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

 public:
  static Result<std::unique_ptr<TcpServer>> start(const ServerContext& ctx) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int gai = getaddrinfo(ctx.bind_host.c_str(), "0", &hints, &res);
    if (gai != 0 || !res) {
      return Status(Errc::invalid_argument,
                    "tcp: cannot resolve bind host '" + ctx.bind_host + "': " + gai_strerror(gai));
    }
    const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      const int e = errno;
      if (fd >= 0) close(fd);
      freeaddrinfo(res);
      return Status(Errc::unavailable,
                    "tcp: cannot listen on " + ctx.bind_host + ": " + errno_text(e));
    }
    freeaddrinfo(res);
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
    char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
    getnameinfo(reinterpret_cast<sockaddr*>(&local), len, host, sizeof(host), port, sizeof(port),
                NI_NUMERICHOST | NI_NUMERICSERV);
    std::string h = host;
    if (h == "0.0.0.0" || h == "::") {
      // Bound to every interface: advertise this host's name, which other
      // hosts can resolve, rather than an address nobody can dial.
      char name[256] = {};
      if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') h = name;
    }
    if (h.find(':') != std::string::npos) h = "[" + h + "]";
    std::string key;
    if (ctx.config.tcp_encrypt) {
      auto k = random_key();
      if (!k.ok()) {
        close(fd);
        return k.status();
      }
      key = std::move(k).value();
    }
    int wake[2];
    if (pipe2(wake, O_CLOEXEC) != 0) {
      const int e = errno;
      close(fd);
      return Status(Errc::io_error, "tcp: pipe: " + errno_text(e));
    }
    auto server =
        std::unique_ptr<TcpServer>(new TcpServer(ctx, fd, wake, h + ":" + port, std::move(key)));
    server->acceptor_ = std::thread([s = server.get()] {
      internal::name_this_thread("ms.tcp.accept");
      s->accept_loop();
    });
    return server;
  }

  ~TcpServer() override { shutdown(); }

  std::string_view name() const noexcept override { return "tcp"; }
  void serve_small_ops(SmallOpHandler handler) override {
    auto h = std::make_shared<const SmallOpHandler>(std::move(handler));
    std::lock_guard<std::mutex> lock(mu_);
    small_ops_ = std::move(h);
  }
  EndpointInfo endpoint() const override {
    EndpointInfo e;
    e.transport = "tcp";
    e.address = address_;
    e.host_id = host_identity();
    e.secret = secret_;
    e.key = key_;
    return e;
  }
  void interrupt(const std::vector<std::uint64_t>& ids) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [fd, region] : moving_) {
      // The blocked send or receive fails at once; the connection ends.
      if (std::find(ids.begin(), ids.end(), region) != ids.end()) ::shutdown(fd, SHUT_RDWR);
    }
  }
  void shutdown() override {
    std::list<Connection> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
      threads = std::move(conn_threads_);
    }
    const char x = 1;
    (void)!write(wake_[1], &x, 1);
    if (acceptor_.joinable()) acceptor_.join();
    for (auto& t : threads) t.thread.join();
    close(listen_fd_);
    close(wake_[0]);
    close(wake_[1]);
  }

 private:
  TcpServer(const ServerContext& ctx, int fd, int wake[2], std::string address, std::string key)
      : regions_(ctx.regions),
        timeout_(ctx.config.request_timeout),
        small_spin_(ctx.config.small_ops_spin),
        listen_fd_(fd),
        address_(std::move(address)),
        secret_(random_secret()),
        key_(std::move(key)) {
    wake_[0] = wake[0];
    wake_[1] = wake[1];
  }

  void accept_loop() {
    for (;;) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[1].revents) return;
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) {
        close(fd);
        return;
      }
      // Join connections that ended, so a long-lived volume keeps no dead
      // threads around.
      for (auto it = conn_threads_.begin(); it != conn_threads_.end();) {
        if (it->done->load()) {
          it->thread.join();
          it = conn_threads_.erase(it);
        } else {
          ++it;
        }
      }
      conn_fds_.push_back(fd);
      auto done = std::make_shared<std::atomic<bool>>(false);
      conn_threads_.push_back(Connection{std::thread([this, fd, done] {
                                           internal::name_this_thread("ms.tcp.serve");
                                           serve(fd);
                                           done->store(true);
                                         }),
                                         done});
    }
  }

  // One connection: the hello, then requests until the client closes.
  void serve(int fd) {
    set_nodelay(fd);
    set_keepalive(fd);
    set_timeouts(fd, timeout_);
    if (auto channel = handshake(fd)) {
      // Between requests a connection may idle for long: no receive timeout.
      set_timeouts(fd, std::chrono::milliseconds(0));
      bool small = false;
      while (serve_one(fd, *channel, small)) {
        // A small-operations connection: its client's next request often
        // comes at once (a get after a put); wait for it awake a moment.
        if (small) spin_until_readable(fd, small_spin_);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    conn_fds_.erase(std::remove(conn_fds_.begin(), conn_fds_.end(), fd), conn_fds_.end());
    close(fd);
  }

  // Reads the hello and answers it; the connection's channel when accepted.
  std::optional<Channel> handshake(int fd) {
    char hello[kHelloBytes];
    std::uint32_t version = 0;
    std::string client_salt;
    Verdict verdict = kRefused;
    if (recv_all(fd, hello, sizeof(hello))) {
      std::memcpy(&version, hello + sizeof(kMagic), 4);
      const bool known = std::memcmp(hello, kMagic, sizeof(kMagic)) == 0 &&
                         (version == kVersion || version == kVersionEncrypted) &&
                         same_secret(hello + sizeof(kMagic) + 4, secret_);
      if (known && version == kVersionEncrypted) {
        client_salt.resize(kSaltBytes);
        if (!recv_all(fd, client_salt.data(), client_salt.size())) return std::nullopt;
        verdict = key_.empty() ? kNotEncrypting : kAccepted;
      } else if (known) {
        verdict = key_.empty() ? kAccepted : kEncryptionRequired;
      }
    }
    auto log = log::get("tcp");
    switch (verdict) {
      case kAccepted:
        break;
      case kEncryptionRequired:
        log->warn("tcp {}: refused a connection in the clear: this volume encrypts (encrypt_tcp)",
                  address_);
        break;
      case kNotEncrypting:
        log->warn("tcp {}: refused an encrypted connection: this volume does not encrypt",
                  address_);
        break;
      default:
        log->warn("tcp {}: refused a connection that failed the handshake", address_);
    }
    const auto v = static_cast<std::uint8_t>(verdict);
    if (!send_all(fd, &v, 1) || verdict != kAccepted) return std::nullopt;
    if (key_.empty()) return Channel(fd);
    auto server_salt = random_salt();
    if (!server_salt.ok() || !send_all(fd, server_salt->data(), server_salt->size())) {
      return std::nullopt;
    }
    using D = RecordCipher::Direction;
    auto out = RecordCipher::derive(key_, client_salt, *server_salt, D::to_client, true);
    auto in = RecordCipher::derive(key_, client_salt, *server_salt, D::to_server, false);
    if (!out.ok() || !in.ok()) {
      log->error("tcp {}: {}", address_, (out.ok() ? in.status() : out.status()).to_string());
      return std::nullopt;
    }
    return Channel(fd, std::move(out).value(), std::move(in).value());
  }

  // `data_follows`: a read's bytes are sent right after (in the same
  // segments as the header).
  bool reply(Channel& ch, const Status& s, bool data_follows = false) {
    std::string msg = s.message().substr(0, kMaxMessage);
    ReplyHeader h{static_cast<std::uint32_t>(s.code()), static_cast<std::uint32_t>(msg.size())};
    return ch.send(&h, sizeof(h), data_follows || !msg.empty()) == Io::ok &&
           (msg.empty() || ch.send(msg.data(), msg.size()) == Io::ok);
  }

  // A sealed record that did not open: someone without the key, or bytes
  // altered on the way. The connection ends (its records cannot be trusted).
  bool forged(const char* what) {
    log::get("tcp")->warn("tcp {}: closed a connection whose {} failed authentication", address_,
                          what);
    return false;
  }

  // A small operation: the request's bytes to the volume's handler, its
  // reply back (the reply header's second field is then the reply's
  // length, not a message's).
  bool serve_small(int fd, Channel& ch, const RequestHeader& h) {
    if (h.length > kMaxSmallOpBytes) {
      reply(ch, Status(Errc::protocol_error, "tcp: a small request of " + std::to_string(h.length) +
                                                 " bytes (at most " +
                                                 std::to_string(kMaxSmallOpBytes) + ")"));
      return false;  // its bytes would be read as the next request
    }
    std::vector<std::byte> request(h.length);
    if (!request.empty()) {
      if (const Io io = ch.recv(request.data(), request.size()); io != Io::ok) {
        return io == Io::forged ? forged("small request") : false;
      }
    }
    std::shared_ptr<const SmallOpHandler> handler;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handler = small_ops_;
    }
    bool alive = false;
    if (!handler) {
      alive = reply(ch, Status(Errc::unsupported,
                               "tcp " + address_ + ": this volume serves no small operations"));
    } else {
      const auto out = (*handler)(request.data(), request.size());
      if (out.size() > kMaxSmallOpBytes) {
        alive = reply(ch, Status(Errc::internal, "tcp " + address_ + ": a small reply of " +
                                                     std::to_string(out.size()) + " bytes"));
      } else {
        const ReplyHeader r{0, static_cast<std::uint32_t>(out.size())};
        alive = ch.send(&r, sizeof(r), !out.empty()) == Io::ok &&
                (out.empty() || ch.send(out.data(), out.size()) == Io::ok);
      }
    }
    set_timeouts(fd, std::chrono::milliseconds(0));
    return alive;
  }

  // `small`: set when the request was a small operation.
  bool serve_one(int fd, Channel& ch, bool& small) {
    RequestHeader h{};
    if (const Io io = ch.recv(&h, sizeof(h)); io != Io::ok) {
      return io == Io::forged ? forged("request") : false;
    }
    set_timeouts(fd, timeout_);
    small = h.op == kOpSmall;
    if (small) return serve_small(fd, ch, h);
    const char* op = h.op == kOpWrite ? "tcp write" : "tcp read";
    std::shared_ptr<Region> region;
    Status s;
    if (h.op != kOpWrite && h.op != kOpRead) {
      reply(ch, Status(Errc::protocol_error, "tcp: unknown op " + std::to_string(h.op)));
      return false;  // the stream cannot be trusted any more
    }
    // Marked before the lookup: a region withdrawn after it is found is
    // interrupted here (interrupt() runs after the withdrawal).
    const Moving moving(*this, fd, h.region);
    auto checked = regions_->checked(h.region, h.offset, h.length, op);
    if (checked.ok()) {
      region = std::move(checked).value();
    } else {
      s = checked.status();
    }
    bool alive = true;
    if (h.op == kOpWrite) {
      // A sealed write lands in the region and is opened there; one whose
      // tag fails leaves garbage in memory that only an uncommitted put
      // can own (its writer gets the error and commits nothing).
      const Io io = s.ok() ? ch.recv(region->data() + h.offset, h.length) : ch.drain(h.length);
      if (io == Io::forged) {
        reply(ch, Status(Errc::unauthenticated,
                         "tcp write of region " + std::to_string(h.region) +
                             ": the payload failed authentication at the volume (its AES-GCM "
                             "tag does not match: altered on the way)"));
        return forged("payload");
      }
      alive = io == Io::ok && reply(ch, s);
    } else {
      alive = reply(ch, s, s.ok() && h.length > 0) &&
              (!s.ok() || ch.send(region->data() + h.offset, h.length) == Io::ok);
    }
    set_timeouts(fd, std::chrono::milliseconds(0));
    return alive;
  }

  // Connection `fd` is moving region `region`'s bytes (a request being
  // served) while this lives: what interrupt() looks for.
  class Moving {
   public:
    Moving(TcpServer& server, int fd, std::uint64_t region) : server_(server), fd_(fd) {
      std::lock_guard<std::mutex> lock(server_.mu_);
      server_.moving_[fd_] = region;
    }
    ~Moving() {
      std::lock_guard<std::mutex> lock(server_.mu_);
      server_.moving_.erase(fd_);
    }
    Moving(const Moving&) = delete;
    Moving& operator=(const Moving&) = delete;

   private:
    TcpServer& server_;
    const int fd_;
  };

  std::shared_ptr<RegionTable> regions_;
  const std::chrono::milliseconds timeout_;
  // How long a small-operations connection spins for its client's next
  // request before it sleeps (TransportConfig::small_ops_spin).
  const std::chrono::microseconds small_spin_;
  const int listen_fd_;
  int wake_[2];
  const std::string address_;
  const std::string secret_;
  const std::string key_;  // empty: the connections are in the clear
  std::thread acceptor_;
  std::mutex mu_;  // guards stopped_, conn_fds_, conn_threads_, small_ops_, moving_
  bool stopped_ = false;
  std::unordered_map<int, std::uint64_t> moving_;  // connection -> region (Moving)
  std::shared_ptr<const SmallOpHandler> small_ops_;
  std::vector<int> conn_fds_;
  std::list<Connection> conn_threads_;
};

}  // namespace

Result<std::unique_ptr<TransportServer>> start_server(const ServerContext& ctx) {
  if (!ctx.regions) return Status(Errc::invalid_argument, "tcp server: incomplete context");
  auto s = TcpServer::start(ctx);
  if (!s.ok()) return s.status();
  return std::unique_ptr<TransportServer>(std::move(s).value());
}

}  // namespace meshstore::transports::tcp
