// store_bench: user-level figures of the store, each next to a baseline
// measured in the same run (never a bare absolute time).
//
//   store_bench --scenario single --transport shm --bytes 1GiB [--iters 5] [--json]
//       put / get_into / get of one tensor, warm (the same key reused) and
//       cold (first put), between two processes: this one is the client, a
//       peer process it starts holds the store and its volume. Baselines:
//       memcpy of the same bytes, and (tcp, rpc) a raw TCP stream of the same
//       bytes between the same two processes.
//   store_bench --scenario small --transport shm [--iters 2000] [--json]
//       p50/p99 of a 4 KiB put + get_into across the two processes, against
//       the round trip of a bare request (exists) to the same peer.
//   store_bench --scenario weight-sync --model qwen3-0.6b --transport shm [--json]
//       put_state_dict and get_state_dict_into of a Qwen3-shaped bf16 state
//       dict (the exact names and shapes) against memcpy of the same bytes;
//       the per-tensor overhead fitted from a second workload (1,000 tensors
//       of 4 KiB); the end-to-end put then get.
//   --processes 1     everything in one process (an embedded store)
//   store_bench --smoke      both scenarios over shm and tcp, tiny, for CI
//
// Progress goes to stderr; the table or the JSON object to stdout.

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "meshstore/checkpoint.hpp"
#include "meshstore/placement.hpp"
#include "meshstore/safetensors.hpp"
#include "meshstore/store.hpp"
#include "qwen3_shapes.hpp"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string scenario = "single";
  std::string transport = "shm";
  std::size_t bytes = std::size_t{256} << 20;
  bool bytes_given = false;
  int iters = 0;  // 0 = scenario default
  bool json = false;
  bool smoke = false;
  int processes = 2;
  int tcp_streams = 2;  // StoreOptions::tcp_streams
  std::string peer;     // internal: run as a peer process ("serve", "read")
  std::string model = "qwen3-0.6b";
  int port = 0;                // internal: the store a "read" peer connects to
  std::string prefix = "e2e";  // internal: what a "read" peer follows
  std::string dir;             // internal: the checkpoint a "load" peer loads
  std::string load_mode;       // internal: "time", "rss-store" or "rss-buffers"
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "store_bench: %s\n"
               "usage: store_bench [--scenario single|small|weight-sync|reshard|safetensors-load]\n"
               "                   [--transport shm|tcp|rpc]\n"
               "                   [--model qwen3-0.6b|qwen3-1.7b|qwen3-4b-8layers]\n"
               "                   [--bytes N[KiB|MiB|GiB]] [--iters N] [--processes 1|2] [--json] "
               "[--smoke]\n",
               why);
  std::exit(2);
}

std::size_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit(end);
  double mul = 1;
  if (unit == "KiB" || unit == "K")
    mul = 1024.0;
  else if (unit == "MiB" || unit == "M")
    mul = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G")
    mul = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "B")
    usage(("bad size unit in '" + s + "'").c_str());
  if (!(v > 0)) usage(("bad size '" + s + "'").c_str());
  return static_cast<std::size_t>(v * mul);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage((arg + " needs a value").c_str());
      return argv[++i];
    };
    if (arg == "--scenario")
      a.scenario = next();
    else if (arg == "--transport")
      a.transport = next();
    else if (arg == "--bytes") {
      a.bytes = parse_bytes(next());
      a.bytes_given = true;
    } else if (arg == "--iters")
      a.iters = std::atoi(next().c_str());
    else if (arg == "--json")
      a.json = true;
    else if (arg == "--smoke")
      a.smoke = true;
    else if (arg == "--processes")
      a.processes = std::atoi(next().c_str());
    else if (arg == "--model")
      a.model = next();
    else if (arg == "--tcp-streams")
      a.tcp_streams = std::atoi(next().c_str());
    else if (arg == "--peer")
      a.peer = next();
    else if (arg == "--port")
      a.port = std::atoi(next().c_str());
    else if (arg == "--prefix")
      a.prefix = next();
    else if (arg == "--dir")
      a.dir = next();
    else if (arg == "--load-mode")
      a.load_mode = next();
    else if (arg == "--help" || arg == "-h")
      usage("help");
    else
      usage(("unknown argument '" + arg + "'").c_str());
  }
  if (a.scenario != "single" && a.scenario != "small" && a.scenario != "weight-sync" &&
      a.scenario != "reshard" && a.scenario != "safetensors-load")
    usage(("unknown scenario '" + a.scenario + "'").c_str());
  if (a.iters < 0) usage("--iters must be positive");
  if (a.processes != 1 && a.processes != 2) usage("--processes must be 1 or 2");
  return a;
}

using meshstore::bench::median;
using meshstore::bench::must;

double secs(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// -- raw TCP: the baseline for bytes between two processes ---------------

bool send_all(int fd, const void* p, std::size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}
bool recv_all(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, c, n, MSG_WAITALL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// Peer side: per connection, requests {u64 bytes, u64 mode}: mode 0 = take
// the bytes then answer one byte, mode 1 = send the bytes. One warm buffer.
void raw_serve(int lfd) {
  std::vector<char> buf;
  for (;;) {
    const int fd = accept(lfd, nullptr, nullptr);
    if (fd < 0) return;
    std::uint64_t req[2];
    while (recv_all(fd, req, sizeof(req))) {
      if (buf.size() < req[0]) {
        buf.resize(req[0]);
        std::memset(buf.data(), 1, buf.size());
      }
      if (req[1] == 0) {
        const char ack = 1;
        if (!recv_all(fd, buf.data(), req[0]) || !send_all(fd, &ack, 1)) break;
      } else if (!send_all(fd, buf.data(), req[0])) {
        break;
      }
    }
    close(fd);
  }
}

int raw_listen(std::uint16_t& port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 4) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("store_bench peer: raw tcp listen");
    std::exit(1);
  }
  port = ntohs(addr.sin_port);
  return fd;
}

