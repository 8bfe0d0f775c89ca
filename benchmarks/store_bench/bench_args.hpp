#pragma once
// store_bench's command line: the options of a run, and of the helper
// processes it starts (--peer), parsed and checked.
#include <cstddef>
#include <string>

namespace meshstore::bench {

/// The options of one store_bench process. Those marked internal are set
/// only on the helper processes store_bench starts.
struct Args {
  std::string scenario = "single";
  std::string transport = "shm";
  std::size_t bytes = std::size_t{256} << 20;
  bool bytes_given = false;
  int iters = 0;    // 0 = scenario default
  int seconds = 0;  // soak: how long; 0 = scenario default
  bool json = false;
  bool smoke = false;
  int processes = 2;
  int tcp_streams = 2;          // StoreOptions::transport.tcp_streams
  bool encrypt_tcp = false;     // StoreOptions::security.encrypt_tcp of the store's process
  std::size_t keys = 0;         // control: the index's largest size; 0 = scenario default
  int clients = 0;              // control: clients connected at once; 0 = scenario default
  bool process_memory = false;  // internal: the peer's volumes in process memory
  std::string peer;             // internal: run as a helper ("serve", "read", "load")
  std::string model = "qwen3-0.6b";
  int port = 0;                // internal: the store a "read" peer connects to
  std::string prefix = "e2e";  // internal: what a "read" peer follows
  std::string dir;             // internal: the checkpoint a "load" peer loads
  std::string load_mode;       // internal: "time", "rss-store" or "rss-buffers"
  // The peer process (and Redis) in network namespace `peer_netns`,
  // listening on `peer_host` (its address there): "between two hosts"
  // joined by a veth pair (benchmarks/run_small_netns.sh).
  std::string peer_netns;
  std::string peer_host;
  std::string listen_host;  // internal: the host a "serve" peer listens on
};

/// Prints "store_bench: WHY" and the usage to stderr, then exits with 2.
[[noreturn]] void usage(const char* why);

/// The options in `argv`; a bad one ends the program through usage().
Args parse(int argc, char** argv);

}  // namespace meshstore::bench
