// The raw-TCP baseline: the peer's loopback server and the client's timed
// stream (see raw_tcp.hpp).
#include "raw_tcp.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../bench_util.hpp"

namespace meshstore::bench {

namespace {

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
bool recv_all(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, c, n, MSG_WAITALL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

}  // namespace

void raw_serve(int lfd) {
  std::vector<char> buf;
  for (;;) {
    const int fd = accept(lfd, nullptr, nullptr);
    if (fd < 0) return;
    std::uint64_t req[2];
    while (recv_all(fd, req, sizeof(req))) {
      if (buf.size() < req[0]) {
        buf.resize(req[0]);
        std::memset(buf.data(), 1, buf.size());
      }
      if (req[1] == 0) {
        const char ack = 1;
        if (!recv_all(fd, buf.data(), req[0]) || !send_all(fd, &ack, 1)) break;
      } else if (!send_all(fd, buf.data(), req[0])) {
        break;
      }
    }
    close(fd);
  }
}

int raw_listen(std::uint16_t& port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 4) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("store_bench peer: raw tcp listen");
    std::exit(1);
  }
  port = ntohs(addr.sin_port);
  return fd;
}

RawTcp::RawTcp(std::uint16_t port) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("store_bench: raw tcp connect");
    std::exit(1);
  }
}

RawTcp::~RawTcp() { close(fd_); }

double RawTcp::send(const void* p, std::size_t n) {
  std::uint64_t req[2] = {n, 0};
  char ack = 0;
  auto t0 = Clock::now();
  if (!send_all(fd_, req, sizeof(req)) || !send_all(fd_, p, n) || !recv_all(fd_, &ack, 1))
    fail("raw tcp send");
  return secs(t0);
}

double RawTcp::recv(void* p, std::size_t n) {
  std::uint64_t req[2] = {n, 1};
  auto t0 = Clock::now();
  if (!send_all(fd_, req, sizeof(req)) || !recv_all(fd_, p, n)) fail("raw tcp recv");
  return secs(t0);
}

void RawTcp::fail(const char* what) {
  std::fprintf(stderr, "store_bench: %s failed\n", what);
  std::exit(1);
}

}  // namespace meshstore::bench
