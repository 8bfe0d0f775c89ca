// A Redis server a benchmark starts for itself (see redis_server.hpp).
#if MESHSTORE_HAVE_HIREDIS
#include "redis_server.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {

namespace {

// A TCP port of 127.0.0.1 that was free a moment ago.
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket: cannot pick a port for redis-server");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    die("bind: cannot pick a port for redis-server");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

RedisServer::RedisServer(const std::string& netns, const std::string& bind_host) {
  char tmpl[] = "/tmp/meshstore_bench-redis-XXXXXX";
  dir = ::mkdtemp(tmpl);
  socket = dir + "/redis.sock";
  // A port free here is as good a guess in a fresh namespace, which has
  // nothing listening.
  port = free_loopback_port();
  if (!bind_host.empty()) host = bind_host;
  std::vector<std::string> args{"redis-server",
                                "--port",
                                std::to_string(port),
                                "--bind",
                                host,
                                "--unixsocket",
                                socket,
                                "--unixsocketperm",
                                "700",
                                "--save",
                                "",
                                "--appendonly",
                                "no",
                                "--dir",
                                dir,
                                "--logfile",
                                dir + "/redis.log",
                                "--daemonize",
                                "no"};
  // Bound to another host's address (a network namespace of the bench's
  // own): let that link's clients in, which protected mode would refuse.
  if (host != "127.0.0.1") args.insert(args.end(), {"--protected-mode", "no"});
  std::string program = "redis-server";
  if (!netns.empty()) {
    // The unix socket (a file) stays reachable from here: the readiness
    // check below works across namespaces.
    program = ip_tool();
    args.insert(args.begin(), {program, "netns", "exec", netns});
  }
  std::vector<char*> argv;
  for (auto& x : args) argv.push_back(x.data());
  argv.push_back(nullptr);
  if (posix_spawnp(&pid, program.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    die("cannot start redis-server (apt-get install redis-server)");
  }
  for (int i = 0; i < 1000; ++i) {  // bounded: 10 s
    if (redisContext* c = redisConnectUnix(socket.c_str()); c && !c->err) {
      redisFree(c);
      return;
    } else if (c) {
      redisFree(c);
    }
    std::this_thread::sleep_for(10ms);
  }
  die("redis-server did not come up on " + socket + " (its log: " + dir + "/redis.log)");
}

RedisServer::~RedisServer() {
  if (pid > 0) {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
  }
  std::system(("rm -rf '" + dir + "'").c_str());
}

redisContext* redis_connect(const std::string& socket) {
  redisContext* c = redisConnectUnix(socket.c_str());
  if (!c || c->err) die("redis connect: " + std::string(c ? c->errstr : "no context"));
  return c;
}

redisContext* redis_connect_tcp(int port, const std::string& host) {
  redisContext* c = redisConnect(host.c_str(), port);
  if (!c || c->err) die("redis connect: " + std::string(c ? c->errstr : "no context"));
  return c;
}

}  // namespace meshstore::bench
#endif
