// peer_bench: meshstore side by side with what users already have, on the
// same workloads, measured in one run on one machine (benchmarks/README.md,
// docs/performance.md).
//
//   build/bin/peer_bench [--workloads tensor,qwen,small] [--contenders LIST]
//                        [--iters 3] [--out DIR] [--smoke]
//
// Each workload moves from process A to process B and is verified there; a
// round is timed from A's first byte to B's last (CLOCK_MONOTONIC, one
// host). Workloads: tensor (one 1 GiB tensor), qwen (the Qwen3-0.6B bf16
// state dict, 310 tensors, 1.19 GB), small (10,000 tensors of 4 KiB).
// Contenders: memcpy (one process: the limit of a one-copy move), tcp (a raw
// loopback TCP stream: the limit across hosts), safetensors-shm (A writes a
// safetensors file into /dev/shm, B maps it and copies the tensors out: what
// many RL frameworks do between trainer and inference), redis (Redis 7 on a
// unix socket), gloo (torch.distributed send/recv, peer_gloo.py), mpi (Open
// MPI send/recv over shared memory, peer_mpi), and meshstore: "meshstore"
// with the transport the store picks for the pair, then each transport
// forced (A publishes the state dict into the store it hosts, B follows with
// get_next_state_dict_into into its own buffers, streamed while A writes).
// For meshstore, tcp, safetensors-shm and redis, B is this program started
// again with --role reader; gloo and mpi start both their processes
// themselves and report each round. A contender whose software is missing
// is listed as skipped, with the reason. Writes results.md, results.json,
// results.dat and (with gnuplot) results.png into --out.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../bench_util.hpp"
#include "meshstore/safetensors.hpp"
#include "meshstore/store.hpp"
#include "qwen3_shapes.hpp"

#if MESHSTORE_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#include <signal.h>
#endif

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
        "gloo", "mpi", "meshstore", "meshstore-inplace", "meshstore-shm", "meshstore-cma",
        "meshstore-tcp", "meshstore-rpc"
  };
  int iters = 3;
  bool smoke = false;
  std::string out = "peer_bench_results";
  // internal: the reader's part
  std::string role, contender, workload;
  int port = 0;
  std::string redis_socket;
};

using meshstore::bench::die;
using meshstore::bench::median;
using meshstore::bench::must;

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

