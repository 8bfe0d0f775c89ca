#pragma once

// The fast path for small gets and puts (issue 26; docs/architecture.md,
// "The fast path"): a caller's thread reads a small whole object from a
// same-host volume over a shared-memory ring (transports/shm/ring.hpp),
// without any actor, and puts one through its own volume's ring (the
// volume's actor commits it). What it needs lives here, shared by the
// client actor and the Store facade:
// - the client's one location cache (client/location_cache.hpp), shared
//   with the client actor, so a location the actor dropped (a remove, an
//   overwrite by this client, a volume that went down) is gone here before
//   the call that dropped it completes;
// - the rings, one per same-host volume, created by the client actor when
//   it connects to the volume over shm and attached by the volume.
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
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "meshstore/actors/client/location_cache.hpp"
#include "meshstore/actors/internal/fast_get.hpp"
#include "meshstore/dtype.hpp"
#include "meshstore/object_format.hpp"
#include "meshstore/tensor.hpp"
#include "meshstore/wire/records.hpp"

namespace meshstore::transports {
class SmallOps;
class Transport;
namespace shm {
class ProcessWatch;
class Ring;
}  // namespace shm
}  // namespace meshstore::transports

namespace meshstore::actors {

class FastPath {
 public:
  /// Objects the fast path reads at most: what a volume serves over its
  /// rings.
  static constexpr std::uint64_t kMaxBytes = fast_get::kMaxObjectBytes;
  /// Puts at most: over a ring, those larger than a slot go through its
  /// side buffer (1 MiB of /dev/shm per ring, made at the first such put).
  static constexpr std::uint64_t kMaxPutBytes = fast_get::kMaxSideBytes;
  /// Puts from GPU memory at most (a device-to-host copy, then the ring):
  /// larger ones take the actors' one copy from the GPU into the volume's
  /// mapping, which cost less from 512 KiB on on the H200 (docs/gpu.md).
  static constexpr std::uint64_t kMaxDevicePutBytes = std::uint64_t{256} << 10;
  /// Whole keys a direct read copies at most (on the caller's one thread;
  /// larger ones take the actors, whose copy engine splits them).
  static constexpr std::uint64_t kMaxDirectBytes = std::uint64_t{8} << 20;

  /// A cached location of a whole key (the client's one location cache's).
  using Entry = LocationCache::Entry;
  /// Reads and puts through `cache`, the client actor's own.
  explicit FastPath(std::shared_ptr<LocationCache> cache = std::make_shared<LocationCache>())
      : cache_(std::move(cache)) {}
  /// The location cache it reads through.
  LocationCache& cache() const { return *cache_; }
  const std::shared_ptr<LocationCache>& shared_cache() const { return cache_; }
  /// Whether a direct read may copy `entry` into host memory (at most
  /// kMaxDirectBytes) or GPU memory (any size: it is the one host-to-device
  /// copy from the volume's page-locked mapping that the actors' path also
  /// makes, without their round trip; docs/gpu.md, "Whole keys: the fast
  /// path").
  static bool direct_size(const Entry& entry, bool to_device) {
    return to_device || entry.nbytes <= kMaxDirectBytes;
  }
  /// A small put: a whole tensor or object in contiguous host memory.
  struct Put {
    std::string key;
    wire::ObjectKind kind = wire::ObjectKind::tensor;
    DType dtype = DType::uint8;
    Shape shape;
    ObjectFormat format = ObjectFormat::bytes;
    const std::byte* data = nullptr;
    std::uint64_t nbytes = 0;
  };
  /// What a read did.
  enum class Outcome {
    hit,   ///< served: `consume` got the bytes
    miss,  ///< nothing cached, no ring, refused by `accept`, or the ring failed
    stale  ///< the volume no longer holds that object: locate afresh
  };
  struct Stats {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::uint64_t stale = 0;
    std::uint64_t rings = 0;             ///< rings (and tcp channels) open now
    std::uint64_t puts = 0;              ///< puts committed over a ring
    std::uint64_t put_misses = 0;        ///< puts write() sent down the actor path
    std::uint64_t lease_free_reads = 0;  ///< reads served without a lease (count_lease_free)
    std::uint64_t lease_free_stale = 0;  ///< lease-free reads that found their object changing
    std::uint64_t direct_reads = 0;      ///< hits copied straight from shared memory
    std::uint64_t direct_batches = 0;    ///< read_together calls served (one snapshot each)
    std::uint64_t spare_commits = 0;     ///< commit() calls that committed
  };

  // -- the client actor's side --

  /// The volume this client puts to (the strategy's choice), "" for none
  /// yet: puts go over its ring.
  void set_home(const std::string& volume_id);
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
  /// (small_attach). Counted and used like a ring.
  void add_remote(const std::string& volume_id, std::unique_ptr<transports::SmallOps> channel,
                  std::uint64_t token);
  bool has_ring(const std::string& volume_id) const;
  /// Whether write() has a channel to try now (this client's volume has
  /// one): a caller that must first copy a put's bytes to the host asks.
  bool can_put() const;
  /// Closes every ring; later reads miss, and no caller waits for a spare. The
  /// store calls it first when it closes.
  void close();

  // -- the caller's side --

  /// Takes an object's bytes (n == entry.nbytes) where the caller wants
  /// them; false when it could not (a device copy failed): the read is then
  /// a miss, and the actor path writes the destination again and reports.
  using Consume = std::function<bool(const Entry&, const std::byte*, std::size_t)>;

