// fault_matrix: kill -9 each role of a served store in each phase of its
// work, and check what the others see (docs/reliability.md, "The fault
// matrix"). One binary: the orchestrator and every role it starts.
//
//   fault_matrix [--cells ROLE/PHASE,...] [--table FILE] [--doc FILE]
//     runs the cells (default: all) and writes their outcome table
//     (Markdown) to FILE, and with --doc into FILE between the lines
//     "<!-- fault-matrix:begin -->" and "<!-- fault-matrix:end -->"
//     (docs/reliability.md); exits 1 when a cell fails.
//
// Each cell starts, as processes of their own:
//   serve    the store: controller and directory, strategy per_local_rank,
//            no volume of its own;
//   volume0  local rank 0: hosts the volume the writer and reader use;
//   volume1  local rank 1: hosts another volume, holding "control" keys;
//   writer   a client of volume0 doing the phase's writes in a loop;
//   reader   a client of volume0 doing the phase's reads in a loop, checking
//            every value it reads (a value mixing two writes is "torn").
// It waits until both loops run, kills the cell's role with SIGKILL, and
// checks: every survivor's next calls answer within kBound (going on, or
// failing with an error that names what died); no reader ever saw a torn
// value; keys on live volumes still serve (a fresh process reads the
// control keys and puts and gets a new one); and after SIGTERM to the
// survivors and `gc` for the killed process, no shared memory of any of
// them is left and every process has exited.
//
// Roles a cell kills: volume (volume0), volume+copies (volume0, in a store
// keeping each key put whole on both volumes, placement.replicas 2: the
// reader goes on reading what was committed, from volume1, except a
// sharded state dict, which is not copied), client (the reader), writer (the
// phase's writer: for "stream" the stream's writer), controller (serve),
// failover (serve, started again at once at the same address: the
// survivors reconnect, the new controller rebuilds its index from the
// volumes, and every survivor must go on; the keys on volume1 serve again),
// failover+volume (serve and volume0 together, serve started again: the
// survivors, clients of volume0, fail naming what died; the new controller
// gives volume0 up at its rebuild's deadline and the keys on volume1 serve
// again).
// Phases: idle (no call in flight: the survivors' next call), put, get,
// publish (publish_state_dict / get_latest_state_dict_into), stream
// (put_state_dict / stream_state_dict_into), sharded (a sharded state dict
// from two ranks / a whole read), checkpoint (save_checkpoint / the
// checkpoint file read back).

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/checkpoint.hpp"
#include "meshstore/store.hpp"
#include "meshstore/tensor_slice.hpp"
#include "testing/doc_table.hpp"
#include "testing/subprocess.hpp"

using namespace std::chrono_literals;
using meshstore::Errc;
using meshstore::StateDict;
using meshstore::Status;
using meshstore::Store;
using meshstore::TensorView;

namespace {

// Every role's request timeout, and the bound on how long a survivor's
// call may take to answer once a role is killed: a call already waiting on
// a peer in another process that dies is answered at its request timeout
// (CAF 0.17 tells only directly connected nodes; docs/reliability.md).
constexpr auto kRequestTimeout = 3s;
constexpr auto kBound = kRequestTimeout + 2s;
// How long a stream reader waits for the next write (within the bound).
constexpr std::chrono::milliseconds kStreamWait = 2s;
// Elements of each tensor a phase moves (uint32: 1 MiB per tensor).
constexpr std::int64_t kElems = 256 * 1024;
constexpr int kTensors = 4;

const std::vector<std::string> kRoles = {"volume",     "volume+copies", "client",         "writer",
                                         "controller", "failover",      "failover+volume"};
const std::vector<std::string> kPhases = {"idle",   "put",     "get",       "publish",
                                          "stream", "sharded", "checkpoint"};

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // one clock for every process
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// -- the roles ------------------------------------------------------------

std::atomic<bool> g_stop{false};

// SIGTERM and SIGINT stop the role's loop (its store then closes and frees
// its memory); SIGUSR1 asks an idle role for one call.
sigset_t role_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  return s;
}

meshstore::Result<Store> join(const std::string& address, int local_rank, bool host_volumes,
                              std::chrono::milliseconds connect_timeout = 30s) {
  meshstore::StoreOptions o;
  o.placement.rank = local_rank + 1;
  o.placement.local_rank = local_rank;
  o.placement.host_volumes = host_volumes;
  o.limits.connect_timeout = connect_timeout;
  o.limits.request_timeout = kRequestTimeout;
  return Store::connect(address, o);
}

