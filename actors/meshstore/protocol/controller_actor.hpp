#pragma once

// The controller's typed interface: the store's index. key -> kind, dtype,
// global shape, version and the shards that hold it (volume + object). It
// never touches payload bytes. Every batch commits atomically: one message,
// one handler run, so a reader sees the old complete entry or the new one.

#include <caf/all.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "meshstore/protocol/atoms.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"

namespace meshstore::protocol {

/// A channel's commit from a volume in the controller's process (never
/// serialized: a small put, or a commit request of staged objects), which
/// the controller answers on its own thread: the reply goes straight to
/// the channel, without a hop back through the volume actor. The records
/// commit, and the groups under `prefixes` are replaced in the same step
/// (as replace_atom with reuse). Before `done`, the objects the commit
/// superseded on `volume_id` are retired through `retire` (their tags
/// cleared, gets no longer serve them; false: not all could be, so the
/// controller waits for that volume's flush as it waits for every other
/// volume's).
struct LocalCommit {
  std::vector<wire::KeyRecord> records;
  std::vector<std::string> prefixes;
  // Shards of sharded keys (put_shards_atom's commit), in group `group` of
  // `members` and `layout` where they are a sharded state dict's.
  bool sharded = false;
  std::string group;
  std::vector<std::string> members;
  std::uint64_t layout = 0;
  std::string volume_id;
  std::function<bool(const std::vector<std::uint64_t>&)> retire;
  std::function<void(Result<std::vector<std::uint64_t>>)> done;
};

using controller_actor = caf::typed_actor<
    // A volume joins; the controller tells it about commits and releases.
    // Its committed records (held_records_atom) are taken into the index
    // before the answer: a controller that starts against live volumes
    // rebuilds its index from them (controller/rebuild.cpp).
    caf::replies_to<register_volume_atom, wire::VolumeInfo,
                    storage_volume_actor>::with<caf::ok_atom>,
    // A registering volume's records, a part ahead of its answer to
    // held_records_atom (many records come in parts): its id, the part,
    // the volumes it knows of.
    caf::reacts_to<held_records_atom, std::string, wire::HeldRecords, std::vector<std::string>>,
    // A volume by id (Errc::not_found if unknown).
    caf::replies_to<volume_atom, std::string>::with<wire::VolumeInfo, storage_volume_actor>,
    // Every registered volume.
    caf::replies_to<volumes_atom>::with<std::vector<wire::VolumeInfo>>,
    // Commits one key; answers its new version.
    caf::replies_to<notify_put_atom, wire::KeyRecord>::with<std::uint64_t>,
    // Commits many keys at once (a whole state dict), all or none; answers
    // their versions in order.
    caf::replies_to<notify_put_batch_atom,
                    std::vector<wire::KeyRecord>>::with<std::vector<std::uint64_t>>,
    // The records of these keys; a missing key comes back with version 0.
    caf::replies_to<locate_atom, std::vector<std::string>>::with<std::vector<wire::KeyRecord>>,
    // Like locate, and pins the objects of the keys found: while pinned,
    // an overwrite or remove commits as usual but the volumes are told to
    // release (or discard) those objects only on unpin, or when ttl_ms
    // have passed. A reader starved by writers (every located version
    // replaced before it could open it) locates pinned to make progress.
    // Answers the pin's id (0 when nothing was found to pin).
    caf::replies_to<locate_pinned_atom, std::vector<std::string>,
                    std::uint64_t /*ttl_ms*/>::with<std::uint64_t, std::vector<wire::KeyRecord>>,
    // The version pointer P: its record first (version 0 when P does not
    // exist); then, with the flag, when P names version N (points_to), the
    // records of the state dict P/vN, its manifest first, as one snapshot:
    // the latest version and where it lies in one request.
    caf::replies_to<locate_latest_atom, std::string,
                    bool /*with_version*/>::with<std::vector<wire::KeyRecord>>,
    // Ends a pin (harmless when it has already expired).
    caf::reacts_to<unpin_atom, std::uint64_t>,
    // Eviction (StoreOptions::limits.eviction "lru"): removes the least recently
    // used keys stored whole on the volume, put on their own (not part of
    // a state dict), not pinned and not held by a reader's lease (the
    // volume decides that), until their objects add up to the bytes asked
    // for or none is left. Answers the keys removed.
    caf::replies_to<evict_atom, std::string /*volume*/,
                    std::uint64_t /*bytes*/>::with<std::vector<std::string>>,
    // Keys under a prefix (whole '/'- or '.'-separated components), sorted.
    caf::replies_to<keys_atom, std::string>::with<std::vector<std::string>>,
    // The version of each key, 0 where it does not exist.
    caf::replies_to<exists_atom, std::vector<std::string>>::with<std::vector<std::uint64_t>>,
    // Removes one key; Errc::not_found if it does not exist.
    caf::replies_to<remove_atom, std::string>::with<caf::ok_atom>,
    // Removes keys, ignoring missing ones (listed in the reply).
    caf::replies_to<remove_batch_atom, std::vector<std::string>>::with<wire::RemoveReply>,
    // Commits `records` (all or none, like notify_put_batch; may be empty)
    // and, in the same step, removes every other key of the group P (the
    // state dict whose manifest is P: "P", its packed buckets "P#packed..." and its "P/..." keys,
    // but not keys put on their own under P/) for each P of the list: a
    // state dict replaced as a whole, or a retired version. The volumes release the removed
    // objects for reuse when the flag is true, else discard them. Answers
    // the new versions.
    caf::replies_to<replace_atom, std::vector<wire::KeyRecord>, std::vector<std::string>,
                    bool>::with<std::vector<std::uint64_t>>,
    // Adds shards (one record of one shard each) to their keys' pending
    // versions; a key commits, with all its shards at once, when they cover
    // its global tensor (identical boxes are replicas). Validated as a
    // whole. Answers, per record, the key's new version, or 0 while it is
    // still partial. A partial key is not found by locate, which answers
    // its pending shards (version 0, shards set) so readers can name what
    // is missing.
    // With a group P (else ""): the records are one rank's part of the
    // sharded state dict P, whose keys (`members`, sorted, P among them)
    // commit together once every one is covered, removing the keys P's
    // previous version had and this one has not (as replace_atom does).
    // Every rank names the same members and layout digest, else refused.
    caf::replies_to<put_shards_atom, std::vector<wire::KeyRecord>, std::string,
                    std::vector<std::string>, std::uint64_t>::with<std::vector<std::uint64_t>>,
    // Control messages handled so far, in ControllerCounter order.
    caf::replies_to<counters_atom>::with<std::vector<std::uint64_t>>,
    // The sender (a client) is sent (volume_gone_atom, volume id, reason)
    // for each volume that goes down from now on, until the sender does:
    // a client whose requests wait on a volume in a process it is not
    // connected to learns of its death only so (CAF tells only directly
    // connected nodes), and fails them at once instead of at their timeout.
    caf::reacts_to<watch_volumes_atom>,
    // -- streams: readers copy a state dict while its writer puts it --
    // The sender began writing state dict P: its manifest's bytes, the
    // records its commit will carry (staged objects, not yet filled) and
    // the indices of those already filled. A stream ends when P commits
    // (readers are told), on stream_abort, or when its writer goes down.
    // Answered once open (a writer that commits over a channel waits for it,
    // so its commit cannot overtake the stream).
    caf::replies_to<stream_open_atom, std::string, std::string, std::vector<wire::KeyRecord>,
                    std::vector<std::uint64_t>>::with<caf::ok_atom>,
    // More records of P's stream are filled.
    caf::reacts_to<stream_progress_atom, std::string, std::vector<std::uint64_t>>,
    // P's writer failed before committing: why.
    caf::reacts_to<stream_abort_atom, std::string, std::string>,
    // Subscribes the sender to P, waiting up to wait_ms for P to be written
    // or committed. Answers a StreamKind, with (kind streaming) the manifest,
    // the records and the indices filled so far; from then on the sender
    // gets (stream_event_atom, P, indices filled, StreamEnd, why) messages.
    caf::replies_to<stream_subscribe_atom, std::string, std::uint64_t>::with<
        std::uint32_t, std::string, std::vector<wire::KeyRecord>, std::vector<std::uint64_t>>,
    // A subscription's wait is over (sent by the controller to itself).
    caf::reacts_to<stream_expire_atom, std::string, std::uint64_t>,
    // Commits as notify_put_batch_atom, answering `done` (LocalCommit).
    caf::reacts_to<local_commit_atom, LocalCommit>,
    // A rebuild's deadline (sent by the controller to itself).
    caf::reacts_to<rebuild_end_atom, std::uint64_t>,
    // Its own: make again the next copy a dead volume took (controller/copies.cpp).
    caf::reacts_to<repair_atom>,
    // A client that reconnected after a failover knew these volumes: a
    // controller with an empty index (or rebuilding it) waits for them
    // before it answers a miss (controller/rebuild.cpp).
    caf::reacts_to<expect_volumes_atom, std::vector<std::string>>>;

/// What stream_subscribe answers.
enum class StreamKind : std::uint32_t {
  committed = 0,  ///< P is committed and not being written: read it as usual
  streaming = 1,  ///< P is being written: follow the events
  absent = 2,     ///< nothing happened to P within the wait
};

/// How a stream ended, in stream_event messages.
enum class StreamEnd : std::uint32_t { none = 0, committed = 1, aborted = 2 };

/// What the controller counts (indices into counters_atom's reply).
enum class ControllerCounter : std::size_t {
  notify_put = 0,
  notify_put_batch,
  locate,
  exists,
  keys,
  remove,            // remove, remove_batch, and the removals of a replace
  streams,           // puts announced as streams (stream_open)
  stream_readers,    // readers that followed a stream instead of waiting for its commit
  stream_subscribe,  // stream_subscribe messages
  pinned_locate,     // locates that pinned what they found (starved readers)
  count_
};

}  // namespace meshstore::protocol

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(meshstore::protocol::LocalCommit)
