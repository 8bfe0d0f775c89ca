// store_bench --scenario small: small values between two processes.
// - p50/p99 of a 4 KiB put + get_into, against the round trip of a bare
//   request (exists) to the same store;
// - by value size, 64 B to 1 MiB: put + get_into p50/p99, next to Redis
//   SET + GET p50/p99 of the same value (one client, TCP over loopback, a
//   server this run starts, as peer_bench's redis contender does), when
//   built with hiredis.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../bench_util.hpp"
#include "../redis_server.hpp"
#include "peer.hpp"
#include "scenarios.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {

namespace {

struct SizePoint {
  std::size_t bytes = 0;
  double p50 = 0, p99 = 0;              // meshstore put + get_into, microseconds
  double get_p50 = 0, put_p50 = 0;      // each call alone
  double redis_p50 = 0, redis_p99 = 0;  // Redis SET + GET; 0 without hiredis
  double redis_get_p50 = 0, redis_set_p50 = 0;
};

// Microseconds of each round: the pair, and each call of it alone.
struct Rounds {
  std::vector<double> both, write, read;
  void add(Clock::time_point t0, Clock::time_point t1, Clock::time_point t2) {
    both.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count());
    write.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    read.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
};

// put + get_into of `bytes` under `key`, `iters` times. The value read back
// is checked.
Rounds time_put_get(meshstore::Store& store, const std::string& key, std::size_t bytes, int iters) {
  std::vector<std::uint8_t> src(bytes), dst(bytes);
  const auto n = static_cast<std::int64_t>(bytes);
  const meshstore::TensorView in(src.data(), meshstore::DType::uint8, {n});
  const meshstore::TensorView out(dst.data(), meshstore::DType::uint8, {n});
  Rounds us;
  for (int i = 0; i < iters; ++i) {
    src.front() = src.back() = static_cast<std::uint8_t>(i);
    const auto t0 = Clock::now();
    must(store.put(key, in).get(60s), "put");
    const auto t1 = Clock::now();
    must(store.get_into(key, out).get(60s), "get_into");
    us.add(t0, t1, Clock::now());
    if (dst.front() != src.front() || dst.back() != src.back()) die("get_into: wrong bytes");
  }
  return us;
}

#if MESHSTORE_HAVE_HIREDIS
// SET + GET of `bytes` under `key`, `iters` times, one call at a time:
// each round's microseconds. The value read back is copied out (as a
// get_into would) and checked.
Rounds time_redis(redisContext* c, const std::string& key, std::size_t bytes, int iters) {
  std::vector<char> src(bytes), dst(bytes);
  Rounds us;
  for (int i = 0; i < iters; ++i) {
    src.front() = src.back() = static_cast<char>(i);
    const auto t0 = Clock::now();
    auto* set = static_cast<redisReply*>(
        redisCommand(c, "SET %b %b", key.data(), key.size(), src.data(), src.size()));
    if (!set || set->type != REDIS_REPLY_STATUS) die("redis SET failed");
    freeReplyObject(set);
    const auto t1 = Clock::now();
    auto* get = static_cast<redisReply*>(redisCommand(c, "GET %b", key.data(), key.size()));
    if (!get || get->type != REDIS_REPLY_STRING || static_cast<std::size_t>(get->len) != bytes) {
      die("redis GET returned no value of the right size");
    }
    std::memcpy(dst.data(), get->str, bytes);
    freeReplyObject(get);
    us.add(t0, t1, Clock::now());
    if (dst.front() != src.front() || dst.back() != src.back()) die("redis GET: wrong bytes");
  }
  return us;
}
#endif

}  // namespace

void run_small(const Args& a) {
  const int iters = a.iters ? a.iters : (a.smoke ? 50 : 2000);
  auto session = open_session(a);
  auto& store = session.store;
  std::vector<std::uint8_t> src(4096, 7), dst(4096);
  const meshstore::TensorView in(src.data(), meshstore::DType::uint8, {4096});
  const meshstore::TensorView out(dst.data(), meshstore::DType::uint8, {4096});
  must(store.put("small", in).get(60s), "put");
  std::vector<double> rtt;
  Rounds put_get;
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    must(store.exists("small").get(60s), "exists");
    rtt.push_back(secs(t0) * 1e6);
    t0 = Clock::now();
    must(store.put("small", in).get(60s), "put");
    const auto t1 = Clock::now();
    must(store.get_into("small", out).get(60s), "get_into");
    put_get.add(t0, t1, Clock::now());
  }
  const double rtt50 = percentile(rtt, 0.5), pg50 = percentile(put_get.both, 0.5),
               pg99 = percentile(put_get.both, 0.99), put50 = percentile(put_get.write, 0.5),
               get50 = percentile(put_get.read, 0.5), get99 = percentile(put_get.read, 0.99);
  const auto fast = store.admin().fast_path_stats();

  // By value size, each with Redis next to it.
  const std::vector<std::size_t> sizes =
      a.smoke ? std::vector<std::size_t>{64, 4096, std::size_t{1} << 20}
              : std::vector<std::size_t>{64,    256,   1024,   4096,
                                         16384, 65536, 262144, std::size_t{1} << 20};
  const int per_size = a.smoke ? 20 : (a.iters ? a.iters : 1000);
#if MESHSTORE_HAVE_HIREDIS
  // Redis where the store's peer is: in its network namespace, when given.
  auto redis = std::make_unique<RedisServer>(a.peer_netns, a.peer_host);
  redisContext* rc = redis_connect_tcp(redis->port, redis->host);