// A tensor whose every element is `seq`: a read that is not uniform mixes
// two writes.
struct Pattern {
  std::vector<std::vector<std::uint32_t>> tensors;
  explicit Pattern(int n = kTensors) : tensors(n, std::vector<std::uint32_t>(kElems)) {}
  void fill(std::uint32_t seq) {
    for (auto& t : tensors) std::fill(t.begin(), t.end(), seq);
  }
  TensorView view(int i) { return TensorView::of(tensors[i].data(), {kElems}); }
  StateDict state_dict() {
    StateDict sd;
    for (int i = 0; i < static_cast<int>(tensors.size()); ++i)
      (void)sd.insert("t" + std::to_string(i), view(i));
    return sd;
  }
  // "" when every element of the first `count` tensors holds one value,
  // else what differs.
  std::string torn(std::size_t count) const {
    const std::uint32_t first = tensors[0][0];
    for (std::size_t i = 0; i < count; ++i) {
      for (std::size_t j = 0; j < tensors[i].size(); ++j) {
        if (tensors[i][j] != first) {
          return "tensor " + std::to_string(i) + " element " + std::to_string(j) + " holds " +
                 std::to_string(tensors[i][j]) + " where tensor 0 element 0 holds " +
                 std::to_string(first);
        }
      }
    }
    return "";
  }
};

Status torn_status(const std::string& what) { return Status(Errc::internal, "TORN: " + what); }

// The writer's and the reader's call for each phase.
struct PhaseOps {
  std::function<Status(std::uint32_t seq)> write;
  std::function<Status()> read;
};

PhaseOps ops_for(const std::string& phase, Store& store, Pattern& out, Pattern& in,
                 const std::string& dir) {
  PhaseOps ops;
  // A read's status, or TORN when what it read mixes two writes.
  auto check = [&in](Status s, std::size_t count = kTensors) -> Status {
    if (!s.ok()) return s;
    const std::string t = in.torn(count);
    return t.empty() ? Status() : torn_status(t);
  };
  if (phase == "idle" || phase == "put" || phase == "get") {
    const std::string key = phase == "get" ? "g" : "k";
    auto read = [&store, &in, key, check] {
      return check(store.get_into(key, in.view(0)).get(kBound).status(), 1);
    };
    ops.read = read;
    // In "get" the writer reads too (it put "g" once, before the loops).
    ops.write = [&store, &out, key, phase, read](std::uint32_t seq) -> Status {
      if (phase == "get") return read();
      out.fill(seq);
      return store.put(key, out.view(0)).get(kBound).status();
    };
  } else if (phase == "publish") {
    ops.write = [&store, &out](std::uint32_t seq) -> Status {
      out.fill(seq);
      auto sd = out.state_dict();
      return store.state_dicts()
          .publish("pub", sd, meshstore::PublishOptions::by_copy(1))
          .get(kBound)
          .status();
    };
    ops.read = [&store, &in, check] {
      auto sd = in.state_dict();
      return check(store.state_dicts().get_latest_into("pub", sd).get(kBound).status());
    };
  } else if (phase == "stream") {
    ops.write = [&store, &out](std::uint32_t seq) -> Status {
      out.fill(seq);
      auto sd = out.state_dict();
      return store.state_dicts().put("st", sd).get(kBound).status();
    };
    ops.read = [&store, &in, check] {
      auto sd = in.state_dict();
      return check(store.state_dicts().stream_into("st", sd, kStreamWait).get(kBound).status());
    };
  } else if (phase == "sharded") {
    // One entry of shape [2, kElems], split by rows over two ranks; the
    // writer puts both ranks' parts, one after the other.
    ops.write = [&store, &out](std::uint32_t seq) -> Status {
      out.fill(seq);
      auto placement = meshstore::Placement::make({2}, {meshstore::DimPlacement::shard(0)}).value();
      for (std::int64_t rank = 0; rank < 2; ++rank) {
        auto shard = placement.shard_for({2, kElems}, rank).value();
        StateDict local;
        (void)local.insert("w", TensorView::of(out.tensors[rank].data(), {1, kElems}));
        auto s = store.state_dicts().put_sharded("sh", local, {{"w", shard}}, rank).get(kBound);
        if (!s.ok()) return s.status();
      }
      return Status();
    };
    ops.read = [&store, &in, check] {
      // Rows 0 and 1 land in tensors 0 and 1 (contiguous), 2 and 3 mirror them.
      std::vector<std::uint32_t> whole(2 * kElems);
      StateDict sd;
      (void)sd.insert("w", TensorView::of(whole.data(), {2, kElems}));
      auto s = store.state_dicts().get_into("sh", sd).get(kBound);
      if (!s.ok()) return s.status();
      std::copy(whole.begin(), whole.begin() + kElems, in.tensors[0].begin());
      std::copy(whole.begin() + kElems, whole.end(), in.tensors[1].begin());
      in.tensors[2] = in.tensors[0];
      in.tensors[3] = in.tensors[1];
      return check(Status());
    };
  } else if (phase == "checkpoint") {
    ops.write = [&store, &out, dir](std::uint32_t seq) -> Status {
      out.fill(seq);
      for (int i = 0; i < kTensors; ++i) {
        auto s = store.put("ck/t" + std::to_string(i), out.view(i)).get(kBound);
        if (!s.ok()) return s.status();
      }
      auto saved = meshstore::save_checkpoint(store, "ck", dir);
      return saved.status();
    };
    ops.read = [&in, dir, check]() -> Status {
      auto sd = meshstore::load_state_dict(dir + "/model.safetensors");
      if (!sd.ok()) return sd.status();
      for (int i = 0; i < kTensors; ++i) {
        const auto* e = sd->find("t" + std::to_string(i));
        if (e == nullptr || !e->is_tensor())
          return torn_status("checkpoint lacks t" + std::to_string(i));
        std::memcpy(in.tensors[i].data(), e->view.data(), kElems * sizeof(std::uint32_t));
      }
      return check(Status());
    };
  }
  return ops;
}

