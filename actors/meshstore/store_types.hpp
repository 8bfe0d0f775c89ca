#pragma once

// What Store's calls take and answer besides tensors: the options of a
// put and a read, a key's metadata, a stored object, and the operator's
// counters (Store::Admin). Included by meshstore/store.hpp.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/tensor.hpp"
#include "meshstore/tensor_slice.hpp"

namespace meshstore {

/// How get() and get_into() read a key. The defaults read the whole key,
/// by copy, in its stored dtype.
struct ReadOptions {
  /// Read only this box of the key's global tensor (sharded or not), from
  /// the shards that overlap it, each once (docs/sharding.md): get()
  /// answers a tensor of the box's shape, and get_into()'s destination
  /// must have it. Errc::out_of_range when the box is not in the key's
  /// global shape.
  std::optional<TensorSlice> slice;
  /// get_into() only: when the destination's dtype differs from the stored
  /// one, convert the elements on the way, in the same pass as the copy:
  /// between float32 and bfloat16 or float16 (can_cast()), rounded to
  /// nearest even (bit-exact with torch's Tensor.to()). Whole keys (and
  /// state-dict entries) into host memory; a box, a sharded key or a GPU
  /// destination is Errc::unsupported (a dtype_mismatch for state-dict
  /// entries). Without it a dtype difference is Errc::dtype_mismatch.
  bool cast = false;
  /// get() only: read without copying where it can. On a volume this
  /// process reaches through shared memory (the shm transport), the tensor
  /// is a read-only mapping of the stored bytes (Tensor::read_only() is
  /// true; writing through it faults), and it keeps that version pinned in
  /// the volume until its last copy is destroyed, even if the key is
  /// replaced or removed meanwhile (the memory is then freed). Elsewhere,
  /// and for small tensors that travel inline, it is a copy. The tensor may
  /// outlive the store. Not with a slice.
  bool view = false;

  /// Shorthands: get(key, ReadOptions::box(s)), get(key,
  /// ReadOptions::mapped()), get_into(key, dst, ReadOptions::converting()).
  static ReadOptions box(TensorSlice s) {
    ReadOptions o;
    o.slice = std::move(s);
    return o;
  }
  /// Options with `view` set: read without copying where it can.
  static ReadOptions mapped() {
    ReadOptions o;
    o.view = true;
    return o;
  }
  /// Options with `cast` set: convert the dtype on the way.
  static ReadOptions converting() {
    ReadOptions o;
    o.cast = true;
    return o;
  }
};

/// How put() stores a tensor: whole (the default), or as one shard of a
/// sharded key (docs/sharding.md). Every rank puts its own shard; the key
/// becomes visible, with all its shards at once, when they cover the global
/// tensor. Until then exists() is false and get() fails with
/// Errc::partially_committed naming the regions still missing. Ranks
/// disagreeing on the global shape or dtype, and boxes that overlap without
/// being identical, are refused. The next complete set of shards replaces
/// the key as a whole. At most one of `slice` and `placement`.
struct PutOptions {
  /// The tensor is the box `slice` of the key's global tensor
  /// (Placement::slice_for gives a rank's box); its shape must be the
  /// slice's. A box put this way has one copy per version: put it again
  /// before the version is complete and it is refused (replicated boxes:
  /// use `placement`).
  std::optional<TensorSlice> slice;
  /// The tensor is rank `rank`'s shard under `placement` of a tensor of
  /// `global_shape`: its box is placement.slice_for(global_shape, rank),
  /// and it counts as many replicas as ranks hold that box, so the version
  /// commits once every replica is in (a replica put again for the same
  /// version is refused, not taken for the next one).
  std::optional<Placement> placement;
  Shape global_shape;     ///< with `placement`: the key's global shape
  std::int64_t rank = 0;  ///< with `placement`: the putting rank
  /// Volumes that keep this key (1 to 16; 0: the store's
  /// placement.replicas): the put commits once every copy is written.
  /// Copies are of keys put whole: not with `slice` or `placement`.
  std::uint32_t replicas = 0;

