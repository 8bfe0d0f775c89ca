// store_bench --scenario failover: how long a store is without its
// controller. `meshstore serve` (controller, strategy, no volume) runs in a
// child process; this process joins it with Store::connect and hosts the
// volume, which keeps the keys and their committed records. For each index
// size (10,000, 100,000 and 1,000,000 keys; --keys caps it) the server is
// killed with SIGKILL and started again at the same port --iters times
// (default 10); each run times, from the kill:
// - the first successful read: the key known to the new controller
//   (exists, made right after the kill: it waits through the gap; asked
//   again only when it was already at the dead controller), then its get;
// - of that, the new process's start until it serves (the baseline: the
//   part no store change can shorten);
// - the first write after that read: a put of the key, which commits only
//   once the whole index is back (a read of a key the new controller has
//   already may answer before the rebuild is over).
// The rebuild rate is the marginal one: the keys added between two sizes
// over the growth of the median time to the first read. The volume
// process's memory per key (objects, their records, bookkeeping) is its
// RSS growth over the keys added. First, what keeping each commit for a
// failover costs a put: 1,000-key put_batch calls into this volume against
// a second store's that keeps none (reconnect_timeout 0), alternated.
// Then a standby's takeover: a second server waits with --standby-of for
// the first to die (the client joined both addresses); each run kills the
// serving one, times the first read and write as above, and starts the
// next standby at the dead one's port. The standby has started already:
// no process start is in its figure. Sizes up to 100,000 keys (--keys for
// more), on a store of its own. Last, a controller restarted by its
// ProcMesh (StorePlacement::controller_process): this process launches
// two workers (this binary again), spawns a store on them with the
// controller in worker 1 and every key on worker 0's volume, and each run
// kills worker 1; the ProcMesh launches it again and the controller
// starts there. Its baseline is a one-process launch (start to joined),
// which the relaunch includes. Same sizes as the standby's.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "../bench_util.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store_mesh.hpp"
#include "scenarios.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {
namespace {

// This process's resident memory, in bytes (VmRSS).
std::uint64_t own_rss() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  die("no VmRSS for this process");
}

// A port free on 127.0.0.1 now (the server is started at it again and again).
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    die("no free port");
  }
  ::close(fd);
  return ntohs(sa.sin_port);
}

// The child's output up to a line holding `what`, or the end of it.
bool wait_for_line(Child& child, const std::string& what) {
  char line[512];
  while (std::fgets(line, sizeof(line), child.from)) {
    if (std::string(line).find(what) != std::string::npos) return true;
  }
  return false;
}

// `meshstore serve` at `port`, once it serves: the seconds that took.
std::unique_ptr<Child> serve(std::uint16_t port, double* took) {
  const auto t0 = Clock::now();
  auto child = spawn(own_dir() + "/meshstore",
                     {"serve", "--port", std::to_string(port), "--strategy", "per_local_rank"});
  if (!wait_for_line(*child, "serving on")) {
    die("meshstore serve at port " + std::to_string(port) + " ended before serving");
  }
  if (took) *took = secs(t0);
  return child;
}

// A standby at `port` of the server at `primary`, once it reached that
// server (its log line says so; its stderr comes through the pipe).
std::unique_ptr<Child> stand_by(std::uint16_t port, std::uint16_t primary) {
  auto child =
      spawn(own_dir() + "/meshstore",
            {"serve", "--port", std::to_string(port), "--strategy", "per_local_rank",
             "--standby-of", "127.0.0.1:" + std::to_string(primary), "--log-level", "info"},
            true);
  if (!wait_for_line(*child, "standing by for the store at")) {
    die("the standby at port " + std::to_string(port) + " ended before it stood by");
  }
  return child;
}

void kill_server(std::unique_ptr<Child>& server) {
  ::kill(server->pid, SIGKILL);
  server.reset();  // reaped
}