// writer|reader ADDRESS PHASE DIR: prints "running" once its first call
// succeeded, then "tick N start=NS end=NS" after each call and "error N
// at=NS start=NS: MESSAGE" after each failure (then it pauses 10 ms; once
// it has failed for kBound, it exits 3); "TORN ..." and exit 4 for a torn
// read. An idle role makes one call per SIGUSR1.
int run_client(bool writer, const std::string& address, const std::string& phase,
               const std::string& dir) {
  role_signals();
  std::thread([] {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    int sig = 0;
    sigwait(&stop, &sig);
    g_stop = true;
  }).detach();
  auto store = join(address, 0, false);
  if (!store.ok()) {
    std::printf("cannot join: %s\n", store.status().to_string().c_str());
    return 1;
  }
  Pattern out, in;
  PhaseOps ops = ops_for(phase, *store, out, in, dir);
  const bool idle = phase == "idle";
  // What the reader needs before it starts (the writer puts it first).
  if (writer) {
    Status first;
    if (phase == "get") {
      out.fill(7);
      first = store->put("g", out.view(0)).get(kBound).status();
    }
    if (first.ok()) first = ops.write(1);
    if (!first.ok()) {
      std::printf("setup failed: %s\n", first.to_string().c_str());
      return 1;
    }
  }
  std::uint32_t seq = 2;
  int ticks = 0, errors = 0;
  std::int64_t failing_since = 0;  // the first error since the last success
  bool running = false;
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  if (idle) {
    // Its calls come only once the victim is dead: a not_found is an
    // answer, not a reader ahead of the writer's first write.
    running = true;
    std::printf("running\n");
    std::fflush(stdout);
  }
  while (!g_stop) {
    if (idle) {
      timespec wait{0, 100 * 1000 * 1000};
      if (sigtimedwait(&usr1, nullptr, &wait) != SIGUSR1) continue;  // re-checks g_stop
    }
    const std::int64_t start = now_ns();
    Status s = writer ? ops.write(seq++) : ops.read();
    if (s.ok()) {
      if (!running) {
        std::printf("running\n");
        running = true;
      }
      failing_since = 0;
      std::printf("tick %d start=%lld end=%lld\n", ++ticks, static_cast<long long>(start),
                  static_cast<long long>(now_ns()));
    } else if (s.message().rfind("TORN: ", 0) == 0) {
      std::printf("TORN %s\n", s.message().c_str());
      std::fflush(stdout);
      return 4;
    } else if (!running && !writer && (s.code() == Errc::not_found || s.code() == Errc::io_error)) {
      // The reader got ahead of the writer's first write: try again.
    } else {
      const std::int64_t at = now_ns();
      std::printf("error %d at=%lld start=%lld: %s\n", ++errors, static_cast<long long>(at),
                  static_cast<long long>(start), s.to_string().c_str());
      if (failing_since == 0) failing_since = at;
      if (at - failing_since > std::chrono::nanoseconds(kBound).count()) {
        std::fflush(stdout);
        return 3;
      }
      // Paced: a store coming back (failover) is not flooded, nor the log.
      std::this_thread::sleep_for(10ms);
    }
    std::fflush(stdout);
  }
  store->close();
  std::printf("stopped\n");
  return 0;
}

