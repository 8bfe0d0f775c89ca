#include "meshstore/transports/tcp/tcp_transport.hpp"

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
#include <random>
#include <thread>
#include <vector>

#include "meshstore/internal/address.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/transports/completion.hpp"
#include "meshstore/transports/host_identity.hpp"

namespace meshstore::transports::tcp {
namespace {

constexpr char kMagic[4] = {'M', 'S', 'T', 'C'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kSecretBytes = 32;
constexpr std::uint32_t kOpWrite = 1;
constexpr std::uint32_t kOpRead = 2;
constexpr std::uint32_t kMaxMessage = 4096;

struct RequestHeader {
  std::uint32_t op;
  std::uint32_t reserved;
  std::uint64_t region;
  std::uint64_t offset;
  std::uint64_t length;
};
static_assert(sizeof(RequestHeader) == 32, "wire layout");

struct ReplyHeader {
  std::uint32_t code;
  std::uint32_t message_length;
};
static_assert(sizeof(ReplyHeader) == 8, "wire layout");

std::string errno_text(int e) { return std::strerror(e); }

// Sends or receives exactly `n` bytes; false on error or EOF (errno set; 0
// for EOF).
bool send_all(int fd, const void* p, std::size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
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

void set_timeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Probes an idle connection, so a server thread waiting on a client whose
// host vanished (no FIN, no RST) gives up after about a minute.
void set_keepalive(int fd) {
  int one = 1, idle = 30, interval = 5, count = 6;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

std::string random_secret() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string s(kSecretBytes, '0');
  for (auto& c : s) c = hex[rd() & 15u];
  return s;
}

bool same_secret(const char* a, const std::string& b) {
  unsigned diff = 0;
  for (std::size_t i = 0; i < kSecretBytes; ++i) diff |= static_cast<unsigned>(a[i] ^ b[i]);
  return diff == 0;
}

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
    int wake[2];
    if (pipe2(wake, O_CLOEXEC) != 0) {
      const int e = errno;
      close(fd);
      return Status(Errc::io_error, "tcp: pipe: " + errno_text(e));
    }
    auto server = std::unique_ptr<TcpServer>(new TcpServer(ctx, fd, wake, h + ":" + port));
    server->acceptor_ = std::thread([s = server.get()] { s->accept_loop(); });
    return server;
  }

  ~TcpServer() override { shutdown(); }

  std::string_view name() const noexcept override { return "tcp"; }
  EndpointInfo endpoint() const override {
    EndpointInfo e;
    e.transport = "tcp";
    e.address = address_;
    e.host_id = host_identity();
    e.secret = secret_;
    return e;
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
  TcpServer(const ServerContext& ctx, int fd, int wake[2], std::string address)
      : regions_(ctx.regions),
        timeout_(ctx.config.request_timeout),
        listen_fd_(fd),
        address_(std::move(address)),
        secret_(random_secret()) {
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
    char hello[sizeof(kMagic) + 4 + kSecretBytes];
    std::uint32_t version = 0;
    bool ok = recv_all(fd, hello, sizeof(hello));
    if (ok) std::memcpy(&version, hello + sizeof(kMagic), 4);
    ok = ok && std::memcmp(hello, kMagic, sizeof(kMagic)) == 0 && version == kVersion &&
         same_secret(hello + sizeof(kMagic) + 4, secret_);
    const std::uint8_t verdict = ok ? 0 : 1;
    if (!ok) {
      log::get("tcp")->warn("tcp {}: refused a connection that failed the handshake", address_);
    }
    if (send_all(fd, &verdict, 1) && ok) {
      // Between requests a connection may idle for long: no receive timeout.
      set_timeouts(fd, std::chrono::milliseconds(0));
      while (serve_one(fd)) {
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    conn_fds_.erase(std::remove(conn_fds_.begin(), conn_fds_.end(), fd), conn_fds_.end());
    close(fd);
  }

  bool reply(int fd, const Status& s) {
    std::string msg = s.message().substr(0, kMaxMessage);
    ReplyHeader h{static_cast<std::uint32_t>(s.code()), static_cast<std::uint32_t>(msg.size())};
    return send_all(fd, &h, sizeof(h)) && send_all(fd, msg.data(), msg.size());
  }

  // Reads and discards `n` bytes (a refused write's payload).
  static bool drain(int fd, std::uint64_t n) {
    std::vector<char> sink(std::min<std::uint64_t>(n, 1 << 20));
    while (n > 0) {
      const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, sink.size()));
      if (!recv_all(fd, sink.data(), k)) return false;
      n -= k;
    }
    return true;
  }

  bool serve_one(int fd) {
    RequestHeader h{};
    if (!recv_all(fd, &h, sizeof(h))) return false;
    set_timeouts(fd, timeout_);
    const char* op = h.op == kOpWrite ? "tcp write" : "tcp read";
    std::shared_ptr<Region> region;
    Status s;
    if (h.op != kOpWrite && h.op != kOpRead) {
      reply(fd, Status(Errc::protocol_error, "tcp: unknown op " + std::to_string(h.op)));
      return false;  // the stream cannot be trusted any more
    }
    auto checked = regions_->checked(h.region, h.offset, h.length, op);
    if (checked.ok()) {
      region = std::move(checked).value();
    } else {
      s = checked.status();
    }
    bool alive = true;
    if (h.op == kOpWrite) {
      alive = s.ok() ? recv_all(fd, region->data() + h.offset, h.length) : drain(fd, h.length);
      alive = alive && reply(fd, s);
    } else {
      alive = reply(fd, s) && (!s.ok() || send_all(fd, region->data() + h.offset, h.length));
    }
    set_timeouts(fd, std::chrono::milliseconds(0));
    return alive;
  }

  std::shared_ptr<RegionTable> regions_;
  const std::chrono::milliseconds timeout_;
  const int listen_fd_;
  int wake_[2];
  const std::string address_;
  const std::string secret_;
  std::thread acceptor_;
  std::mutex mu_;  // guards stopped_, conn_fds_, conn_threads_
  bool stopped_ = false;
  std::vector<int> conn_fds_;
  std::list<Connection> conn_threads_;
};

// -- client ---------------------------------------------------------------

struct Job {
  std::uint32_t op = 0;
  std::uint64_t region = 0;
  std::uint64_t offset = 0;
  std::byte* data = nullptr;
  std::size_t length = 0;
  std::shared_ptr<PartedTransfer> transfer;  // the chunks of one transfer
};

// The connections of a client-volume pair and their worker threads. Shared
// by the transport and its workers: the last owner of the transport may be
// a transfer's continuation running on a worker, so a worker must never
// need the transport object itself (see ~TcpTransport).
class TcpConnections {
 public:
  TcpConnections(const TransportConfig& config, std::string host, std::string port,
                 std::string secret)
      : config_(config),
        host_(std::move(host)),
        port_(std::move(port)),
        secret_(std::move(secret)) {}

  // Stops the workers: queued chunks fail with Errc::shutdown; a chunk in
  // flight ends when its socket is shut down.
  std::deque<Job> stop() {
    std::deque<Job> orphans;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      orphans = std::move(jobs_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    cv_.notify_all();
    return orphans;
  }

  const TransportConfig& config() const noexcept { return config_; }

  Future<void> submit(std::uint32_t op, const wire::RegionRef& ref, std::uint64_t offset,
                      std::byte* data, std::size_t n) {
    const char* what = op == kOpWrite ? "tcp write" : "tcp read";
    if (auto s = check_range(ref.region_id, ref.nbytes, offset, n, what); !s.ok()) {
      return make_error_future<void>(std::move(s));
    }
    if (n == 0) return make_ready_future();
    const std::size_t chunk = config_.tcp_chunk_bytes;
    const std::size_t pieces = (n + chunk - 1) / chunk;
    auto t = std::make_shared<PartedTransfer>(
        pieces, Status(Errc::shutdown, std::string(what) + " stopped: the transport closed"));
    auto fut = t->future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        return make_error_future<void>(Status(Errc::shutdown, "tcp transport closed"));
      }
      for (std::size_t pos = 0; pos < n; pos += chunk) {
        jobs_.push_back(
            Job{op, ref.region_id, offset + pos, data + pos, std::min(chunk, n - pos), t});
      }
    }
    if (pieces == 1) {
      cv_.notify_one();
    } else {
      cv_.notify_all();
    }
    return fut;
  }

  // A worker: one connection, one request at a time.
  void work() {
    int fd = -1;
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) break;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      if (job.transfer->failed()) {
        job.transfer->part_done(Status());  // another chunk failed: skip
        continue;
      }
      if (fd < 0) {
        auto c = connect_stream();
        if (!c.ok()) {
          job.transfer->part_done(c.status());
          continue;
        }
        fd = *c;
      }
      bool broken = false;
      job.transfer->part_done(run(fd, job, broken));
      if (broken) {
        forget(fd);
        fd = -1;
      }
    }
    if (fd >= 0) forget(fd);
  }

