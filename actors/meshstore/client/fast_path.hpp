#pragma once

// The fast path for small gets and puts (issue 26;
// docs/internals/data-path-small-ops.md): a caller's thread reads a small whole object from a
// same-host volume over a shared-memory ring (transports/shm/ring.hpp),
// without any actor, and puts one through its own volume's ring (the
// volume's actor commits it). What it needs lives here, shared by the
// client actor and the Store facade:
// - the client's one location cache (client/location_cache.hpp), shared
//   with the client actor, so a location the actor dropped (a remove, an
//   overwrite by this client, a volume that went down) is gone here before
//   the call that dropped it completes;
// - the rings, one per same-host volume, created by the client actor when
//   it connects to the volume over shm and attached by the volume;
// - the objects staged ahead for this client's next puts larger than one
//   request (docs/internals/data-path-small-ops.md, "Puts on the caller's thread"), which
//   the caller's thread writes and commits over the channel
//   (client/channel_put.hpp).
// A read of a key whose object's place in the volume's shared memory is
// known (its record's place) copies it straight out of
// that memory on the caller's thread, checked by the object's tag before
// and after (a direct read: no ring, no volume). Else a read names the
// object id and key it expects over the ring; the volume answers the bytes
// of that committed object or "stale" (superseded, removed). Either way a
// stale location is detected and the caller takes the actor path, never
// reads the wrong bytes. A put's record is cached before put() returns;
// a record of an older version never replaces a newer one. Thread-safe.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "meshstore/client/location_cache.hpp"
#include "meshstore/protocol/fast_get.hpp"
#include "meshstore/protocol/limits.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::transports {
class SmallOps;
namespace shm {
class ProcessWatch;
class Ring;
}  // namespace shm
}  // namespace meshstore::transports

namespace meshstore::client {

/// One object of a direct read: the object it must be, and its tag and
/// bytes in its volume's shared memory (Transport::tagged_bytes).
struct TaggedObject {
  std::uint64_t object_id = 0;
  transports::Transport::TaggedBytes at;
};

/// What a read did.
enum class ReadOutcome {
  hit,   ///< served: the bytes were copied
  miss,  ///< not possible this way (nothing cached, no channel, refused, a copy failed)
  stale  ///< an object is no longer there, or changed during the copy: locate afresh
};

/// The direct read's check (docs/internals/data-path-small-ops.md, "Direct reads"), made
/// before its copy and again after it: the first of `objects` whose tag
/// does not name it now, or n when every one does. Committed bytes never
/// change, and the volume clears an object's tag before its memory serves
/// anything else, so tags unchanged from before the copy to after it mean
/// the copy is those objects' bytes. (The check after a copy follows an
/// acquire fence: read_tagged, or the client actor's reads after a locate,
/// client/volume_reads.cpp, whose copies run on the copy engine.)
inline std::size_t first_changed(const TaggedObject* objects, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (objects[i].at.tag->load(std::memory_order_acquire) != objects[i].object_id) return i;
  }
  return n;
}

/// A direct read on this thread (the caller's: FastPath::read,
/// read_together): hit: `copy()` returned true and every tag held; miss:
/// `copy()` returned false; stale: objects[*changed] was not its object,
/// before or after (the copy may have run: it must only write what a
/// second read writes again).
template <class Copy>
ReadOutcome read_tagged(const TaggedObject* objects, std::size_t n, Copy&& copy,
                        std::size_t* changed) {
  if ((*changed = first_changed(objects, n)) != n) return ReadOutcome::stale;
  if (!copy()) return ReadOutcome::miss;
  std::atomic_thread_fence(std::memory_order_acquire);
  if ((*changed = first_changed(objects, n)) != n) return ReadOutcome::stale;
  return ReadOutcome::hit;
}