// serve [ADDRESS [REPLICAS [STATE_DIR]]]: the store (at ADDRESS, else a
// free port of 127.0.0.1; its state in STATE_DIR, so that started again
// there it knows it restarts the store); prints "address HOST:PORT" and
// waits for SIGTERM.
// volume ADDRESS LOCAL_RANK: hosts that local rank's volume; volume 1 also
// puts the control keys. Prints "ready" and waits for SIGTERM.
int run_host(const std::string& role, int argc, char** argv) {
  role_signals();
  meshstore::Result<Store> store = Status(Errc::internal, "unset");
  if (role == "serve") {
    meshstore::StoreOptions o;
    o.listen = argc >= 3 ? argv[2] : "127.0.0.1:0";
    o.placement.replicas = argc >= 4 ? std::atoi(argv[3]) : 1;
    if (argc >= 5) o.state_dir = argv[4];
    o.placement.strategy = "per_local_rank";
    o.placement.local_rank = -1;
    store = Store::embedded(o);
  } else {
    if (argc < 4) return 2;
    const int local_rank = std::atoi(argv[3]);
    store = join(argv[2], local_rank, true);
    if (store.ok() && local_rank == 1) {
      std::vector<std::uint32_t> v(kElems, 11);
      for (int i = 0; i < 3; ++i) {
        auto s = store->put("control/" + std::to_string(i), TensorView::of(v.data(), {kElems}))
                     .get(kBound);
        if (!s.ok()) store = s.status();
      }
    }
  }
  if (!store.ok()) {
    std::printf("cannot start: %s\n", store.status().to_string().c_str());
    return 1;
  }
  if (role == "serve") {
    std::printf("address %s\n", store->admin().address().c_str());
  } else {
    std::printf("ready\n");
  }
  std::fflush(stdout);
  int sig = 0;
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigwait(&stop, &sig);
  store->close();
  return 0;
}

// check ADDRESS: reads the control keys on volume 1 and puts and gets a
// new key there; prints "serving" or what failed. After a failover this
// process never knew the store: the server, started again from its state
// directory, knows it restarts one and has its reads wait until a volume
// of it rejoined (docs/failover.md, "A server restarted in place"), so
// each is asked once.
int run_check(const std::string& address) {
  auto store = join(address, 1, false, 5s);
  if (!store.ok()) {
    std::printf("not serving: %s\n", store.status().to_string().c_str());
    return 1;
  }
  std::vector<std::uint32_t> v(kElems);
  for (int i = 0; i < 3; ++i) {
    const auto s =
        store->get_into("control/" + std::to_string(i), TensorView::of(v.data(), {kElems}))
            .get(kBound)
            .status();
    if (!s.ok() || v[0] != 11 || v[kElems - 1] != 11) {
      std::printf("not serving: control/%d: %s\n", i, s.to_string().c_str());
      return 1;
    }
  }
  std::vector<std::uint32_t> w(kElems, 5), back(kElems);
  auto put = store->put("after", TensorView::of(w.data(), {kElems})).get(kBound);
  auto got = store->get_into("after", TensorView::of(back.data(), {kElems})).get(kBound);
  if (!put.ok() || !got.ok() || back != w) {
    std::printf("not serving: new key: %s / %s\n", put.status().to_string().c_str(),
                got.status().to_string().c_str());
    return 1;
  }
  std::printf("serving\n");
  return 0;
}

// -- the orchestrator -----------------------------------------------------

using meshstore::testing::Child;

// The highest N of the "tick N" lines in `out`.
int last_tick(const std::string& out) {
  int best = 0;
  for (std::size_t p = out.find("tick "); p != std::string::npos; p = out.find("tick ", p + 1)) {
    best = std::max(best, std::atoi(out.c_str() + p + 5));
  }
  return best;
}

// How many "tick N start=NS" lines in `out` are of calls that started at
// `t` or later: a call that started before its peer died may succeed.
int ticks_started_after(const std::string& out, std::int64_t t) {
  int n = 0;
  for (std::size_t p = out.find("tick "); p != std::string::npos; p = out.find("tick ", p + 1)) {
    int tick = 0;
    long long start = 0;
    if (std::sscanf(out.c_str() + p, "tick %d start=%lld", &tick, &start) == 2 && start >= t) ++n;
  }
  return n;
}

