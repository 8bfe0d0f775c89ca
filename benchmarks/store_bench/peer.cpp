// The peer process that holds the store, and the bench's and the helper
// processes' connections to it (see peer.hpp).
#include "peer.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "raw_tcp.hpp"

namespace meshstore::bench {

int run_peer(const Args& a) {
  meshstore::StoreOptions o;
  o.listen = (a.listen_host.empty() ? std::string("127.0.0.1") : a.listen_host) + ":0";
  o.placement.local_rank = -1;
  o.security.encrypt_tcp = a.encrypt_tcp;
  // A million tiny objects would be a million shared-memory segments.
  if (a.process_memory) o.transport.shared_memory_volumes = false;
  auto store = must(meshstore::Store::embedded(o), "peer: Store::embedded");
  std::uint16_t raw_port = 0;
  const int lfd = raw_listen(raw_port);
  std::thread(raw_serve, lfd).detach();
  // The bare cross-memory-attach baseline reads and writes this buffer.
  std::vector<std::uint8_t> cma_buffer(a.bytes_given ? a.bytes : 0, 1);
  std::printf("ready %u %u %lld %llu\n", static_cast<unsigned>(store.admin().port()),
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

std::unique_ptr<Peer> start_peer(std::size_t cma_bytes, bool encrypt_tcp, bool process_memory,
                                 const std::string& netns, const std::string& host) {
  std::vector<std::string> args{"--peer", "serve"};
  if (!host.empty()) {
    args.push_back("--listen-host");
    args.push_back(host);
  }
  if (encrypt_tcp) args.push_back("--encrypt-tcp");
  if (process_memory) args.push_back("--process-memory");
  if (cma_bytes > 0) {
    args.push_back("--bytes");
    args.push_back(std::to_string(cma_bytes) + "B");
  }
  auto peer = std::make_unique<Peer>();
  peer->child = netns.empty() ? spawn_self(args) : spawn_in_netns(netns, args);
  peer->host = host.empty() ? "127.0.0.1" : host;
  unsigned sp = 0, rp = 0;
  long long pid = 0;
  unsigned long long address = 0;
  if (std::fscanf(peer->child->from, "ready %u %u %lld %llu", &sp, &rp, &pid, &address) != 4) {
    die("the peer process did not start");
  }
  peer->store_port = static_cast<std::uint16_t>(sp);
  peer->raw_port = static_cast<std::uint16_t>(rp);
  peer->cma_pid = static_cast<pid_t>(pid);
  peer->cma_address = address;
  return peer;
}

Session open_session(const Args& a) {
  meshstore::StoreOptions o;
  o.transport.name = a.transport;
  o.transport.tcp_streams = a.tcp_streams;
  o.security.encrypt_tcp = a.encrypt_tcp;
  if (a.processes == 1) return Session{nullptr, must(meshstore::Store::embedded(o), "embedded")};
  const std::size_t n = a.smoke ? (std::size_t{4} << 20) : a.bytes;
  auto peer = start_peer(a.transport == "cma" && a.scenario == "single" ? n : 0, a.encrypt_tcp,
                         false, a.peer_netns, a.peer_host);
  o.placement.host_volumes = false;
  o.placement.local_rank = -1;
  o.placement.rank = 1;
  auto store = must(
      meshstore::Store::connect(peer->host + ":" + std::to_string(peer->store_port), o), "connect");
  return Session{std::move(peer), std::move(store)};
}

meshstore::Store connect_helper(const Args& a, std::int64_t rank, const char* what) {
  meshstore::StoreOptions o;
  o.transport.name = a.transport;
  o.transport.tcp_streams = a.tcp_streams;
  o.placement.host_volumes = false;
  o.placement.local_rank = -1;
  o.placement.rank = rank;
  return must(meshstore::Store::connect("127.0.0.1:" + std::to_string(a.port), o), what);
}

}  // namespace meshstore::bench