class FastPath {
 public:
  /// A cached location of a whole key (the client's one location cache's).
  using Entry = LocationCache::Entry;
  /// Reads and puts through `cache`, the client actor's own.
  explicit FastPath(std::shared_ptr<LocationCache> cache = std::make_shared<LocationCache>());
  /// Lets the jobs handed to defer() run, then joins their thread.
  ~FastPath();
  FastPath(const FastPath&) = delete;
  FastPath& operator=(const FastPath&) = delete;
  /// The location cache it reads through.
  LocationCache& cache() const { return *cache_; }
  const std::shared_ptr<LocationCache>& shared_cache() const { return cache_; }
  using Outcome = ReadOutcome;
  struct Stats {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::uint64_t stale = 0;
    std::uint64_t rings = 0;             ///< rings (and tcp channels) open now
    std::uint64_t puts = 0;              ///< whole-key puts and batches committed over a channel
    std::uint64_t lease_free_reads = 0;  ///< reads served without a lease (count_lease_free)
    std::uint64_t lease_free_stale = 0;  ///< lease-free reads that found their object changing
    std::uint64_t direct_reads = 0;      ///< hits copied straight from shared memory
    std::uint64_t direct_batches = 0;    ///< read_together calls served (one snapshot each)
    std::uint64_t state_dict_puts = 0;   ///< state dicts and versions put_over_channel committed
    std::uint64_t resent_commits = 0;    ///< commits sent again (tried) after their channel failed
    std::map<std::string, std::uint64_t> channels;  ///< open now, by transport (shm, tcp, ...)
  };

  // -- the client actor's side --

  /// The volume this client puts to (the strategy's choice), "" for none
  /// yet: puts go over its channel (shm: a ring; tcp: a small-op
  /// connection; other transports: actor messages).
  void set_home(const std::string& volume_id);
  /// Connects this client to its volume and waits, at most `timeout`, for
  /// the channel to it: Status() once it is open, else why none is (no
  /// volume for this client, the volume down, the channel refused). The
  /// client actor sets it.
  using HomeConnector = std::function<Status(std::chrono::milliseconds)>;
  void set_home_connector(HomeConnector connector);
  /// Whether a put finding no channel to its volume should have the client
  /// connect first (connect_home), on the waiting thread: no volume chosen
  /// yet, or no channel open to it (never opened, or failed).
  bool may_connect_home() const;
  /// Whether close() was called.
  bool closed() const;
  /// Whether the channel to `volume_id` failed since the last call (a
  /// request on it failed, and it was dropped): the client actor then
  /// opens a new one, once per failure.
  bool take_reopen(const std::string& volume_id);
  /// Runs the connector: its answer, or Errc::shutdown once closed. It
  /// may wait `timeout`: only the waiting thread calls it.
  Status connect_home(std::chrono::milliseconds timeout);
  /// Makes room on a full volume (StoreOptions::limits.eviction "lru"): asks the
  /// controller to evict at least `bytes` there, waiting at most `timeout`;
  /// true when it evicted something. The client actor sets it, only when
  /// the store evicts.
  using Evictor = std::function<bool(const std::string& volume_id, std::uint64_t bytes,
                                     std::chrono::milliseconds)>;
  void set_evictor(Evictor evictor);
  /// Runs the evictor: false when there is none, the store closed, or it
  /// evicted nothing.
  bool evict(const std::string& volume_id, std::uint64_t bytes, std::chrono::milliseconds timeout);
  /// A state dict put over the channel announced as a stream (readers copy
  /// each object as soon as it is filled): the client actor is the
  /// stream's writer at the controller (its death ends the stream). `open`
  /// waits (at most its timeout) until the controller opened the stream;
  /// `progress` and `abort` are one-way. The client actor sets them.
  struct StreamHooks {
    std::function<bool(const std::string& key, const std::string& manifest,
                       const std::vector<wire::KeyRecord>& records,
                       const std::vector<std::uint64_t>& filled, std::chrono::milliseconds)>
        open;
    std::function<void(const std::string& key, std::vector<std::uint64_t> filled)> progress;
    std::function<void(const std::string& key, const std::string& why)> abort;
  };
  void set_stream_hooks(StreamHooks hooks);
  /// The hooks, or none (closed, or not set).
  std::optional<StreamHooks> stream_hooks() const;
  /// Closes the ring to `volume_id` (it went down).
  void close_ring(const std::string& volume_id);
  /// The ring to `volume_id`, which attached it, and the shm transport
  /// this client reaches the volume's memory with (direct reads; null:
  /// none).
  void add_ring(const std::string& volume_id, std::unique_ptr<transports::shm::Ring> ring,
                std::shared_ptr<transports::Transport> shm = nullptr);
  /// The controller's process, when it runs on this host in another one:
  /// no direct read once it exited (as the actors' lease-free reads). Set
  /// before any ring is added (the client actor does so as it starts):
  /// each ring copies it, so a direct read takes no lock for it.
  void watch_controller(std::shared_ptr<const transports::shm::ProcessWatch> watch);
  /// The small-operations channel to `volume_id` over its transport (tcp,
  /// across hosts); the volume knows this client by `token`
  /// (small_attach). Counted and used like a ring; objects staged there
  /// are written with `transport` (null: none are).
  void add_remote(const std::string& volume_id, std::unique_ptr<transports::SmallOps> channel,
                  std::uint64_t token, std::shared_ptr<transports::Transport> transport = nullptr);
  bool has_ring(const std::string& volume_id) const;
  /// Runs `job` on this client's waiting thread (made at the first call),
  /// one job at a time, in order: a state dict put or publish whose bytes
  /// go over the network (tcp), so that its caller's thread need not wait
  /// for them. A job must not outlive this object's references it holds
  /// (it runs before close() or the destructor returns). After close() the
  /// job runs on the calling thread.
  void defer(std::function<void()> job);
  /// Gives the stagings kept back to their volumes, one request per volume
  /// (so a volume that does not answer holds the close up for `timeout`
  /// once, not once per staging), then closes every ring; later reads
  /// miss. The store calls it first when it closes.
  void close(std::chrono::milliseconds timeout = std::chrono::milliseconds(1000));