// Puts keys "k/FIRST" up to "k/LAST" (excluded), 1,000 a call.
void fill(meshstore::Store& store, std::size_t first, std::size_t last) {
  static float one = 1.0f;
  const meshstore::TensorView v(&one, meshstore::DType::float32, {});
  for (std::size_t at = first; at < last;) {
    std::vector<std::pair<std::string, meshstore::TensorView>> batch;
    for (; at < last && batch.size() < 1000; ++at) batch.emplace_back("k/" + std::to_string(at), v);
    must(store.put_batch(std::move(batch)).get(300s), "put_batch");
  }
}

// What holding commits for a failover costs a put: 1,000-key put_batch
// calls into a volume that keeps a copy of each commit until answered
// (`held`), against one that does not (reconnect_timeout 0), alternated
// in this run; the calls per second of each.
std::pair<double, double> hold_cost(meshstore::Store& held, meshstore::Store& bare, int calls) {
  static float one = 1.0f;
  const meshstore::TensorView v(&one, meshstore::DType::float32, {});
  double t_held = 0, t_bare = 0;
  for (int i = 0; i < calls; ++i) {
    for (auto* s : {&held, &bare}) {
      std::vector<std::pair<std::string, meshstore::TensorView>> batch;
      for (int k = 0; k < 1000; ++k) batch.emplace_back("h/" + std::to_string(k), v);
      const auto t0 = Clock::now();
      must(s->put_batch(std::move(batch)).get(300s), "put_batch");
      (s == &held ? t_held : t_bare) += secs(t0);
    }
  }
  return {calls / t_held, calls / t_bare};
}

struct Run {
  double first_read = 0;   // seconds from the kill
  double start = 0;        // of which the new server's start
  double first_write = 0;  // seconds from the kill: the index whole again
};

// From kill time `t0`: the first read of `key` (put before), then the first
// write, as Run counts them; `known` is the exists() made right after the
// kill.
void read_then_write(meshstore::Store& store, const std::string& key, meshstore::Future<bool> known,
                     Clock::time_point t0, Run& run) {
  for (int attempt = 0;; ++attempt) {
    auto got = known.get(300s);
    if (got.ok() && *got) break;
    if (attempt == 100 || got.ok() ||
        got.status().message().find("went down") == std::string::npos) {
      die("'" + key +
          "' after failover: " + (got.ok() ? std::string("not found") : got.status().to_string()));
    }
    known = store.exists(key);
  }
  must(store.get(key).get(300s), "get after failover");
  run.first_read = secs(t0);
  static float two = 2.0f;
  must(store.put(key, meshstore::TensorView(&two, meshstore::DType::float32, {})).get(300s),
       "put after failover");
  run.first_write = secs(t0);
}

// One failover: kill, start again, read. `key` was put before.
Run failover(meshstore::Store& store, std::unique_ptr<Child>& server, std::uint16_t port,
             const std::string& key) {
  Run run;
  const auto t0 = Clock::now();
  kill_server(server);
  // Asked of the controller (a get may be served from this process's
  // location cache and volume without it): made now, it waits for the
  // new server; one the client had already sent to the dead one fails
  // ("went down") and is made again.
  auto known = store.exists(key);
  server = serve(port, &run.start);
  read_then_write(store, key, std::move(known), t0, run);
  return run;
}

// One takeover: the serving `primary` (at ports[0]) is killed, `standby`
// (at ports[1]) takes over, and a new standby of it starts at ports[0]
// once the first read and write are timed; the ports swap.
Run takeover(meshstore::Store& store, std::unique_ptr<Child>& primary,
             std::unique_ptr<Child>& standby, std::uint16_t ports[2], const std::string& key) {
  Run run;
  const auto t0 = Clock::now();
  kill_server(primary);
  auto known = store.exists(key);
  read_then_write(store, key, std::move(known), t0, run);
  primary = std::move(standby);
  std::swap(ports[0], ports[1]);
  standby = stand_by(ports[1], ports[0]);
  return run;
}

struct Row {
  std::size_t keys;
  double first_read, first_read_min, first_read_max, start, first_write;
  double bytes_per_key;
};