// "error N at=NS start=NS: MSG" -> the ns from max(kill, start) to at.
double answer_ms(const std::string& line, std::int64_t killed_at) {
  long long at = 0, start = 0;
  int n = 0;
  if (std::sscanf(line.c_str(), "error %d at=%lld start=%lld", &n, &at, &start) != 3) return -1;
  return static_cast<double>(at - std::max<std::int64_t>(start, killed_at)) / 1e6;
}

// The message of an "error" line, without CAF's reason in parentheses.
std::string message_of(const std::string& line) {
  const auto p = line.find(": ");
  std::string msg = p == std::string::npos ? line : line.substr(p + 2);
  for (const char* tail : {" (system_error(", " (exit_reason("}) {
    const auto t = msg.find(tail);
    if (t != std::string::npos) msg.erase(t);
  }
  return msg;
}

struct Cell {
  std::string role, phase;
  bool pass = true;
  std::string writer, reader, serving, leaks, notes;
  double worst_ms = 0;
  double back_ms = -1;  // failover: kill to the end of the first call that succeeded after it
};

// The ms from `killed_at` to the end of the first call in `out` that
// succeeded after the role's first failure since the kill (a call it
// served from what it held, before it learned of the death, does not
// count); -1 if none.
double back_after_ms(const std::string& out, std::int64_t killed_at) {
  long long failed_at = killed_at;
  for (std::size_t p = out.find("error "); p != std::string::npos; p = out.find("error ", p + 1)) {
    int n = 0;
    long long at = 0, start = 0;
    if (std::sscanf(out.c_str() + p, "error %d at=%lld start=%lld", &n, &at, &start) == 3 &&
        at >= killed_at) {
      failed_at = at;
      break;
    }
  }
  for (std::size_t p = out.find("tick "); p != std::string::npos; p = out.find("tick ", p + 1)) {
    int tick = 0;
    long long start = 0, end = 0;
    if (std::sscanf(out.c_str() + p, "tick %d start=%lld end=%lld", &tick, &start, &end) == 3 &&
        start >= failed_at) {
      return static_cast<double>(end - killed_at) / 1e6;
    }
  }
  return -1;
}

std::string shm_left(const std::vector<pid_t>& pids) {
  std::string left;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      for (pid_t p : pids) {
        if (name.rfind("meshstore." + std::to_string(p) + "-", 0) == 0 ||
            name.rfind("meshstore." + std::to_string(p) + ".", 0) == 0) {
          left += (left.empty() ? "" : " ") + name;
        }
      }
    }
    closedir(d);
  }
  return left;
}

// The "error" lines of `out` after offset `from`.
std::vector<std::string> errors_after(const std::string& out, std::size_t from) {
  std::vector<std::string> lines;
  for (auto p = out.find("error ", from); p != std::string::npos; p = out.find("error ", p + 1)) {
    if (p > 0 && out[p - 1] != '\n') continue;
    lines.push_back(out.substr(p, out.find('\n', p) - p));
  }
  return lines;
}

// What a survivor did once the victim died (killed at `killed_at`, reaped
// at `dead_at`). `goes_on`: it must answer 3 calls started after the kill
// (1 when idle), failing on the way only with errors that name what died.
// Otherwise its calls must fail within kBound, one of the errors naming
// what died (any of `names`), and no 3 calls started after the victim was
// dead may succeed (a call already running when it died may: calls that
// end in microseconds, as lease-free reads do, show that in the output).
std::string watch_survivor(Child& c, std::int64_t killed_at, std::int64_t dead_at,
                           std::size_t offset, const std::vector<std::string>& names, bool goes_on,
                           bool idle, Cell& cell) {
  const int want = idle ? 1 : 3;
  auto names_it = [&](const std::string& msg) {
    for (const auto& n : names)
      if (msg.find(n) != std::string::npos) return true;
    return false;
  };
  if (idle) c.signal(SIGUSR1);
  const auto deadline = std::chrono::steady_clock::now() + kBound + 2s;
  std::string first_named;
  std::size_t retried = 0;  // idle: the errors already answered by one more call
  while (std::chrono::steady_clock::now() < deadline) {
    if (c.output().find("TORN") != std::string::npos) {
      cell.pass = false;
      return "TORN: " + c.output().substr(c.output().find("TORN"), 200);
    }
    const auto errors = errors_after(c.output(), offset);
    for (const auto& line : errors) {
      const std::string msg = message_of(line);
      if (goes_on && !names_it(msg)) {
        cell.pass = false;
        return "failed with an error that does not name it: " + msg;
      }
      if (names_it(msg) && first_named.empty()) {
        first_named = msg;
        const double ms = answer_ms(line, killed_at);
        cell.worst_ms = std::max(cell.worst_ms, ms);
        if (!goes_on) {
          char buf[64];
          std::snprintf(buf, sizeof(buf), "failed in %.0f ms: ", ms);
          return buf + msg;
        }
      }
    }
    if (ticks_started_after(c.output(), goes_on ? killed_at : dead_at) >= want) {
      if (goes_on) {
        return first_named.empty() ? (idle ? "next call answered" : "went on")
                                   : "failed once (" + first_named + "), then went on";
      }
      cell.pass = false;
      return "kept succeeding with a dead peer";
    }
    if (idle && (first_named.empty() || goes_on) && errors.size() > retried) {
      retried = errors.size();
      c.signal(SIGUSR1);  // one more call: the error did not name it, or it must go on
    }
    c.wait_for_output("tick " + std::to_string(last_tick(c.output()) + 1) + " ", 100ms);
  }
  cell.pass = false;
  const auto errs = errors_after(c.output(), offset);
  return "no answer naming it within " + std::to_string(kBound.count()) + " s" +
         (errs.empty() ? std::string() : " (last: " + message_of(errs.back()) + ")");
}

