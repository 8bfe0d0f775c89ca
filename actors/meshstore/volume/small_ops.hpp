#pragma once
// A volume's small-op service: one thread that serves the small gets, puts
// and commits of every client's channel to this volume (docs/internals/data-path-small-ops.md,
// "The small-op service"). Clients on this host send them over a
// shared-memory ring each (transports/shm/ring.hpp); the thread polls all
// the rings and, when they are all empty, sleeps on the volume's doorbell,
// which each client rings after a request. Clients on other hosts send them
// over tcp's small-op connections, on that transport's connection threads.
//
// A get is answered from the table of small committed objects at once. A
// put or commit is checked (a request is input from another process) and
// handed to the volume actor, which commits it at the controller; the
// actor's outcome is the reply, sent to the channel from the thread that
// has it. So the serving thread never waits for the controller: a slow
// commit holds up no other client. A reply is owed once: the actor's
// outcome, or "unavailable" when the commit's controller goes down or the
// volume stops, whichever comes first.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/status.hpp"
#include "meshstore/transports/region.hpp"
#include "meshstore/transports/shm/ring.hpp"

namespace meshstore::volume {

/// The volume's objects by id, as threads other than the volume actor see
/// them: the small-op service serves gets of small committed host objects
/// from it, and the controller retires superseded objects through it. The
/// actor tracks an object from its staging, marks it committed, and removes
/// it when it is dropped. A reader copies under the lock while holding the
/// region, so a dropped object's memory is never pooled or freed under it,
/// and committed bytes never change.
class SmallObjects {
 public:
  /// Object `id`, just staged; `tag` is the one clients check around a
  /// direct read (null: none, e.g. GPU memory).
  void track(std::uint64_t id, const std::shared_ptr<transports::Region>& region,
             std::atomic<std::uint64_t>* tag);
  /// Object `id` was committed under `key`: gets may read it.
  void commit(std::uint64_t id, const std::string& key);
  void remove(std::uint64_t id);
  /// Whether object `id` is tracked and not retired: staged, or committed
  /// and not superseded.
  bool current(std::uint64_t id) const;
  /// The reply to a get of object `id` named `key`: its bytes, or stale
  /// (not committed under that name, superseded, removed, in GPU memory,
  /// or a reply larger than `message`, one message of the channel that
  /// asked: the client sends no such get). Copied out of the object
  /// while holding its region, not the table's lock.
  std::vector<std::byte> read(std::uint64_t id, const std::string& key, std::size_t message) const;
  /// The reply to a check of object `id` named `key` (a get too large for
  /// one message): ok, with no bytes, when read() would serve it but for
  /// its size, so the client reads it with the transport's bulk read by
  /// id; else stale. A bulk read that follows returns this object's bytes
  /// or fails (not_found once it is dropped): committed bytes never change.
  std::vector<std::byte> check(std::uint64_t id, const std::string& key) const;
  /// Objects the controller released (or a pin holds back superseded),
  /// before the volume actor drops them: their tags are cleared (only
  /// while they still name them), and neither gets nor unpinned leases
  /// serve them, so no reader that located them unpinned finds them from
  /// now on. True when each had a tag (or was dropped already); false
  /// when one has none (GPU memory, a lent buffer): the controller then
  /// also waits for the volume actor's flush before it answers.
  bool retire(const std::vector<std::uint64_t>& ids);

 private:
  struct Entry {
    std::string key;  // empty until committed
    std::shared_ptr<transports::Region> region;
    std::atomic<std::uint64_t>* tag = nullptr;
    bool committed = false;
  };
  // Object `id` when a get or a check of it under `key` is answered from
  // here: committed under that key, in host memory; else null. Under mu_.
  const Entry* committed_on_host(std::uint64_t id, const std::string& key) const;
  mutable std::mutex mu_;  // guards map_
  std::unordered_map<std::uint64_t, Entry> map_;
};

/// Where a channel's puts go: the volume actor, which commits them at the
/// controller for the client that attached the channel (all weak: the
/// service must not keep actors alive); a tcp connection thread waits at
/// most `timeout` for the outcome.
struct FastPuts {
  caf::actor_addr volume;
  caf::actor_addr controller;
  caf::actor_addr owner;
  std::chrono::milliseconds timeout;
};

class SmallOpService {
 public:
  /// The service of volume `volume_id`, serving gets from `table`. Its
  /// thread and doorbell are made at the first ring (a volume no client
  /// reaches over shm keeps nothing in /dev/shm); the thread spins `spin`
  /// over the rings before it sleeps. Its commits take at most
  /// `request_timeout` at the controller.
  SmallOpService(std::string volume_id, std::shared_ptr<SmallObjects> table,
                 std::chrono::microseconds spin, std::chrono::milliseconds request_timeout);
  /// stop(), then lets go of every ring.
  ~SmallOpService();
  SmallOpService(const SmallOpService&) = delete;
  SmallOpService& operator=(const SmallOpService&) = delete;

