// store_bench's command line: parsing and checking the options, sizes
// with their units.
#include "bench_args.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace meshstore::bench {

[[noreturn]] void usage(const char* why) {
  std::fprintf(
      stderr,
      "store_bench: %s\n"
      "usage: store_bench [--scenario "
      "single|small|weight-sync|reshard|safetensors-load|python|soak|control|failover|replicas|\n"
      "                   metrics]\n"
      "                   [--transport shm|tcp|rpc] [--tcp-streams N] [--encrypt-tcp]\n"
      "                   [--model qwen3-0.6b|qwen3-1.7b|qwen3-4b-8layers]\n"
      "                   [--bytes N[KiB|MiB|GiB]] [--iters N] [--processes 1|2] [--json] "
      "[--smoke]\n"
      "                   [--peer-netns NS --peer-host ADDR]  (small: the peer and "
      "Redis in network namespace NS at ADDR)\n",
      why);
  std::exit(2);
}

namespace {

// N bytes, or N with a unit: KiB (K), MiB (M), GiB (G) or B.
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

}  // namespace

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
    else if (arg == "--encrypt-tcp")
      a.encrypt_tcp = true;
    else if (arg == "--seconds")
      a.seconds = std::atoi(next().c_str());
    else if (arg == "--keys")
      a.keys = static_cast<std::size_t>(std::atoll(next().c_str()));
    else if (arg == "--clients")
      a.clients = std::atoi(next().c_str());
    else if (arg == "--process-memory")
      a.process_memory = true;
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
    else if (arg == "--peer-netns")
      a.peer_netns = next();
    else if (arg == "--peer-host")
      a.peer_host = next();
    else if (arg == "--listen-host")
      a.listen_host = next();
    else if (arg == "--help" || arg == "-h")
      usage("help");
    else
      usage(("unknown argument '" + arg + "'").c_str());
  }
  if (a.scenario != "single" && a.scenario != "small" && a.scenario != "weight-sync" &&
      a.scenario != "reshard" && a.scenario != "safetensors-load" && a.scenario != "python" &&
      a.scenario != "soak" && a.scenario != "control" && a.scenario != "failover" &&
      a.scenario != "replicas" && a.scenario != "metrics")
    usage(("unknown scenario '" + a.scenario + "'").c_str());
  if (a.iters < 0) usage("--iters must be positive");
  if (a.seconds < 0) usage("--seconds must be positive");
  if (a.clients < 0 || a.clients > 256) usage("--clients must be in [1, 256]");
  if (a.processes != 1 && a.processes != 2) usage("--processes must be 1 or 2");
  if (a.peer_netns.empty() != a.peer_host.empty()) {
    usage("--peer-netns and --peer-host go together");
  }
  if (!a.peer_netns.empty() && (a.scenario != "small" || a.processes != 2 || a.smoke)) {
    usage("--peer-netns measures --scenario small with a peer process (--processes 2)");
  }
  return a;
}

}  // namespace meshstore::bench
