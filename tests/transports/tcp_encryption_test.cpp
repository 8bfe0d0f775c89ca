// The tcp transport with encryption (TransportConfig::tcp_encrypt), seen from
// the network: a proxy on loopback between a client and a volume's server
// records (and, when told, alters) every byte. The tensor bytes never cross
// in the clear, an altered byte in either direction fails the transfer with
// a clear error instead of landing, a recorded connection cannot be replayed,
// and a client that does not encrypt is refused. The conformance suite runs
// the same transport's transfers (tcp_encrypted).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/internal/actor_runtime.hpp"
#include "meshstore/internal/memory.hpp"
#include "meshstore/transports/registry.hpp"
#include "testing/region_ref.hpp"
#include "testing/test_util.hpp"

namespace meshstore::transports {
namespace {

using testing::kWait;
using namespace std::chrono_literals;

constexpr std::size_t kRegionBytes = std::size_t{1} << 20;
const std::string kMarker = "MESHSTORE-PLAINTEXT-MARKER-";

int listen_loopback(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 8) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  port = ntohs(a.sin_port);
  return fd;
}

int dial_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A man in the middle on loopback: forwards every connection to `target`,
// records each direction, and flips the byte at `flip_at` of one direction
// (counted over the connection) when asked. Every pump ends when either
// side closes, or when the proxy is destroyed.
class Proxy {
 public:
  enum class Dir { to_server, to_client };

  explicit Proxy(std::uint16_t target) : target_(target) {
    listen_fd_ = listen_loopback(port_);
    ::pipe2(stop_, O_CLOEXEC);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~Proxy() {
    const char x = 1;
    (void)!::write(stop_[1], &x, 1);
    acceptor_.join();
    for (auto& t : pumps_) t.join();
    ::close(listen_fd_);
    ::close(stop_[0]);
    ::close(stop_[1]);
  }
  std::uint16_t port() const { return port_; }
  void flip(Dir dir, std::size_t at) {
    std::lock_guard<std::mutex> lock(mu_);
    flip_dir_ = dir;
    flip_at_ = at;
  }
  std::string recorded(Dir dir) {
    std::lock_guard<std::mutex> lock(mu_);
    return dir == Dir::to_server ? to_server_ : to_client_;
  }

 private:
  void accept_loop() {
    for (;;) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
      if (::poll(p, 2, -1) < 0 || p[1].revents) return;
      const int a = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (a < 0) continue;
      const int b = dial_loopback(target_);
      if (b < 0) {
        ::close(a);
        continue;
      }
      pumps_.emplace_back([this, a, b] { pump(a, b); });
    }
  }
  void pump(int client, int server) {
    std::size_t seen[2] = {0, 0};
    char buf[64 << 10];
    for (;;) {
      pollfd p[3] = {{client, POLLIN, 0}, {server, POLLIN, 0}, {stop_[0], POLLIN, 0}};
      if (::poll(p, 3, -1) < 0 || p[2].revents) break;
      const int from = p[0].revents ? client : server;
      const int to = from == client ? server : client;
      const Dir dir = from == client ? Dir::to_server : Dir::to_client;
      const ssize_t n = ::recv(from, buf, sizeof(buf), 0);
      if (n <= 0) break;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto& seen_dir = seen[dir == Dir::to_server ? 0 : 1];
        if (dir == flip_dir_ && flip_at_ >= seen_dir && flip_at_ < seen_dir + std::size_t(n)) {
          buf[flip_at_ - seen_dir] ^= 0x01;
          flip_at_ = SIZE_MAX;  // once
        }
        seen_dir += std::size_t(n);
        (dir == Dir::to_server ? to_server_ : to_client_).append(buf, std::size_t(n));
      }
      if (::send(to, buf, std::size_t(n), MSG_NOSIGNAL) != n) break;
    }
    ::close(client);
    ::close(server);
  }

  const std::uint16_t target_;
  std::uint16_t port_ = 0;
  int listen_fd_ = -1;
  int stop_[2] = {-1, -1};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;  // touched by the acceptor, joined after it
  std::mutex mu_;                   // guards the fields below
  Dir flip_dir_ = Dir::to_server;
  std::size_t flip_at_ = SIZE_MAX;
  std::string to_server_, to_client_;
};

