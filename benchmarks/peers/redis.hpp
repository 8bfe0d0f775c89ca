#pragma once
// The redis contender: moving a workload through a Redis server peer_bench
// starts for itself (../redis_server.hpp) in pipelined pieces (hiredis).
// Built only with MESHSTORE_HAVE_HIREDIS.
#if MESHSTORE_HAVE_HIREDIS
#include <hiredis/hiredis.h>

#include "../redis_server.hpp"
#include "workload.hpp"

namespace meshstore::bench {

/// SETs (`write`) or GETs every piece of `w`'s tensors, pipelined in windows.
void redis_move(redisContext* c, Workload& w, bool write);

}  // namespace meshstore::bench
#endif