Cell run_cell(const std::string& self, const std::string& role, const std::string& phase) {
  Cell cell;
  cell.role = role;
  cell.phase = phase;
  char tmpl[] = "/tmp/meshstore-faults-XXXXXX";
  const std::string dir = mkdtemp(tmpl) ? tmpl : "/tmp";
  // volume+copies: the store keeps each key put whole on both volumes.
  const bool copies = role == "volume+copies";
  const std::string state = dir + "/state";
  ::mkdir(state.c_str(), 0700);
  auto serve = std::make_unique<Child>(
      std::vector<std::string>{self, "serve", "127.0.0.1:0", copies ? "2" : "1", state});
  if (!serve->wait_for_output("address ", 30s) || !serve->wait_for_output("\n", 5s)) {
    cell.pass = false;
    cell.notes = "the store did not start: " + serve->output();
    return cell;
  }
  const auto a = serve->output().find("address ") + 8;
  const std::string address = serve->output().substr(a, serve->output().find('\n', a) - a);
  auto vol0 = std::make_unique<Child>(std::vector<std::string>{self, "volume", address, "0"});
  auto vol1 = std::make_unique<Child>(std::vector<std::string>{self, "volume", address, "1"});
  for (auto* v : {vol0.get(), vol1.get()}) {
    if (!v->wait_for_output("ready", 30s)) {
      cell.pass = false;
      cell.notes = "a volume did not start: " + v->output();
      return cell;
    }
  }
  auto writer =
      std::make_unique<Child>(std::vector<std::string>{self, "writer", address, phase, dir});
  if (!writer->wait_for_output("running", 30s)) {
    cell.pass = false;
    cell.notes = "the writer did not start: " + writer->output();
    return cell;
  }
  auto reader =
      std::make_unique<Child>(std::vector<std::string>{self, "reader", address, phase, dir});
  const bool idle = phase == "idle";
  if (!reader->wait_for_output("running", 30s) ||
      (!idle && !reader->wait_for_output("tick 3 ", 30s)) ||
      (!idle && !writer->wait_for_output(
                    "tick " + std::to_string(last_tick(writer->output()) + 3) + " ", 30s))) {
    cell.pass = false;
    cell.notes = "the loops did not run: " + writer->output().substr(0, 300) + " / " +
                 reader->output().substr(0, 300);
    return cell;
  }
  std::vector<pid_t> pids = {serve->pid(), vol0->pid(), vol1->pid(), writer->pid(), reader->pid()};
  Child* victim = role == "volume" || copies ? vol0.get()
                  : role == "client"         ? reader.get()
                  : role == "writer"         ? writer.get()
                                             : serve.get();
  const bool with_volume = role == "failover+volume";
  Child* also = with_volume ? vol0.get() : nullptr;  // killed with the victim
  const bool failover = role == "failover" || with_volume;
  const std::size_t w_off = writer->output().size(), r_off = reader->output().size();
  const std::int64_t killed_at = now_ns();
  victim->signal(SIGKILL);
  if (also) also->signal(SIGKILL);
  victim->wait(5s);
  if (also) also->wait(5s);
  const std::int64_t dead_at = now_ns();
  // failover: the store again at its address, as a supervisor would start it.
  std::unique_ptr<Child> again;
  if (failover) {
    again = std::make_unique<Child>(std::vector<std::string>{self, "serve", address, "1", state});
    if (!again->wait_for_output("address ", 30s)) {
      cell.pass = false;
      cell.notes = "the store did not start again: " + again->output();
    }
    pids.push_back(again->pid());
  }

  // What each survivor must do: after a volume or the controller dies, its
  // calls fail naming it (the checkpoint reader reads files: it goes on);
  // after a client or the writer dies, the others go on.
  // volume0's id, or (once the client forgot it) the strategy finding none
  // for its local rank.
  const std::vector<std::string> names_volume = {"/lr0'", "no volume on host"};
  const std::vector<std::string> names_store = {"controller", "the store is unreachable"};
  const std::vector<std::string> names_writer = {"writer"};
  // Both died: an error may name either.
  std::vector<std::string> names_both = names_volume;
  names_both.insert(names_both.end(), names_store.begin(), names_store.end());
  // With copies, what was committed before the kill stays readable: the
  // reader goes on (a stream reader reads the last committed version from
  // its copy; a read in flight at volume0 may fail naming it), except for
  // what is not copied (a sharded state dict).
  const bool copied_reads = copies && phase != "sharded";
  if (victim != writer.get()) {
    const bool goes_on =
        role == "client" || (failover && !with_volume) || (copies && phase == "get");
    cell.writer = watch_survivor(*writer, killed_at, dead_at, w_off,
                                 role == "volume" || copies ? names_volume
                                 : with_volume              ? names_both
                                                            : names_store,
                                 goes_on, idle, cell);
  } else {
    cell.writer = "killed";
  }
  if (victim != reader.get()) {
    const bool files = phase == "checkpoint";
    const bool goes_on = role == "writer" || files || (failover && !with_volume) || copied_reads;
    // A stream reader waiting for the next write when the volume dies (not
    // reading from it) learns nothing is written any more at its deadline.
    auto names_for_reader = role == "writer"             ? names_writer
                            : role == "volume" || copies ? names_volume
                            : with_volume                ? names_both
                                                         : names_store;
    if ((role == "volume" || with_volume || copies) && phase == "stream") {
      names_for_reader.push_back("nothing was written within");
    }
    // With copies the reader may be streaming from the copy while the
    // writer's put, whose volume died, aborts: the reader is told that.
    if (copies && phase == "stream") {
      names_for_reader.push_back("the writer aborted before its commit");
    }
    cell.reader =
        watch_survivor(*reader, killed_at, dead_at, r_off, names_for_reader, goes_on, idle, cell);
  } else {
    cell.reader = "killed";
  }

  // Keys on live volumes still serve, for a process that comes now.
  Child check({self, "check", address});
  check.wait(kBound + 20s);
  const bool serving = check.output().find("serving") == 0;
  if (role == "controller") {
    cell.serving = serving ? "serving (unexpected)" : "no: the index died with the controller";
  } else if (with_volume) {
    cell.serving = serving ? "yes, volume1's keys after the rebuild gave volume0 up"
                           : "NO: " + check.output().substr(0, 200);
    cell.pass &= serving;
  } else if (failover) {
    for (auto* c : {writer.get(), reader.get()}) {
      const double ms = back_after_ms(c->output(), killed_at);
      if (ms >= 0) cell.back_ms = cell.back_ms < 0 ? ms : std::max(cell.back_ms, ms);
    }
    char back[96];
    std::snprintf(back, sizeof(back), "yes, every survivor's calls again %.0f ms after the kill",
                  cell.back_ms);
    cell.serving = serving ? back : "NO: " + check.output().substr(0, 200);
    cell.pass &= serving;
  } else {
    cell.serving = serving ? "yes" : "NO: " + check.output().substr(0, 200);
    cell.pass &= serving;
  }

  // Stop the survivors; gc for the killed process; nothing may be left.
  const pid_t killed = victim->pid();
  const std::vector<Child*> all = {reader.get(), writer.get(), vol1.get(),
                                   vol0.get(),   serve.get(),  again.get()};
  for (Child* c : all) {
    if (c && c != victim && c != also) c->signal(SIGTERM);
  }
  std::string stuck;
  for (Child* c : all) {
    if (c && c != victim && c != also && !c->wait(kBound)) {
      stuck += " " + std::to_string(c->pid());
    }
  }
  meshstore::transports::shm::garbage_collect(false, killed);
  if (also) meshstore::transports::shm::garbage_collect(false, also->pid());
  const std::string left = shm_left(pids);
  cell.leaks = left.empty() && stuck.empty()
                   ? "none"
                   : (left.empty() ? "" : "shm:" + left) + (stuck.empty() ? "" : " stuck:" + stuck);
  cell.pass &= left.empty() && stuck.empty();
  for (Child* c : {reader.get(), writer.get()}) {
    if (c->output().find("TORN") != std::string::npos) {
      cell.pass = false;
      cell.notes += "torn read; ";
    }
  }
  std::string rm = "rm -rf '" + dir + "'";
  (void)std::system(rm.c_str());
  return cell;
}

