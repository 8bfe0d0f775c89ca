// meshstore: the command-line tool. Subcommands grow with the project; each
// is listed by --help.

#include <google/protobuf/stubs/common.h>
#include <signal.h>
#include <spdlog/version.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <caf/config.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "meshstore/checkpoint.hpp"
#include "meshstore/host_agent.hpp"
#include "meshstore/internal/address.hpp"
#include "meshstore/internal/idle_spin.hpp"
#include "meshstore/logging.hpp"
#include "meshstore/safetensors.hpp"
#include "meshstore/store.hpp"
#include "meshstore/store/metrics_server.hpp"
#include "meshstore/transports/copy_engine.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"
#include "meshstore/version.hpp"

namespace {

using namespace std::chrono_literals;
using namespace meshstore::cli;

// The stop signals (SIGINT, SIGTERM), blocked: call it before any thread
// exists, so that every thread inherits the mask and wait_for_stop() alone
// takes them.
sigset_t block_stop_signals() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  return stop;
}

// Waits for one of `stop`'s signals; its name.
const char* wait_for_stop(const sigset_t& stop) {
  int sig = 0;
  sigwait(&stop, &sig);
  return sig == SIGINT ? "SIGINT" : "SIGTERM";
}

// What `meshstore serve` prints once it serves: where, how, and where its
// metrics are.
void print_serving(meshstore::Store& store, const meshstore::StoreOptions& o) {
  std::printf("meshstore %s serving on %s (strategy %s%s%s); stop with SIGTERM or Ctrl-C\n",
              meshstore::version(), store.admin().address().c_str(), o.placement.strategy.c_str(),
              o.security.tls.enabled() ? ", mutual TLS" : "",
              o.security.encrypt_tcp ? ", encrypted tcp" : "");
  if (auto at = store.admin().metrics_address(); !at.empty()) {
    std::printf("meshstore serve: metrics on %s://%s/metrics\n",
                o.security.tls.enabled() ? "https" : "http", at.c_str());
  }
}

// `meshstore serve`'s options from its arguments into `o`; what was wrong
// with them, "" when nothing.
std::string serve_options(const Args& args, meshstore::StoreOptions& o) {
  long long port = 0, volumes = 0, replicas = 0, capacity = 0;
  if (!parse_number(args.get("port", std::to_string(meshstore::kDefaultStorePort)), 0, 65535,
                    port)) {
    return "--port wants a number in [0, 65535]";
  }
  if (!parse_number(args.get("volumes", "1"), 1, 1024, volumes)) {
    return "--volumes wants a number in [1, 1024]";
  }
  if (!parse_number(args.get("replicas", "1"), 1, 16, replicas)) {
    return "--replicas wants a number in [1, 16]";
  }
  if (!parse_number(args.get("capacity", "0"), 0, 1LL << 62, capacity)) {
    return "--capacity wants a byte count (0 = unlimited)";
  }
  long long rebuild_ms = 0;
  if (!parse_number(args.get("rebuild-timeout-ms", "2000"), 1, 3600000, rebuild_ms)) {
    return "--rebuild-timeout-ms wants milliseconds in [1, 3600000]";
  }
  const char* env_encrypt = std::getenv("MESHSTORE_ENCRYPT_TCP");
  const std::string encrypt =
      args.get("encrypt-tcp", env_encrypt && std::string(env_encrypt) == "1" ? "on" : "off");
  if (encrypt != "on" && encrypt != "off") {
    return "--encrypt-tcp wants on or off, got '" + encrypt + "'";
  }
  o.security.encrypt_tcp = encrypt == "on";
  o.listen = args.get("host", "127.0.0.1") + ":" + std::to_string(port);
  o.placement.strategy = args.get("strategy", "singleton");
  o.placement.num_volumes = static_cast<int>(volumes);
  o.placement.replicas = static_cast<int>(replicas);
  o.limits.volume_capacity_bytes = static_cast<std::uint64_t>(capacity);
  o.log_level = args.get("log-level", "");
  o.placement.local_rank = -1;  // a server is not a rank: per-rank volumes live in the ranks
  o.security.tls = tls_from(args);
  o.standby_of = args.get("standby-of", "");
  o.state_dir = args.get("state-dir", "");
  o.limits.rebuild_timeout = std::chrono::milliseconds(rebuild_ms);
  o.metrics = args.get("metrics", "");
  return {};
}

