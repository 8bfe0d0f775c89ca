// peer_bench's process B for the contenders it runs itself (tcp, redis,
// safetensors-shm, meshstore): this program started again with --role
// reader, receiving each round into its own buffers (see contenders.hpp).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include "../bench_util.hpp"
#include "contenders.hpp"
#include "meshstore/safetensors.hpp"
#include "meshstore/store.hpp"
#include "redis.hpp"
#include "workload.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {

namespace {

// Receives all `n` bytes into `p`; false if the connection failed.
bool read_exact(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t got = ::recv(fd, c, n, 0);
    if (got <= 0) return false;
    c += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace

int run_reader(const Args& a) {
  Workload w = make_workload(a.workload, a.smoke);
  int listener = -1, conn = -1;
  std::unique_ptr<meshstore::Store> store;
  if (a.contender == "tcp") {
    listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener, 1) != 0) {
      die("reader: tcp listen");
    }
    socklen_t len = sizeof(addr);
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    std::printf("ready %d\n", ntohs(addr.sin_port));
    std::fflush(stdout);
    conn = ::accept(listener, nullptr, nullptr);
    if (conn < 0) die("reader: accept");
  } else if (is_meshstore(a.contender)) {
    meshstore::StoreOptions o;
    o.transport.name = transport_of(a.contender);
    o.placement.local_rank = -1;
    o.placement.host_volumes = false;
    o.placement.rank = 1;
    store = std::make_unique<meshstore::Store>(must(
        meshstore::Store::connect("127.0.0.1:" + std::to_string(a.port), o), "reader: connect"));
    std::printf("ready\n");
    std::fflush(stdout);
  } else {
    std::printf("ready\n");
    std::fflush(stdout);
  }
#if MESHSTORE_HAVE_HIREDIS
  redisContext* redis = a.contender == "redis" ? redis_connect(a.redis_socket) : nullptr;
#endif
  char line[256];
  std::uint64_t seen = 0;
  while (std::fgets(line, sizeof(line), stdin)) {
    int r = 0;
    if (std::sscanf(line, "round %d", &r) != 1) break;
    if (a.contender == "tcp") {
      for (auto& b : w.buffers) {
        if (!read_exact(conn, b.data(), b.size() * 2)) die("reader: tcp recv");
      }
#if MESHSTORE_HAVE_HIREDIS
    } else if (a.contender == "redis") {
      redis_move(redis, w, false);
#endif
    } else if (a.contender == "safetensors-shm") {
      auto f =
          must(meshstore::safetensors::File::open(shm_path(a.workload, getppid())), "reader: open");
      for (std::size_t t = 0; t < w.shapes.size(); ++t) {
        auto v = must(f.view(w.shapes[t].first), "reader: tensor");
        std::memcpy(w.buffers[t].data(), v.data(), v.nbytes());
      }
    } else {
      seen = must(store->state_dicts().get_next_into("bench", w.sd, seen, 600s).get(),
                  "reader: get_next_state_dict_into");
    }
    const std::int64_t end = now_ns();
    std::printf("done %lld %d\n", static_cast<long long>(end), holds(w, r) ? 1 : 0);
    std::fflush(stdout);
  }
  if (conn >= 0) ::close(conn);
  if (listener >= 0) ::close(listener);
  if (store) store->close();
#if MESHSTORE_HAVE_HIREDIS
  if (redis) redisFree(redis);
#endif
  return 0;
}

}  // namespace meshstore::bench