 private:
  void forget(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    fds_.erase(std::remove(fds_.begin(), fds_.end(), fd), fds_.end());
    close(fd);
  }

  Result<int> connect_stream() {
    const std::string where = "tcp: volume endpoint " + host_ + ":" + port_;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int gai = getaddrinfo(host_.c_str(), port_.c_str(), &hints, &res);
    if (gai != 0 || !res) {
      return Status(Errc::unavailable, where + ": cannot resolve: " + gai_strerror(gai));
    }
    const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      const int e = errno;
      freeaddrinfo(res);
      return Status(Errc::io_error, where + ": socket: " + errno_text(e));
    }
    set_timeouts(fd, config_.request_timeout);  // bounds connect() too
    set_nodelay(fd);
    const int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
    const int e = errno;
    freeaddrinfo(res);
    if (rc != 0) {
      close(fd);
      return Status(e == EINPROGRESS || e == EAGAIN ? Errc::timeout : Errc::unavailable,
                    where + ": connect: " + errno_text(e));
    }
    char hello[sizeof(kMagic) + 4 + kSecretBytes];
    std::memcpy(hello, kMagic, sizeof(kMagic));
    std::memcpy(hello + sizeof(kMagic), &kVersion, 4);
    std::memcpy(hello + sizeof(kMagic) + 4, secret_.data(), std::min(secret_.size(), kSecretBytes));
    std::uint8_t verdict = 1;
    if (!send_all(fd, hello, sizeof(hello)) || !recv_all(fd, &verdict, 1) || verdict != 0) {
      close(fd);
      return Status(Errc::unavailable, where + ": the handshake was refused");
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      close(fd);
      return Status(Errc::shutdown, "tcp transport closed");
    }
    fds_.push_back(fd);
    return fd;
  }

  Status io_error(const Job& job, const char* step) {
    const int e = errno;
    const std::string what = std::string(job.op == kOpWrite ? "tcp write" : "tcp read") +
                             " of region " + std::to_string(job.region) + ": " + step + " ";
    if (e == EAGAIN || e == EWOULDBLOCK) {
      return Status(Errc::timeout, what + "timed out after " +
                                       std::to_string(config_.request_timeout.count()) + " ms");
    }
    if (e == 0) return Status(Errc::unavailable, what + "failed: the volume closed the connection");
    return Status(Errc::unavailable, what + "failed: " + errno_text(e));
  }

  Status run(int fd, const Job& job, bool& broken) {
    RequestHeader h{job.op, 0, job.region, job.offset, job.length};
    broken = true;
    if (!send_all(fd, &h, sizeof(h))) return io_error(job, "sending the request");
    if (job.op == kOpWrite && !send_all(fd, job.data, job.length)) {
      return io_error(job, "sending the bytes");
    }
    ReplyHeader r{};
    if (!recv_all(fd, &r, sizeof(r))) return io_error(job, "receiving the reply");
    if (r.message_length > kMaxMessage) {
      return Status(Errc::protocol_error,
                    "tcp: reply message of " + std::to_string(r.message_length) + " bytes");
    }
    std::string msg(r.message_length, '\0');
    if (!recv_all(fd, msg.data(), msg.size())) return io_error(job, "receiving the reply");
    if (r.code != 0) {
      if (r.code > static_cast<std::uint32_t>(kLastErrc)) {
        return Status(Errc::protocol_error,
                      "tcp: the volume answered unknown error code " + std::to_string(r.code));
      }
      broken = false;
      return Status(static_cast<Errc>(r.code), msg);
    }
    if (job.op == kOpRead && !recv_all(fd, job.data, job.length)) {
      return io_error(job, "receiving the bytes");
    }
    broken = false;
    return Status();
  }

  const TransportConfig config_;
  const std::string host_, port_, secret_;
  std::mutex mu_;  // guards jobs_, fds_, stopping_
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<int> fds_;
  bool stopping_ = false;
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(const TransportConfig& config, std::string host, std::string port,
               std::string secret)
      : connections_(std::make_shared<TcpConnections>(config, std::move(host), std::move(port),
                                                      std::move(secret))) {
    for (int i = 0; i < config.tcp_streams; ++i) {
      workers_.emplace_back([c = connections_] { c->work(); });
    }
  }
  ~TcpTransport() override {
    auto orphans = connections_->stop();
    for (auto& t : workers_) {
      // The last owner may be a continuation of one of our own transfers,
      // run by a worker: that worker cannot join itself; it holds the
      // connections and leaves once it sees them stopped.
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();
      } else {
        t.join();
      }
    }
    for (auto& j : orphans) {
      j.transfer->part_done(Status(Errc::shutdown, "tcp transport closed during a transfer"));
    }
  }

  std::string_view name() const noexcept override { return "tcp"; }
  Capabilities capabilities() const noexcept override {
    Capabilities c;
    c.max_chunk_bytes = connections_->config().tcp_chunk_bytes;
    return c;
  }
  Future<void> write(const wire::RegionRef& dst, std::uint64_t offset, const std::byte* src,
                     std::size_t n) override {
    return connections_->submit(kOpWrite, dst, offset, const_cast<std::byte*>(src), n);
  }
  Future<void> read(const wire::RegionRef& src, std::uint64_t offset, std::byte* dst,
                    std::size_t n) override {
    return connections_->submit(kOpRead, src, offset, dst, n);
  }

 private:
  std::shared_ptr<TcpConnections> connections_;
  std::vector<std::thread> workers_;
};

}  // namespace