// The row of `runs` at `keys` (memory per key given).
Row row_of(std::size_t keys, const std::vector<Run>& runs, double bytes_per_key) {
  std::vector<double> reads, starts, writes;
  for (const auto& r : runs) {
    reads.push_back(r.first_read);
    starts.push_back(r.start);
    writes.push_back(r.first_write);
  }
  return Row{keys,
             median(reads),
             *std::min_element(reads.begin(), reads.end()),
             *std::max_element(reads.begin(), reads.end()),
             median(starts),
             median(writes),
             bytes_per_key};
}

// The standby's takeovers at each of `sizes`, `runs` each, on a store of
// its own joined to both servers.
std::vector<Row> standby_rows(const std::vector<std::size_t>& sizes, int runs,
                              const meshstore::StoreOptions& o) {
  std::uint16_t ports[2] = {free_port(), free_port()};
  while (ports[1] == ports[0]) ports[1] = free_port();
  auto primary = serve(ports[0], nullptr);
  auto standby = stand_by(ports[1], ports[0]);
  auto store = must(
      meshstore::Store::connect(
          "127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]), o),
      "connect to the primary and its standby");
  std::vector<Row> rows;
  std::size_t have = 0;
  for (auto n : sizes) {
    std::fprintf(stderr, "store_bench failover: a standby's takeover at %zu keys\n", n);
    fill(store, have, n);
    have = n;
    std::vector<Run> done;
    for (int i = 0; i < runs; ++i) {
      done.push_back(takeover(store, primary, standby, ports, "k/" + std::to_string(i * 7919 % n)));
      std::fprintf(stderr, "  run %d: first read %.0f ms, first write %.0f ms\n", i + 1,
                   done.back().first_read * 1e3, done.back().first_write * 1e3);
    }
    rows.push_back(row_of(n, done, 0));
  }
  store.close();
  kill_server(standby);
  kill_server(primary);
  return rows;
}

// How long a one-process ProcMesh takes to launch (start until it joined):
// the part of a relaunch no store change can shorten.
double launch_time() {
  const auto t0 = Clock::now();
  auto one = must(meshstore::ProcMesh::launch({{"procs", 1}}), "launch one process");
  const double took = secs(t0);
  one.stop();
  return took;
}

// A controller restarted by its ProcMesh at each of `sizes`, `runs` each:
// two workers, the controller in worker 1 (killed each run), every key on
// worker 0's volume.
std::vector<Row> procmesh_rows(const std::vector<std::size_t>& sizes, int runs) {
  std::vector<double> starts;
  for (int i = 0; i < 3; ++i) starts.push_back(launch_time());
  meshstore::LaunchSpec spec;
  spec.max_relaunches = runs * static_cast<int>(sizes.size()) + 1;
  spec.relaunch_window = std::chrono::hours(24);
  auto procs = must(meshstore::ProcMesh::launch({{"procs", 2}}, spec), "launch 2 workers");
  meshstore::Supervision restart;
  restart.policy = meshstore::FailurePolicy::restart;
  restart.max_restarts = spec.max_relaunches;
  restart.window = spec.relaunch_window;
  restart.on_failure = [](const meshstore::MeshFailure&) { return false; };  // the policy
  meshstore::StoreOptions o;
  o.placement.strategy = "per_local_rank";  // this process's puts: worker 0's volume
  o.placement.controller_process = 1;
  o.transport.shared_memory_volumes = false;  // a million objects, not a million segments
  o.limits.request_timeout = 300s;
  auto store = must(meshstore::spawn_store(procs, o, restart), "spawn_store");
  std::vector<Row> rows;
  std::size_t have = 0;
  for (auto n : sizes) {
    std::fprintf(stderr, "store_bench failover: a controller its ProcMesh restarts, %zu keys\n", n);
    fill(store, have, n);
    have = n;
    std::vector<Run> done;
    for (int i = 0; i < runs; ++i) {
      const std::string key = "k/" + std::to_string(i * 7919 % n);
      Run run;
      run.start = median(starts);
      const auto t0 = Clock::now();
      must(procs.signal(1, SIGKILL), "kill -9 of the controller's process");
      read_then_write(store, key, store.exists(key), t0, run);
      done.push_back(run);
      std::fprintf(stderr, "  run %d: first read %.0f ms, first write %.0f ms\n", i + 1,
                   run.first_read * 1e3, run.first_write * 1e3);
    }
    rows.push_back(row_of(n, done, 0));
  }
  store.close();
  procs.stop();
  return rows;
}

// The rebuild's rate at row i: keys added over the time they added.
double rate(const std::vector<Row>& rows, std::size_t i) {
  if (i == 0) return 0.0;
  const double dt = rows[i].first_read - rows[i - 1].first_read;
  return dt > 0 ? static_cast<double>(rows[i].keys - rows[i - 1].keys) / dt : 0.0;
}

// The standby's or the ProcMesh's rows (`what`), as JSON.
void print_json_rows(const char* what, const std::vector<Row>& rows) {
  std::printf("\"%s\":[", what);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    std::printf(
        "%s{\"keys\":%zu,\"first_read_ms_median\":%.1f,\"first_read_ms_min\":%.1f,"
        "\"first_read_ms_max\":%.1f,\"first_write_ms_median\":%.1f,\"start_ms_median\":%.1f}",
        i ? "," : "", r.keys, r.first_read * 1e3, r.first_read_min * 1e3, r.first_read_max * 1e3,
        r.first_write * 1e3, r.start * 1e3);
  }
  std::printf("],");
}