// "meshstore" (the store picks the transport) or "meshstore-TRANSPORT".
bool is_meshstore(const std::string& c) {
  return c == "meshstore" || c.rfind("meshstore-", 0) == 0;
}
std::string transport_of(const std::string& c) {
  return c == "meshstore" || c == "meshstore-inplace" ? "" : c.substr(10);
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

// Round `r`'s bytes written straight into `sd`, whose entries are `w`'s
// tensors in order (the staged tensors of meshstore-inplace).
void fill(const Workload& w, const meshstore::StateDict& sd, int r) {
  if (sd.size() != w.shapes.size()) die("the staged state dict has the wrong entries");
  for (std::size_t t = 0; t < sd.size(); ++t) {
    const auto& view = sd.entries()[t].view;
    auto* p = static_cast<std::uint16_t*>(view.data());
    const auto n = static_cast<std::size_t>(view.numel());
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint16_t>(i * 7 + t + r);
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
  } else if (is_meshstore(a.contender)) {
    meshstore::StoreOptions o;
    o.transport = transport_of(a.contender);
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

// Starts B: this program with --role reader.
std::unique_ptr<meshstore::bench::Child> spawn_reader(const Args& a, const std::string& contender,
                                                      const std::string& workload, int port,
                                                      const std::string& redis_socket) {
  std::vector<std::string> args{"--role",     "reader", "--contender", contender,
                                "--workload", workload, "--port",      std::to_string(port)};
  if (a.smoke) args.push_back("--smoke");
  if (!redis_socket.empty()) {
    args.push_back("--redis-socket");
    args.push_back(redis_socket);
  }
  return meshstore::bench::spawn_self(std::move(args));
}

std::string read_line(FILE* f, const char* what) {
  char line[256];
  if (!std::fgets(line, sizeof(line), f)) die(std::string("the reader stopped (") + what + ")");
  return line;
}

// -- contenders that start both processes themselves (gloo, mpi) ----------------

// The directory this program lies in (peer_gloo.py and peer_mpi lie there too).
std::string own_dir() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) die("readlink /proc/self/exe");
  std::string path(exe, static_cast<std::size_t>(n));
  return path.substr(0, path.rfind('/'));
}

bool executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

// The settings each external contender runs with (written next to its figures).
#if MESHSTORE_HAVE_MPI
const char* const kMpiSettings = "-np 2 --bind-to none --mca pml ob1 --mca btl self,vader";
#endif

// The command running `contender` for `rounds` rounds of the workload in
// `spec`, or the reason it cannot run here.
meshstore::Result<std::vector<std::string>> external_command(const std::string& contender,
                                                             const std::string& spec, int rounds) {
  const std::string dir = own_dir();
  if (contender == "gloo") {
    if (!executable("/usr/bin/python3")) {
      return meshstore::Status(meshstore::Errc::unavailable,
                               "no /usr/bin/python3 (apt-get install python3-torch)");
    }
    return std::vector<std::string>{"/usr/bin/python3", dir + "/peer_gloo.py", "--spec", spec,
                                    "--rounds",         std::to_string(rounds)};
  }
#if MESHSTORE_HAVE_MPI
  if (contender == "mpi") {
    if (!executable(MESHSTORE_MPIEXEC)) {
      return meshstore::Status(
          meshstore::Errc::unavailable,
          std::string("no ") + MESHSTORE_MPIEXEC + " (apt-get install openmpi-bin)");
    }
    std::vector<std::string> cmd{MESHSTORE_MPIEXEC};
    std::string settings = kMpiSettings;
    for (std::size_t at = 0; at < settings.size();) {
      const auto sp = settings.find(' ', at);
      cmd.push_back(settings.substr(at, sp == std::string::npos ? std::string::npos : sp - at));
      if (sp == std::string::npos) break;
      at = sp + 1;
    }
    if (::geteuid() == 0) cmd.push_back("--allow-run-as-root");  // CI runs as root
    cmd.push_back("--oversubscribe");  // 2 ranks even where fewer cores are counted
    for (const auto& x : {dir + "/peer_mpi", std::string("--spec"), spec, std::string("--rounds"),
                          std::to_string(rounds)}) {
      cmd.push_back(x);
    }
    return cmd;
  }
#else
  if (contender == "mpi") {
    return meshstore::Status(meshstore::Errc::unavailable,
                             "built without MPI (apt-get install libopenmpi-dev openmpi-bin, "
                             "then build again)");
  }
#endif
  return meshstore::Status(meshstore::Errc::invalid_argument, "not an external contender");
}

// Runs an external contender; the median seconds of its rounds after `warm`,
// or why it was skipped.
meshstore::Result<double> run_external(const Args& a, const std::string& contender,
                                       const Workload& w, int warm) {
  const std::string spec = a.out + "/spec-" + w.name + ".txt";
  {
    std::ofstream f(spec);
    for (const auto& [name, shape] : w.shapes)
      f << name << ' ' << meshstore::shape_numel(shape) << '\n';
    if (!f) die("writing " + spec);
  }
  auto cmd = external_command(contender, spec, a.iters + warm);
  if (!cmd.ok()) return cmd.status();
  const std::string program = cmd->front();
  cmd->erase(cmd->begin());
  auto child = meshstore::bench::spawn(program, std::move(cmd).value());
  std::fclose(child->to);  // no input
  child->to = nullptr;
  std::vector<double> times;
  char line[512];
  int rounds = 0;
  std::string skipped;
  while (std::fgets(line, sizeof(line), child->from)) {
    int r = 0, ok = 0;
    double secs = 0;
    if (std::strncmp(line, "skip ", 5) == 0) {
      skipped = std::string(line + 5);
      while (!skipped.empty() && skipped.back() == '\n') skipped.pop_back();
      continue;
    }
    if (std::sscanf(line, "round %d %lf %d", &r, &secs, &ok) != 3) continue;
    if (!ok)
      die(contender + " on " + w.name + ": B got the wrong bytes in round " + std::to_string(r));
    ++rounds;
    if (r >= warm) times.push_back(secs);
  }
  int status = 0;
  ::waitpid(child->pid, &status, 0);
  child->pid = -1;
  std::remove(spec.c_str());
  if (!skipped.empty()) return meshstore::Status(meshstore::Errc::unavailable, skipped);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || rounds != a.iters + warm) {
    die(contender + " on " + w.name + " failed after " + std::to_string(rounds) + " of " +
        std::to_string(a.iters + warm) + " rounds (its own messages are above)");
  }
  return median(times);
}

