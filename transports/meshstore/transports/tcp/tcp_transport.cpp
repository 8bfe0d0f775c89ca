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

namespace meshstore::transports::tcp {
namespace {

constexpr char kMagic[4] = {'M', 'S', 'T', 'C'};
constexpr std::uint32_t kVersion = 1;           // in the clear
constexpr std::uint32_t kVersionEncrypted = 2;  // sealed records
constexpr std::size_t kSecretBytes = 32;
constexpr std::size_t kHelloBytes = sizeof(kMagic) + 4 + kSecretBytes;

// The server's answer to a hello.
enum Verdict : std::uint8_t {
  kAccepted = 0,
  kRefused = 1,             // not a hello, or the wrong secret
  kEncryptionRequired = 2,  // a hello in the clear to a server that encrypts
  kNotEncrypting = 3,       // an encrypted hello to a server that does not
};
constexpr std::uint32_t kOpWrite = 1;
constexpr std::uint32_t kOpRead = 2;
constexpr std::uint32_t kOpSmall = 3;  // a small operation (SmallOps)
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
                 std::string secret, std::string key)
      : config_(config),
        host_(std::move(host)),
        port_(std::move(port)),
        secret_(std::move(secret)),
        key_(std::move(key)) {}

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

  // The volume is gone: stops as above, and every chunk queued, in flight
  // or submitted later fails with `why`.
  void abort(const Status& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_.ok()) aborted_ = why;
    }
    for (auto& j : stop()) j.transfer->part_done(why);
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
        return make_error_future<void>(
            aborted_.ok() ? Status(Errc::shutdown, "tcp transport closed") : aborted_);
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

  // A connection of its own (SmallOps), shut down with the others when the
  // transport stops or aborts; give it back with forget().
  Result<Channel> open_channel() { return connect_stream(); }

  // Closes a connection this object opened.
  void forget(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    fds_.erase(std::remove(fds_.begin(), fds_.end(), fd), fds_.end());
    close(fd);
  }

  // Why a connection failed, when the transport was aborted (the volume is
  // gone): that, not the socket's state, is the reason. Ok otherwise.
  Status aborted() {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }

  // A worker: one connection, one request at a time.
  void work() {
    std::optional<Channel> ch;
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
      if (!ch) {
        auto c = connect_stream();
        if (!c.ok()) {
          job.transfer->part_done(c.status());
          continue;
        }
        ch.emplace(std::move(c).value());
      }
      bool broken = false;
      job.transfer->part_done(run(*ch, job, broken));
      if (broken) {
        forget(ch->fd());
        ch.reset();
      }
    }
    if (ch) forget(ch->fd());
  }

 private:
  Result<Channel> connect_stream() {
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
    const bool encrypt = !key_.empty();
    std::string salt;
    if (encrypt) {
      auto drawn = random_salt();
      if (!drawn.ok()) {
        close(fd);
        return drawn.status();
      }
      salt = std::move(drawn).value();
    }
    const std::uint32_t version = encrypt ? kVersionEncrypted : kVersion;
    std::string hello(kHelloBytes, '\0');
    std::memcpy(hello.data(), kMagic, sizeof(kMagic));
    std::memcpy(hello.data() + sizeof(kMagic), &version, 4);
    std::memcpy(hello.data() + sizeof(kMagic) + 4, secret_.data(),
                std::min(secret_.size(), kSecretBytes));
    hello += salt;
    std::uint8_t verdict = kRefused;
    std::string server_salt(encrypt ? kSaltBytes : 0, '\0');
    if (!send_all(fd, hello.data(), hello.size()) || !recv_all(fd, &verdict, 1) ||
        verdict != kAccepted || !recv_all(fd, server_salt.data(), server_salt.size())) {
      close(fd);
      return Status(verdict == kEncryptionRequired || verdict == kNotEncrypting
                        ? Errc::unauthenticated
                        : Errc::unavailable,
                    where + ": the handshake was refused" + refusal_reason(verdict));
    }
    std::optional<Channel> ch;
    if (encrypt) {
      using D = RecordCipher::Direction;
      auto out = RecordCipher::derive(key_, salt, server_salt, D::to_server, true);
      auto in = RecordCipher::derive(key_, salt, server_salt, D::to_client, false);
      if (!out.ok() || !in.ok()) {
        close(fd);
        return out.ok() ? in.status() : out.status();
      }
      ch.emplace(fd, std::move(out).value(), std::move(in).value());
    } else {
      ch.emplace(fd);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      close(fd);
      return Status(Errc::shutdown, "tcp transport closed");
    }
    fds_.push_back(fd);
    return std::move(*ch);
  }

  static std::string refusal_reason(std::uint8_t verdict) {
    switch (verdict) {
      case kEncryptionRequired:
        return ": the volume encrypts its connections and this client does not";
      case kNotEncrypting:
        return ": this client encrypts and the volume does not";
      default:
        return "";
    }
  }

  Status io_error(const Job& job, const char* step) {
    const int e = errno;
    const std::string what = std::string(job.op == kOpWrite ? "tcp write" : "tcp read") +
                             " of region " + std::to_string(job.region) + ": " + step + " ";
    {
      // Aborted (the volume is gone): that, not the socket's state, is why.
      std::lock_guard<std::mutex> lock(mu_);
      if (!aborted_.ok()) return aborted_;
    }
    if (e == EAGAIN || e == EWOULDBLOCK) {
      return Status(Errc::timeout, what + "timed out after " +
                                       std::to_string(config_.request_timeout.count()) + " ms");
    }
    if (e == 0) {
      return Status(Errc::unavailable,
                    what + "failed: the volume closed the connection" +
                        (key_.empty() ? ""
                                      : " (a volume that encrypts closes a connection whose "
                                        "records it cannot open: a wrong or stale key)"));
    }
    return Status(Errc::unavailable, what + "failed: " + errno_text(e));
  }

  Status forged(const Job& job, const char* what) {
    return Status(Errc::unauthenticated,
                  std::string(job.op == kOpWrite ? "tcp write" : "tcp read") + " of region " +
                      std::to_string(job.region) + ": the volume's " + what +
                      " failed authentication (its AES-GCM tag does not match: altered on the "
                      "way, or not from the volume)");
  }

  Status run(Channel& ch, const Job& job, bool& broken) {
    RequestHeader h{job.op, 0, job.region, job.offset, job.length};
    broken = true;
    if (ch.send(&h, sizeof(h), job.op == kOpWrite) != Io::ok) {
      return io_error(job, "sending the request");
    }
    if (job.op == kOpWrite && ch.send(job.data, job.length) != Io::ok) {
      return io_error(job, "sending the bytes");
    }
    ReplyHeader r{};
    if (const Io io = ch.recv(&r, sizeof(r)); io != Io::ok) {
      return io == Io::forged ? forged(job, "reply") : io_error(job, "receiving the reply");
    }
    if (r.message_length > kMaxMessage) {
      return Status(Errc::protocol_error,
                    "tcp: reply message of " + std::to_string(r.message_length) + " bytes");
    }
    std::string msg(r.message_length, '\0');
    if (!msg.empty()) {
      if (const Io io = ch.recv(msg.data(), msg.size()); io != Io::ok) {
        return io == Io::forged ? forged(job, "reply") : io_error(job, "receiving the reply");
      }
    }
    if (r.code != 0) {
      if (r.code > static_cast<std::uint32_t>(kLastErrc)) {
        return Status(Errc::protocol_error,
                      "tcp: the volume answered unknown error code " + std::to_string(r.code));
      }
      // A volume that found a record forged answers so, then closes.
      broken = static_cast<Errc>(r.code) == Errc::unauthenticated;
      return Status(static_cast<Errc>(r.code), msg);
    }
    if (job.op == kOpRead) {
      if (const Io io = ch.recv(job.data, job.length); io != Io::ok) {
        return io == Io::forged ? forged(job, "bytes") : io_error(job, "receiving the bytes");
      }
    }
    broken = false;
    return Status();
  }

  const TransportConfig config_;
  const std::string host_, port_, secret_;
  const std::string key_;  // empty: in the clear
  std::mutex mu_;          // guards jobs_, fds_, stopping_, aborted_
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<int> fds_;
  bool stopping_ = false;
  Status aborted_;  // why abort() ended it; ok while it was not aborted
};

