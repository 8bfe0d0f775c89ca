// libFuzzer target for the tcp transport's server: what a peer sends on one
// connection. The input's first byte picks the framing: even, a valid hello
// (the server's own secret) and then the rest as requests; odd, the rest
// raw, from the connection's first byte (the hello itself fuzzed). The
// server must answer or close, never crash nor touch memory outside its
// region (ASan), and keep serving: every 64 inputs a fresh connection reads
// the region back and must get its 4096 bytes. Built with clang when it is
// present (fuzz/CMakeLists.txt); ctest runs it for a short while (label
// fuzz).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "meshstore/internal/memory.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/transports/tcp/tcp_transport.hpp"

namespace {

using namespace meshstore;
using namespace meshstore::transports;

struct Target {
  std::shared_ptr<RegionTable> regions = std::make_shared<RegionTable>();
  std::shared_ptr<Region> region;  // the table holds it weakly
  std::unique_ptr<TransportServer> server;
  std::uint16_t port = 0;
  std::string secret;
};

Target* target = nullptr;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "tcp_fuzz: %s (errno %d: %s)\n", what, errno, std::strerror(errno));
  std::abort();
}

// libFuzzer's timer (SIGALRM, for -timeout) interrupts blocking calls of
// this thread: every call below retries on EINTR. A connect that blocks
// (the server's accept backlog full under load) and is interrupted is
// tried again on a fresh socket.
int dial() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(target->port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      const int e = errno;
      ::close(fd);
      if (e == EINTR) continue;
      errno = e;
      fail("connect");
    }
    timeval tv{2, 0};  // a server that neither answers nor closes is a hang
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
  }
  fail("connect: interrupted 100 times");
}

// recv of exactly `n` bytes (MSG_WAITALL), retried on EINTR; what it got.
ssize_t recv_exact(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t k = ::recv(fd, c + got, n - got, MSG_WAITALL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return got > 0 ? static_cast<ssize_t>(got) : k;
    got += static_cast<std::size_t>(k);
  }
  return static_cast<ssize_t>(got);
}

bool send_all(int fd, const void* p, std::size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool hello(int fd) {
  char h[4 + 4 + 32] = {'M', 'S', 'T', 'C'};
  const std::uint32_t version = 1;
  std::memcpy(h + 4, &version, 4);
  std::memcpy(h + 8, target->secret.data(), std::min<std::size_t>(target->secret.size(), 32));
  char verdict = 1;
  return send_all(fd, h, sizeof(h)) && recv_exact(fd, &verdict, 1) == 1 && verdict == 0;
}

// A real client's read of the whole region answers 4096 bytes.
void still_serving() {
  const int fd = dial();
  if (!hello(fd)) fail("the server refused a valid hello");
  const std::uint64_t req[4] = {2 /* read, reserved 0 */, 1, 0, 4096};
  if (!send_all(fd, req, sizeof(req))) fail("sending a read");
  std::uint32_t reply[2] = {1, 0};
  const ssize_t got = recv_exact(fd, reply, sizeof(reply));
  if (got != sizeof(reply) || reply[0] != 0) {
    std::fprintf(stderr, "tcp_fuzz: got %zd bytes, code %u\n", got, reply[0]);
    fail("a valid read was not answered ok");
  }
  std::string msg(reply[1], '\0');
  if (reply[1] && recv_exact(fd, msg.data(), msg.size()) != ssize_t(msg.size())) std::abort();
  std::string bytes(4096, '\0');
  if (recv_exact(fd, bytes.data(), bytes.size()) != 4096) fail("the region's bytes were cut");
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)log::set_level("off");  // refused hellos and bad requests are logged as warnings
  target = new Target();
  target->region = std::make_shared<Region>(1, internal::allocate_aligned(4096), 4096);
  std::memset(target->region->data(), 0x5a, 4096);
  target->regions->add(target->region);
  TransportConfig config;
  config.request_timeout = std::chrono::milliseconds(2000);
  auto server = tcp::tcp_factory().make_server(
      ServerContext{nullptr, target->regions, config, "fuzz", "127.0.0.1"});
  if (!server.ok()) fail(server.status().to_string().c_str());
  target->server = std::move(server).value();
  const auto& address = target->server->endpoint().address;
  target->port = static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  target->secret = target->server->endpoint().secret;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::uint64_t runs = 0;
  if (size == 0) return 0;
  const int fd = dial();
  const bool framed = (data[0] & 1) == 0;
  if (!framed || hello(fd)) {
    send_all(fd, data + 1, size - 1);
    ::shutdown(fd, SHUT_WR);
    char sink[4096];
    for (;;) {  // replies, until the server closes
      const ssize_t k = ::recv(fd, sink, sizeof(sink), 0);
      if (k > 0 || (k < 0 && errno == EINTR)) continue;
      break;
    }
  }
  ::close(fd);
  if (++runs % 64 == 0) still_serving();
  return 0;
}
