#pragma once

// FastPath's channel to one volume (fast_path.cpp, fast_path_commits.cpp):
// internal to the client module.

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "meshstore/client/fast_path.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/transports/shm/ring.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::client {

// One channel to a volume and what a caller needs to use it, one request
// at a time: a ring (same host) or small operations (tcp's own connection,
// else actor messages; each request prefixed with the token the client
// attached with). A ring's
// volume is also read directly, through the shm transport.
struct FastPath::Channel {
  std::mutex mu;  // held for a whole request and its reply
  std::unique_ptr<transports::shm::Ring> ring;
  // Whether a request failed: then the volume may still be working on it,
  // so the channel is never used again (under `mu`).
  bool failed = false;
  std::shared_ptr<transports::Transport> shm;  // direct reads; null: none
  // The controller's process (FastPath::watch_controller), copied here so a
  // direct read needs no lock for it; null: not watched.
  std::shared_ptr<const transports::shm::ProcessWatch> controller;
  // Whether `entry` is read straight from this volume's shared memory.
  bool direct(const Entry& entry) const { return shm && !entry.place.empty(); }
  // Where `entry`'s object lies in that memory, with its tag; none (no tag)
  // when the controller's process exited, the volume's did, or the place
  // is not the volume's region.
  transports::Transport::TaggedBytes tagged(const Entry& entry) const {
    if (controller && !controller->alive()) return {};
    wire::RegionRef ref;
    ref.region_id = entry.object_id;
    ref.nbytes = entry.nbytes;
    ref.described.emplace("shm", entry.place);
    return shm->tagged_bytes(ref);
  }
  std::unique_ptr<transports::SmallOps> remote;
  std::uint64_t token = 0;                           // remote only
  std::shared_ptr<transports::Transport> transport;  // remote only: writes staged objects
  std::uint64_t next_tag = 1;
  std::vector<std::byte> request;  // reused encoding buffer (remote: after the token)

  // The largest message it carries (a larger request goes in parts).
  std::size_t max_request() const {
    return ring ? ring->slot_bytes() : transports::kMaxSmallOpBytes - sizeof(token);
  }
  // The largest object a get over it asks for: its reply is one message
  // (a ring slot; a small operation's 1 MiB across hosts).
  std::uint64_t max_get() const {
    return ring ? protocol::limits::kRingReadBytes
                : transports::kMaxSmallOpBytes - protocol::fast_get::kReplyHeaderBytes;
  }
  // Whether a get of `entry`, larger than one message, is a check over
  // this channel, then the transport's bulk read of the object by id, on
  // the caller's thread: over a two-sided transport (tcp, rpc; one-sided
  // ones need the region described by the volume actor), and up to
  // limits::kSnapshotHereBytes, as a state dict's snapshot. A larger read
  // takes the actors, off the caller's thread, which it would otherwise
  // hold (an asyncio loop among them) for the whole transfer, and where a
  // cancel stops it.
  bool bulk_reads(const Entry& entry) const {
    if (ring || !transport || entry.nbytes > protocol::limits::kSnapshotHereBytes) return false;
    const auto caps = transport->capabilities();
    return !caps.one_sided && !caps.device_memory;
  }
  // Sends `request` and waits for its reply (the caller holds `mu`), in
  // parts when it or its reply is larger than a message
  // (fast_get::exchange_in_parts). `*sent` (when given) is false when the
  // request certainly did not reach the volume (a ring's send that failed
  // enqueues nothing); a remote request may have whenever it fails.
  Result<std::vector<std::byte>> exchange(std::chrono::steady_clock::time_point deadline,
                                          bool* sent = nullptr) {
    return protocol::fast_get::exchange_in_parts(
        request.data(), request.size(), max_request(),
        [&](const std::byte* p, std::size_t n, bool* left) {
          return exchange_one(p, n, deadline, left);
        },
        sent);
  }

 private:
  // One message and its reply; over a ring under a new tag, passing over
  // late replies to abandoned requests.
  Result<std::vector<std::byte>> exchange_one(const std::byte* p, std::size_t n,
                                              std::chrono::steady_clock::time_point deadline,
                                              bool* sent) {
    if (sent) *sent = true;
    if (remote) {
      framed.resize(sizeof(token) + n);
      std::memcpy(framed.data(), &token, sizeof(token));
      std::memcpy(framed.data() + sizeof(token), p, n);
      return remote->exchange(framed.data(), framed.size(), deadline);
    }
    const std::uint64_t tag = next_tag++;
    if (auto s = ring->send(tag, p, n, deadline); !s.ok()) {
      if (sent) *sent = false;
      return s;
    }
    for (;;) {
      auto m = ring->receive(deadline);
      if (!m.ok()) return m.status();
      if (m->tag == tag) return std::move(m->bytes);
    }
  }

  std::vector<std::byte> framed;  // token + request (remote)
};

}  // namespace meshstore::client
