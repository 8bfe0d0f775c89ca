#pragma once

// A request/reply channel between two processes on one host, in one
// shared-memory segment: the building block of issue 26's fast path for
// small operations (docs/transports.md, "The ring"). Two single-producer,
// single-consumer queues of fixed-size slots, one each way. A receiver that
// finds its queue empty spins for a moment (Options::spin), then sleeps on a
// futex in the segment; a sender wakes it only when it sleeps, so a busy
// pair makes no system call at all.
//
// Everything read from the segment is input from another process and is
// validated: the header when attaching, the queue indices and every entry's
// length when receiving. A corrupt or hostile ring is an Errc::protocol_error
// naming the ring and what was wrong, never a crash or an out-of-bounds
// access. A peer that dies (its pid is gone) or closes its end turns waiting
// calls into Errc::unavailable within about 10 ms. The server end's mapping
// is a PeerMemory range: a client that truncates the segment under it makes
// the server's calls fail with protocol_error, not its process die of
// SIGBUS.
//
// The creator names the segment (with the process prefix) and the server end
// unlinks the name as it attaches: from then on the ring is two mappings
// and no name, so it goes with the last of its ends whatever kills them.
// A creator killed before any server attached leaves the name, which
// `meshstore gc` (and every shm server's start) removes.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshstore/result.hpp"
#include "meshstore/transports/shm/peer_memory.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"

namespace meshstore::transports::shm {

/// One end of a ring. Thread-compatible: one thread sends and one thread
/// receives on an end at a time (the queues are single-producer,
/// single-consumer).
/// How long a receiver spins before it sleeps, by default.
inline constexpr std::chrono::microseconds kDefaultSpin{50};

class Ring {
 public:
  struct Options {
    /// Slots each way, in [1, 4096].
    std::uint32_t slots = 64;
    /// The largest message, in bytes, in [64, 1 MiB].
    std::uint32_t slot_bytes = 8192;
    /// How long a receiver (or a sender facing a full queue) spins before
    /// it sleeps on the futex.
    std::chrono::microseconds spin = kDefaultSpin;
  };
  /// A received message: the sender's tag and a copy of its bytes.
  struct Message {
    std::uint64_t tag = 0;
    std::vector<std::byte> bytes;
  };
  using Deadline = std::chrono::steady_clock::time_point;
  /// One direction's queue in the segment (defined in ring.cpp).
  struct Queue;

  /// Creates a ring (this process is its client end) in a new segment.
  /// Errc::invalid_argument for options out of range; the segment's errors
  /// (out_of_capacity when /dev/shm is full).
  static Result<std::unique_ptr<Ring>> create(const Options& options);
  /// Attaches the server end to ring `name`, created by process `creator`,
  /// and unlinks the name. Errc::not_found when it is gone (another server
  /// end attached, or its creator closed it), Errc::protocol_error when its
  /// header is not a ring's (magic, version, sizes), Errc::unavailable when
  /// its creator is not `creator` or another server end is attached.
  static Result<std::unique_ptr<Ring>> attach(const std::string& name, pid_t creator,
                                              std::chrono::microseconds spin = kDefaultSpin);
  /// Closes this end: the peer's waiting calls fail with unavailable.
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  const std::string& name() const noexcept { return segment_->name(); }
  /// True when the other end's process is gone without having closed its
  /// end (it was killed): what it created is left for this end to remove.
  bool peer_died() const;
  std::uint32_t slot_bytes() const noexcept { return slot_bytes_; }
  bool is_client() const noexcept { return end_ == 0; }

  /// Sends `n` bytes at `data` with `tag` to the other end; waits (spin,
  /// then sleep) while its queue is full, until `deadline` (Errc::timeout).
  /// Errc::invalid_argument when `n` exceeds slot_bytes(); unavailable when
  /// the peer is gone; protocol_error when the queue's indices are corrupt.
  Status send(std::uint64_t tag, const void* data, std::size_t n, Deadline deadline);
  /// The next message from the other end, waiting until `deadline`
  /// (Errc::timeout). unavailable when the peer is gone and nothing is
  /// left to read; protocol_error for a corrupt entry or index.
  Result<Message> receive(Deadline deadline);

 private:
  Ring(std::unique_ptr<Segment> segment, int end, std::uint32_t slots, std::uint32_t slot_bytes,
       std::chrono::microseconds spin);
  // Queue `which` (0: requests, 1: replies) and slot `index` of it.
  Queue& queue(int which) const;
  std::byte* slot(int which, std::uint32_t index) const;
  // Errc::unavailable when the peer closed its end or (`ask_process`) its
  // process is gone; protocol_error when it truncated the segment.
  Status peer_gone(bool ask_process = true) const;
  // protocol_error when the segment was truncated under this end since it
  // attached (what was read from it since is not to be trusted).
  Status truncated() const;
  Status corrupt(const std::string& what) const;

  std::unique_ptr<Segment> segment_;
  // The server end's: after segment_, so it goes before the mapping does.
  std::unique_ptr<PeerMemory> guard_;
  int end_;  // 0: client (creator), 1: server
  std::uint32_t slots_;
  std::uint32_t slot_bytes_;
  std::chrono::microseconds spin_;
};

}  // namespace meshstore::transports::shm