int cmd_serve(int argc, char** argv) {
  Args args;
  int rc = 0;
  if (!parse_args(
          "serve", argc, argv,
          with_tls({"host", "port", "strategy", "volumes", "replicas", "capacity", "standby-of",
                    "state-dir", "rebuild-timeout-ms", "encrypt-tcp", "log-level", "metrics"}),
          args, rc)) {
    return rc;
  }
  if (!args.positional.empty())
    return usage_error("serve", "unexpected argument '" + args.positional[0] + "'");
  meshstore::StoreOptions o;
  if (auto wrong = serve_options(args, o); !wrong.empty()) return usage_error("serve", wrong);
  const sigset_t stop = block_stop_signals();  // before any thread exists
  // A stop signal while the store starts (a standby waits there until its
  // primary is gone) ends the process: nothing serves yet.
  std::atomic<bool> serving{false};
  const char* stopped_by = nullptr;
  std::thread stopper([&] {
    stopped_by = wait_for_stop(stop);
    if (!serving.load()) {
      std::printf("meshstore serve: got %s before serving, stopped\n", stopped_by);
      std::fflush(stdout);
      std::_Exit(0);
    }
  });
  if (!o.standby_of.empty()) {
    std::printf("meshstore serve: standing by for %s\n", o.standby_of.c_str());
    std::fflush(stdout);
  }
  auto store = meshstore::Store::embedded(o);
  if (!store.ok()) {
    std::fprintf(stderr, "meshstore serve: %s\n", store.status().to_string().c_str());
    std::_Exit(1);  // the stopper thread waits for a signal
  }
  serving = true;
  print_serving(*store, o);
  std::fflush(stdout);
  stopper.join();
  std::printf("meshstore serve: got %s, shutting down\n", stopped_by);
  std::fflush(stdout);
  store->close();
  std::printf("meshstore serve: stopped\n");
  return 0;
}