class TcpEncryption : public ::testing::Test {
 protected:
  // A tcp server (encrypting or not) with one region of kRegionBytes.
  void start(bool encrypt) {
    runtime_ = internal::ActorRuntime::create({}).value();
    regions_ = std::make_shared<RegionTable>();
    config_.request_timeout = 10s;
    config_.tcp_chunk_bytes = 256 << 10;  // a transfer of several records
    config_.tcp_streams = 1;
    config_.tcp_encrypt = encrypt;
    factory_ = builtin_registry().find("tcp").value();
    server_ =
        factory_
            .make_server(ServerContext{&runtime_->system(), regions_, config_, "v", "127.0.0.1"})
            .value();
    region_ = std::make_shared<Region>(1, internal::allocate_aligned(kRegionBytes), kRegionBytes);
    std::memset(region_->data(), 0, kRegionBytes);
    regions_->add(region_);
    ref_ = testing::region_ref(1, kRegionBytes);
    ASSERT_OK(server_->describe(*region_, ref_));
    const auto& address = server_->endpoint().address;
    port_ = static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  }
  void TearDown() override {
    server_.reset();
    runtime_.reset();
  }
  // A client of the server, through `proxy` when given; `endpoint` edits
  // what the client is told.
  std::unique_ptr<Transport> client(Proxy* proxy = nullptr) {
    return client_for(server_->endpoint(), proxy);
  }
  std::unique_ptr<Transport> client_for(EndpointInfo ep, Proxy* proxy = nullptr) {
    if (proxy) ep.address = "127.0.0.1:" + std::to_string(proxy->port());
    return factory_.make_client(ClientContext{&runtime_->system(), config_}, ep).value();
  }
  static std::vector<std::byte> marked(std::size_t n) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(kMarker[i % kMarker.size()]);
    return v;
  }

  std::unique_ptr<internal::ActorRuntime> runtime_;
  std::shared_ptr<RegionTable> regions_;
  TransportConfig config_;
  TransportFactory factory_;
  std::unique_ptr<TransportServer> server_;
  std::shared_ptr<Region> region_;
  wire::RegionRef ref_;
  std::uint16_t port_ = 0;
};

TEST_F(TcpEncryption, TheBytesCrossTheWireSealedAndArriveWhole) {
  start(true);
  ASSERT_EQ(server_->endpoint().key.size(), 32u);
  Proxy proxy(port_);
  auto c = client(&proxy);
  const auto src = marked(kRegionBytes);
  ASSERT_OK(c->write(ref_, 0, src.data(), src.size()).get(kWait));
  EXPECT_EQ(std::memcmp(region_->data(), src.data(), src.size()), 0);
  std::vector<std::byte> back(kRegionBytes);
  ASSERT_OK(c->read(ref_, 0, back.data(), back.size()).get(kWait));
  EXPECT_EQ(back, src);
  c.reset();
  // Both directions carried the megabyte (and a tag per record), none of
  // it readable.
  const auto up = proxy.recorded(Proxy::Dir::to_server);
  const auto down = proxy.recorded(Proxy::Dir::to_client);
  EXPECT_GT(up.size(), kRegionBytes);
  EXPECT_GT(down.size(), kRegionBytes);
  EXPECT_FALSE(contains(up, kMarker));
  EXPECT_FALSE(contains(down, kMarker));
}

TEST_F(TcpEncryption, WithoutItTheSameProxySeesThePlaintext) {
  start(false);  // the control: the proxy does capture what crosses
  EXPECT_TRUE(server_->endpoint().key.empty());
  Proxy proxy(port_);
  auto c = client(&proxy);
  const auto src = marked(64 << 10);
  ASSERT_OK(c->write(ref_, 0, src.data(), src.size()).get(kWait));
  c.reset();
  EXPECT_TRUE(contains(proxy.recorded(Proxy::Dir::to_server), kMarker));
}

TEST_F(TcpEncryption, AByteAlteredOnItsWayToTheReaderFailsTheRead) {
  start(true);
  const auto src = marked(kRegionBytes);
  std::memcpy(region_->data(), src.data(), src.size());
  Proxy proxy(port_);
  // Past the hello's answer (1 + 16 bytes) and the reply record (8 + 16),
  // inside the payload's first record.
  proxy.flip(Proxy::Dir::to_client, 5000);
  auto c = client(&proxy);
  std::vector<std::byte> back(kRegionBytes);
  EXPECT_TRUE(testing::is_error(c->read(ref_, 0, back.data(), back.size()).get(kWait),
                                Errc::unauthenticated, "failed authentication"));
  // The next read, on a new connection, is whole.
  ASSERT_OK(c->read(ref_, 0, back.data(), back.size()).get(kWait));
  EXPECT_EQ(back, src);
}

