#pragma once

// A request/reply channel between two processes on one host, in one
// shared-memory segment: the building block of issue 26's fast path for
// small operations (docs/shm.md, "The ring"). Two single-producer,
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
//
// One thread may serve many rings (a volume's small-op service): it polls
// their request queues with try_receive() and, when all are empty, sleeps
// on a Doorbell, a futex word in a segment of its own that every client
// end rings after each request it sends (Ring::use_doorbell). A client
// that scribbles on the doorbell can only delay the wake-ups of its
// fellow clients by one liveness period; it reads nothing of theirs.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/transports/shm/peer_memory.hpp"
#include "meshstore/transports/shm/shm_segment.hpp"

namespace meshstore::transports::shm {

class Doorbell;

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
  std::uint32_t slot_bytes() const noexcept { return slot_bytes_; }

  /// Sends `n` bytes at `data` with `tag` to the other end; waits (spin,
  /// then sleep) while its queue is full, until `deadline` (Errc::timeout).
  /// Errc::invalid_argument when `n` exceeds slot_bytes(); unavailable when
  /// the peer is gone; protocol_error when the queue's indices are corrupt.
  /// A send that fails enqueued nothing.
  Status send(std::uint64_t tag, const void* data, std::size_t n, Deadline deadline);
  /// The next message from the other end, waiting until `deadline`
  /// (Errc::timeout). unavailable when the peer is gone and nothing is
  /// left to read; protocol_error for a corrupt entry or index.
  Result<Message> receive(Deadline deadline);
  /// The next message if one is queued, else none, without waiting or a
  /// system call: unavailable when the peer closed its end and nothing is
  /// left; protocol_error as receive(). Whether the peer's process still
  /// runs is not asked here (see alive()).
  Result<std::optional<Message>> try_receive();
  /// Whether a message waits for this end (or the queue's indices are
  /// corrupt, which try_receive() then says): two loads, for a thread that
  /// polls many rings.
  bool has_message() const;
  /// unavailable when the peer closed its end or its process is gone,
  /// protocol_error when the segment was truncated under this end: what a
  /// thread polling with try_receive() asks now and then.
  Status alive() const { return peer_gone(); }
  /// From now on every send() of this (client) end also rings `bell`, the
  /// doorbell of the thread that serves the other end.
  void use_doorbell(std::shared_ptr<Doorbell> bell) { doorbell_ = std::move(bell); }

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
  // protocol_error when a queue's tail is more than slots_ past its head.
  Status check_distance(std::uint32_t head, std::uint32_t tail) const;
  // Takes the message at `head` of receiving queue `q`.
  Result<Message> take(Queue& q, std::uint32_t head);

  std::unique_ptr<Segment> segment_;
  // The server end's: after segment_, so it goes before the mapping does.
  std::unique_ptr<PeerMemory> guard_;
  int end_;  // 0: client (creator), 1: server
  std::uint32_t slots_;
  std::uint32_t slot_bytes_;
  std::chrono::microseconds spin_;
  std::shared_ptr<Doorbell> doorbell_;  // rung after each send; null: none
};

/// A futex word in a shared-memory segment of its own: the thread that
/// serves many rings sleeps on it (wait()) and their client ends ring it
/// (ring()). The server creates it (its name has the process prefix, so
/// `meshstore gc` removes one a killed server left); clients open it by
/// the name the server tells them. Thread-safe.
class Doorbell {
 public:
  /// A new doorbell, this process its server.
  static Result<std::shared_ptr<Doorbell>> create();
  /// Opens doorbell `name` to ring it. invalid_argument for a name that is
  /// not a meshstore segment's, protocol_error for a segment that is not a
  /// doorbell, the segment's errors otherwise.
  static Result<std::shared_ptr<Doorbell>> open(const std::string& name);
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  const std::string& name() const noexcept;
  /// Bumps the word and wakes the server when it sleeps.
  void ring();
  /// The word's value now: what wait() compares against.
  std::uint32_t seq() const;
  /// Sleeps until the word moves from `seen`, or `timeout` passes (or a
  /// spurious wake-up: look again either way). Marks the server sleeping
  /// meanwhile, so ring() makes a system call only then; `ready` is asked
  /// once more after that mark, and no sleep happens when it says yes.
  template <class Ready>
  void wait(std::uint32_t seen, std::chrono::nanoseconds timeout, Ready ready) {
    set_sleeping(true);
    if (!ready()) sleep(seen, timeout);
    set_sleeping(false);
  }

 private:
  explicit Doorbell(std::unique_ptr<Segment> segment);
  void set_sleeping(bool on);
  void sleep(std::uint32_t seen, std::chrono::nanoseconds timeout);
  std::unique_ptr<Segment> segment_;
  // The server's: a client may truncate the segment under it (then the
  // server reads zeros and sleeps in slices, never dies of SIGBUS).
  std::unique_ptr<PeerMemory> guard_;
};

}  // namespace meshstore::transports::shm