// Client side: a raw stream to the peer, timed one way at a time.
class RawTcp {
 public:
  explicit RawTcp(std::uint16_t port) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      std::perror("store_bench: raw tcp connect");
      std::exit(1);
    }
  }
  ~RawTcp() { close(fd_); }
  // Seconds to send `n` bytes and hear they all arrived.
  double send(const void* p, std::size_t n) {
    std::uint64_t req[2] = {n, 0};
    char ack = 0;
    auto t0 = Clock::now();
    if (!send_all(fd_, req, sizeof(req)) || !send_all(fd_, p, n) || !recv_all(fd_, &ack, 1))
      fail("raw tcp send");
    return secs(t0);
  }
  // Seconds to ask for and receive `n` bytes.
  double recv(void* p, std::size_t n) {
    std::uint64_t req[2] = {n, 1};
    auto t0 = Clock::now();
    if (!send_all(fd_, req, sizeof(req)) || !recv_all(fd_, p, n)) fail("raw tcp recv");
    return secs(t0);
  }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::fprintf(stderr, "store_bench: %s failed\n", what);
    std::exit(1);
  }
  int fd_;
};

// -- the peer process: holds the store and its volume ----------------------

int run_peer(const Args& a) {
  meshstore::StoreOptions o;
  o.listen = "127.0.0.1:0";
  o.local_rank = -1;
  auto store = must(meshstore::Store::embedded(o), "peer: Store::embedded");
  std::uint16_t raw_port = 0;
  const int lfd = raw_listen(raw_port);
  std::thread(raw_serve, lfd).detach();
  // The bare cross-memory-attach baseline reads and writes this buffer.
  std::vector<std::uint8_t> cma_buffer(a.bytes_given ? a.bytes : 0, 1);
  std::printf("ready %u %u %lld %llu\n", static_cast<unsigned>(store.port()),
              static_cast<unsigned>(raw_port), static_cast<long long>(getpid()),
              static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(cma_buffer.data())));
  std::fflush(stdout);
  // Until the bench closes our stdin (or dies).
  char c;
  while (read(0, &c, 1) > 0) {
  }
  store.close();
  std::_Exit(0);  // the raw server thread still blocks in accept
}

struct Peer {
  std::unique_ptr<meshstore::bench::Child> child;  // closing its stdin stops it
  std::uint16_t store_port = 0;
  std::uint16_t raw_port = 0;
  pid_t cma_pid = 0;  // the peer's process and its baseline buffer
  std::uint64_t cma_address = 0;
};

// The peer holds a buffer of `cma_bytes` for the bare cross-memory-attach
// baseline (0: none).
std::unique_ptr<Peer> start_peer(std::size_t cma_bytes = 0) {
  std::vector<std::string> args{"--peer", "serve"};
  if (cma_bytes > 0) {
    args.push_back("--bytes");
    args.push_back(std::to_string(cma_bytes) + "B");
  }
  auto peer = std::make_unique<Peer>();
  peer->child = meshstore::bench::spawn_self(args);
  unsigned sp = 0, rp = 0;
  long long pid = 0;
  unsigned long long address = 0;
  if (std::fscanf(peer->child->from, "ready %u %u %lld %llu", &sp, &rp, &pid, &address) != 4) {
    meshstore::bench::die("the peer process did not start");
  }
  peer->store_port = static_cast<std::uint16_t>(sp);
  peer->raw_port = static_cast<std::uint16_t>(rp);
  peer->cma_pid = static_cast<pid_t>(pid);
  peer->cma_address = address;
  return peer;
}

// The store this run measures: embedded (one process), or a connection to
// the peer process that holds the store and its volume.
struct Session {
  std::unique_ptr<Peer> peer;
  meshstore::Store store;
};

Session open_session(const Args& a) {
  meshstore::StoreOptions o;
  o.transport = a.transport;
  o.tcp_streams = a.tcp_streams;
  if (a.processes == 1) return Session{nullptr, must(meshstore::Store::embedded(o), "embedded")};
  const std::size_t n = a.smoke ? (std::size_t{4} << 20) : a.bytes;
  auto peer = start_peer(a.transport == "cma" && a.scenario == "single" ? n : 0);
  o.host_volumes = false;
  o.local_rank = -1;
  o.rank = 1;
  auto store = must(meshstore::Store::connect("127.0.0.1:" + std::to_string(peer->store_port), o),
                    "connect");
  return Session{std::move(peer), std::move(store)};
}