// One contender on one workload: the median seconds of --iters rounds after
// two warm-up rounds, first byte in A to last byte in B; or why it was
// skipped.
meshstore::Result<double> run_contender(const Args& a, const std::string& contender, Workload& w) {
  std::vector<double> times;
  const int warm = 2;  // the first versions fault in fresh memory
  if (contender == "gloo" || contender == "mpi") return run_external(a, contender, w, warm);
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
  if (is_meshstore(contender)) {
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
  std::vector<meshstore::TensorSpec> specs;
  for (const auto& [name, shape] : w.shapes) {
    specs.push_back({name, meshstore::DType::bfloat16, shape});
  }
  const bool in_place = contender == "meshstore-inplace";
  for (int r = 0; r < a.iters + warm; ++r) {
    // Producing the round's bytes is not timed, for any contender; in place,
    // A produces them straight into the store's staged shared memory.
    meshstore::StagedStateDict staged;
    if (in_place) {
      staged = must(store->stage_publish("bench", specs).get(600s), "stage_publish");
      fill(w, staged.state_dict(), r);
    } else {
      fill(w, r);
    }
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
      } else if (in_place) {
        must(staged.commit().get(600s), "commit");
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
  if (contender == "gloo") {
    return "torch.distributed, gloo backend, on loopback (Debian python3-torch): A sends every "
           "tensor with one batch_isend_irecv, B receives into its own tensors the same way "
           "(peer_gloo.py; one intra-op thread each)";
  }
  if (contender == "mpi") {
#if MESHSTORE_HAVE_MPI
    return std::string(
               "Open MPI: one MPI_Isend per tensor, B pre-posts one MPI_Irecv each, "
               "MPI_Waitall (peer_mpi; mpirun ") +
           kMpiSettings + ": shared memory, single copy through CMA where permitted)";
#else
    return "Open MPI (not built)";
#endif
  }
  if (contender == "meshstore") {
    return "meshstore, the transport the store picks for the pair (shm on one host): A "
           "publishes (publish_state_dict), B streams it (get_next_state_dict_into)";
  }
  if (contender == "meshstore-inplace") {
    return "meshstore zero-copy publishing, the transport the store picks: A produces each "
           "version straight into the store's staged shared memory (stage_publish; producing "
           "is untimed, as every contender's is) and commits; B reads it "
           "(get_next_state_dict_into)";
  }
  return "meshstore with " + transport_of(contender) +
         " forced: A publishes (publish_state_dict), B streams it (get_next_state_dict_into)";
}

// Per-operation overhead and bandwidth fitted to a contender's workloads:
// seconds = overhead x tensors + bytes / bandwidth, least squares on the
// relative error (every workload counts alike, whatever its time).
struct Fit {
  double overhead_s = 0;  // per tensor
  double bandwidth = 0;   // bytes per second; 0 = unbounded
};

std::optional<Fit> fit(const std::vector<std::array<double, 3>>& points) {  // tensors, bytes, s
  if (points.size() < 2) return std::nullopt;
  // Rows (n/t, b/t) x (o, c) = 1, c = 1/bandwidth.
  double snn = 0, snb = 0, sbb = 0, sn = 0, sb = 0;
  for (const auto& [n, b, t] : points) {
    const double x = n / t, y = b / t;
    snn += x * x;
    snb += x * y;
    sbb += y * y;
    sn += x;
    sb += y;
  }
  const double det = snn * sbb - snb * snb;
  Fit f;
  double o = 0, c = 0;
  if (std::fabs(det) > 1e-12 * snn * sbb) {
    o = (sn * sbb - sb * snb) / det;
    c = (sbb * 0 + snn * sb - snb * sn) / det;
  }
  if (o < 0 || c <= 0 || std::fabs(det) <= 1e-12 * snn * sbb) {
    // One term alone explains it better than a negative other one.
    const double c_only = sb / sbb, o_only = sn / snn;
    double err_c = 0, err_o = 0;
    for (const auto& [n, b, t] : points) {
      err_c += std::pow(c_only * b / t - 1, 2);
      err_o += std::pow(o_only * n / t - 1, 2);
    }
    if (err_c <= err_o) {
      o = 0;
      c = c_only;
    } else {
      o = o_only;
      c = 0;
    }
  }
  f.overhead_s = o;
  f.bandwidth = c > 0 ? 1 / c : 0;
  return f;
}

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

// Writes results.dat and chart.gp into `out` and, when gnuplot is
// installed, renders results.png. Answers what happened, for the log.
std::string chart(const std::string& out, const std::vector<std::string>& workloads,
                  const std::vector<std::string>& contenders,
                  const std::map<std::string, std::map<std::string, meshstore::Result<double>>>& r,
                  const std::map<std::string, std::uint64_t>& bytes) {
  std::ofstream dat(out + "/results.dat");
  dat << "contender";
  for (const auto& w : workloads) dat << ' ' << w;
  dat << '\n';
  for (const auto& c : contenders) {
    dat << c;
    for (const auto& w : workloads) {
      const auto& s = r.at(w).at(c);
      dat << ' ' << (s.ok() ? fixed(static_cast<double>(bytes.at(w)) / 1e9 / *s, 3) : "-");
    }
    dat << '\n';
  }
  dat.close();
  std::ofstream gp(out + "/chart.gp");
  gp << "set terminal pngcairo noenhanced size 1200,600 font ',10'\n"
     << "set output 'results.png'\n"
     << "set title 'peer_bench: process A to process B, verified (GB/s, higher is better)'\n"
     << "set datafile missing '-'\n"
     << "set style data histogram\nset style histogram clustered gap 1\n"
     << "set style fill solid 0.8 border -1\nset boxwidth 0.9\n"
     << "set ylabel 'GB/s (log scale)'\nset logscale y\nset yrange [0.05:*]\nset grid ytics\n"
     << "set xtics rotate by -30\nset key top right\n"
     << "plot ";
  for (std::size_t i = 0; i < workloads.size(); ++i) {
    gp << (i ? ", " : "") << "'results.dat' using " << i + 2 << ":xtic(1) title columnheader";
  }
  gp << '\n';
  gp.close();
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    return "no chart: gnuplot is not installed (apt-get install gnuplot-nox)";
  }
  const std::string cmd = "cd '" + out + "' && gnuplot chart.gp";
  if (std::system(cmd.c_str()) != 0) return "gnuplot failed on " + out + "/chart.gp";
  return "wrote " + out + "/results.png";
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.role == "reader") return run_reader(a);
  if (!a.role.empty()) die("unknown --role");
  for (const auto& c : a.contenders) {
    const bool known = c == "memcpy" || c == "tcp" || c == "safetensors-shm" || c == "gloo" ||
                       c == "mpi" || is_meshstore(c)
#if MESHSTORE_HAVE_HIREDIS
                       || c == "redis"
#endif
        ;
    if (!known) die("unknown or unbuilt contender '" + c + "'");
  }
  std::system(("mkdir -p '" + a.out + "'").c_str());
  // workload -> contender -> median seconds, or why it was skipped
  std::map<std::string, std::map<std::string, meshstore::Result<double>>> seconds;
  std::map<std::string, std::uint64_t> bytes, tensors;
  for (const auto& wname : a.workloads) {
    Workload w = make_workload(wname, a.smoke);
    bytes[wname] = w.bytes;
    tensors[wname] = w.shapes.size();
    for (const auto& c : a.contenders) {
      std::fprintf(stderr, "peer_bench: %s on %s\n", c.c_str(), wname.c_str());
      auto s = run_contender(a, c, w);
      if (!s.ok()) {
        std::fprintf(stderr, "peer_bench: %s skipped: %s\n", c.c_str(),
                     s.status().message().c_str());
      }
      seconds[wname].emplace(c, std::move(s));
    }
  }
  // The table: GB/s, x memcpy, x the best contender that is neither memcpy
  // nor meshstore.
  std::string md = "| workload | contender | seconds | GB/s | x memcpy | x best other |\n";
  md += "| --- | --- | --- | --- | --- | --- |\n";
  std::string json = "{\"smoke\":" + std::string(a.smoke ? "true" : "false") + ",\"results\":[";
  std::string headline;
  bool first = true;
  for (const auto& wname : a.workloads) {
    const auto& row = seconds.at(wname);
    double mem = 0, best_other = 0;
    std::string best_name;
    for (const auto& [c, s] : row) {
      if (!s.ok()) continue;
      if (c == "memcpy") mem = *s;
      if (c != "memcpy" && !is_meshstore(c) && (best_other == 0 || *s < best_other)) {
        best_other = *s;
        best_name = c;
      }
    }
    for (const auto& c : a.contenders) {
      const auto& s = row.at(c);
      if (!s.ok()) {
        md += "| " + wname + " | " + c + " | skipped: " + s.status().message() + " | | | |\n";
        json += std::string(first ? "" : ",") + "{\"workload\":\"" + wname + "\",\"contender\":\"" +
                c + "\",\"skipped\":true}";
        first = false;
        continue;
      }
      const double gbps = static_cast<double>(bytes[wname]) / 1e9 / *s;
      md += "| " + wname + " | " + c + " | " + fixed(*s, 4) + " | " + fixed(gbps, 2) + " | " +
            (mem > 0 ? fixed(mem / *s, 2) : "-") + " | " +
            (best_other > 0 ? fixed(best_other / *s, 2) : "-") + " |\n";
      json += std::string(first ? "" : ",") + "{\"workload\":\"" + wname + "\",\"contender\":\"" +
              c + "\",\"bytes\":" + std::to_string(bytes[wname]) +
              ",\"tensors\":" + std::to_string(tensors[wname]) + ",\"seconds\":" + fixed(*s, 6) +
              ",\"gbps\":" + fixed(gbps, 3) + ",\"vs_memcpy\":" + fixed(mem > 0 ? mem / *s : 0, 3) +
              ",\"vs_best_other\":" + fixed(best_other > 0 ? best_other / *s : 0, 3) + "}";
      first = false;
    }
    // The goal's figures: meshstore with the transport it picks for the
    // pair, publishing by copy and in place.
    std::string line;
    for (const char* c : {"meshstore", "meshstore-inplace"}) {
      if (!row.count(c) || !row.at(c).ok() || best_other <= 0) continue;
      line += std::string(line.empty() ? "" : ", ") + c + " " + fixed(best_other / *row.at(c), 2) +
              " x";
    }
    if (!line.empty()) {
      headline += "- " + wname + ": " + line + " the best other contender (" + best_name + ")\n";
    }
  }
  json += "],\"fits\":[";
  // Fitted per-tensor overhead and bandwidth, for contenders measured on
  // workloads of different tensor counts.
  std::string fits =
      "| contender | overhead per tensor (us) | bandwidth (GB/s) |\n| --- | --- | --- |\n";
  bool any_fit = false;
  first = true;
  for (const auto& c : a.contenders) {
    std::vector<std::array<double, 3>> points;
    for (const auto& wname : a.workloads) {
      const auto& s = seconds.at(wname).at(c);
      if (s.ok()) {
        points.push_back(
            {static_cast<double>(tensors[wname]), static_cast<double>(bytes[wname]), *s});
      }
    }
    auto f = fit(points);
    if (!f) continue;
    any_fit = true;
    fits += "| " + c + " | " + fixed(f->overhead_s * 1e6, 2) + " | " +
            (f->bandwidth > 0 ? fixed(f->bandwidth / 1e9, 2) : "unbounded") + " |\n";
    json += std::string(first ? "" : ",") + "{\"contender\":\"" + c +
            "\",\"overhead_us\":" + fixed(f->overhead_s * 1e6, 3) +
            ",\"bandwidth_gbps\":" + fixed(f->bandwidth / 1e9, 3) + "}";
    first = false;
  }
  json += "]}\n";
  if (!headline.empty())
    md = "Goal: meshstore (the transport it picks for the pair) against the best other "
         "contender:\n\n" +
         headline + "\n" + md;
  md += "\nContenders:\n\n";
  for (const auto& c : a.contenders) md += "- `" + c + "`: " + describe(c) + "\n";
  if (any_fit) {
    md +=
        "\nFitted per-tensor overhead and bandwidth (seconds = overhead x tensors + bytes / "
        "bandwidth, least squares on the relative error over the workloads above):\n\n" +
        fits;
  }
  std::ofstream(a.out + "/results.md") << md;
  std::ofstream(a.out + "/results.json") << json;
  const std::string drawn = chart(a.out, a.workloads, a.contenders, seconds, bytes);
  std::printf("%s", md.c_str());
  std::printf("\npeer_bench: wrote %s/results.md and %s/results.json; %s\n", a.out.c_str(),
              a.out.c_str(), drawn.c_str());
  return 0;
}