int cmd_agent(int argc, char** argv) {
  Args args;
  int rc = 0;
  if (!parse_args("agent", argc, argv, with_tls({"listen", "grace-ms", "log-level", "metrics"}),
                  args, rc)) {
    return rc;
  }
  if (!args.positional.empty())
    return usage_error("agent", "unexpected argument '" + args.positional[0] + "'");
  auto listen = meshstore::internal::parse_address(args.get("listen", "127.0.0.1:29600"));
  if (!listen.ok() || listen->host.empty()) {
    return usage_error("agent",
                       "--listen wants HOST:PORT or [V6]:PORT" +
                           (listen.ok() ? std::string() : ": " + listen.status().message()));
  }
  long long grace = 0;
  if (!parse_number(args.get("grace-ms", "5000"), 0, 600000, grace)) {
    return usage_error("agent", "--grace-ms wants milliseconds in [0, 600000]");
  }
  if (auto level = args.get("log-level", "info"); !level.empty()) {
    setenv("MESHSTORE_LOG_LEVEL", level.c_str(), 0);
  }
  meshstore::AgentOptions o;
  o.host = listen->host;
  o.port = listen->port;
  o.stop_grace = std::chrono::milliseconds(grace);
  o.tls = tls_from(args);
  const sigset_t stop = block_stop_signals();  // before any thread exists
  auto agent = meshstore::HostAgent::start(o);
  if (!agent.ok()) {
    std::fprintf(stderr, "meshstore agent: %s\n", agent.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<meshstore::store::MetricsServer> metrics;
  if (const auto at = args.get("metrics", ""); !at.empty()) {
    auto served = meshstore::store::MetricsServer::start(
        at, meshstore::store::agent_metrics([a = &*agent] { return a->stats(); }), o.tls);
    if (!served.ok()) {
      std::fprintf(stderr, "meshstore agent: --metrics: %s\n", served.status().to_string().c_str());
      return 1;
    }
    metrics = std::move(served).value();
  }
  std::printf("meshstore %s agent listening on %s:%u%s; stop with SIGTERM or Ctrl-C\n",
              meshstore::version(), o.host.c_str(), static_cast<unsigned>(agent->port()),
              o.tls.enabled() ? " (mutual TLS)" : "");
  if (metrics) {
    std::printf("meshstore agent: metrics on %s://%s/metrics\n", metrics->scheme(),
                metrics->address().c_str());
  }
  std::fflush(stdout);
  std::printf("meshstore agent: got %s, stopping its processes\n", wait_for_stop(stop));
  std::fflush(stdout);
  metrics.reset();  // before the agent it reads
  agent->stop();
  std::printf("meshstore agent: stopped\n");
  return 0;
}

int cmd_ls(int argc, char** argv) {
  Args args;
  int rc = 0;
  if (!parse_args("ls", argc, argv, with_tls({"store", "log-level"}), args, rc)) return rc;
  if (args.positional.size() > 1) return usage_error("ls", "takes at most one prefix");
  auto store = dial(args);
  if (!store.ok()) {
    std::fprintf(stderr, "meshstore ls: %s\n", store.status().to_string().c_str());
    return 1;
  }
  auto keys = store->list(args.positional.empty() ? "" : args.positional[0]).get(30s);
  if (!keys.ok()) {
    std::fprintf(stderr, "meshstore ls: %s\n", keys.status().to_string().c_str());
    return 1;
  }
  std::printf("%-48s %-10s %-20s %12s %8s\n", "KEY", "DTYPE", "SHAPE", "BYTES", "VERSION");
  for (const auto& k : *keys) {
    std::printf("%-48s %-10s %-20s %12llu %8llu\n", k.key.c_str(),
                k.is_object ? "object" : std::string(meshstore::dtype_name(k.dtype)).c_str(),
                k.is_object ? "-" : meshstore::shape_to_string(k.shape).c_str(),
                static_cast<unsigned long long>(k.nbytes),
                static_cast<unsigned long long>(k.version));
  }
  return 0;
}

int cmd_rm(int argc, char** argv) {
  Args args;
  int rc = 0;
  if (!parse_args("rm", argc, argv, with_tls({"store", "log-level"}), args, rc)) return rc;
  if (args.positional.empty()) return usage_error("rm", "names no key");
  auto store = dial(args);
  if (!store.ok()) {
    std::fprintf(stderr, "meshstore rm: %s\n", store.status().to_string().c_str());
    return 1;
  }
  int failures = 0;
  for (const auto& key : args.positional) {
    auto r = store->remove(key).get(30s);
    if (!r.ok()) {
      std::fprintf(stderr, "meshstore rm: %s\n", r.status().to_string().c_str());
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

void print_transport_status(const char* indent);

int cmd_stat(int argc, char** argv) {
  Args args;
  int rc = 0;
  if (!parse_args("stat", argc, argv, with_tls({"store", "log-level"}), args, rc)) return rc;
  auto store = dial(args);
  if (!store.ok()) {
    std::fprintf(stderr, "meshstore stat: %s\n", store.status().to_string().c_str());
    return 1;
  }
  auto stats = store->admin().stats().get(30s);
  auto keys = store->keys().get(30s);
  if (!stats.ok() || !keys.ok()) {
    std::fprintf(stderr, "meshstore stat: %s\n",
                 (stats.ok() ? keys.status() : stats.status()).to_string().c_str());
    return 1;
  }
  std::printf("store %s: %zu keys, %zu volumes\n", args.get("store", default_store()).c_str(),
              keys->size(), stats->size());
  if (auto c = store->admin().controller_counters().get(30s); c.ok()) {
    std::printf(
        "controller messages: notify_put %llu, notify_put_batch %llu, locate %llu, exists %llu, "
        "keys %llu, remove %llu, pinned locate %llu\n",
        static_cast<unsigned long long>(c->notify_put),
        static_cast<unsigned long long>(c->notify_put_batch),
        static_cast<unsigned long long>(c->locate), static_cast<unsigned long long>(c->exists),
        static_cast<unsigned long long>(c->keys), static_cast<unsigned long long>(c->remove),
        static_cast<unsigned long long>(c->pinned_locates));
    std::printf("streams: %llu state dict puts streamed, %llu readers followed one\n",
                static_cast<unsigned long long>(c->streams),
                static_cast<unsigned long long>(c->stream_readers));
  }
  print_transport_status("");
  std::printf("%-32s %14s %14s %8s %7s %7s\n", "VOLUME", "HELD", "CAPACITY", "OBJECTS", "STAGED",
              "LEASES");
  for (const auto& s : *stats) {
    if (!s.unreachable.empty()) {
      std::printf("%-32s unreachable: %s\n", s.volume_id.c_str(), s.unreachable.c_str());
      continue;
    }
    std::printf("%-32s %14s %14s %8llu %7llu %7llu\n", s.volume_id.c_str(),
                human_bytes(s.bytes_held).c_str(),
                s.capacity_bytes ? human_bytes(s.capacity_bytes).c_str() : "unlimited",
                static_cast<unsigned long long>(s.objects),
                static_cast<unsigned long long>(s.staged),
                static_cast<unsigned long long>(s.leases));
  }
  return 0;
}

// Removes shared-memory segments that crashed meshstore processes left in
// /dev/shm. Segments of live processes are never touched.
int cmd_gc(int argc, char** argv) {
  bool dry_run = false;
  long pid = 0;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--dry-run") == 0) {
      dry_run = true;
    } else if (std::strcmp(argv[i], "--pid") == 0 && i + 1 < argc) {
      char* end = nullptr;
      pid = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || pid <= 0) return usage_error("gc", "--pid wants a process id");
    } else {
      return usage_error("gc", std::string("unknown option '") + argv[i] + "'");
    }
  }
  const auto report = meshstore::transports::shm::garbage_collect(dry_run, pid);
  for (const auto& name : report.removed) {
    std::printf("%s /dev/shm/%s\n", dry_run ? "would remove" : "removed", name.c_str());
  }
  std::printf("meshstore gc: %s %zu segment(s) of dead processes (%s); %zu of live ones kept\n",
              dry_run ? "found" : "removed", report.removed.size(),
              human_bytes(report.bytes_freed).c_str(), report.live);
  return 0;
}

void print_help(std::FILE* out) {
  std::fprintf(
      out,
      "meshstore %s: a distributed tensor store on CAF actors\n"
      "\n"
      "usage: meshstore <command> [options]\n"
      "       meshstore --version | --help\n"
      "\n"
      "commands:\n"
      "  serve [--host 127.0.0.1] [--port %u] [--strategy singleton] [--volumes 1]\n"
      "        [--replicas 1] [--capacity BYTES] [--standby-of HOST:PORT]\n"
      "        [--state-dir DIR] [--rebuild-timeout-ms 2000]\n"
      "        [--encrypt-tcp off] [--log-level warn] [--metrics HOST:PORT]\n"
      "            run a standalone store (controller + volumes) until SIGTERM or Ctrl-C;\n"
      "            --standby-of: wait until the store there is gone, then take over\n"
      "            --state-dir: started again after its death, wait for its volumes\n"
      "            before answering that a key does not exist (one server per DIR)\n"
      "            --metrics: serve /metrics, /healthz and /readyz there (port 0: any)\n"
      "  agent [--listen 127.0.0.1:29600] [--grace-ms 5000] [--log-level info]\n"
      "        [--metrics HOST:PORT]\n"
      "            run a host agent: starts and stops worker processes for controllers\n"
      "            (ProcMesh::attach) until SIGTERM or Ctrl-C, then stops them all\n"
      "  ls [PREFIX] [--store HOST:PORT]   keys with dtype, shape, bytes, version\n"
      "  rm KEY... [--store HOST:PORT]     remove keys\n"
      "  stat [--store HOST:PORT]          volumes with the bytes they hold\n"
      "  top [--store HOST:PORT] [--metrics HOST:PORT[,...]] [--keys 5] [--once]\n"
      "        [--interval-ms 1000]\n"
      "            volumes, calls per second with p50/p99 (from those /metrics) and the\n"
      "            keys holding the most bytes, every second; --once: one frame\n"
      "  inspect FILE|DIR                  a safetensors checkpoint: tensors, dtypes,\n"
      "                                    shapes, bytes, metadata, total\n"
      "  load FILE|DIR [--prefix P] [--store HOST:PORT]\n"
      "            put a safetensors checkpoint's tensors (tensor T as key P/T)\n"
      "  save PREFIX DIR [--max-shard-size 5GB] [--store HOST:PORT]\n"
      "            write the tensors under PREFIX as a checkpoint (key P/T as T)\n"
      "  gc [--dry-run] [--pid PID]\n"
      "            remove shared memory that crashed (killed) meshstore processes left\n"
      "  version   print the version\n"
      "  info      print the build: dependencies, transports, optional features\n"
      "  help      print this help\n"
      "\n"
      "Every command takes --log-format text|json (else $MESHSTORE_LOG_FORMAT): json\n"
      "writes one JSON object per log line (docs/operations.md).\n"
      "--store defaults to $MESHSTORE_ADDR, else 127.0.0.1:%u. Every command that\n"
      "talks to a store or an agent (serve and agent too) takes --tls-cert FILE\n"
      "--tls-key FILE --tls-ca FILE, else $MESHSTORE_TLS_CERT, _KEY, _CA: mutual TLS\n"
      "(docs/security.md). serve --encrypt-tcp on (or $MESHSTORE_ENCRYPT_TCP=1)\n"
      "seals the volumes' tcp bytes with AES-256-GCM. Strategies: singleton,\n"
      "controller_colocated, per_host, per_local_rank (docs/meshes.md).\n"
      "Programs next to this one in build/bin: meshrun (the launcher), hello_store (the\n"
      "embedded-store demo), store_bench (benchmarks). Docs: docs/.\n",
      meshstore::version(), meshstore::kDefaultStorePort, meshstore::kDefaultStorePort);
}

// The transports that cannot run in this process, and why (rdma without
// a device).
void print_transport_status(const char* indent) {
  for (const auto& [name, status] : meshstore::Store::Admin::transport_status()) {
    if (!status.ok()) {
      std::printf("%s%s unavailable on this host: %s\n", indent, name.c_str(),
                  status.message().c_str());
    }
  }
}

void print_info() {
  std::printf("meshstore %s\n", meshstore::version());
  std::printf("  CAF         %d.%d.%d\n", CAF_VERSION / 10000, (CAF_VERSION / 100) % 100,
              CAF_VERSION % 100);
  std::printf("  Protobuf    %s\n",
              google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION).c_str());
  std::printf("  spdlog      %d.%d.%d\n", SPDLOG_VER_MAJOR, SPDLOG_VER_MINOR, SPDLOG_VER_PATCH);
  std::printf("  transports ");
  for (const auto& t : meshstore::Store::Admin::available_transports())
    std::printf(" %s", t.c_str());
  std::printf("\n");
  print_transport_status("  ");
  std::printf("  RDMA build  %s\n",
              MESHSTORE_BUILD_RDMA ? "libibverbs found: the rdma transport is built" : "off");
  std::printf("  CUDA build  %s\n",
              MESHSTORE_BUILD_CUDA ? "toolkit found: device tensors and the cuda-ipc transport "
                                     "work where meshstore::cuda::status() is OK"
                                   : "off (device tensors and cuda-ipc answer unavailable)");
  std::printf("  usable CPUs %u (the affinity mask, within the cgroup's CPU quota)\n",
              meshstore::internal::usable_cpus());
  std::printf(
      "  spinning %s (waiting threads spin: with 8 or more usable CPUs; MESHSTORE_SPIN=on|off|auto "
      "sets it)\n",
      meshstore::internal::spinning_host() ? "on" : "off");
  std::printf("  copy threads %d (one per usable CPU up to 16; MESHSTORE_COPY_THREADS sets it)\n",
              meshstore::transports::CopyEngine::instance().threads());
  std::printf(
      "  scheduler polls %zu before an idle worker sleeps (5000 where spinning, else 100; "
      "MESHSTORE_SCHEDULER_POLLS sets it)\n",
      meshstore::internal::scheduler_polls());
  // Where GPU tensors move in one copy, and why not elsewhere.
  std::printf("  GPU tensors\n");
  for (const auto& [name, status] : meshstore::Store::Admin::gpu_transport_status()) {
    std::printf("    %-9s %s\n", name.c_str(),
                status.ok() ? "moved directly (no host staging)"
                            : ("staged through host memory: " + status.message()).c_str());
  }
}

// Takes --log-format FORMAT (or --log-format=FORMAT), which every command
// accepts, out of argv and applies it; false after printing why it is bad.
bool take_log_format(int& argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i], format;
    int taken = 1;
    if (a.rfind("--log-format=", 0) == 0) {
      format = a.substr(13);
    } else if (a == "--log-format" && i + 1 < argc) {
      format = argv[i + 1];
      taken = 2;
    } else if (a == "--log-format") {
      usage_error(argv[1], "--log-format needs a value");
      return false;
    } else {
      continue;
    }
    if (auto s = meshstore::log::set_format(format); !s.ok()) {
      usage_error(argv[1], "--log-format: " + s.message());
      return false;
    }
    for (int j = i; j + taken <= argc; ++j) argv[j] = argv[j + taken];
    argc -= taken;
    --i;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_help(stderr);
    return 2;
  }
  if (!take_log_format(argc, argv)) return 2;
  const std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    std::printf("meshstore %s\n", meshstore::version());
    return 0;
  }
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    print_help(stdout);
    return 0;
  }
  if (cmd == "info") {
    print_info();
    return 0;
  }
  if (cmd == "serve") return cmd_serve(argc, argv);
  if (cmd == "agent") return cmd_agent(argc, argv);
  if (cmd == "ls") return cmd_ls(argc, argv);
  if (cmd == "rm") return cmd_rm(argc, argv);
  if (cmd == "stat") return cmd_stat(argc, argv);
  if (cmd == "top") return cmd_top(argc, argv);
  if (cmd == "gc") return cmd_gc(argc, argv);
  if (cmd == "inspect") return cmd_inspect(argc, argv);
  if (cmd == "load") return cmd_load(argc, argv);
  if (cmd == "save") return cmd_save(argc, argv);
  std::fprintf(stderr, "meshstore: unknown command '%s'\n\n", cmd.c_str());
  print_help(stderr);
  return 2;
}