void run_single(const Args& a) {
  const std::size_t n = a.smoke ? (std::size_t{4} << 20) : a.bytes;
  const int iters = a.iters ? a.iters : (a.smoke ? 2 : 5);
  auto session = open_session(a);
  auto& store = session.store;
  std::vector<std::uint8_t> src(n), dst(n), scratch(n);
  for (std::size_t i = 0; i < n; i += 4096) src[i] = static_cast<std::uint8_t>(i >> 12);
  std::memset(dst.data(), 0, n);
  std::memset(scratch.data(), 0, n);
  const auto len = static_cast<std::int64_t>(n);
  const meshstore::TensorView in(src.data(), meshstore::DType::uint8, {len});
  const meshstore::TensorView out(dst.data(), meshstore::DType::uint8, {len});

  std::vector<double> memcpy_t, put_t, get_into_t, get_t, tcp_send_t, tcp_recv_t;
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    std::memcpy(scratch.data(), src.data(), n);
    memcpy_t.push_back(secs(t0));
  }
  if (session.peer) {
    RawTcp raw(session.peer->raw_port);
    raw.send(src.data(), n);  // warms the peer's buffer
    for (int i = 0; i < iters; ++i) {
      tcp_send_t.push_back(raw.send(src.data(), n));
      tcp_recv_t.push_back(raw.recv(scratch.data(), n));
    }
  }
  // cma: bare process_vm_writev / readv of the same bytes to and from the
  // peer's buffer, one call each, as a program without a store would.
  std::vector<double> cma_write_t, cma_read_t;
  if (session.peer && session.peer->cma_address != 0) {
    auto bare = [&](bool write) {
      iovec local{write ? static_cast<void*>(src.data()) : static_cast<void*>(scratch.data()), n};
      iovec remote{reinterpret_cast<void*>(session.peer->cma_address), n};
      const auto t0 = Clock::now();
      std::size_t done = 0;
      while (done < n) {
        iovec l{static_cast<char*>(local.iov_base) + done, n - done};
        iovec r{static_cast<char*>(remote.iov_base) + done, n - done};
        const ssize_t got = write ? process_vm_writev(session.peer->cma_pid, &l, 1, &r, 1, 0)
                                  : process_vm_readv(session.peer->cma_pid, &l, 1, &r, 1, 0);
        if (got <= 0) {
          std::perror("store_bench: bare process_vm_readv/writev");
          std::exit(1);
        }
        done += static_cast<std::size_t>(got);
      }
      return secs(t0);
    };
    bare(true);  // the peer's buffer is touched already; this warms ours
    for (int i = 0; i < iters; ++i) {
      cma_write_t.push_back(bare(true));
      cma_read_t.push_back(bare(false));
    }
  }
  auto t0 = Clock::now();
  must(store.put("bench", in).get(600s), "cold put");
  const double cold = secs(t0);
  must(store.put("bench", in).get(600s), "warm-up put");  // the next version needs new memory once
  for (int i = 0; i < iters; ++i) {
    if (!a.json) std::fprintf(stderr, "\rstore_bench single: round %d/%d", i + 1, iters);
    t0 = Clock::now();
    must(store.put("bench", in).get(600s), "put");
    put_t.push_back(secs(t0));
    t0 = Clock::now();
    must(store.get_into("bench", out).get(600s), "get_into");
    get_into_t.push_back(secs(t0));
    t0 = Clock::now();
    auto t = must(store.get("bench").get(600s), "get");
    get_t.push_back(secs(t0));
  }
  if (!a.json) std::fprintf(stderr, "\n");
  if (std::memcmp(src.data(), dst.data(), n) != 0) {
    std::fprintf(stderr, "store_bench: get_into returned different bytes\n");
    std::exit(1);
  }
  const double gb = static_cast<double>(n) / 1e9;
  const double m = median(memcpy_t), p = median(put_t), gi = median(get_into_t), g = median(get_t);
  const bool two = session.peer != nullptr;
  const double ts = two ? median(tcp_send_t) : 0, tr = two ? median(tcp_recv_t) : 0;
  if (a.json) {
    std::printf(
        "{\"scenario\":\"single\",\"transport\":\"%s\",\"tcp_streams\":%d,\"bytes\":%zu,\"iters\":%"
        "d,"
        "\"processes\":%d,"
        "\"memcpy_gbps\":%.3f,\"put_gbps\":%.3f,\"put_cold_gbps\":%.3f,\"get_into_gbps\":%.3f,"
        "\"get_gbps\":%.3f,"
        "\"put_vs_memcpy\":%.3f,\"get_into_vs_memcpy\":%.3f,\"get_vs_memcpy\":%.3f,\"put_cold_vs_"
        "memcpy\":%.3f",
        a.transport.c_str(), a.tcp_streams, n, iters, a.processes, gb / m, gb / p, gb / cold,
        gb / gi, gb / g, m / p, m / gi, m / g, m / cold);
    if (two) {
      std::printf(
          ",\"raw_tcp_send_gbps\":%.3f,\"raw_tcp_recv_gbps\":%.3f,\"put_vs_raw_tcp\":%.3f,"
          "\"get_into_vs_raw_tcp\":%.3f",
          gb / ts, gb / tr, ts / p, tr / gi);
    }
    if (!cma_read_t.empty()) {
      const double cw = median(cma_write_t), cr = median(cma_read_t);
      std::printf(
          ",\"process_vm_writev_gbps\":%.3f,\"process_vm_readv_gbps\":%.3f,"
          "\"put_vs_process_vm_writev\":%.3f,\"get_into_vs_process_vm_readv\":%.3f",
          gb / cw, gb / cr, cw / p, cr / gi);
    }
    std::printf("}\n");
    return;
  }
  std::printf(
      "scenario single: %zu bytes, transport %s, %s, median of %d\n", n, a.transport.c_str(),
      two ? "client process -> store in a peer process" : "embedded store (1 process)", iters);
  std::printf("  %-16s %10s %10s %10s %12s\n", "operation", "seconds", "GB/s", "vs memcpy",
              two ? "vs raw tcp" : "");
  auto row = [&](const char* name, double t, double tcp) {
    std::printf("  %-16s %10.4f %10.2f %10.2f", name, t, gb / t, m / t);
    if (tcp > 0) std::printf(" %12.2f", tcp / t);
    std::printf("\n");
  };
  row("memcpy", m, 0);
  if (two) {
    row("raw tcp send", ts, ts);
    row("raw tcp recv", tr, tr);
  }
  row("put (cold)", cold, ts);
  row("put (warm)", p, ts);
  row("get_into", gi, tr);
  row("get (allocates)", g, tr);
  if (!cma_read_t.empty()) {
    const double cw = median(cma_write_t), cr = median(cma_read_t);
    std::printf("  bare process_vm_writev %.4f s (%.2f GB/s): put (warm) %.2f x of it\n", cw,
                gb / cw, cw / p);
    std::printf("  bare process_vm_readv  %.4f s (%.2f GB/s): get_into %.2f x of it\n", cr, gb / cr,
                cr / gi);
  }
}

// -- reshard: a tensor put as 2 row shards, read as 4 column shards --------

