// peer_bench: meshstore side by side with what users already have, on the
// same workloads, measured in one run on one machine (benchmarks/README.md,
// docs/performance.md).
//
//   build/bin/peer_bench [--workloads tensor,qwen,small] [--contenders LIST]
//                        [--iters 3] [--out DIR] [--smoke]
//
// Each workload moves from process A (this one) to process B (a copy of
// this program it starts with --role reader) and is verified there; a round
// is timed from A's first byte to B's last (steady clock, one host).
// Workloads: tensor (one 1 GiB tensor), qwen (the Qwen3-0.6B bf16 state
// dict, 310 tensors, 1.19 GB), small (10,000 tensors of 4 KiB). Contenders
// in this build: memcpy (one process: the limit of a one-copy move), tcp (a
// raw loopback TCP stream: the limit across hosts), safetensors-shm (A
// writes a safetensors file into /dev/shm, B maps it and copies the tensors
// out: what many RL frameworks do between trainer and inference), and
// meshstore over each transport (A publishes the state dict into the store
// it hosts, B follows with get_next_state_dict_into into its own buffers:
// streamed while A writes). Writes results.md and results.json into --out.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/safetensors.hpp"
#include "meshstore/store.hpp"
#include "qwen3_shapes.hpp"

#if MESHSTORE_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#include <signal.h>
#endif

extern char** environ;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::vector<std::string> workloads{"tensor", "qwen", "small"};
  std::vector<std::string> contenders {
    "memcpy", "tcp", "safetensors-shm",
#if MESHSTORE_HAVE_HIREDIS
        "redis",
#endif
        "meshstore-shm", "meshstore-cma", "meshstore-tcp", "meshstore-rpc"
  };
  int iters = 3;
  bool smoke = false;
  std::string out = "peer_bench_results";
  // internal: the reader's part
  std::string role, contender, workload;
  int port = 0;
  std::string redis_socket;
};

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "peer_bench: %s\n", why.c_str());
  std::exit(1);
}