  // -- the caller's side --

  /// Takes an object's bytes (n == entry.nbytes) where the caller wants
  /// them; false when it could not (a device copy failed): the read is then
  /// a miss, and the actor path writes the destination again and reports.
  using Consume = std::function<bool(const Entry&, const std::byte*, std::size_t)>;

  /// Where a read larger than one message may put the object's bytes
  /// itself (host memory of entry.nbytes), or null: a buffer of its own.
  using Place = std::function<std::byte*(const Entry&)>;

  /// Reads `key` when its location is cached and `accept(entry)` says the
  /// call can be served from it (kind, dtype, shape): straight from the
  /// volume's shared memory where its place is known, else over its
  /// volume's channel, whose reply is one message (a ring's: at most
  /// limits::kRingReadBytes; a small operation's across hosts: 1 MiB less
  /// its header); a larger object across hosts is checked over the channel
  /// (still committed under `key`), then read with the transport's bulk
  /// read, into `place(entry)` where given (two-sided transports, up to
  /// limits::kSnapshotHereBytes: Channel::bulk_reads). The
  /// transport's own deadline bounds that read. `consume(entry, data, n)`
  /// gets the object's bytes (`data` is place's memory when the bulk read
  /// went there); a direct read may call it and still answer stale (the
  /// object changed during the copy), so it, and what place() lets the
  /// bulk read write, must only be what the caller's actor path writes
  /// again. `to_device`: consume copies into GPU memory (a direct read lets
  /// the transport page-lock its mapping for that). Waits for a channel's
  /// reply at most `timeout`. One request at a time per channel.
  Outcome read(const std::string& key, const std::function<bool(const Entry&)>& accept,
               const Consume& consume, std::chrono::milliseconds timeout, bool to_device = false,
               const Place& place = {});

  /// Reads every key in `keys` straight from its volume's shared memory as
  /// one snapshot (a state dict's manifest and buckets): each key's
  /// location must be cached with its place, on a volume this client has a
  /// ring to, and `accept(i, entry)` must say yes, else nothing is read and
  /// the answer is miss. Every object's tag is checked before any copy and
  /// again after all of them, so a hit means every object was committed
  /// and unchanged from the first copy to the last (docs/internals/data-path-small-ops.md,
  /// "Direct state-dict reads"). `consume(entries, data)` copies every
  /// key's bytes (key i's at data[i], entries[i].nbytes of them),
  /// synchronously, in one batch (CopyEngine::copy_all_here); it may run
  /// and the answer still be stale, so it must only write what the
  /// caller's actor path writes again. Host memory only.
  using ConsumeAll =
      std::function<bool(const std::vector<Entry>&, const std::vector<const std::byte*>&)>;
  Outcome read_together(const std::vector<std::string>& keys,
                        const std::function<bool(std::size_t, const Entry&)>& accept,
                        const ConsumeAll& consume);