void run_reshard(const Args& a) {
  // bf16, 4096 columns; rows from the size (1 GiB unless --bytes says).
  const std::int64_t cols = 4096;
  const std::size_t want =
      a.smoke ? (std::size_t{8} << 20) : (a.bytes_given ? a.bytes : (std::size_t{1} << 30));
  const std::int64_t rows =
      std::max<std::int64_t>(4, static_cast<std::int64_t>(want / (cols * 2)) / 4 * 4);
  const std::size_t n = static_cast<std::size_t>(rows * cols) * 2;
  const int iters = a.iters ? a.iters : (a.smoke ? 2 : 5);
  auto session = open_session(a);
  auto& store = session.store;
  std::vector<std::uint16_t> whole(static_cast<std::size_t>(rows * cols)), scratch(whole.size());
  for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<std::uint16_t>(i * 7 + 3);
  const meshstore::Shape global{rows, cols};
  auto put_rows = meshstore::Placement::make({2}, {meshstore::DimPlacement::shard(0)}).value();
  auto get_cols = meshstore::Placement::make({4}, {meshstore::DimPlacement::shard(1)}).value();
  std::vector<std::vector<std::uint16_t>> parts(4, std::vector<std::uint16_t>(whole.size() / 4));
  std::vector<double> memcpy_t, put_t, get_t;
  for (int i = 0; i < iters + 2; ++i) {  // two warm-up rounds: fresh segments
    if (!a.json) std::fprintf(stderr, "\rstore_bench reshard: round %d/%d", i + 1, iters + 2);
    // The baseline in every round: this VM's memory bandwidth drifts.
    auto t0 = Clock::now();
    std::memcpy(scratch.data(), whole.data(), n);
    if (i >= 2) memcpy_t.push_back(secs(t0));
    t0 = Clock::now();
    std::vector<meshstore::Future<void>> puts;
    for (std::int64_t r = 0; r < 2; ++r) {
      auto box = put_rows.slice_for(global, r).value();
      puts.push_back(store.put("reshard",
                               meshstore::TensorView(whole.data() + box.offsets()[0] * cols,
                                                     meshstore::DType::bfloat16, box.local_shape()),
                               box));
    }
    for (auto& f : puts) must(f.get(600s), "put shard");
    const double put_s = secs(t0);
    t0 = Clock::now();
    std::vector<meshstore::Future<void>> gets;
    for (std::int64_t r = 0; r < 4; ++r) {
      auto box = get_cols.slice_for(global, r).value();
      gets.push_back(
          store.get_into("reshard",
                         meshstore::TensorView(parts[static_cast<std::size_t>(r)].data(),
                                               meshstore::DType::bfloat16, box.local_shape()),
                         box));
    }
    for (auto& f : gets) must(f.get(600s), "get_into column shard");
    const double get_s = secs(t0);
    if (i >= 2) {
      put_t.push_back(put_s);
      get_t.push_back(get_s);
    }
  }
  if (!a.json) std::fprintf(stderr, "\n");
  for (std::int64_t r = 0; r < 4; ++r) {
    const auto& part = parts[static_cast<std::size_t>(r)];
    const std::int64_t w = cols / 4;
    for (std::int64_t row = 0; row < rows; row += 97) {
      for (std::int64_t c = 0; c < w; c += 131) {
        if (part[static_cast<std::size_t>(row * w + c)] !=
            whole[static_cast<std::size_t>(row * cols + r * w + c)]) {
          std::fprintf(stderr, "store_bench: column shard %lld holds the wrong bytes\n",
                       static_cast<long long>(r));
          std::exit(1);
        }
      }
    }
  }
  must(store.remove("reshard").get(60s), "cleanup");
  const double m = median(memcpy_t), p = median(put_t), g = median(get_t);
  const double gb = static_cast<double>(n) / 1e9;
  if (a.json) {
    std::printf(
        "{\"scenario\":\"reshard\",\"transport\":\"%s\",\"processes\":%d,\"bytes\":%zu,"
        "\"shape\":[%lld,%lld],\"dtype\":\"bfloat16\",\"put\":\"2 row shards\","
        "\"get\":\"4 column shards\",\"iters\":%d,\"memcpy_gbps\":%.3f,\"put_gbps\":%.3f,"
        "\"reshard_gbps\":%.3f,\"put_vs_memcpy\":%.3f,\"reshard_vs_memcpy\":%.3f}\n",
        a.transport.c_str(), a.processes, n, static_cast<long long>(rows),
        static_cast<long long>(cols), iters, gb / m, gb / p, gb / g, m / p, m / g);
    return;
  }
  std::printf(
      "scenario reshard: [%lld, %lld] bf16 (%.2f GB), 2 row shards -> 4 column shards, "
      "transport %s, %s, median of %d\n",
      static_cast<long long>(rows), static_cast<long long>(cols), gb, a.transport.c_str(),
      a.processes == 2 ? "client process -> store in a peer process" : "embedded store", iters);
  std::printf("  %-24s %10s %10s %10s\n", "operation", "seconds", "GB/s", "vs memcpy");
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "memcpy", m, gb / m, 1.0);
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "put 2 row shards", p, gb / p, m / p);
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "get 4 column shards", g, gb / g, m / g);
}

void run_small(const Args& a) {
  const int iters = a.iters ? a.iters : (a.smoke ? 50 : 2000);
  auto session = open_session(a);
  auto& store = session.store;
  std::vector<std::uint8_t> src(4096, 7), dst(4096);
  const meshstore::TensorView in(src.data(), meshstore::DType::uint8, {4096});
  const meshstore::TensorView out(dst.data(), meshstore::DType::uint8, {4096});
  must(store.put("small", in).get(60s), "put");
  std::vector<double> rtt, put_get;
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    must(store.exists("small").get(60s), "exists");
    rtt.push_back(secs(t0) * 1e6);
    t0 = Clock::now();
    must(store.put("small", in).get(60s), "put");
    must(store.get_into("small", out).get(60s), "get_into");
    put_get.push_back(secs(t0) * 1e6);
  }
  const double rtt50 = percentile(rtt, 0.5), pg50 = percentile(put_get, 0.5),
               pg99 = percentile(put_get, 0.99);
  if (a.json) {
    std::printf(
        "{\"scenario\":\"small\",\"transport\":\"%s\",\"bytes\":4096,\"iters\":%d,\"processes\":%d,"
        "\"rtt_p50_us\":%.2f,\"put_get_p50_us\":%.2f,\"put_get_p99_us\":%.2f,\"small_put_get_vs_"
        "rtt\":%.2f}\n",
        a.transport.c_str(), iters, a.processes, rtt50, pg50, pg99, pg50 / rtt50);
    return;
  }
  std::printf(
      "scenario small: 4 KiB put + get_into, transport %s, %s, %d rounds\n", a.transport.c_str(),
      a.processes == 2 ? "client process -> store in a peer process" : "embedded store", iters);
  std::printf("  bare round trip (exists) p50 %8.1f us\n", rtt50);
  std::printf("  put + get_into           p50 %8.1f us   p99 %8.1f us   (%.1f round trips)\n", pg50,
              pg99, pg50 / rtt50);
}

// -- weight sync: state dicts ------------------------------------------------

// Buffers and their state dict.
struct Dict {
  std::vector<std::vector<std::uint16_t>> buffers;
  meshstore::StateDict sd;
  std::uint64_t bytes = 0;
};

Dict make_dict(const qwen3::Tensors& shapes, std::uint16_t fill) {
  Dict d;
  d.buffers.reserve(shapes.size());
  for (const auto& [name, shape] : shapes) {
    d.buffers.emplace_back(static_cast<std::size_t>(qwen3::numel(shape)), fill);
    must(d.sd.insert(name, meshstore::TensorView(d.buffers.back().data(),
                                                 meshstore::DType::bfloat16, shape)),
         "state dict");
    d.bytes += d.buffers.back().size() * 2;
  }
  return d;
}

struct SyncTimes {
  double put = 0, get = 0;
};

