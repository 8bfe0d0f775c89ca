// tensor_server: the store embedded in a service that has its own threads
// and event loop. A small TCP server (one poll() loop, non-blocking
// sockets) answers "GET <key>\n" with the tensor's bytes from the store.
// The loop never blocks on a store call: it starts get(), and the future's
// continuation (which runs on a store thread) queues the answer and wakes
// the loop through an eventfd. Futures are used from threads the store's
// runtime does not own, in both directions.
//
//   build/bin/tensor_server --demo             serve, query itself, exit
//   build/bin/tensor_server --port 7000        serve until Ctrl-C
//
// Reply: "OK <dtype> <shape> <nbytes>\n" then the raw bytes, or "ERR <status>\n".

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/store.hpp"

using namespace std::chrono_literals;

namespace {

// Set by a signal handler or the demo thread; a lock-free atomic is safe for both.
std::atomic<bool> g_stop{false};

struct Connection {
  std::string in;   // bytes received, not yet a full request line
  std::string out;  // bytes to send
};

// Answers computed on store threads, waiting for the event loop.
class Mailbox {
 public:
  Mailbox() : wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Mailbox() { close(wake_fd_); }
  int fd() const { return wake_fd_; }
  void post(int conn, std::string reply) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      replies_.emplace_back(conn, std::move(reply));
    }
    const std::uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  std::deque<std::pair<int, std::string>> take() {
    std::uint64_t n;
    (void)!read(wake_fd_, &n, sizeof(n));
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(replies_);
  }

 private:
  int wake_fd_;
  std::mutex mu_;  // guards replies_
  std::deque<std::pair<int, std::string>> replies_;
};

std::string encode_reply(const meshstore::Result<meshstore::Tensor>& t) {
  if (!t.ok()) return "ERR " + t.status().to_string() + "\n";
  std::string head = "OK " + std::string(meshstore::dtype_name(t->dtype())) + " " +
                     meshstore::shape_to_string(t->shape()) + " " + std::to_string(t->nbytes()) +
                     "\n";
  head.append(static_cast<const char*>(t->data()), t->nbytes());
  return head;
}

int listen_on(std::uint16_t port, std::uint16_t& bound) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // services listen on loopback by default
  a.sin_port = htons(port);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::perror("tensor_server: listen");
    std::exit(1);
  }
  bound = ntohs(a.sin_port);
  return fd;
}

// The service's own event loop: accepts, reads request lines, starts store
// calls without blocking, and writes answers as they arrive.
void serve(meshstore::Store& store, int listen_fd) {
  // Shared with the continuations: a get may complete after this loop ends.
  auto mailbox = std::make_shared<Mailbox>();
  std::map<int, Connection> conns;
  while (!g_stop) {
    std::vector<pollfd> fds{{listen_fd, POLLIN, 0}, {mailbox->fd(), POLLIN, 0}};
    for (auto& [fd, c] : conns)
      fds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    if (poll(fds.data(), fds.size(), 200) < 0) continue;
    if (fds[0].revents & POLLIN) {
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) conns[fd] = Connection{};
    }
    if (fds[1].revents & POLLIN) {
      for (auto& [fd, reply] : mailbox->take()) {
        if (auto it = conns.find(fd); it != conns.end()) it->second.out += reply;
      }
    }
    for (std::size_t i = 2; i < fds.size(); ++i) {
      const int fd = fds[i].fd;
      auto& c = conns[fd];
      bool closed = false;
      if (fds[i].revents & POLLIN) {
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
          closed = true;
        else
          c.in.append(buf, static_cast<std::size_t>(n));
        for (std::size_t nl; (nl = c.in.find('\n')) != std::string::npos;) {
          const std::string line = c.in.substr(0, nl);
          c.in.erase(0, nl + 1);
          if (line.rfind("GET ", 0) != 0) {
            c.out += "ERR invalid_argument: expected 'GET <key>'\n";
            continue;
          }
          // Non-blocking: the continuation runs on a store thread and hands
          // the answer back to this loop through the mailbox.
          store.get(line.substr(4))
              .on_complete([mailbox, fd](const meshstore::Result<meshstore::Tensor>& t) {
                mailbox->post(fd, encode_reply(t));
              });
        }
      }
      if ((fds[i].revents & POLLOUT) && !c.out.empty()) {
        ssize_t n = write(fd, c.out.data(), c.out.size());
        if (n > 0) c.out.erase(0, static_cast<std::size_t>(n));
      }
      if (closed || (fds[i].revents & (POLLERR | POLLHUP))) {
        close(fd);
        conns.erase(fd);
      }
    }
  }
  for (auto& [fd, c] : conns) close(fd);
}

// A blocking client for the demo: sends one request, reads one reply.
std::string ask(std::uint16_t port, const std::string& key) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return "connect failed";
  const std::string req = "GET " + key + "\n";
  (void)!write(fd, req.data(), req.size());
  std::string reply;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) {
    reply.append(buf, static_cast<std::size_t>(n));
    const auto nl = reply.find('\n');
    if (nl == std::string::npos) continue;
    if (reply.rfind("ERR", 0) == 0) break;
    const auto nbytes = std::stoull(reply.substr(reply.rfind(' ', nl) + 1, nl));
    if (reply.size() >= nl + 1 + nbytes) break;
  }
  close(fd);
  return reply.substr(0, reply.find('\n'));
}

}  // namespace

int main(int argc, char** argv) {
  bool demo = false;
  std::uint16_t port = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--demo") == 0)
      demo = true;
    else if (std::strcmp(argv[i], "--port") == 0 && i + 1 < argc)
      port = static_cast<std::uint16_t>(std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: tensor_server [--demo] [--port PORT]\n");
      return 2;
    }
  }
  auto store = meshstore::Store::embedded().value();
  std::vector<float> w(64 * 64);
  std::iota(w.begin(), w.end(), 0.0f);
  store.put("model.embed", meshstore::TensorView::of(w.data(), {64, 64})).get(10s).value();

  std::uint16_t bound = 0;
  const int listen_fd = listen_on(port, bound);
  std::printf("tensor_server: serving tensors on 127.0.0.1:%u\n", bound);
  std::fflush(stdout);
  if (!demo) {
    signal(SIGINT, [](int) { g_stop = true; });
    signal(SIGTERM, [](int) { g_stop = true; });
    serve(store, listen_fd);
    return 0;
  }
  // Demo: the service loop on its own thread, queried by a plain client.
  std::thread loop([&] { serve(store, listen_fd); });
  const std::string found = ask(bound, "model.embed");
  const std::string missing = ask(bound, "no.such.key");
  std::printf("GET model.embed -> %s\nGET no.such.key -> %s\n", found.c_str(), missing.c_str());
  g_stop = true;
  loop.join();
  close(listen_fd);
  const bool ok = found == "OK float32 [64, 64] 16384" && missing.rfind("ERR not_found", 0) == 0;
  std::printf("tensor_server demo: %s\n", ok ? "ok" : "unexpected replies");
  return ok ? 0 : 1;
}