// The standby's or the ProcMesh's rows, as a table beside the restart in
// place's first reads (`restarts`).
void print_rows(const std::vector<Row>& rows, const std::vector<Row>& restarts, bool start) {
  std::printf("%10s %14s %12s %12s %15s %20s%s\n", "keys", "first read ms", "min ms", "max ms",
              "first write ms", "read / restart's", start ? "   launch ms   read / launch" : "");
  for (const auto& r : rows) {
    double restart = 0;
    for (const auto& q : restarts) {
      if (q.keys == r.keys) restart = q.first_read;
    }
    std::printf("%10zu %14.0f %12.0f %12.0f %15.0f %20.2f", r.keys, r.first_read * 1e3,
                r.first_read_min * 1e3, r.first_read_max * 1e3, r.first_write * 1e3,
                restart > 0 ? r.first_read / restart : 0.0);
    if (start) std::printf(" %11.0f %15.2f", r.start * 1e3, r.first_read / r.start);
    std::printf("\n");
  }
}

void print_failover(const Args& a, int runs, const std::vector<Row>& rows,
                    const std::vector<Row>& standby, const std::vector<Row>& procmesh,
                    std::pair<double, double> hold) {
  if (a.json) {
    std::printf("{\"scenario\":\"failover\",\"runs\":%d,\"sizes\":[", runs);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      std::printf(
          "%s{\"keys\":%zu,\"first_read_ms_median\":%.1f,\"first_read_ms_min\":%.1f,"
          "\"first_read_ms_max\":%.1f,\"server_start_ms_median\":%.1f,"
          "\"first_read_over_start\":%.2f,\"first_write_ms_median\":%.1f,"
          "\"rebuild_keys_per_s\":%.0f,\"bytes_per_key\":%.0f}",
          i ? "," : "", r.keys, r.first_read * 1e3, r.first_read_min * 1e3, r.first_read_max * 1e3,
          r.start * 1e3, r.first_read / r.start, r.first_write * 1e3, rate(rows, i),
          r.bytes_per_key);
    }
    std::printf("],");
    print_json_rows("standby", standby);
    print_json_rows("procmesh", procmesh);
    std::printf("\"put_batch_1000_per_s_held\":%.0f,\"put_batch_1000_per_s_bare\":%.0f}\n",
                hold.first, hold.second);
    return;
  }
  std::printf("failover: kill -9 of the server to the first read, median of %d runs\n", runs);
  std::printf("%10s %14s %12s %12s %10s %14s %15s %12s\n", "keys", "first read ms", "min ms",
              "max ms", "start ms", "read / start", "first write ms", "rebuild k/s");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    std::printf("%10zu %14.0f %12.0f %12.0f %10.0f %14.2f %15.0f %12.0f\n", r.keys,
                r.first_read * 1e3, r.first_read_min * 1e3, r.first_read_max * 1e3, r.start * 1e3,
                r.first_read / r.start, r.first_write * 1e3, rate(rows, i) / 1e3);
  }
  std::printf("volume process memory per key (objects, records, bookkeeping): %.0f bytes at %zu\n",
              rows.back().bytes_per_key, rows.back().keys);
  std::printf("a standby's takeover: kill -9 of the primary to the first read, median of %d runs\n",
              runs);
  print_rows(standby, rows, false);
  std::printf(
      "a controller its ProcMesh restarts: kill -9 of its process to the first read, median of "
      "%d runs\n",
      runs);
  print_rows(procmesh, rows, true);
  std::printf(
      "1,000-key put_batch into this process's volume: %.0f calls/s keeping each commit for a "
      "failover, %.0f/s not (reconnect_timeout 0): %.2f x\n",
      hold.first, hold.second, hold.first / hold.second);
}

}  // namespace