// Median put_state_dict and get_state_dict_into seconds over `iters`, warm.
SyncTimes time_sync(meshstore::Store& store, const std::string& key, Dict& src, Dict& dst,
                    int iters, bool progress) {
  must(store.put_state_dict(key, src.sd).get(600s), "put_state_dict (cold)");
  must(store.put_state_dict(key, src.sd).get(600s), "put_state_dict (warm-up)");
  must(store.get_state_dict_into(key, dst.sd).get(600s), "get_state_dict_into (warm-up)");
  std::vector<double> put_t, get_t;
  for (int i = 0; i < iters; ++i) {
    if (progress)
      std::fprintf(stderr, "\rstore_bench weight-sync %s: round %d/%d", key.c_str(), i + 1, iters);
    auto t0 = Clock::now();
    must(store.put_state_dict(key, src.sd).get(600s), "put_state_dict");
    put_t.push_back(secs(t0));
    t0 = Clock::now();
    must(store.get_state_dict_into(key, dst.sd).get(600s), "get_state_dict_into");
    get_t.push_back(secs(t0));
  }
  if (progress) std::fprintf(stderr, "\n");
  return SyncTimes{median(put_t), median(get_t)};
}

// The pattern of version `v` (bf16 bits), every element alike.
std::uint16_t pattern_of(std::uint64_t v) { return static_cast<std::uint16_t>(0x3f80 + v * 7); }

// A helper process's store: joins the peer's store at --port as rank `rank`,
// hosting no volume, over the bench's transport.
meshstore::Store connect_helper(const Args& a, std::int64_t rank, const char* what) {
  meshstore::StoreOptions o;
  o.transport = a.transport;
  o.tcp_streams = a.tcp_streams;
  o.host_volumes = false;
  o.local_rank = -1;
  o.rank = rank;
  return must(meshstore::Store::connect("127.0.0.1:" + std::to_string(a.port), o), what);
}

// The reader peer of the end-to-end figure: connects to the store, then for
// each round waits for the next version under "e2e" (streamed while the
// writer puts it), notes when its last byte arrived, checks it, and reports
// "done VERSION STEADY_NS OK" on stdout.
int run_reader(const Args& a) {
  qwen3::Config config;
  if (!qwen3::find(a.model, config)) usage(("unknown model '" + a.model + "'").c_str());
  if (a.smoke) config.layers = 1;
  auto store = connect_helper(a, 2, "reader: connect");
  Dict dst = make_dict(qwen3::tensors(config), 0);
  std::printf("ready\n");
  std::fflush(stdout);
  std::uint64_t seen = 0;
  for (int r = 0; r < a.iters; ++r) {
    seen = must(store.get_next_state_dict_into(a.prefix, dst.sd, seen, 600s).get(),
                "reader: get_next_state_dict_into");
    const auto end =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
    bool ok = true;
    for (const auto& b : dst.buffers) {
      for (std::size_t i = 0; i < b.size() && ok; i += 4099) ok = b[i] == pattern_of(seen);
      ok = ok && b.back() == pattern_of(seen);
    }
    std::printf("done %llu %lld %d\n", static_cast<unsigned long long>(seen),
                static_cast<long long>(end), ok ? 1 : 0);
    std::fflush(stdout);
  }
  char c;
  while (read(0, &c, 1) > 0) {
  }
  store.close();
  return 0;
}

struct EndToEnd {
  double seconds = 0;  // median, first byte put to last byte read
  double put = 0;      // median publish_state_dict
  int rounds = 0;
};

// The trainer publishes, a worker in another process reads it into its own
// buffers, timed to the reader's last byte (steady clock, one host). Each
// round waits until the reader is subscribed to the next version first.
//  - copy: publish_state_dict of the trainer's buffers, timed from before
//    its first byte; the reader streams it while it is put.
//  - in place: the trainer writes the version straight into tensors from
//    stage_publish (as its update step would; not timed, like filling its
//    own buffers in the copy mode), then commit() is timed and the reader
//    reads it.
EndToEnd time_end_to_end(const Args& a, meshstore::Store& store, std::uint16_t store_port,
                         Dict& src, const qwen3::Tensors& shapes, int iters, bool in_place) {
  const std::string prefix = in_place ? "e2e_in_place" : "e2e";
  std::vector<meshstore::TensorSpec> specs;
  for (const auto& [name, shape] : shapes)
    specs.push_back({name, meshstore::DType::bfloat16, shape});
  const int warm = 2;  // the first versions fault in fresh segments
  const int rounds = iters + warm;
  auto subscribes = [&] {
    return must(store.controller_counters().get(30s), "counters").stream_subscribes;
  };
  std::uint64_t last = subscribes();
  std::vector<std::string> args{"--peer",        "read",
                                "--port",        std::to_string(store_port),
                                "--model",       a.model,
                                "--transport",   a.transport,
                                "--tcp-streams", std::to_string(a.tcp_streams),
                                "--iters",       std::to_string(rounds),
                                "--prefix",      prefix};
  if (a.smoke) args.push_back("--smoke");
  auto reader = meshstore::bench::spawn_self(args);
  FILE* from = reader->from;
  char line[256];
  if (!std::fgets(line, sizeof(line), from) || std::strncmp(line, "ready", 5) != 0) {
    std::fprintf(stderr, "store_bench: the reader process did not start\n");
    std::exit(1);
  }
  std::vector<double> e2e, put;
  for (int r = 0; r < rounds; ++r) {
    if (!a.json) {
      std::fprintf(stderr, "\rstore_bench weight-sync end to end (%s): round %d/%d",
                   in_place ? "in place" : "copy", r + 1, rounds);
    }
    const std::uint64_t version = static_cast<std::uint64_t>(r) + 1;
    meshstore::StagedStateDict staged;
    if (in_place) {
      staged = must(store.stage_publish(prefix, specs).get(600s), "stage_publish");
      for (auto& e : staged.state_dict().entries()) {
        auto* p = static_cast<std::uint16_t*>(e.view.data());
        std::fill(p, p + e.view.numel(), pattern_of(version));
      }
    } else {
      for (auto& b : src.buffers) std::fill(b.begin(), b.end(), pattern_of(version));
    }
    // Bounded wait until the reader waits for this version.
    for (int i = 0; i < 60000 && subscribes() <= last; ++i) std::this_thread::sleep_for(1ms);
    last = subscribes();
    const auto t0 = Clock::now();
    const auto published =
        in_place ? must(staged.commit().get(600s), "commit")
                 : must(store.publish_state_dict(prefix, src.sd).get(600s), "publish");
    const double put_s = secs(t0);
    unsigned long long v = 0;
    long long end_ns = 0;
    int ok = 0;
    if (!std::fgets(line, sizeof(line), from) ||
        std::sscanf(line, "done %llu %lld %d", &v, &end_ns, &ok) != 3 || v != published || !ok) {
      std::fprintf(stderr, "store_bench: the reader read version %llu (%s), expected %llu\n", v,
                   ok ? "intact" : "corrupt", static_cast<unsigned long long>(published));
      std::exit(1);
    }
    const double e =
        static_cast<double>(
            end_ns -
            std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count()) /
        1e9;
    if (r >= warm) {
      e2e.push_back(e);
      put.push_back(put_s);
    }
  }
  if (!a.json) std::fprintf(stderr, "\n");
  reader.reset();  // closes its stdin and reaps it
  must(store.remove_batch({prefix}).get(60s), "cleanup");
  return EndToEnd{median(e2e), median(put), iters};
}