  /// A version pointer as read on this thread with no request: the
  /// version it names and its own commit's version (the precondition of
  /// moving it).
  struct Pointer {
    std::uint64_t value = 0;
    std::uint64_t seq = 0;
  };
  /// The pointer `prefix`, when its record is cached and its object on a
  /// same-host volume is still the current one (its tag names it; a
  /// publish clears the old pointer's tag before it returns). The cache
  /// only moves forward, so successive reads never go back a version.
  /// nullopt: not known here (the caller locates it at the controller); a
  /// moved pointer's record is dropped.
  std::optional<Pointer> pointer_here(const std::string& prefix);
  /// For a publisher over a channel that cannot check the tag (tcp): the
  /// pointer `prefix` as this client last saw it (its cached record), not
  /// checked. Moving it from there is a compare-and-set, which another
  /// writer's publish in between refuses. nullopt over a ring (whose
  /// pointer_here is the check) or when nothing is cached.
  std::optional<Pointer> pointer_last_seen(const std::string& prefix) const;

  /// Whether read(key, accept, ...) would try the key now (its location
  /// cached, a channel to its volume, `accept` says yes): a batch checks
  /// every key so before it reads any.
  bool servable(const std::string& key, const std::function<bool(const Entry&)>& accept) const;

  // -- state dicts: written on the caller's thread into staged objects -----

  /// Objects this client's volume staged for a state dict's put: their
  /// sizes and regions, in order. A put whose objects have those sizes
  /// may use them, whatever its keys (a version's keys change).
  struct Staging {
    std::string volume_id;
    std::vector<std::uint64_t> sizes;
    std::vector<wire::RegionRef> regions;
  };
  /// Whether the last put under `under` this client noted had objects of
  /// `sizes` (then its next put's objects are worth staging ahead); notes
  /// this one. The last layouts of 64 keys are remembered.
  bool note_layout(const std::string& under, const std::vector<std::uint64_t>& sizes);
  /// Takes the staging kept for `under`: the taker owns it. nullopt: none.
  std::optional<Staging> take_staging(const std::string& under);
  /// Keeps `s` for the next put under `under`. What it displaces (a
  /// staging kept for that key meanwhile, or the least recently kept of
  /// limits::kStagedAheadCount) is given back to its volume.
  void keep_staging(const std::string& under, Staging s, std::chrono::milliseconds timeout);
  /// Gives `s`'s objects back to their volume over its ring, in requests
  /// of at most fast_get::kMaxCommitRecords objects (stopping at the first
  /// that fails); a volume gone, or a ring failed, has them go with this
  /// client.
  void give_back(const Staging& s, std::chrono::milliseconds timeout);
  /// This client's volume ("" for none yet).
  std::string home() const;
  /// home() (in `*home`) and the transport the caller's thread writes
  /// objects staged on it with: the shm transport of its ring (it maps
  /// them), or the transport of its tcp channel (it sends them); null: no
  /// channel, or none to write with, and then `*may_connect` =
  /// may_connect_home(). All read at once, so a channel another call
  /// opens meanwhile is not taken for one that cannot be opened.
  std::shared_ptr<transports::Transport> home_writer(std::string* home, bool* may_connect) const;
  /// The bytes one message over the channel to `volume_id` takes (0: no
  /// channel); a larger request goes in parts (fast_get::exchange_in_parts),
  /// one round trip each.
  std::size_t request_room(const std::string& volume_id) const;
  /// One request over the channel (ring or tcp) to `volume_id`
  /// (fast_get::CommitRequest: give back, commit, stage): what the volume
  /// did. Over a channel that can send it again (tcp), `req` gets an id.
  /// An error with `*sent` false did nothing (no channel, over
  /// fast_get::kMaxAssembledBytes); with `*refused` it is the volume's
  /// refusal (nothing done). A channel that
  /// fails with the request on its way (a timeout, a reset connection, a
  /// corrupt reply) is dropped, and the request sent again with its id
  /// over a new connection where the channel's transport opens one (tcp):
  /// the volume answers it what it answered the first, or does it now,
  /// once (docs/internals/data-path.md, "A commit sent again"). Else, or when
  /// that fails too, the outcome is unknown: an error with `*sent` set.
  /// Waits at most `timeout` for each.
  Result<protocol::fast_get::CommitDone> commit(const std::string& volume_id,
                                                protocol::fast_get::CommitRequest& req,
                                                std::chrono::milliseconds timeout, bool* sent,
                                                bool* refused);