void run_failover(const Args& a) {
  std::vector<std::size_t> sizes =
      a.smoke ? std::vector<std::size_t>{1000} : std::vector<std::size_t>{10000, 100000, 1000000};
  if (a.keys) {
    sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](auto n) { return n > a.keys; }),
                sizes.end());
    if (sizes.empty() || sizes.back() != a.keys) sizes.push_back(a.keys);
  }
  const int runs = a.iters ? a.iters : (a.smoke ? 2 : 10);
  const std::uint16_t port = free_port();
  auto server = serve(port, nullptr);
  meshstore::StoreOptions o;
  o.placement.local_rank = 0;                 // per_local_rank: the volume lives here
  o.transport.shared_memory_volumes = false;  // a million objects, not a million segments
  o.limits.request_timeout = 300s;
  auto store = must(meshstore::Store::connect("127.0.0.1:" + std::to_string(port), o), "connect");
  std::pair<double, double> hold{0, 0};
  {
    auto bare_options = o;
    bare_options.placement.local_rank = 1;
    bare_options.limits.reconnect_timeout = std::chrono::milliseconds(0);
    auto bare = must(meshstore::Store::connect("127.0.0.1:" + std::to_string(port), bare_options),
                     "connect");
    hold = hold_cost(store, bare, a.smoke ? 5 : 200);
    bare.close();
  }
  const std::uint64_t rss0 = own_rss();

  std::vector<Row> rows;
  std::size_t have = 0;
  for (auto n : sizes) {
    std::fprintf(stderr, "store_bench failover: %zu keys\n", n);
    fill(store, have, n);
    have = n;
    const auto rss = own_rss();
    std::vector<Run> done;
    for (int i = 0; i < runs; ++i) {
      done.push_back(failover(store, server, port, "k/" + std::to_string(i * 7919 % n)));
      const auto& r = done.back();
      std::fprintf(stderr,
                   "  run %d: first read %.0f ms (server start %.0f ms), first write %.0f ms\n",
                   i + 1, r.first_read * 1e3, r.start * 1e3, r.first_write * 1e3);
    }
    rows.push_back(
        row_of(n, done, static_cast<double>(rss > rss0 ? rss - rss0 : 0) / static_cast<double>(n)));
  }
  store.close();
  kill_server(server);
  std::vector<std::size_t> standby_sizes;
  for (auto n : sizes) {
    if (n <= 100000 || n == a.keys) standby_sizes.push_back(n);
  }
  const auto standby = standby_rows(standby_sizes, runs, o);
  const auto procmesh = procmesh_rows(standby_sizes, runs);
  print_failover(a, runs, rows, standby, procmesh, hold);
}

}  // namespace meshstore::bench