void run_weight_sync(const Args& a) {
  qwen3::Config config;
  if (!qwen3::find(a.model, config)) usage(("unknown model '" + a.model + "'").c_str());
  if (a.smoke) config.layers = 1;  // the real shapes, fewer layers
  const int iters = a.iters ? a.iters : (a.smoke ? 2 : 5);
  auto session = open_session(a);
  auto& store = session.store;
  const auto shapes = qwen3::tensors(config);
  Dict src = make_dict(shapes, 0x3f80), dst = make_dict(shapes, 0);
  // memcpy of the same bytes, tensor by tensor, warm.
  Dict scratch = make_dict(shapes, 0);
  std::vector<double> memcpy_t;
  for (int i = 0; i < iters + 1; ++i) {
    auto t0 = Clock::now();
    for (std::size_t t = 0; t < src.buffers.size(); ++t) {
      std::memcpy(scratch.buffers[t].data(), src.buffers[t].data(), src.buffers[t].size() * 2);
    }
    if (i > 0) memcpy_t.push_back(secs(t0));
  }
  scratch = Dict();
  const SyncTimes big = time_sync(store, "ws", src, dst, iters, !a.json);
  for (std::size_t t = 0; t < src.buffers.size(); ++t) {
    if (src.buffers[t] != dst.buffers[t]) {
      std::fprintf(stderr, "store_bench: get_state_dict_into returned different bytes\n");
      std::exit(1);
    }
  }
  // A second workload for the fit: 1,000 tensors of 4 KiB.
  qwen3::Tensors small_shapes;
  for (int i = 0; i < 1000; ++i) small_shapes.push_back({"t." + std::to_string(i), {2048}});
  Dict small_src = make_dict(small_shapes, 0x4000), small_dst = make_dict(small_shapes, 0);
  const SyncTimes small = time_sync(store, "ws_small", small_src, small_dst, iters, !a.json);
  // time = tensors * per_tensor + bytes / bandwidth, from the two workloads.
  const double n1 = static_cast<double>(shapes.size()), b1 = static_cast<double>(src.bytes);
  const double n2 = 1000.0, b2 = static_cast<double>(small_src.bytes);
  auto per_tensor_us = [&](double t1, double t2) {
    return std::max(0.0, (t1 * b2 - t2 * b1) / (n1 * b2 - n2 * b1)) * 1e6;
  };
  const double put_op = per_tensor_us(big.put, small.put),
               get_op = per_tensor_us(big.get, small.get);
  const double m = median(memcpy_t), gb = b1 / 1e9;
  const double sequential = big.put + big.get;
  // Streaming needs a reader in a third process, so a store it can reach.
  EndToEnd streamed, in_place;
  if (session.peer) {
    small_src = Dict();
    small_dst = Dict();
    dst = Dict();
    streamed = time_end_to_end(a, store, session.peer->store_port, src, shapes, iters, false);
    in_place = time_end_to_end(a, store, session.peer->store_port, src, shapes, iters, true);
  }
  const bool have_stream = streamed.seconds > 0;
  const double e2e = have_stream ? streamed.seconds : sequential;
  if (a.json) {
    std::printf(
        "{\"scenario\":\"weight-sync\",\"model\":\"%s\",\"transport\":\"%s\",\"processes\":%d,"
        "\"tensors\":%zu,\"bytes\":%llu,\"iters\":%d,\"memcpy_gbps\":%.3f,"
        "\"put_state_dict_gbps\":%.3f,\"get_state_dict_into_gbps\":%.3f,"
        "\"put_state_dict_vs_memcpy\":%.3f,\"get_state_dict_into_vs_memcpy\":%.3f,"
        "\"put_per_tensor_us\":%.2f,\"get_per_tensor_us\":%.2f,\"per_tensor_overhead_us\":%.2f,"
        "\"small_1000x4KiB_sync_ms\":%.3f,\"end_to_end_gbps\":%.3f,\"end_to_end_vs_memcpy\":%.3f,"
        "\"end_to_end_mode\":\"%s\",\"end_to_end_sequential_vs_memcpy\":%.3f,"
        "\"end_to_end_publish_vs_memcpy\":%.3f,\"end_to_end_in_place_vs_memcpy\":%.3f,"
        "\"in_place_commit_ms\":%.3f}\n",
        config.name.c_str(), a.transport.c_str(), a.processes, shapes.size(),
        static_cast<unsigned long long>(src.bytes), iters, gb / m, gb / big.put, gb / big.get,
        m / big.put, m / big.get, put_op, get_op, std::max(put_op, get_op),
        (small.put + small.get) * 1e3, gb / e2e, m / e2e,
        have_stream ? "streamed to a reader process" : "sequential", m / sequential,
        have_stream ? m / streamed.put : 0.0, have_stream ? m / in_place.seconds : 0.0,
        in_place.put * 1e3);
    return;
  }
  std::printf(
      "scenario weight-sync: %s (%zu tensors, %.2f GB bf16), transport %s, %s, median of %d\n",
      config.name.c_str(), shapes.size(), gb, a.transport.c_str(),
      a.processes == 2 ? "client process -> store in a peer process" : "embedded store", iters);
  std::printf("  %-24s %10s %10s %10s\n", "operation", "seconds", "GB/s", "vs memcpy");
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "memcpy", m, gb / m, 1.0);
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "put_state_dict", big.put, gb / big.put,
              m / big.put);
  std::printf("  %-24s %10.4f %10.2f %10.2f\n", "get_state_dict_into", big.get, gb / big.get,
              m / big.get);
  std::printf("  %-24s %10.4f %10.2f %10.2f   (put, then get, one process)\n",
              "end to end, sequential", sequential, gb / sequential, m / sequential);
  if (have_stream) {
    std::printf("  %-24s %10.4f %10.2f %10.2f   (publish; a reader process streams it)\n",
                "end to end, streamed", streamed.seconds, gb / streamed.seconds,
                m / streamed.seconds);
    std::printf("  %-24s %10.4f %10.2f %10.2f   (written in place; commit %.2f ms, then read)\n",
                "end to end, in place", in_place.seconds, gb / in_place.seconds,
                m / in_place.seconds, in_place.put * 1e3);
  }
  std::printf(
      "  per-tensor overhead: put %.1f us, get %.1f us; 1,000 x 4 KiB put %.2f ms + get %.2f ms\n",
      put_op, get_op, small.put * 1e3, small.get * 1e3);
}

