#pragma once
// The peer process that holds the store and its volume, and the ways a
// measurement reaches it: the bench's session, a helper process's store.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "../bench_util.hpp"
#include "bench_args.hpp"
#include "meshstore/store.hpp"

namespace meshstore::bench {

/// The peer process (--peer serve): hosts a store and its volume, a raw-TCP
/// server, and a buffer of --bytes for the bare cross-memory-attach
/// baseline; prints "ready STORE_PORT RAW_PORT PID ADDRESS" and serves
/// until its stdin closes, then ends the process.
int run_peer(const Args& a);

/// A running peer process, as the bench sees it. Dropping it stops the peer.
struct Peer {
  std::unique_ptr<Child> child;  // closing its stdin stops it
  std::uint16_t store_port = 0;
  std::uint16_t raw_port = 0;
  pid_t cma_pid = 0;  // the peer's process and its baseline buffer
  std::uint64_t cma_address = 0;
  std::string host = "127.0.0.1";  // where its store listens
};

/// Starts a peer process and waits until it is ready. The peer holds a
/// buffer of `cma_bytes` for the bare cross-memory-attach baseline (0: none);
/// `process_memory`: its volumes keep their objects in process memory.
/// `netns`, `host`: the peer runs in that network namespace and listens on
/// that address (both empty: this namespace, 127.0.0.1).
std::unique_ptr<Peer> start_peer(std::size_t cma_bytes = 0, bool encrypt_tcp = false,
                                 bool process_memory = false, const std::string& netns = "",
                                 const std::string& host = "");

/// The store this run measures: embedded (one process), or a connection to
/// the peer process that holds the store and its volume.
struct Session {
  std::unique_ptr<Peer> peer;  // null when embedded
  meshstore::Store store;
};

/// The session of a scenario, by --processes and --transport.
Session open_session(const Args& a);

/// A helper process's store: joins the peer's store at --port as rank
/// `rank`, hosting no volume, over the bench's transport.
meshstore::Store connect_helper(const Args& a, std::int64_t rank, const char* what);

}  // namespace meshstore::bench