  Stats stats() const;
  /// put_over_channel counts what it committed: a whole key's put (or a
  /// batch's), or a state dict's or a version's.
  void count_commit(bool whole_key) {
    (whole_key ? puts_ : state_dict_puts_).fetch_add(1, std::memory_order_relaxed);
  }
  /// The client actor counts its lease-free reads (a read without a lease,
  /// checked by the object tags): served, or gone the leased way.
  void count_lease_free(bool served) {
    (served ? lease_free_reads_ : lease_free_stale_).fetch_add(1, std::memory_order_relaxed);
  }

 private:
  struct Channel;
  std::shared_ptr<Channel> channel_of(const std::string& key, Entry* entry) const;
  // The direct read of `entry` (miss: not possible here; stale: the object
  // is no longer there, or changed during the copy).
  Outcome read_direct(const std::string& key, const Entry& entry, Channel& channel,
                      const Consume& consume, bool to_device);
  // The check of `entry` over `channel`, then its bulk read (read()).
  Outcome read_bulk(const std::string& key, const Entry& entry,
                    const std::shared_ptr<Channel>& channel, const Consume& consume,
                    const Place& place, std::chrono::milliseconds timeout);
  void drop_ring(const std::string& volume_id, const std::shared_ptr<Channel>& expected);
  // A request on `channel` failed for `why`: never used again (the volume
  // may still be working on it), dropped, logged unless the volume went.
  // The caller holds the channel's lock.
  void close_failed(const std::string& volume_id, const std::shared_ptr<Channel>& channel,
                    const Status& why);
  // Sends `failed`'s request (an identified commit whose channel failed
  // with it on its way) again over a new connection to `volume_id`, which
  // then serves as its channel: the reply; nullopt when the channel's
  // transport opens none (a ring, actor messages) or it cannot connect.
  std::optional<Result<std::vector<std::byte>>> resend(const std::string& volume_id,
                                                       const Channel& failed,
                                                       std::chrono::milliseconds timeout);

  const std::shared_ptr<LocationCache> cache_;
  // may_connect_home() with mu_ held.
  bool may_connect_home_locked() const;

  mutable std::mutex mu_;  // guards rings_, closed_, home_*, controller_
  std::unordered_map<std::string, std::shared_ptr<Channel>> rings_;
  bool closed_ = false;
  std::string home_;
  std::unordered_set<std::string> failed_;  // channels dropped since take_reopen
  HomeConnector home_connector_;
  Evictor evictor_;
  std::optional<StreamHooks> stream_hooks_;
  std::shared_ptr<const transports::shm::ProcessWatch> controller_;
  struct Kept {
    Staging staging;
    std::uint64_t used = 0;  // recency
  };
  struct Noted {
    std::vector<std::uint64_t> sizes;
    std::uint64_t used = 0;
  };
  // The waiting thread (defer) and its queue.
  void stop_waiting();
  std::mutex jobs_mu_;  // guards what follows
  std::condition_variable jobs_cv_;
  std::deque<std::function<void()>> jobs_;
  bool jobs_stopped_ = false;
  std::thread waiter_;
  std::unordered_map<std::string, Kept> kept_;    // under mu_
  std::unordered_map<std::string, Noted> noted_;  // under mu_
  std::uint64_t clock_ = 0;                       // under mu_
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, stale_{0}, puts_{0}, lease_free_reads_{0},
      lease_free_stale_{0}, direct_reads_{0}, direct_batches_{0}, state_dict_puts_{0},
      resent_commits_{0};
  // Commit ids (fast_get::CommitRequest::id): random high bits, so that two
  // clients' ids differ, and a count.
  std::atomic<std::uint64_t> next_commit_id_;
};

}  // namespace meshstore::client