// -- safetensors-load: a checkpoint from the page cache into the store ------

// Peak resident memory of this process (VmHWM), in bytes.
std::uint64_t peak_rss() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (std::fgets(line, sizeof(line), f)) {
    if (std::sscanf(line, "VmHWM: %llu kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb * 1024;
}

// Reads every file of the checkpoint with plain read() into `buffer` (as
// large as the largest file): the baseline.
double read_files(const meshstore::safetensors::Checkpoint& c, std::vector<char>& buffer) {
  const auto t0 = Clock::now();
  for (const auto& f : c.files) {
    const int fd = open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::perror("store_bench: open");
      std::exit(1);
    }
    std::size_t at = 0;
    for (;;) {
      const ssize_t n = read(fd, buffer.data() + at, buffer.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    close(fd);
  }
  return secs(t0);
}

// The loader peer: connects to the store and, by --load-mode, times loads
// ("time": read() baseline, load into the store, load into buffers, each
// --iters rounds after a warm-up; prints "times READ STORE BUFFERS COLD"),
// or does one load and reports its peak memory ("rss-store",
// "rss-buffers": prints "rss BYTES").
int run_loader(const Args& a) {
  auto c = must(meshstore::safetensors::open_checkpoint(a.dir), "loader: open_checkpoint");
  if (a.load_mode == "rss-buffers") {
    // Every tensor into buffers of its own, as a model would hold them.
    std::vector<meshstore::Tensor> buffers;
    for (const auto& f : c.files) {
      for (const auto& t : f.header().tensors) {
        auto b = must(meshstore::Tensor::empty(t.dtype, t.shape), "loader: buffer");
        must(meshstore::read_tensor_into(c, t.name, b.view()), "loader: read_tensor_into");
        f.release(t.name);
        buffers.push_back(std::move(b));
      }
    }
    std::printf("rss %llu\n", static_cast<unsigned long long>(peak_rss()));
    return 0;
  }
  auto store = connect_helper(a, 3, "loader: connect");
  meshstore::LoadOptions lo;
  lo.prefix = "ckpt";
  lo.batch_bytes = std::uint64_t{64} << 20;
  if (a.load_mode == "rss-store") {
    must(meshstore::load_checkpoint(store, a.dir, lo), "loader: load_checkpoint");
    std::printf("rss %llu\n", static_cast<unsigned long long>(peak_rss()));
    store.close();
    return 0;
  }
  std::uint64_t largest = 0;
  for (const auto& f : c.files) largest = std::max<std::uint64_t>(largest, f.size());
  std::vector<char> buffer(largest, 1);  // touched: no first-touch faults in the baseline
  std::vector<meshstore::Tensor> buffers;
  for (const auto& f : c.files) {
    for (const auto& t : f.header().tensors) {
      auto b = must(meshstore::Tensor::zeros(t.dtype, t.shape), "loader: buffer");
      buffers.push_back(std::move(b));
    }
  }
  read_files(c, buffer);  // the page cache is warm
  auto t0 = Clock::now();
  must(meshstore::load_checkpoint(store, a.dir, lo), "loader: load_checkpoint");
  const double cold = secs(t0);  // fresh segments at the volume
  std::vector<double> rd, st, bf;
  for (int i = 0; i < a.iters; ++i) {
    rd.push_back(read_files(c, buffer));
    t0 = Clock::now();
    must(meshstore::load_checkpoint(store, a.dir, lo), "loader: load_checkpoint");
    st.push_back(secs(t0));
    t0 = Clock::now();
    std::size_t k = 0;
    for (const auto& f : c.files) {
      for (const auto& t : f.header().tensors) {
        must(meshstore::read_tensor_into(c, t.name, buffers[k++].view()), "loader: read");
        f.release(t.name);
      }
    }
    bf.push_back(secs(t0));
  }
  std::printf("times %.6f %.6f %.6f %.6f\n", median(rd), median(st), median(bf), cold);
  std::fflush(stdout);
  store.close();
  return 0;
}

void run_safetensors_load(const Args& a) {
  namespace st = meshstore::safetensors;
  const std::uint64_t want =
      a.smoke ? (std::uint64_t{16} << 20) : (a.bytes_given ? a.bytes : (std::uint64_t{2} << 30));
  const int iters = a.iters ? a.iters : (a.smoke ? 1 : 3);
  // A model-like checkpoint: [rows, 4096] bf16 matrices and small norms,
  // in files of at most 1 GiB with the index.
  const std::int64_t cols = 4096;
  const std::int64_t matrices = 32;
  const std::int64_t rows =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(want / (matrices * cols * 2)));
  std::vector<std::pair<std::string, meshstore::Shape>> tensors;
  for (std::int64_t i = 0; i < matrices; ++i) {
    tensors.push_back({"model.layers." + std::to_string(i) + ".weight", {rows, cols}});
    tensors.push_back({"model.layers." + std::to_string(i) + ".norm", {cols}});
  }
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0;
  for (const auto& [n, shape] : tensors) {
    sizes.push_back(static_cast<std::uint64_t>(meshstore::shape_numel(shape)) * 2);
    total += sizes.back();
  }
  char tmpl[] = "/tmp/store_bench-ckpt-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  if (!a.json) std::fprintf(stderr, "store_bench safetensors-load: writing %s\n", dir.c_str());
  const auto [file_of, files] = st::plan_shards(sizes, std::uint64_t{1} << 30);
  std::map<std::string, std::string> weight_map;
  for (std::size_t f = 0; f < files; ++f) {
    const std::string name = files == 1 ? "model.safetensors" : st::shard_file_name(f, files);
    std::vector<st::Writer::Spec> specs;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (file_of[i] != f) continue;
      specs.push_back({tensors[i].first, meshstore::DType::bfloat16, tensors[i].second});
      weight_map[tensors[i].first] = name;
    }
    auto w = must(st::Writer::open(dir + "/" + name, specs), "writing the checkpoint");
    for (const auto& s : specs) {
      auto v = must(w.tensor(s.name), "writer tensor");
      auto* p = static_cast<std::uint16_t*>(v.data());
      for (std::int64_t i = 0; i < v.numel(); ++i) p[i] = static_cast<std::uint16_t>(i * 7 + 3);
    }
    must(w.commit(), "committing the checkpoint");
  }
  if (files > 1) must(st::write_index(dir, total, weight_map), "writing the index");

  auto peer = start_peer();
  auto ask = [&](const std::string& mode) {
    std::vector<std::string> args{"--peer",      "load",
                                  "--port",      std::to_string(peer->store_port),
                                  "--dir",       dir,
                                  "--load-mode", mode,
                                  "--iters",     std::to_string(iters),
                                  "--transport", a.transport};
    auto loader = meshstore::bench::spawn_self(args);
    char line[256] = {0};
    if (!std::fgets(line, sizeof(line), loader->from)) {
      meshstore::bench::die("the loader (" + mode + ") failed");
    }
    loader.reset();  // closes its stdin, waits for it
    return std::string(line);
  };
  if (!a.json) std::fprintf(stderr, "store_bench safetensors-load: timing\n");
  double rd = 0, stt = 0, bf = 0, cold = 0;
  if (std::sscanf(ask("time").c_str(), "times %lf %lf %lf %lf", &rd, &stt, &bf, &cold) != 4) {
    std::fprintf(stderr, "store_bench: the loader reported no times\n");
    std::exit(1);
  }
  unsigned long long rss_store = 0, rss_buffers = 0;
  std::sscanf(ask("rss-store").c_str(), "rss %llu", &rss_store);
  std::sscanf(ask("rss-buffers").c_str(), "rss %llu", &rss_buffers);
  peer.reset();
  std::system(("rm -rf '" + dir + "'").c_str());
  const double gb = static_cast<double>(total) / 1e9;
  const double w = static_cast<double>(total);
  if (a.json) {
    std::printf(
        "{\"scenario\":\"safetensors-load\",\"transport\":\"%s\",\"bytes\":%llu,\"files\":%zu,"
        "\"tensors\":%zu,\"iters\":%d,\"read_gbps\":%.3f,\"load_store_gbps\":%.3f,"
        "\"load_buffers_gbps\":%.3f,\"load_vs_read\":%.3f,\"load_buffers_vs_read\":%.3f,"
        "\"load_cold_vs_read\":%.3f,\"peak_rss_over_weights_store\":%.3f,"
        "\"peak_rss_over_weights_buffers\":%.3f}\n",
        a.transport.c_str(), static_cast<unsigned long long>(total), files, tensors.size(), iters,
        gb / rd, gb / stt, gb / bf, rd / stt, rd / bf, rd / cold, rss_store / w, rss_buffers / w);
    return;
  }
  std::printf(
      "scenario safetensors-load: %zu tensors (%.2f GB bf16) in %zu file(s) from the page cache, "
      "loader process -> store in a peer process, transport %s, median of %d\n",
      tensors.size(), gb, files, a.transport.c_str(), iters);
  std::printf("  %-34s %10s %10s %10s\n", "operation", "seconds", "GB/s", "vs read()");
  std::printf("  %-34s %10.4f %10.2f %10.2f\n", "read() of the files", rd, gb / rd, 1.0);
  std::printf("  %-34s %10.4f %10.2f %10.2f\n", "load into the store", stt, gb / stt, rd / stt);
  std::printf("  %-34s %10.4f %10.2f %10.2f\n", "load into caller buffers", bf, gb / bf, rd / bf);
  std::printf("  %-34s %10.4f %10.2f %10.2f   (fresh store memory)\n", "first load into the store",
              cold, gb / cold, rd / cold);
  std::printf(
      "  peak resident memory over the weights: %.2f (into the store), %.2f (into buffers)\n",
      rss_store / w, rss_buffers / w);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.peer == "serve") return run_peer(a);
  if (a.peer == "read") return run_reader(a);
  if (a.peer == "load") return run_loader(a);
  if (!a.peer.empty()) usage("unknown --peer role");
  if (a.transport == "cuda-ipc") {
    // GPU memory: cuda_bench measures it against cudaMemcpy in the same run.
    if (a.scenario != "single") usage("--transport cuda-ipc measures --scenario single only");
    std::string exe(4096, '\0');
    const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
    if (n <= 0) usage("cannot find this program's directory");
    exe.resize(static_cast<std::size_t>(n));
    const std::string cuda_bench = exe.substr(0, exe.rfind('/')) + "/cuda_bench";
    std::vector<std::string> args{cuda_bench, "--transport", "cuda-ipc", "--bytes",
                                  std::to_string(a.bytes) + "B"};
    if (a.iters > 0) {
      args.push_back("--iters");
      args.push_back(std::to_string(a.iters));
    }
    if (a.json) args.push_back("--json");
    if (a.smoke) args.push_back("--smoke");
    std::vector<char*> argv2;
    for (auto& s : args) argv2.push_back(s.data());
    argv2.push_back(nullptr);
    execv(cuda_bench.c_str(), argv2.data());
    std::fprintf(stderr,
                 "store_bench: --transport cuda-ipc runs %s, which this build lacks (%s): build "
                 "with the CUDA toolkit (MESHSTORE_WITH_CUDA=AUTO finds /usr/local/cuda)\n",
                 cuda_bench.c_str(), std::strerror(errno));
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  if (a.smoke) {
    // Every scenario over the same-host and the cross-host data planes.
    for (const char* transport : {"shm", "tcp", "cma"}) {
      Args s = a;
      s.transport = transport;
      s.scenario = "single";
      run_single(s);
      s.scenario = "small";
      run_small(s);
    }
    Args w = a;
    w.transport = "shm";
    w.scenario = "weight-sync";
    run_weight_sync(w);
    w.scenario = "reshard";
    run_reshard(w);
    w.scenario = "safetensors-load";
    run_safetensors_load(w);
    return 0;
  }
  if (a.scenario == "single")
    run_single(a);
  else if (a.scenario == "small")
    run_small(a);
  else if (a.scenario == "reshard")
    run_reshard(a);
  else if (a.scenario == "safetensors-load")
    run_safetensors_load(a);
  else
    run_weight_sync(a);
  return 0;
}