TEST_F(TcpEncryption, AByteAlteredOnItsWayToTheVolumeFailsTheWrite) {
  start(true);
  Proxy proxy(port_);
  // Past the hello (40 + 16 bytes) and the request record (32 + 16).
  proxy.flip(Proxy::Dir::to_server, 5000);
  auto c = client(&proxy);
  const auto src = marked(kRegionBytes);
  EXPECT_TRUE(testing::is_error(c->write(ref_, 0, src.data(), src.size()).get(kWait),
                                Errc::unauthenticated, "payload failed authentication"));
  // The writer learns it, so a put would commit nothing; a second write
  // lands whole.
  ASSERT_OK(c->write(ref_, 0, src.data(), src.size()).get(kWait));
  EXPECT_EQ(std::memcmp(region_->data(), src.data(), src.size()), 0);
}

TEST_F(TcpEncryption, ARecordedConnectionCannotBeReplayed) {
  start(true);
  std::string recorded;
  {
    Proxy proxy(port_);
    auto c = client(&proxy);
    const auto first = marked(64 << 10);
    ASSERT_OK(c->write(ref_, 0, first.data(), first.size()).get(kWait));
    c.reset();
    recorded = proxy.recorded(Proxy::Dir::to_server);
  }
  // The region moves on; then an eavesdropper replays the whole recorded
  // connection (hello, secret, sealed write) to the volume.
  std::memset(region_->data(), 0x77, kRegionBytes);
  const int fd = dial_loopback(port_);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::send(fd, recorded.data(), recorded.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(recorded.size()));
  // The volume answers the hello (its own fresh salt), then closes on the
  // first record, which was sealed for another connection's keys: nothing
  // else comes back, and the region is untouched.
  char answer[64];
  std::size_t got = 0;
  for (;;) {
    const ssize_t n = ::recv(fd, answer + got, sizeof(answer) - got, 0);
    if (n <= 0) break;
    got += std::size_t(n);
  }
  ::close(fd);
  EXPECT_EQ(got, 1u + 16u);  // the verdict and the salt, then the close
  EXPECT_EQ(answer[0], 0);
  const auto* bytes = static_cast<const unsigned char*>(static_cast<const void*>(region_->data()));
  for (std::size_t i = 0; i < kRegionBytes; ++i) ASSERT_EQ(bytes[i], 0x77) << i;
}

TEST_F(TcpEncryption, AClientThatDoesNotEncryptIsRefused) {
  start(true);
  // A client told the secret but not the key speaks version 1.
  auto ep = server_->endpoint();
  ep.key.clear();
  auto plain = client_for(ep);
  std::vector<std::byte> back(4096);
  EXPECT_TRUE(testing::is_error(plain->read(ref_, 0, back.data(), back.size()).get(kWait),
                                Errc::unauthenticated,
                                "the volume encrypts its connections and this client does not"));
}

TEST_F(TcpEncryption, AClientThatEncryptsIsRefusedByAVolumeThatDoesNot) {
  start(false);
  auto ep = server_->endpoint();
  ep.key = std::string(32, 'k');
  auto sealed = client_for(ep);
  std::vector<std::byte> back(4096);
  EXPECT_TRUE(testing::is_error(sealed->read(ref_, 0, back.data(), back.size()).get(kWait),
                                Errc::unauthenticated,
                                "this client encrypts and the volume does not"));
}

TEST_F(TcpEncryption, AClientWithTheWrongKeyMovesNoByte) {
  start(true);
  std::memset(region_->data(), 0x33, kRegionBytes);
  auto ep = server_->endpoint();
  ep.key[0] = static_cast<char>(ep.key[0] ^ 0x01);
  auto wrong = client_for(ep);
  const auto src = marked(64 << 10);
  // Its first record fails at the volume, which closes the connection.
  EXPECT_FALSE(wrong->write(ref_, 0, src.data(), src.size()).get(kWait).ok());
  const auto* bytes = static_cast<const unsigned char*>(static_cast<const void*>(region_->data()));
  for (std::size_t i = 0; i < kRegionBytes; ++i) ASSERT_EQ(bytes[i], 0x33) << i;
}

}  // namespace
}  // namespace meshstore::transports