TransportFactory tcp_factory() {
  TransportFactory f;
  f.name = "tcp";
  f.priority = 10;
  f.capabilities.max_chunk_bytes = TransportConfig{}.tcp_chunk_bytes;
  f.make_server = [](const ServerContext& ctx) -> Result<std::unique_ptr<TransportServer>> {
    if (!ctx.regions) return Status(Errc::invalid_argument, "tcp server: incomplete context");
    auto s = TcpServer::start(ctx);
    if (!s.ok()) return s.status();
    return std::unique_ptr<TransportServer>(std::move(s).value());
  };
  f.make_client = [](const ClientContext& ctx,
                     const EndpointInfo& ep) -> Result<std::unique_ptr<Transport>> {
    MESHSTORE_RETURN_IF_ERROR(ctx.config.validate());
    auto address = internal::parse_address(ep.address);
    if (ep.transport != "tcp" || !address.ok()) {
      return Status(Errc::invalid_argument,
                    "tcp client: endpoint '" + ep.address + "' is not a tcp endpoint");
    }
    if (ep.secret.size() != kSecretBytes) {
      return Status(Errc::invalid_argument, "tcp client: endpoint carries no valid secret");
    }
    return std::unique_ptr<Transport>(std::make_unique<TcpTransport>(
        ctx.config, address->host, std::to_string(address->port), ep.secret));
  };
  return f;
}

}  // namespace meshstore::transports::tcp