#endif
  std::vector<SizePoint> points;
  for (const std::size_t bytes : sizes) {
    if (!a.json) std::fprintf(stderr, "store_bench small: %zu bytes\n", bytes);
    SizePoint p;
    p.bytes = bytes;
    const std::string key = "small." + std::to_string(bytes);
    time_put_get(store, key, bytes, 5);  // warm: the key's memory and location
    auto m = time_put_get(store, key, bytes, per_size);
    p.p50 = percentile(m.both, 0.5);
    p.p99 = percentile(m.both, 0.99);
    p.put_p50 = percentile(m.write, 0.5);
    p.get_p50 = percentile(m.read, 0.5);
#if MESHSTORE_HAVE_HIREDIS
    time_redis(rc, key, bytes, 5);
    auto r = time_redis(rc, key, bytes, per_size);
    p.redis_p50 = percentile(r.both, 0.5);
    p.redis_p99 = percentile(r.both, 0.99);
    p.redis_set_p50 = percentile(r.write, 0.5);
    p.redis_get_p50 = percentile(r.read, 0.5);
#endif
    points.push_back(p);
  }
#if MESHSTORE_HAVE_HIREDIS
  redisFree(rc);
  redis.reset();
#endif
  double vs_redis_4k = 0, vs_redis_4k_p99 = 0;
  for (const auto& p : points) {
    if (p.bytes == 4096 && p.redis_p50 > 0) {
      vs_redis_4k = p.p50 / p.redis_p50;
      vs_redis_4k_p99 = p.p99 / p.redis_p99;
    }
  }

  // Where the peer (and Redis) is: this host's loopback, or another
  // network namespace over a veth pair.
  const std::string link =
      a.peer_netns.empty() ? "loopback" : "veth to network namespace " + a.peer_netns;
  if (a.json) {
    std::printf(
        "{\"scenario\":\"small\",\"transport\":\"%s\",\"link\":\"%s\",\"bytes\":4096,"
        "\"iters\":%d,\"processes\":%d,"
        "\"rtt_p50_us\":%.2f,\"put_get_p50_us\":%.2f,\"put_get_p99_us\":%.2f,\"put_p50_us\":%.2f,"
        "\"get_p50_us\":%.2f,\"get_p99_us\":%.2f,\"fast_path_hits\":%llu,\"fast_path_puts\":%llu,"
        "\"small_put_get_vs_"
        "rtt\":%.2f,\"redis\":%s,\"put_get_4k_vs_redis_p50\":%.2f,\"put_get_4k_vs_redis_p99\":%.2f,"
        "\"sizes\":[",
        a.transport.c_str(), link.c_str(), iters, a.processes, rtt50, pg50, pg99, put50, get50,
        get99, static_cast<unsigned long long>(fast.hits),
        static_cast<unsigned long long>(fast.puts), pg50 / rtt50,
        vs_redis_4k > 0 ? "true" : "false", vs_redis_4k, vs_redis_4k_p99);
    for (std::size_t i = 0; i < points.size(); ++i) {
      const auto& p = points[i];
      std::printf(
          "%s{\"bytes\":%zu,\"p50_us\":%.2f,\"p99_us\":%.2f,\"put_p50_us\":%.2f,"
          "\"get_p50_us\":%.2f,\"redis_p50_us\":%.2f,\"redis_p99_us\":%.2f,"
          "\"redis_set_p50_us\":%.2f,\"redis_get_p50_us\":%.2f}",
          i ? "," : "", p.bytes, p.p50, p.p99, p.put_p50, p.get_p50, p.redis_p50, p.redis_p99,
          p.redis_set_p50, p.redis_get_p50);
    }
    std::printf("]}\n");
    return;
  }
  std::printf("scenario small: 4 KiB put + get_into, transport %s, %s (%s), %d rounds\n",
              a.transport.c_str(),
              a.processes == 2 ? "client process -> store in a peer process" : "embedded store",
              link.c_str(), iters);
  std::printf("  bare round trip (exists) p50 %8.1f us\n", rtt50);
  std::printf("  put + get_into           p50 %8.1f us   p99 %8.1f us   (%.1f round trips)\n", pg50,
              pg99, pg50 / rtt50);
  std::printf("  put alone                p50 %8.1f us   (fast path: %llu of %d puts)\n", put50,
              static_cast<unsigned long long>(fast.puts), iters + 1);
  std::printf(
      "  get_into alone           p50 %8.1f us   p99 %8.1f us   (fast path: %llu of %llu gets)\n",
      get50, get99, static_cast<unsigned long long>(fast.hits),
      static_cast<unsigned long long>(fast.hits + fast.misses + fast.stale));
  std::printf("  by value size, %d rounds each; Redis: SET + GET, one client, TCP over %s\n",
              per_size, link.c_str());
  std::printf("  %10s %9s %9s %9s %9s %9s %9s %9s %9s %7s %7s %7s\n", "bytes", "p50 us", "p99 us",
              "put p50", "get p50", "Redis p50", "p99", "SET p50", "GET p50", "p50 x", "p99 x",
              "get x");
  for (const auto& p : points) {
    if (p.redis_p50 > 0) {
      std::printf("  %10zu %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %7.2f %7.2f %7.2f\n",
                  p.bytes, p.p50, p.p99, p.put_p50, p.get_p50, p.redis_p50, p.redis_p99,
                  p.redis_set_p50, p.redis_get_p50, p.p50 / p.redis_p50, p.p99 / p.redis_p99,
                  p.get_p50 / p.redis_get_p50);
    } else {
      std::printf("  %10zu %9.1f %9.1f %9.1f %9.1f %9s\n", p.bytes, p.p50, p.p99, p.put_p50,
                  p.get_p50, "(no hiredis)");
    }
  }
}

}  // namespace meshstore::bench
