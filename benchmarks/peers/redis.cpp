// The redis contender: a workload moved through the server peer_bench
// starts for itself (../redis_server.hpp) in pipelined pieces (see
// redis.hpp).
#if MESHSTORE_HAVE_HIREDIS
#include "redis.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "../bench_util.hpp"

namespace meshstore::bench {

namespace {

// Values go to Redis in pieces of this size (Redis caps a value at 512 MB;
// its users split tensors into pieces of a few MiB), pipelined in windows.
constexpr std::size_t kRedisPiece = std::size_t{4} << 20;
constexpr std::size_t kRedisWindow = 16;

}  // namespace

// SETs (write) or GETs every piece of `w`'s tensors, pipelined in windows.
void redis_move(redisContext* c, Workload& w, bool write) {
  struct Piece {
    std::string key;
    char* data;
    std::size_t n;
  };
  std::vector<Piece> window;
  auto flush = [&] {
    for (const auto& p : window) {
      void* r = nullptr;
      if (redisGetReply(c, &r) != REDIS_OK || !r) die("redis reply: " + std::string(c->errstr));
      auto* reply = static_cast<redisReply*>(r);
      if (write && reply->type != REDIS_REPLY_STATUS) die("redis SET " + p.key + " failed");
      if (!write) {
        if (reply->type != REDIS_REPLY_STRING || static_cast<std::size_t>(reply->len) != p.n) {
          die("redis GET " + p.key + " returned no value of the right size");
        }
        std::memcpy(p.data, reply->str, p.n);  // hiredis's reply buffer -> ours
      }
      freeReplyObject(reply);
    }
    window.clear();
  };
  for (std::size_t t = 0; t < w.buffers.size(); ++t) {
    auto* base = reinterpret_cast<char*>(w.buffers[t].data());
    const std::size_t bytes = w.buffers[t].size() * 2;
    for (std::size_t at = 0, i = 0; at < bytes; at += kRedisPiece, ++i) {
      Piece p{"t" + std::to_string(t) + "." + std::to_string(i), base + at,
              std::min(kRedisPiece, bytes - at)};
      if (write) {
        redisAppendCommand(c, "SET %b %b", p.key.data(), p.key.size(), p.data, p.n);
      } else {
        redisAppendCommand(c, "GET %b", p.key.data(), p.key.size());
      }
      window.push_back(std::move(p));
      if (window.size() == kRedisWindow) flush();
    }
  }
  flush();
}

}  // namespace meshstore::bench
#endif
