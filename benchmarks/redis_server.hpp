#pragma once
// A Redis server a benchmark starts for itself (peer_bench's redis
// contender, store_bench --scenario small's baseline), and connections to
// it. Built only with MESHSTORE_HAVE_HIREDIS.
#if MESHSTORE_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#include <sys/types.h>

#include <string>

namespace meshstore::bench {

/// A Redis server on a unix socket in a temporary directory and on a free
/// TCP port of 127.0.0.1, persistence off; stopped and removed with this.
/// Dies if it does not come up within 10 s. With `netns`, it runs in that
/// network namespace (ip netns exec) and listens on `host` there.
struct RedisServer {
  pid_t pid = -1;
  std::string dir, socket;
  std::string host = "127.0.0.1";
  int port = 0;
  RedisServer() : RedisServer("", "") {}
  RedisServer(const std::string& netns, const std::string& host);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
};

/// A connection to the server at unix socket `socket`; dies if there is
/// none. The caller frees it (redisFree).
redisContext* redis_connect(const std::string& socket);

/// A connection to the server at `host`:`port` (TCP, Nagle off as hiredis
/// sets it); dies if there is none. The caller frees it.
redisContext* redis_connect_tcp(int port, const std::string& host = "127.0.0.1");

}  // namespace meshstore::bench
#endif
