#pragma once
// The redis contender: a Redis server peer_bench starts for itself, and
// moving a workload through it in pipelined pieces (hiredis). Built only
// with MESHSTORE_HAVE_HIREDIS.
#if MESHSTORE_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#include <sys/types.h>

#include <string>

#include "workload.hpp"

namespace meshstore::bench {

/// A Redis server the benchmark starts for itself on a unix socket in a
/// temporary directory, persistence off; stopped and removed with this.
/// Dies if it does not come up within 10 s.
struct RedisServer {
  pid_t pid = -1;
  std::string dir, socket;
  RedisServer();
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
};

/// A connection to the server at `socket`; dies if there is none. The
/// caller frees it (redisFree).
redisContext* redis_connect(const std::string& socket);

/// SETs (`write`) or GETs every piece of `w`'s tensors, pipelined in windows.
void redis_move(redisContext* c, Workload& w, bool write);

}  // namespace meshstore::bench
#endif
