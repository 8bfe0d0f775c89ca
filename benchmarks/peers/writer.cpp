// peer_bench's process A: runs one contender on one workload (memcpy in
// this process; tcp, redis, safetensors-shm and meshstore against a reader
// process it starts), timed from A's first byte to B's last.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../bench_util.hpp"
#include "contenders.hpp"
#include "meshstore/safetensors.hpp"
#include "meshstore/store.hpp"
#include "redis.hpp"
#include "workload.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {

namespace {

// Sends all `n` bytes at `p`; false if the connection failed.
bool write_exact(int fd, const void* p, std::size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t put = ::send(fd, c, n, MSG_NOSIGNAL);
    if (put <= 0) return false;
    c += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

// Starts B: this program with --role reader.
std::unique_ptr<Child> spawn_reader(const Args& a, const std::string& contender,
                                    const std::string& workload, int port,
                                    const std::string& redis_socket) {
  std::vector<std::string> args{"--role",     "reader", "--contender", contender,
                                "--workload", workload, "--port",      std::to_string(port)};
  if (a.smoke) args.push_back("--smoke");
  if (!redis_socket.empty()) {
    args.push_back("--redis-socket");
    args.push_back(redis_socket);
  }
  return spawn_self(std::move(args));
}

// The reader's next line; dies naming `what` if the reader stopped.
std::string read_line(FILE* f, const char* what) {
  char line[256];
  if (!std::fgets(line, sizeof(line), f)) die(std::string("the reader stopped (") + what + ")");
  return line;
}

}  // namespace

meshstore::Result<double> run_contender(const Args& a, const std::string& contender, Workload& w) {
  std::vector<double> times;
  const int warm = 2;  // the first versions fault in fresh memory
  if (contender == "gloo" || contender == "mpi" || contender == "meshstore-python") {
    return run_external(a, contender, w, warm);
  }
  if (contender == "memcpy" || contender == "memcpy-all-cores") {
    Workload dst = make_workload(w.name, a.smoke);
    std::vector<CopyPiece> pieces;
    for (std::size_t t = 0; t < w.buffers.size(); ++t) {
      pieces.push_back({dst.buffers[t].data(), w.buffers[t].data(), w.buffers[t].size() * 2});
    }
    for (int r = 0; r < a.iters + warm; ++r) {
      fill(w, r);
      double s = 0;
      if (contender == "memcpy") {
        const auto t0 = Clock::now();
        for (const auto& p : pieces) std::memcpy(p.dst, p.src, p.n);
        s = secs(t0);
      } else {
        s = memcpy_all_cores(pieces);
      }
      if (!holds(dst, r)) die(contender + " copied the wrong bytes");
      if (r >= warm) times.push_back(s);
    }
    return median(times);
  }
  std::unique_ptr<meshstore::Store> store;
  int port = 0;
  if (is_meshstore(contender)) {
    meshstore::StoreOptions o;
    o.listen = "127.0.0.1:0";
    o.placement.local_rank = -1;
    store = std::make_unique<meshstore::Store>(must(meshstore::Store::embedded(o), "A: store"));
    port = store->admin().port();
  }
  std::string redis_socket;
#if MESHSTORE_HAVE_HIREDIS
  std::unique_ptr<RedisServer> redis_server;
  redisContext* redis = nullptr;
  if (contender == "redis") {
    redis_server = std::make_unique<RedisServer>();
    redis_socket = redis_server->socket;
    redis = redis_connect(redis_socket);
  }
#endif
  auto reader = spawn_reader(a, contender, w.name, port, redis_socket);
  const std::string ready = read_line(reader->from, "ready");
  int conn = -1;
  if (contender == "tcp") {
    int rp = 0;
    if (std::sscanf(ready.c_str(), "ready %d", &rp) != 1) die("the tcp reader sent no port");
    conn = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(rp));
    if (::connect(conn, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("tcp connect");
    int one = 1;
    ::setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  std::uint64_t subscribes = 0;
  std::vector<meshstore::TensorSpec> specs;
  for (const auto& [name, shape] : w.shapes) {
    specs.push_back({name, meshstore::DType::bfloat16, shape});
  }
  const bool in_place = contender == "meshstore-inplace";
  meshstore::PublishOptions po;
  const bool by_publish = publishes(contender, &po);
  meshstore::Publication last;  // the version whose buffers may still be lent
  for (int r = 0; r < a.iters + warm; ++r) {
    // Producing the round's bytes is not timed, for any contender; in place,
    // A produces them straight into the store's staged shared memory.
    meshstore::StagedStateDict staged;
    if (in_place) {
      staged = must(store->state_dicts().stage_publish("bench", specs).get(600s), "stage_publish");
      fill(w, staged.state_dict(), r);
    } else {
      fill(w, r);
    }
    if (store)
      subscribes =
          must(store->admin().controller_counters().get(30s), "counters").stream_subscribes;
    std::int64_t t0 = 0;
    if (contender == "redis") {
      // Every piece SET (pipelined), then the reader GETs them.
      t0 = now_ns();
#if MESHSTORE_HAVE_HIREDIS
      redis_move(redis, w, true);
#endif
      std::fprintf(reader->to, "round %d\n", r);
      std::fflush(reader->to);
    } else if (contender == "safetensors-shm") {
      // The file is written first, then the reader is told to read it.
      t0 = now_ns();
      std::vector<meshstore::safetensors::NamedTensor> named;
      for (const auto& e : w.sd.entries()) named.push_back({e.name, e.view});
      must(meshstore::safetensors::write_file(shm_path(w.name, getpid()), named), "write the file");
      std::fprintf(reader->to, "round %d\n", r);
      std::fflush(reader->to);
    } else {
      std::fprintf(reader->to, "round %d\n", r);
      std::fflush(reader->to);
      if (store) {
        // Bounded wait until the reader waits for this version.
        for (int i = 0; i < 10000; ++i) {
          if (must(store->admin().controller_counters().get(30s), "counters").stream_subscribes >
              subscribes) {
            break;
          }
          std::this_thread::sleep_for(1ms);
        }
      }
      t0 = now_ns();
      if (contender == "tcp") {
        for (const auto& b : w.buffers) {
          if (!write_exact(conn, b.data(), b.size() * 2)) die("tcp send");
        }
      } else if (in_place) {
        must(staged.commit().get(600s), "commit");
      } else if (by_publish) {
        last = must(store->state_dicts().publish("bench", w.sd, po).get(600s), "publish");
      } else {
        must(store->state_dicts().publish("bench", w.sd, PublishOptions::by_copy()).get(600s),
             "publish_state_dict");
      }
    }
    long long end = 0;
    int ok = 0;
    if (std::sscanf(read_line(reader->from, "done").c_str(), "done %lld %d", &end, &ok) != 2 ||
        !ok) {
      die(contender + " on " + w.name + ": the reader got the wrong bytes in round " +
          std::to_string(r));
    }
    double seconds = static_cast<double>(end - t0) / 1e9;
    if (by_publish) {
      // A trainer takes its buffers back before its next step writes them:
      // part of each round's cost (the next round's untimed fill follows).
      const auto t1 = now_ns();
      must(last.reclaim().get(600s), "reclaim");
      seconds += static_cast<double>(now_ns() - t1) / 1e9;
    }
    if (r >= warm) times.push_back(seconds);
  }
  if (conn >= 0) ::close(conn);
  reader.reset();
  if (store) store->close();
#if MESHSTORE_HAVE_HIREDIS
  if (redis) redisFree(redis);
#endif
  std::remove(shm_path(w.name, getpid()).c_str());
  return median(times);
}

}  // namespace meshstore::bench
