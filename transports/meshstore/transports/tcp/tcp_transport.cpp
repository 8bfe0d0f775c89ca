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
#include "meshstore/transports/tcp/internal/tcp_wire.hpp"

namespace meshstore::transports::tcp {
namespace {

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
  f.make_server = start_server;
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