// Small operations over a connection of their own: a request record, then
// its payload; a reply header whose second field is the reply's length
// (when its code is ok), then the reply.
class TcpSmallOps final : public SmallOps {
 public:
  TcpSmallOps(std::shared_ptr<TcpConnections> connections, Channel ch)
      : connections_(std::move(connections)), ch_(std::move(ch)) {}
  ~TcpSmallOps() override {
    if (ch_) connections_->forget(ch_->fd());
  }

  Result<std::vector<std::byte>> exchange(const std::byte* request, std::size_t n,
                                          std::chrono::steady_clock::time_point deadline) override {
    if (!ch_) return Status(Errc::unavailable, "tcp small operations: the connection failed");
    if (n > kMaxSmallOpBytes) {
      return Status(Errc::invalid_argument, "tcp small operations: a request of " +
                                                std::to_string(n) + " bytes (at most " +
                                                std::to_string(kMaxSmallOpBytes) + ")");
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Status(Errc::timeout, "tcp small operation: no time left");
    set_timeouts(ch_->fd(), left);
    const RequestHeader h{kOpSmall, 0, 0, 0, n};
    if (ch_->send(&h, sizeof(h), n > 0) != Io::ok || (n > 0 && ch_->send(request, n) != Io::ok)) {
      return broken(Io::failed, "sending the request");
    }
    ReplyHeader r{};
    spin_until_readable(ch_->fd(), connections_->config().small_ops_spin);
    if (const Io io = ch_->recv(&r, sizeof(r)); io != Io::ok) {
      return broken(io, "receiving the reply");
    }
    if (r.code != 0) {
      if (r.code > static_cast<std::uint32_t>(kLastErrc) || r.message_length > kMaxMessage) {
        return broken(Status(Errc::protocol_error, "tcp small operation: a malformed reply"));
      }
      std::string msg(r.message_length, '\0');
      if (!msg.empty()) {
        if (const Io io = ch_->recv(msg.data(), msg.size()); io != Io::ok) {
          return broken(io, "receiving the reply");
        }
      }
      const Status refused(static_cast<Errc>(r.code), msg);
      // A volume that found a record forged, or the stream out of step,
      // answers so and closes.
      if (refused.code() == Errc::unauthenticated || refused.code() == Errc::protocol_error) {
        return broken(refused);
      }
      return refused;
    }
    if (r.message_length > kMaxSmallOpBytes) {
      return broken(Status(Errc::protocol_error, "tcp small operation: a reply of " +
                                                     std::to_string(r.message_length) + " bytes"));
    }
    std::vector<std::byte> out(r.message_length);
    if (!out.empty()) {
      if (const Io io = ch_->recv(out.data(), out.size()); io != Io::ok) {
        return broken(io, "receiving the reply");
      }
    }
    return out;
  }

 private:
  // The connection cannot be used any more: closes it, answers why.
  Status broken(Status why) {
    connections_->forget(ch_->fd());
    ch_.reset();
    return why;
  }
  Status broken(Io io, const char* step) {
    const int e = errno;
    if (io == Io::forged) {
      return broken(Status(Errc::unauthenticated,
                           std::string("tcp small operation: ") + step +
                               ": the volume's record failed authentication (its AES-GCM tag "
                               "does not match)"));
    }
    if (auto a = connections_->aborted(); !a.ok()) return broken(a);
    if (e == EAGAIN || e == EWOULDBLOCK) {
      return broken(Status(Errc::timeout,
                           std::string("tcp small operation: ") + step + ": no answer in time"));
    }
    return broken(Status(Errc::unavailable,
                         std::string("tcp small operation: ") + step + ": " +
                             (e == 0 ? "the volume closed the connection" : errno_text(e))));
  }

  std::shared_ptr<TcpConnections> connections_;
  std::optional<Channel> ch_;
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(const TransportConfig& config, std::string host, std::string port,
               std::string secret, std::string key)
      : connections_(std::make_shared<TcpConnections>(config, std::move(host), std::move(port),
                                                      std::move(secret), std::move(key))) {
    for (int i = 0; i < config.tcp_streams; ++i) {
      workers_.emplace_back([c = connections_] {
        internal::name_this_thread("ms.tcp.client");
        c->work();
      });
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
  void abort(const Status& why) override { connections_->abort(why); }
  Future<void> write(const wire::RegionRef& dst, std::uint64_t offset, const std::byte* src,
                     std::size_t n) override {
    return connections_->submit(kOpWrite, dst, offset, const_cast<std::byte*>(src), n);
  }
  Future<void> read(const wire::RegionRef& src, std::uint64_t offset, std::byte* dst,
                    std::size_t n) override {
    return connections_->submit(kOpRead, src, offset, dst, n);
  }
  Result<std::unique_ptr<SmallOps>> open_small_ops() override {
    auto ch = connections_->open_channel();
    if (!ch.ok()) return ch.status();
    return std::unique_ptr<SmallOps>(
        std::make_unique<TcpSmallOps>(connections_, std::move(ch).value()));
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
    if (!ep.key.empty() && ep.key.size() != kKeyBytes) {
      return Status(Errc::invalid_argument, "tcp client: endpoint carries a key of " +
                                                std::to_string(ep.key.size()) + " bytes, not " +
                                                std::to_string(kKeyBytes));
    }
    return std::unique_ptr<Transport>(std::make_unique<TcpTransport>(
        ctx.config, address->host, std::to_string(address->port), ep.secret, ep.key));
  };
  return f;
}

}  // namespace meshstore::transports::tcp