  /// Shorthands: put(key, shard, PutOptions::box(s)), put(key, shard,
  /// PutOptions::shard(global_shape, placement, rank)).
  static PutOptions box(TensorSlice s) {
    PutOptions o;
    o.slice = std::move(s);
    return o;
  }
  /// Options putting rank `rank`'s shard under `placement` of a tensor of `global_shape`.
  static PutOptions shard(Shape global_shape, Placement placement, std::int64_t rank) {
    PutOptions o;
    o.placement = std::move(placement);
    o.global_shape = std::move(global_shape);
    o.rank = rank;
    return o;
  }
};

/// A key's metadata, as list() reports it.
struct KeyInfo {
  std::string key;                                   ///< the key's name
  bool is_object = false;                            ///< a byte object (put_object), not a tensor
  ObjectFormat object_format = ObjectFormat::bytes;  ///< an object's format
  DType dtype = DType::uint8;  ///< a tensor's element type (uint8 for an object)
  Shape shape;                 ///< a tensor's global shape (an object's: one dim, its byte count)
  std::uint64_t nbytes = 0;    ///< stored bytes over all shards (one copy of a copied key)
  std::uint64_t version = 0;   ///< store-wide commit sequence number of its current value
  std::size_t shards = 0;      ///< boxes it is stored in (1: whole)
  std::size_t copies = 1;      ///< volumes keeping a whole key (placement.replicas)
};

/// A byte object with its format, as get_stored_object() answers it.
struct StoredObject {
  std::string bytes;                          ///< the object's bytes, as put
  ObjectFormat format = ObjectFormat::bytes;  ///< what the bytes are, as put
};

/// One volume's usage, as stats() reports it.
struct VolumeStats {
  std::string volume_id;             ///< the volume's id
  std::uint64_t bytes_held = 0;      ///< payload bytes in memory, staged and leased included
  std::uint64_t capacity_bytes = 0;  ///< 0 = unlimited
  std::uint64_t objects = 0;         ///< committed objects
  std::uint64_t staged = 0;          ///< objects of puts still in flight
  std::uint64_t leases = 0;          ///< open read leases
  /// Why the volume did not answer ("" when it did; the counts are then
  /// zero): one the controller still lists that is gone or cut off.
  std::string unreachable;
  std::uint64_t evictions = 0;      ///< objects evicted since the volume started
  std::uint64_t evicted_bytes = 0;  ///< their bytes
};

/// Control messages the store's controller has handled since it started:
/// how many round trips to it the calls cost (a state dict's put commits with
/// one notify_put_batch, whatever its size).
struct ControllerCounters {
  std::uint64_t notify_put = 0;        ///< single-key commits (only tests send them)
  std::uint64_t notify_put_batch = 0;  ///< commits of puts, batches, shards and state dicts
  std::uint64_t locate = 0;            ///< lookups of where keys are stored
  std::uint64_t exists = 0;            ///< checks of whether keys exist
  std::uint64_t keys = 0;              ///< listings of the keys under a prefix
  std::uint64_t remove = 0;   ///< remove, remove_batch, replacing a state dict, retiring a version
  std::uint64_t streams = 0;  ///< state dict puts readers could stream
  std::uint64_t stream_readers = 0;     ///< reads that streamed one (overlapping its put)
  std::uint64_t stream_subscribes = 0;  ///< reads that waited for or looked for a stream
  /// Reads that lost the race to a writer (the version they located was
  /// replaced before they opened it) and then located with a pin, which
  /// holds the located version's memory until they have read it.
  std::uint64_t pinned_locates = 0;
};

/// What this process's calls on the caller's thread did: each client keeps
/// a channel to each volume it reaches (a shared-memory ring over shm, a
/// connection of its own over tcp, actor messages over the other
/// transports) and runs calls over it (docs/internals/data-path.md).
struct FastPathStats {
  /// Gets served on the caller's thread: over a ring, or straight from
  /// shared memory (direct_reads).
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;  ///< gets that took the actor path (location unknown, no ring, ...)
  std::uint64_t stale = 0;   ///< gets whose known location was superseded: located afresh
  std::uint64_t rings = 0;   ///< channels open now, one per volume reached: a ring (shm),
                             ///< a tcp connection (tcp), actor messages (other transports)
  /// Puts committed over a channel (a put_batch counts once; a shard of a
  /// sharded key counts as one), and the pointer moves of publishes that
  /// read the pointer through the actors or were staged (stage_publish),
  /// which take the channel from the client's waiting thread.
  std::uint64_t puts = 0;
  /// Reads of objects on a volume of this host whose place this client
  /// knew (its own puts, earlier leases), copied straight from shared
  /// memory without asking the volume, and checked after the copy by the
  /// object's tag (docs/internals/data-path.md, "Lease-free reads").
  std::uint64_t lease_free_reads = 0;
  /// Lease-free reads that found their object replaced, removed or changing:
  /// read again the leased way (never returned).
  std::uint64_t lease_free_stale = 0;
  /// Hits that were lease-free reads on the caller's thread: a whole key,
  /// of any size, whose place this client knew, copied straight out of a
  /// same-host volume's shared memory without a ring or an actor (counted
  /// in lease_free_reads too; docs/internals/data-path-small-ops.md,
  /// "Direct reads").
  std::uint64_t direct_reads = 0;
  /// State-dict reads (StateDicts::get_into and the version reads into
  /// tensors) served the same way as one snapshot, on the caller's thread
  /// (a version read: on the thread that got the pointer's locate):
  /// the manifest and every bucket copied straight out of same-host
  /// volumes' shared memory, checked by their tags before the first copy
  /// and after the last (docs/internals/data-path-small-ops.md, "Direct
  /// state-dict reads").
  std::uint64_t direct_state_dicts = 0;
  /// State dicts committed over a channel: StateDicts::put calls (written
  /// into objects the volume staged for this client, or sent inline),
  /// publishes' versions, each rank's part of StateDicts::put_sharded, and
  /// staged state dicts' commits (docs/internals/data-path-small-ops.md,
  /// "Puts on the caller's thread").
  std::uint64_t state_dict_puts = 0;
  /// Commits sent again, with their ids, over a new connection after
  /// their channel failed with them on their way (tcp): the volume answers
  /// each what it did with the first, or does it then, once
  /// (docs/internals/data-path.md, "A commit sent again").
  std::uint64_t resent_commits = 0;
  /// The channels open now (`rings`), by the transport each serves: "shm"
  /// (a ring), "tcp" (a connection of its own), or another transport's
  /// name (actor messages).
  std::map<std::string, std::uint64_t> channels;
};

}  // namespace meshstore