template <class T>
T must(meshstore::Result<T> r, const char* what) {
  if (!r.ok()) die(std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}
void must(meshstore::Result<void> r, const char* what) {
  if (!r.ok()) die(std::string(what) + ": " + r.status().to_string());
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const auto comma = s.find(',', at);
    out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--workloads")
      a.workloads = split(next());
    else if (arg == "--contenders")
      a.contenders = split(next());
    else if (arg == "--iters")
      a.iters = std::max(1, std::atoi(next().c_str()));
    else if (arg == "--out")
      a.out = next();
    else if (arg == "--smoke")
      a.smoke = true;
    else if (arg == "--role")
      a.role = next();
    else if (arg == "--contender")
      a.contender = next();
    else if (arg == "--workload")
      a.workload = next();
    else if (arg == "--port")
      a.port = std::atoi(next().c_str());
    else if (arg == "--redis-socket")
      a.redis_socket = next();
    else
      die("unknown argument '" + arg + "' (see the comment at the top of peer_bench.cpp)");
  }
  return a;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// -- workloads -------------------------------------------------------------------

// A workload's tensors (bf16), held in buffers with a state dict over them.
struct Workload {
  std::string name;
  std::vector<std::pair<std::string, meshstore::Shape>> shapes;
  std::vector<std::vector<std::uint16_t>> buffers;
  meshstore::StateDict sd;
  std::uint64_t bytes = 0;
};

Workload make_workload(const std::string& name, bool smoke) {
  Workload w;
  w.name = name;
  if (name == "tensor") {
    const std::int64_t n = smoke ? (std::int64_t{4} << 20) : (std::int64_t{512} << 20);
    w.shapes.push_back({"w", {n}});  // bf16: 1 GiB (8 MiB in --smoke)
  } else if (name == "qwen") {
    qwen3::Config c;
    if (!qwen3::find("qwen3-0.6b", c)) die("no qwen3-0.6b shapes");
    if (smoke) c.layers = 1;
    for (auto& [n, s] : qwen3::tensors(c))
      w.shapes.push_back({n, meshstore::Shape(s.begin(), s.end())});
  } else if (name == "small") {
    const int count = smoke ? 500 : 10000;
    for (int i = 0; i < count; ++i) w.shapes.push_back({"t" + std::to_string(i), {2048}});
  } else {
    die("unknown workload '" + name + "' (tensor, qwen, small)");
  }
  w.buffers.reserve(w.shapes.size());
  for (const auto& [n, shape] : w.shapes) {
    w.buffers.emplace_back(static_cast<std::size_t>(meshstore::shape_numel(shape)), 0);
    must(w.sd.insert(
             n, meshstore::TensorView(w.buffers.back().data(), meshstore::DType::bfloat16, shape)),
         "state dict");
    w.bytes += w.buffers.back().size() * 2;
  }
  return w;
}

// The bytes of round `r`: element i of tensor t holds (i * 7 + t + r).
void fill(Workload& w, int r) {
  for (std::size_t t = 0; t < w.buffers.size(); ++t) {
    auto& b = w.buffers[t];
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint16_t>(i * 7 + t + r);
  }
}

// Whether `w` holds round `r` (every tensor, a sample of its elements).
bool holds(const Workload& w, int r) {
  for (std::size_t t = 0; t < w.buffers.size(); ++t) {
    const auto& b = w.buffers[t];
    for (std::size_t i = 0; i < b.size(); i += 1 + b.size() / 64) {
      if (b[i] != static_cast<std::uint16_t>(i * 7 + t + r)) return false;
    }
    if (b.back() != static_cast<std::uint16_t>((b.size() - 1) * 7 + t + r)) return false;
  }
  return true;
}

// The file of the safetensors contender, named after the writer's pid.
std::string shm_path(const std::string& workload, pid_t writer) {
  return "/dev/shm/peer_bench." + std::to_string(writer) + "." + workload + ".safetensors";
}

// -- redis ------------------------------------------------------------------------

#if MESHSTORE_HAVE_HIREDIS
// Values go to Redis in pieces of this size (Redis caps a value at 512 MB;
// its users split tensors into pieces of a few MiB), pipelined in windows.
constexpr std::size_t kRedisPiece = std::size_t{4} << 20;
constexpr std::size_t kRedisWindow = 16;

// A Redis server the benchmark starts for itself on a unix socket in a
// temporary directory, persistence off; stopped and removed with this.
struct RedisServer {
  pid_t pid = -1;
  std::string dir, socket;
  RedisServer() {
    char tmpl[] = "/tmp/peer_bench-redis-XXXXXX";
    dir = ::mkdtemp(tmpl);
    socket = dir + "/redis.sock";
    std::vector<std::string> args{"redis-server",
                                  "--port",
                                  "0",
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
    std::vector<char*> argv;
    for (auto& x : args) argv.push_back(x.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid, "redis-server", nullptr, nullptr, argv.data(), environ) != 0) {
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
    die("redis-server did not come up on " + socket);
  }
  ~RedisServer() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
    std::system(("rm -rf '" + dir + "'").c_str());
  }
};

redisContext* redis_connect(const std::string& socket) {
  redisContext* c = redisConnectUnix(socket.c_str());
  if (!c || c->err) die("redis connect: " + std::string(c ? c->errstr : "no context"));
  return c;
}

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
#endif

// -- the reader process (B) ------------------------------------------------------

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

// B: prepares its side, says "ready" (tcp: "ready PORT"), then for each
// "round R" line receives round R into its own buffers and answers
// "done END_NS OK".
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
  } else if (a.contender.rfind("meshstore-", 0) == 0) {
    meshstore::StoreOptions o;
    o.transport = a.contender.substr(10);
    o.local_rank = -1;
    o.host_volumes = false;
    o.rank = 1;
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
      seen = must(store->get_next_state_dict_into("bench", w.sd, seen, 600s).get(),
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

// -- the writer (A) and the coordination -----------------------------------------

struct Reader {
  pid_t pid = -1;
  FILE* to = nullptr;
  FILE* from = nullptr;
  ~Reader() {
    if (to) std::fclose(to);
    if (from) std::fclose(from);
    if (pid > 0) ::waitpid(pid, nullptr, 0);
  }
};

std::unique_ptr<Reader> spawn_reader(const Args& a, const std::string& contender,
                                     const std::string& workload, int port,
                                     const std::string& redis_socket) {
  int in[2], out[2];
  if (::pipe(in) != 0 || ::pipe(out) != 0) die("pipe");
  std::vector<std::string> args{"/proc/self/exe", "--role",  "reader",
                                "--contender",    contender, "--workload",
                                workload,         "--port",  std::to_string(port)};
  if (a.smoke) args.push_back("--smoke");
  if (!redis_socket.empty()) {
    args.push_back("--redis-socket");
    args.push_back(redis_socket);
  }
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) die("readlink /proc/self/exe");
  exe[n] = '\0';
  auto r = std::make_unique<Reader>();
  if (posix_spawn(&r->pid, exe, &fa, nullptr, argv.data(), environ) != 0) die("spawn the reader");
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  r->to = ::fdopen(in[1], "w");
  r->from = ::fdopen(out[0], "r");
  return r;
}

std::string read_line(FILE* f, const char* what) {
  char line[256];
  if (!std::fgets(line, sizeof(line), f)) die(std::string("the reader stopped (") + what + ")");
  return line;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One contender on one workload: the median seconds of --iters rounds after
// a warm-up round, first byte in A to last byte in B.
double run_contender(const Args& a, const std::string& contender, Workload& w) {
  std::vector<double> times;
  const int warm = 2;  // the first versions fault in fresh memory
  if (contender == "memcpy") {
    Workload dst = make_workload(w.name, a.smoke);
    for (int r = 0; r < a.iters + warm; ++r) {
      fill(w, r);
      const auto t0 = Clock::now();
      for (std::size_t t = 0; t < w.buffers.size(); ++t) {
        std::memcpy(dst.buffers[t].data(), w.buffers[t].data(), w.buffers[t].size() * 2);
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!holds(dst, r)) die("memcpy copied the wrong bytes");
      if (r >= warm) times.push_back(s);
    }
    return median(times);
  }
  std::unique_ptr<meshstore::Store> store;
  int port = 0;
  if (contender.rfind("meshstore-", 0) == 0) {
    meshstore::StoreOptions o;
    o.listen = "127.0.0.1:0";
    o.local_rank = -1;
    store = std::make_unique<meshstore::Store>(must(meshstore::Store::embedded(o), "A: store"));
    port = store->port();
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
  for (int r = 0; r < a.iters + warm; ++r) {
    fill(w, r);
    if (store)
      subscribes = must(store->controller_counters().get(30s), "counters").stream_subscribes;
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
          if (must(store->controller_counters().get(30s), "counters").stream_subscribes >
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
      } else {
        must(store->publish_state_dict("bench", w.sd).get(600s), "publish_state_dict");
      }
    }
    long long end = 0;
    int ok = 0;
    if (std::sscanf(read_line(reader->from, "done").c_str(), "done %lld %d", &end, &ok) != 2 ||
        !ok) {
      die(contender + " on " + w.name + ": the reader got the wrong bytes in round " +
          std::to_string(r));
    }
    if (r >= warm) times.push_back(static_cast<double>(end - t0) / 1e9);
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

std::string describe(const std::string& contender) {
  if (contender == "memcpy") return "memcpy in one process (the one-copy limit)";
  if (contender == "tcp") return "raw TCP stream on loopback, TCP_NODELAY, one send per tensor";
  if (contender == "safetensors-shm") {
    return "A writes a safetensors file in /dev/shm (meshstore's writer), B maps it and copies";
  }
  if (contender == "redis") {
    return "Redis 7 on a unix socket, persistence off: A SETs 4 MiB pieces, B GETs them, both "
           "pipelined 16 at a time (hiredis)";
  }
  return "meshstore over " + contender.substr(10) +
         ": A publishes (publish_state_dict), B streams it (get_next_state_dict_into)";
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.role == "reader") return run_reader(a);
  if (!a.role.empty()) die("unknown --role");
  for (const auto& c : a.contenders) {
    const bool known = c == "memcpy" || c == "tcp" || c == "safetensors-shm" ||
                       c.rfind("meshstore-", 0) == 0
#if MESHSTORE_HAVE_HIREDIS
                       || c == "redis"
#endif
        ;
    if (!known) die("unknown or unbuilt contender '" + c + "'");
  }
  std::map<std::string, std::map<std::string, double>> seconds;  // workload -> contender -> s
  std::map<std::string, std::uint64_t> bytes;
  for (const auto& wname : a.workloads) {
    Workload w = make_workload(wname, a.smoke);
    bytes[wname] = w.bytes;
    for (const auto& c : a.contenders) {
      std::fprintf(stderr, "peer_bench: %s on %s\n", c.c_str(), wname.c_str());
      seconds[wname][c] = run_contender(a, c, w);
    }
  }
  // The table: GB/s, x memcpy, x the best contender that is not meshstore.
  std::string md = "| workload | contender | seconds | GB/s | x memcpy | x best other |\n";
  md += "| --- | --- | --- | --- | --- | --- |\n";
  std::string json = "{\"smoke\":" + std::string(a.smoke ? "true" : "false") + ",\"results\":[";
  bool first = true;
  for (const auto& wname : a.workloads) {
    const auto& row = seconds[wname];
    const double mem = row.count("memcpy") ? row.at("memcpy") : 0;
    double best_other = 0;
    for (const auto& [c, s] : row) {
      if (c != "memcpy" && c.rfind("meshstore-", 0) != 0 && (best_other == 0 || s < best_other)) {
        best_other = s;
      }
    }
    for (const auto& c : a.contenders) {
      const double s = row.at(c);
      const double gbps = static_cast<double>(bytes[wname]) / 1e9 / s;
      char buf[512];
      std::snprintf(buf, sizeof(buf), "| %s | %s | %.4f | %.2f | %s | %s |\n", wname.c_str(),
                    c.c_str(), s, gbps,
                    mem > 0 ? std::to_string(mem / s).substr(0, 4).c_str() : "-",
                    best_other > 0 ? std::to_string(best_other / s).substr(0, 4).c_str() : "-");
      md += buf;
      std::snprintf(buf, sizeof(buf),
                    "%s{\"workload\":\"%s\",\"contender\":\"%s\",\"bytes\":%llu,\"seconds\":%.6f,"
                    "\"gbps\":%.3f,\"vs_memcpy\":%.3f,\"vs_best_other\":%.3f}",
                    first ? "" : ",", wname.c_str(), c.c_str(),
                    static_cast<unsigned long long>(bytes[wname]), s, gbps, mem > 0 ? mem / s : 0.0,
                    best_other > 0 ? best_other / s : 0.0);
      json += buf;
      first = false;
    }
  }
  json += "]}\n";
  md += "\nContenders:\n\n";
  for (const auto& c : a.contenders) md += "- `" + c + "`: " + describe(c) + "\n";
  std::system(("mkdir -p '" + a.out + "'").c_str());
  std::ofstream(a.out + "/results.md") << md;
  std::ofstream(a.out + "/results.json") << json;
  std::printf("%s", md.c_str());
  std::printf("\npeer_bench: wrote %s/results.md and %s/results.json\n", a.out.c_str(),
              a.out.c_str());
  return 0;
}