int orchestrate(const std::string& self, const std::vector<std::string>& cells,
                const std::string& table, const std::string& doc) {
  std::vector<Cell> done;
  for (const auto& name : cells) {
    const auto slash = name.find('/');
    const auto t0 = std::chrono::steady_clock::now();
    Cell c = run_cell(self, name.substr(0, slash), name.substr(slash + 1));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-4s %-10s %-10s writer: %s | reader: %s | serving: %s | leaks: %s%s (%.1f s)\n",
                c.pass ? "ok" : "FAIL", c.role.c_str(), c.phase.c_str(), c.writer.c_str(),
                c.reader.c_str(), c.serving.c_str(), c.leaks.c_str(),
                c.notes.empty() ? "" : (" | " + c.notes).c_str(), s);
    std::fflush(stdout);
    done.push_back(std::move(c));
  }
  int failed = 0;
  std::ostringstream md;
  md << "| killed | phase | writer | reader | live volumes serve | left behind | outcome |\n"
     << "| --- | --- | --- | --- | --- | --- | --- |\n";
  double worst = 0;
  for (const auto& c : done) {
    failed += !c.pass;
    worst = std::max(worst, c.worst_ms);
    md << "| " << c.role << " | " << c.phase << " | " << c.writer << " | " << c.reader << " | "
       << c.serving << " | " << c.leaks << " | " << (c.pass ? "pass" : "**FAIL**") << " |\n";
  }
  char tail[160];
  std::snprintf(tail, sizeof(tail),
                "\n%zu cells, %d failed; the slowest error answered %.0f ms after the kill "
                "(bound %lld s).\n",
                done.size(), failed, worst, static_cast<long long>(kBound.count()));
  md << tail;
  if (!table.empty()) {
    std::ofstream f(table);
    f << md.str();
  }
  if (!doc.empty() && !meshstore::testing::replace_doc_table(doc, "fault-matrix", md.str()))
    return 1;
  std::printf("%s", tail);
  std::printf("fault_matrix: %s\n", failed == 0 ? "ok" : "FAILED");
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Roles are this program again.
  std::string exe(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  exe.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  const std::string role = argc > 1 ? argv[1] : "";
  if (role == "serve" || role == "volume" || role == "writer" || role == "reader" ||
      role == "check") {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a role never outlives the orchestrator
  }
  if (role == "serve" || role == "volume") return run_host(role, argc, argv);
  if ((role == "writer" || role == "reader") && argc >= 5) {
    return run_client(role == "writer", argv[2], argv[3], argv[4]);
  }
  if (role == "check" && argc >= 3) {
    return run_check(argv[2]);
  }
  std::vector<std::string> cells;
  std::string table, doc;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--table" && i + 1 < argc) {
      table = argv[++i];
    } else if (a == "--doc" && i + 1 < argc) {
      doc = argv[++i];
    } else if (a == "--cells" && i + 1 < argc) {
      std::string list = argv[++i];
      std::stringstream ss(list);
      for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    } else {
      std::fprintf(stderr,
                   "usage: fault_matrix [--cells ROLE/PHASE,...] [--table FILE] [--doc FILE]\n");
      return 2;
    }
  }
  if (cells.empty()) {
    for (const auto& r : kRoles)
      for (const auto& p : kPhases) cells.push_back(r + "/" + p);
  }
  for (const auto& c : cells) {
    const auto slash = c.find('/');
    const bool known =
        slash != std::string::npos &&
        std::find(kRoles.begin(), kRoles.end(), c.substr(0, slash)) != kRoles.end() &&
        std::find(kPhases.begin(), kPhases.end(), c.substr(slash + 1)) != kPhases.end();
    if (!known) {
      std::fprintf(stderr, "fault_matrix: unknown cell '%s'\n", c.c_str());
      return 2;
    }
  }
  return orchestrate(exe, cells, table, doc);
}