  /// Reads `key` when its location is cached and `accept(entry)` says the
  /// call can be served from it (kind, dtype, shape): straight from the
  /// volume's shared memory where its place is known, else over its
  /// volume's ring (at most kMaxBytes). `consume(entry, data, n)` gets the
  /// object's bytes; a direct read may call it and still answer stale (the
  /// object changed during the copy), so it must only write what the
  /// caller's actor path writes again. `to_device`: consume copies into GPU
  /// memory (a direct read lets the transport page-lock its mapping for
  /// that). Waits for a ring's reply at most `timeout`. One request at a
  /// time per ring.
  Outcome read(const std::string& key, const std::function<bool(const Entry&)>& accept,
               const Consume& consume, std::chrono::milliseconds timeout, bool to_device = false);

  /// Reads every key in `keys` straight from its volume's shared memory as
  /// one snapshot (a state dict's manifest and buckets): each key's
  /// location must be cached with its place, on a volume this client has a
  /// ring to, and `accept(i, entry)` must say yes, else nothing is read and
  /// the answer is miss. Every object's tag is checked before any copy and
  /// again after all of them, so a hit means every object was committed
  /// and unchanged from the first copy to the last (docs/architecture.md,
  /// "Direct state-dict reads"). `consume(i, entry, data, n)` copies key
  /// i's bytes, synchronously (it may split them over the copy engine and
  /// wait); it may run and the answer still be stale, so it must only write
  /// what the caller's actor path writes again. Host memory only.
  using ConsumeAt = std::function<bool(std::size_t, const Entry&, const std::byte*, std::size_t)>;
  Outcome read_together(const std::vector<std::string>& keys,
                        const std::function<bool(std::size_t, const Entry&)>& accept,
                        const ConsumeAt& consume);

  /// Whether read(key, accept, ...) would try the key now (its location
  /// cached, a channel to its volume, `accept` says yes): a batch checks
  /// every key so before it reads any.
  bool servable(const std::string& key, const std::function<bool(const Entry&)>& accept,
                bool to_device = false) const;

  /// Puts `p` over the ring to this client's home volume, which stages it
  /// and commits it at the controller; on success the key's new record is
  /// in the location cache before this returns. A miss (no home ring, too big for a slot, the
  /// volume refused or failed: `*why` says what) means the caller takes the actor path, which
  /// reports any error itself (a full volume evicts there).
  Outcome write(const Put& p, std::chrono::milliseconds timeout, Status* why);

  // -- spares: puts of a state dict into staging made ready for it ----------

  /// Staged objects of a layout this client put before, ready for its next
  /// put (docs/architecture.md, "Spare staging"), which the client actor
  /// put on the shelf so the caller's thread can write and commit them over
  /// the ring ("Puts into a spare over the ring").
  struct Spare {
    std::string volume_id;
    std::vector<std::pair<std::string, std::uint64_t>> layout;  // (key, bytes) per object
    std::vector<wire::RegionRef> regions;
  };
  /// The client actor: shelves `spare` under `under` (a state dict's key);
  /// false once closed (the actor keeps it then).
  bool shelve(const std::string& under, Spare spare);
  /// Takes the spare shelved under `under`: whoever takes it owns it (the
  /// caller's thread for its put, the actor to use or give it back);
  /// nullopt when none. Works after close(), so the actor can still give
  /// shelved spares back.
  std::optional<Spare> unshelve(const std::string& under);
  /// unshelve, waiting until `until` while a spare is expected under
  /// `under` (expect(): being staged), so a put right behind the one
  /// before takes its spare rather than the actors.
  std::optional<Spare> unshelve(const std::string& under,
                                std::chrono::steady_clock::time_point until);
  /// A spare is on its way under `under` (the caller that committed the
  /// last, or the actor staging it); shelve() or unexpect() ends that.
  void expect(const std::string& under);
  void unexpect(const std::string& under);
  /// This client's volume ("" for none yet) and the shm transport its
  /// ring's client writes that volume's memory with (null: none).
  std::string home() const;
  std::shared_ptr<transports::Transport> shm_of(const std::string& volume_id) const;
  /// Commits `req` (records of objects this client staged on `volume_id`
  /// and wrote) over that volume's ring; the versions, one per record.
  /// `*sent`: whether the request went out. An error with `*sent` false
  /// committed nothing (no ring); with `*sent` true and code
  /// Errc::protocol_error, timeout or unavailable from the ring itself the
  /// outcome is unknown (`*lost`), else it is the volume's refusal (nothing
  /// committed). Waits at most `timeout`.
  Result<std::vector<std::uint64_t>> commit(const std::string& volume_id,
                                            const fast_get::CommitRequest& req,
                                            std::chrono::milliseconds timeout, bool* sent,
                                            bool* lost);

  Stats stats() const;
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
  void drop_ring(const std::string& volume_id, const std::shared_ptr<Channel>& expected);
  // A request on `channel` failed for `why`: never used again (the volume
  // may still be working on it), dropped, logged unless the volume went.
  // The caller holds the channel's lock.
  void close_failed(const std::string& volume_id, const std::shared_ptr<Channel>& channel,
                    const Status& why);

  const std::shared_ptr<LocationCache> cache_;
  mutable std::mutex mu_;  // guards rings_, closed_, home_, controller_
  std::unordered_map<std::string, std::shared_ptr<Channel>> rings_;
  bool closed_ = false;
  std::string home_;
  std::shared_ptr<const transports::shm::ProcessWatch> controller_;
  std::unordered_map<std::string, Spare> shelf_;  // under mu_
  std::unordered_set<std::string> expected_;      // under mu_: spares on their way
  std::condition_variable shelf_cv_;              // shelve, unexpect, close
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, stale_{0}, puts_{0}, put_misses_{0},
      lease_free_reads_{0}, lease_free_stale_{0}, direct_reads_{0}, direct_batches_{0},
      spare_commits_{0};
};

}  // namespace meshstore::actors