  /// Serves `ring` (its server end) from now on, committing its puts as
  /// `puts` says; answers the name of the doorbell its client rings after
  /// each request. The ring goes when its client closes it, dies or
  /// corrupts it (logged). The doorbell's
  /// errors (out_of_capacity when /dev/shm is full); unavailable once
  /// stopped.
  Result<std::string> add_ring(std::unique_ptr<transports::shm::Ring> ring, FastPuts puts);

  /// The bytes of each small-op request that comes without a ring (over
  /// tcp's small-op connections, or in an actor message) start with the
  /// 8-byte token its client attached with (attach_token), which says whom
  /// its puts are committed for.
  static constexpr std::size_t kTokenBytes = 8;
  void attach_token(std::uint64_t token, FastPuts puts);
  /// Answers small-op request `p`, `n` bytes (token first), through `send`,
  /// once: at once for a get or a refusal, else when the volume actor has
  /// the commit's outcome (`answer_here`: on the actor's thread, for a
  /// request that came in an actor message, answered by its response
  /// promise; else possibly from the controller's thread).
  void serve_framed(const std::byte* p, std::size_t n,
                    std::function<void(std::vector<std::byte>)> send, bool answer_here);
  /// serve_framed on the calling tcp connection thread, waiting for a
  /// put's outcome.
  std::vector<std::byte> serve_token(const std::byte* p, std::size_t n);

  /// The client `owner` went: the tokens it attached go.
  void owner_gone(const caf::actor_addr& owner);
  /// `controller` went down: puts waiting for it are answered unavailable
  /// now (a request to a dead remote actor would only time out), and
  /// later ones at once; unless the volume awaits a new controller
  /// (await_controller), which then answers them.
  void controller_gone(const caf::actor_addr& controller);
  /// The volume's commits wait for a new controller when theirs went down
  /// (VolumeConfig::await_controller): the service leaves their answers to
  /// the volume actor, which holds them until then (commit_waits.cpp).
  void await_controller(bool on) { await_controller_.store(on); }
  /// `controller` is the store's controller from now (a failover's: the
  /// one this volume registered with last); every channel's puts commit
  /// there, whichever controller the channel was attached with.
  void controller_is(const caf::actor_addr& controller) {
    std::lock_guard<std::mutex> lock(mu_);
    controller_now_ = controller;
  }
  /// The volume stops: the thread ends (within one poll), and every put
  /// still owed a reply is answered unavailable. Idempotent.
  void stop();

  struct Channel;
  struct Owed;
  struct Pending;
  struct Recent;

  /// Replies of identified commits kept for a request sent again: the
  /// last this many, of at most kRecentReplyBytes in all; a larger reply
  /// is not kept (the commit sent again is then done again, and refused:
  /// its objects are no longer staged).
  static constexpr std::size_t kRecentCommits = 1024;
  static constexpr std::size_t kRecentReplyBytes = std::size_t{16} << 20;

 private:
  void run();
  // Serves one request (null `puts`: from a client never attached), its
  // reply owed by `owed`; a part of a larger one (fast_get::PartAssembly)
  // assembled in `parts` (null: none taken).
  // `message`: the bytes one message of its channel carries (a get's
  // reply fits one).
  void serve(const std::vector<std::byte>& bytes, const FastPuts* puts,
             const std::shared_ptr<Owed>& owed, protocol::fast_get::PartAssembly* parts,
             std::size_t message, bool answer_here = false);
  // Answers each waiting request of `channel`; false when it must go.
  bool drain(const std::shared_ptr<Channel>& channel);
  bool controller_down(const caf::actor_addr& controller) const;
  // What a put whose controller went down is answered.
  std::vector<std::byte> controller_down_reply() const;

  const std::string volume_id_;
  const std::shared_ptr<SmallObjects> table_;
  const std::chrono::microseconds spin_;
  const std::chrono::milliseconds request_timeout_;
  const std::shared_ptr<Pending> pending_;
  const std::shared_ptr<Recent> recent_;
  const bool spinning_host_;
  std::atomic<bool> await_controller_{false};

  mutable std::mutex mu_;  // guards what follows
  std::vector<std::shared_ptr<Channel>> rings_;
  // A token's puts, and its requests and replies in parts.
  struct Attached {
    FastPuts puts;
    std::shared_ptr<protocol::fast_get::PartAssembly> parts;
  };
  std::unordered_map<std::uint64_t, Attached> tokens_;
  std::vector<caf::actor_addr> dead_controllers_;
  caf::actor_addr controller_now_;  // controller_is; null: each channel's own
  // Where `puts`' commits go: the controller_is one, else the channel's.
  caf::actor_addr controller_for(const FastPuts& puts) const {
    std::lock_guard<std::mutex> lock(mu_);
    return controller_now_ ? controller_now_ : puts.controller;
  }
  std::shared_ptr<transports::shm::Doorbell> bell_;  // set once, with thread_
  std::thread thread_;
  std::atomic<std::uint64_t> generation_{0};  // bumped when rings_ changes
  std::atomic<bool> stop_{false};
};

}  // namespace meshstore::volume
