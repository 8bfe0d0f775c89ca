// Transport::abort on tcp: a volume whose host vanished sends nothing, not
// even a close, so a transfer in flight would wait for its socket's
// timeout. When the client learns the volume went down it aborts the
// transport, and every transfer, in flight or later, ends at once with the
// reason. The volume here is a silent peer: it accepts, answers the hello,
// reads a request and then never answers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "meshstore/transports/registry.hpp"
#include "testing/region_ref.hpp"
#include "testing/test_util.hpp"

namespace meshstore::transports {
namespace {

using namespace std::chrono_literals;

class SilentVolume {
 public:
  SilentVolume() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(listen_fd_, 4), 0);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~SilentVolume() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    thread_.join();
    if (conn_ >= 0) ::close(conn_);
  }
  std::uint16_t port() const { return port_; }
  // Waits until a request's header arrived (the transfer is in flight).
  bool wait_for_request() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return got_request_; });
  }

 private:
  void serve() {
    conn_ = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn_ < 0) return;
    char hello[4 + 4 + 32];
    if (::recv(conn_, hello, sizeof(hello), MSG_WAITALL) != ssize_t(sizeof(hello))) return;
    const char accepted = 0;
    ::send(conn_, &accepted, 1, MSG_NOSIGNAL);
    char request[32];
    if (::recv(conn_, request, sizeof(request), MSG_WAITALL) != ssize_t(sizeof(request))) return;
    std::lock_guard<std::mutex> lock(mu_);
    got_request_ = true;
    cv_.notify_all();
    // ... and never answers, nor closes, until the test ends.
  }

  int listen_fd_ = -1;
  int conn_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool got_request_ = false;
};

TEST(TcpAbort, ATransferToAVanishedVolumeEndsAtOnceWithTheReason) {
  SilentVolume volume;
  TransportConfig config;
  config.request_timeout = 60s;  // what the transfer would otherwise wait
  EndpointInfo ep;
  ep.transport = "tcp";
  ep.address = "127.0.0.1:" + std::to_string(volume.port());
  ep.secret = std::string(32, 's');
  auto client =
      builtin_registry().find("tcp").value().make_client(ClientContext{nullptr, config}, ep);
  ASSERT_OK(client);
  const auto ref = testing::region_ref(1, 4096);
  std::vector<std::byte> buf(4096);
  auto read = (*client)->read(ref, 0, buf.data(), buf.size());
  ASSERT_TRUE(volume.wait_for_request());
  (*client)->abort(Status(Errc::unavailable, "volume 'v' went down (test)"));
  // Well inside its 60 s socket timeout: a wait of 10 s would give
  // wait_timeout instead.
  EXPECT_TRUE(testing::is_error(read.get(10s), Errc::unavailable, "volume 'v' went down"));
  // Later transfers fail with the same reason, without dialling.
  EXPECT_TRUE(testing::is_error((*client)->write(ref, 0, buf.data(), buf.size()).get(10s),
                                Errc::unavailable, "volume 'v' went down"));
}

}  // namespace
}  // namespace meshstore::transports
