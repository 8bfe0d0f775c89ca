#pragma once
// The controller actor's state (its index, pending sharded puts, streams and
// pins), shared by the files that implement the controller: controller.cpp
// (the behaviour), controller/sharded_puts.cpp, controller/volumes.cpp and
// controller/streams.cpp. Private to actors/.
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "meshstore/logging.hpp"
#include "meshstore/protocol/controller_actor.hpp"

namespace meshstore::controller {

// A key's committed record in the index, with what only the controller
// keeps about it. Derived rather than wrapped so that the index's records
// pass as wire::KeyRecord wherever one is read (a reply copies the record
// part alone).
struct IndexEntry : wire::KeyRecord {
  // Eviction's recency: the use tick of the key's last commit or locate
  // here (reads a client serves from its location cache do not count).
  // Kept in the entry, not in a map of its own: a million keys would pay
  // a second copy of each key and a hash node (about 75 bytes a key).
  std::uint64_t last_used = 0;

  IndexEntry& operator=(const wire::KeyRecord& r) {
    wire::KeyRecord::operator=(r);
    return *this;
  }
  IndexEntry& operator=(wire::KeyRecord&& r) {
    wire::KeyRecord::operator=(std::move(r));
    return *this;
  }
};

// A rebuild of the index from the records its volumes keep
// (controller/rebuild.cpp): a controller that starts against live volumes
// takes each one's records as it registers.
struct Rebuild {
  // A version of a key some volume reported, newest so far, waiting until
  // every volume its shards name reported it too (and, for a state dict,
  // until every key its commit wrote is complete).
  struct Candidate {
    wire::KeyRecord record;
    std::set<std::string> reported_by;
  };
  // While on, commits and a locate that misses a key wait; it ends when
  // every volume the reporting ones knew of has reported and no record
  // waits for a volume, or at its deadline.
  bool active = false;
  std::uint64_t epoch = 0;  // the deadline's (a deadline of an ended rebuild is stale)
  std::chrono::steady_clock::time_point began{};
  std::set<std::string> reported;  // volumes that reported their records
  // Volumes whose records come in parts and whose last part has not come:
  // nothing waits on them as finished until it does.
  std::set<std::string> reporting;
  std::set<std::string> expected;  // volumes the reporting ones knew of
  // A standby took over a store that existed (ControllerOptions::took_over)
  // and no volume of it has reported yet (one that keeps records, or knew
  // volumes not registered here).
  bool awaits_old_volume = false;
  std::map<std::string, Candidate> candidates;
  // A volume registering after the index was written to again: the keys
  // its records restored so far (its parts come one by one), which a
  // newer version among its own records may still replace.
  std::map<std::string, std::unordered_set<std::string>> late_keys;
  std::uint64_t restored = 0;  // keys restored so far
  // Volumes a deadline gave up that have not registered since: a key the
  // index misses may have been on them (KeyRecord::maybe_lost_on).
  std::set<std::string> given_up;
};

struct ControllerState {
  static inline const char* name = "meshstore.controller";

  // How long a rebuild waits for the volumes its records name.
  std::chrono::milliseconds rebuild_grace{2000};
  Rebuild rebuild;
  // Copies of whole keys (StoreOptions::placement.replicas;
  // controller/copies.cpp).
  struct Copies {
    std::uint32_t wanted = 1;         // volumes that keep each whole key
    bool per_key = false;             // a put asked for copies itself (PutOptions::replicas)
    double repair_share = 0.25;       // of the time making copies again may take
    std::size_t next_target = 0;      // where the next choice of volumes starts
    std::deque<std::string> repairs;  // keys short of copies, oldest first
    std::set<std::string> queued;     // the keys in `repairs`
    bool repairing = false;           // a repair or its pause is under way
    std::uint64_t repaired = 0;       // copies made again
    // Copy requests under way, by token: each ends itself when the
    // volume named (its source or target) went down.
    std::map<std::uint64_t, std::function<void(const std::string&)>> in_flight;
    std::uint64_t next_batch = 1;
  } copies;

  std::map<std::string, IndexEntry> index;  // ordered: keys(prefix) is a range scan
  std::vector<wire::VolumeInfo> volume_infos;
  // Registered volume `id`'s description, or null.
  const wire::VolumeInfo* info_of(const std::string& id) const {
    for (const auto& v : volume_infos) {
      if (v.volume_id == id) return &v;
    }
    return nullptr;
  }
  std::unordered_map<std::string, protocol::storage_volume_actor> volumes;
  std::map<caf::actor_addr, std::string> volume_by_addr;  // monitored volumes
  // Keys whose volume died, with that volume's id, until put or removed again.
  std::map<std::string, std::string> lost;
  std::uint64_t last_version = 0;  // store-wide commit sequence
  std::uint64_t use_tick = 0;      // IndexEntry::last_used's clock
  void touch(IndexEntry& entry) { entry.last_used = ++use_tick; }
  // Sharded keys whose shards do not cover their tensor yet: the shards so
  // far (adopted by their volumes, so no reclaim takes them).
  std::map<std::string, wire::KeyRecord> pending;
  // Sharded state dicts being put, by manifest key: the keys that commit
  // together (sorted) and the digest of the layout every rank computed.
  // Their keys' shards are in `pending` (record group = the manifest key).
  struct Group {
    std::vector<std::string> members;
    std::uint64_t layout = 0;
  };
  std::map<std::string, Group> groups;
  // State dicts being written, by manifest key, and readers waiting for
  // one to be written or committed.
  struct Stream {
    caf::actor_addr writer;
    std::string manifest;
    std::vector<wire::KeyRecord> records;
    std::vector<std::uint64_t> filled;
    std::set<caf::actor_addr> readers;
  };
  using SubscribeReply =
      caf::typed_response_promise<std::uint32_t, std::string, std::vector<wire::KeyRecord>,
                                  std::vector<std::uint64_t>>;
  struct Waiter {
    std::uint64_t id = 0;
    caf::actor_addr reader;
    SubscribeReply reply;
  };
  std::map<std::string, Stream> streams;
  std::map<std::string, std::vector<Waiter>> waiters;
  std::uint64_t next_waiter = 1;
  std::set<caf::actor_addr> writers;                      // monitored stream writers
  std::map<caf::actor_addr, caf::actor> volume_watchers;  // monitored clients
  std::set<std::string> dead_volumes;                     // ids of volumes that went down
  // Pinned locates: objects a starved reader is about to open. Their
  // release (or discard) is held back until every pin on them ends.
  using ObjectRef = std::pair<std::string, std::uint64_t>;  // volume id, object id
  std::map<std::uint64_t, std::vector<ObjectRef>> pins;
  std::map<ObjectRef, std::uint32_t> pinned;  // pins per object
  std::map<ObjectRef, bool> held_back;        // object -> discard (else release)
  std::uint64_t next_pin = 1;
  // Volumes told to release or discard objects by the message being
  // handled, with those objects (send_to_volumes adds only registered
  // volumes, and no volume goes within a handler); a write answers only
  // once they confirmed (answer_after_flush).
  std::map<std::string, std::vector<std::uint64_t>> flush_due;
  // The keys the message being handled wrote (committed or removed): a
  // write is settled once the volumes it told confirmed, and until then
  // no reader hears of it (after_flush, answer_settled;
  // docs/internals/actors.md, "Readers wait for the same flushes").
  std::vector<std::string> written;
  // A write's keys are changed now: clears flush_due and written.
  void begin_write() {
    flush_due.clear();
    written.clear();
  }
  // Writes not settled yet: the volumes not heard from, the earlier writes
  // of the same keys not settled yet (`before`), the writer's answer (sent
  // once there are none, or only `unwaited` is left), and what waits for
  // this one to settle (later writes of its keys, and reads of them).
  // An earlier write left waiting only for `unwaited`'s flush does not
  // hold the answer (`answer_before` does not count it): that volume
  // handles what it was told before it relays this answer.
  struct FlushWait {
    std::set<std::string> volumes;
    std::string unwaited;
    std::size_t before = 0;
    std::size_t answer_before = 0;
    std::vector<std::string> keys;
    std::function<void()> answer;
    std::vector<std::function<void()>> then;
  };
  std::map<std::uint64_t, FlushWait> flushes;
  std::uint64_t next_flush = 1;
  // Keys whose last write is not settled, and that write (a flushes token).
  std::unordered_map<std::string, std::uint64_t> unsettled;
  std::vector<std::uint64_t> counters =
      std::vector<std::uint64_t>(static_cast<std::size_t>(protocol::ControllerCounter::count_), 0);
  void count(protocol::ControllerCounter c) { ++counters[static_cast<std::size_t>(c)]; }
  std::shared_ptr<spdlog::logger> log = log::get("controller");
};

using controller_pointer = protocol::controller_actor::stateful_pointer<ControllerState>;

/// How long a write waits for a volume to confirm a flush before it
/// settles anyway (a volume that is alive but stuck; one that dies counts
/// at once), and a joining volume has to tell its records.
inline constexpr auto kFlushTimeout = std::chrono::seconds(10);

/// Adds the object ids of `r`'s shards to `out`, by volume.
void collect(const wire::KeyRecord& r, std::map<std::string, std::vector<std::uint64_t>>& out);

// A record names volume `id`, which is not registered: Errc::unavailable
// when it went down (a writer that staged on it just before), else
// Errc::not_found. `ctx` names the call.
Status unknown_volume(const ControllerState& st, const std::string& ctx, const std::string& id);

// -- sharded puts (controller/sharded_puts.cpp) --------------------------------

/// Elements the distinct boxes of `shards` cover, counting only boxes that
/// have all their replicas (identical boxes count once).
std::int64_t covered_elements(const std::vector<wire::ShardRecord>& shards);
/// Checks one shard of a sharded put against the pending shards of its key.
Status validate_shard(const ControllerState& st,
                      const std::map<std::string, wire::KeyRecord>& pending,
                      const wire::KeyRecord& r);
/// Adds a validated shard to its key's pending set.
void add_shard(std::map<std::string, wire::KeyRecord>& pending, const wire::KeyRecord& r);
/// Checks a put_shards call's state dict (group): every rank names the same
/// keys and computed the same layout, and every record belongs to it.
Status validate_group(const ControllerState& st, const std::vector<wire::KeyRecord>& records,
                      const std::string& group, const std::vector<std::string>& members,
                      std::uint64_t layout);
/// True when `key`'s pending shards cover its tensor with all replicas.
bool pending_complete(const ControllerState& st, const std::string& key);
/// What the sharded state dict `group` being put still waits for, as seen
/// from its key `key`.
std::string group_progress(const ControllerState& st, const std::string& group,
                           const std::string& key);
/// Drops `key`'s pending shards, and with them the rest of its state dict's
/// group, collecting their objects; false when it has none.
bool drop_pending(ControllerState& st, const std::string& key,
                  std::map<std::string, std::vector<std::uint64_t>>& objects);

// -- volumes (controller/volumes.cpp) -----------------------------------------

// What a volume is told about some of its objects.
enum class Verdict { commit, release, discard };

/// Tells each volume which of its objects a commit adopted or dropped
/// (release: superseded, the memory may serve the next version) or a
/// remove dropped (discard: the memory goes back at once). A release or
/// discard of a pinned object is held back until its pins end.
void send_to_volumes(controller_pointer self,
                     const std::map<std::string, std::vector<std::uint64_t>>& by_volume,
                     Verdict verdict);
/// Runs `answer` once the write being handled is settled: every volume
/// in `due` confirmed a flush (it handled what the write told it:
/// release or discard objects), and every earlier write of the keys it
/// wrote (ControllerState::written) settled. Until then, a reader whose
/// cached location names a superseded or removed object could still read
/// it at its volume, so no reader hears of the write (after_settled)
/// and the writer has no answer.
/// The answer need not wait for volume `unwaited` (the sender of the
/// write, which hears of it before the answer), though readers do.
void after_flush(controller_pointer self,
                 const std::map<std::string, std::vector<std::uint64_t>>& due,
                 std::function<void()> answer, const std::string& unwaited = {});
/// Whether a write of a key of `records` is not settled yet.
bool settling(const ControllerState& st, const std::vector<wire::KeyRecord>& records);
/// Runs `then` once every write of the keys of `records` not settled yet
/// is (at once when none is).
void after_settled(controller_pointer self, const std::vector<wire::KeyRecord>& records,
                   std::function<void()> then);
/// One volume confirmed the flush of write `token` (or went down, which
/// makes its objects unreadable too); the write settles once every volume
/// has.
void flushed(controller_pointer self, std::uint64_t token, const std::string& volume_id);
/// Ends pin `id`: objects no other pin holds and whose release was held
/// back go to their volumes now.
void unpin(controller_pointer self, std::uint64_t id);
/// Eviction: the least recently used keys stored whole (one object) on
/// `volume_id`, put on their own and not pinned, offered to the volume in
/// that order; the volume drops those no reader's lease holds until
/// `bytes` are freed, and their keys are removed. Answers the keys removed.
caf::result<std::vector<std::string>> evict(controller_pointer self, const std::string& volume_id,
                                            std::uint64_t bytes);
/// A volume went down: its bytes are gone, so are the keys it held.
void volume_down(controller_pointer self, const caf::down_msg& msg);
// -- commits and removals (controller/commits.cpp) ----------------------------

/// Whether whole-key `records` are a commit already applied, sent again
/// (its answer was lost: a channel that failed, a failover): each names, as
/// its first shard, the object its key's entry names now (an object id is
/// never reused on its volume), with the same pointer. nullopt when none
/// does: a new commit. Else the answer: their versions, or Errc::conflict
/// when only some do (it was applied, and others wrote some of its keys
/// since). Nothing is applied again, released or copied either way.
std::optional<Result<std::vector<std::uint64_t>>> resent(
    const ControllerState& st, const std::vector<wire::KeyRecord>& records);
/// Commits whole-key `records` (validated as a whole, each against its
/// expect_version, then applied as a whole): a version each.
Result<std::vector<std::uint64_t>> commit_batch(controller_pointer self,
                                                const std::vector<wire::KeyRecord>& records);
/// One sharded put's shards (or a sharded state dict's, as group `group`
/// of `members`, `layout`): each key its shards now cover commits (a
/// group's all at once). A version per record: 0 for a key still waiting.
Result<std::vector<std::uint64_t>> put_shards(controller_pointer self,
                                              const std::vector<wire::KeyRecord>& records,
                                              const std::string& group,
                                              const std::vector<std::string>& members,
                                              std::uint64_t layout);
/// Removes the keys of the groups under `prefixes` that `records` (just
/// committed) did not write.
void replace_groups(controller_pointer self, const std::vector<wire::KeyRecord>& records,
                    const std::vector<std::string>& prefixes, Verdict verdict = Verdict::release);
/// The keys of the state dict P (its manifest, buckets and entries) for
/// each P of `prefixes`, except `kept`.
std::vector<std::string> group_keys(const ControllerState& st,
                                    const std::vector<std::string>& prefixes,
                                    const std::set<std::string>& kept);
/// The keys that go with `key` when it is removed (a manifest's group, a
/// version pointer's versions with theirs).
std::vector<std::string> written_with(const ControllerState& st, const std::string& key);
/// Drops `keys` from the index; their objects go into `released`.
wire::RemoveReply drop_keys(ControllerState& st, const std::vector<std::string>& keys,
                            std::map<std::string, std::vector<std::uint64_t>>& released);
/// Removes `keys`; the volumes free the objects (discard)
/// or keep their memory for the next version (release). With `whole`, a
/// state dict's manifest among them takes the keys written with it along;
/// the reply counts only `keys`.
wire::RemoveReply remove_keys(controller_pointer self, const std::vector<std::string>& keys,
                              Verdict verdict, bool whole = false);

/// Tells the volumes in other processes which volumes `joined` the store
/// and which `left` it (one that joins hears of every volume): a
/// controller rebuilding the index waits for the volumes they knew.
void tell_peers(controller_pointer self, const std::vector<std::string>& joined,
                const std::vector<std::string>& left);

/// Registers volume `v` described by `info`, monitored; an empty or taken
/// id is refused.
Status register_volume(controller_pointer self, const wire::VolumeInfo& info,
                       protocol::storage_volume_actor v);

// -- copies of whole keys (controller/copies.cpp) ------------------------------

/// The volumes that are to keep whole key `r` (its own count, else the store's).
std::uint32_t copies_wanted(const ControllerState& st, const wire::KeyRecord& r);
/// Whether a commit of `records` must wait for copies: one of them is a
/// whole key stored once that wants more, and another volume could take one.
bool wants_copies(const ControllerState& st, const std::vector<wire::KeyRecord>& records);
/// Has volumes that hold no copy copy each whole key of `records` that
/// wants more copies (other hosts first), then calls `done` with the
/// records naming every copy (each with its `copies`); or with the first
/// failure, every copy made discarded.
void make_copies(controller_pointer self, std::vector<wire::KeyRecord> records,
                 std::function<void(Result<std::vector<wire::KeyRecord>>)> done);
/// Volume `dead` went down: when `entry` has copies elsewhere, its copy
/// there leaves the record, the key is queued for repair, and true.
bool keep_copies(ControllerState& st, IndexEntry& entry, const std::string& dead);
/// Queues the keys of `committed` (index entries a commit just wrote)
/// that got fewer copies than they want (a target failed), and repairs.
void note_thin(controller_pointer self, const std::vector<IndexEntry*>& committed);
/// Queues every whole key with fewer copies than it wants (a volume
/// joined, an index was rebuilt) and starts repairing.
void queue_thin_keys(controller_pointer self);
/// Makes the copies of the next queued key again, unless a repair runs.
void repair_next(controller_pointer self);
/// A repair's pause is over: the next one starts.
void repair_due(controller_pointer self);
/// Discards the copies `records` name beyond their first shard (a commit
/// that failed after make_copies made them).
void discard_copies(controller_pointer self, const std::vector<wire::KeyRecord>& records);
/// Volume `id` went down: the copies under way from it or onto it end
/// (from it: the write fails; onto it: the key commits with one copy
/// fewer, made again later).
void copies_lost_volume(controller_pointer self, const std::string& id);

/// Tells the volumes their part of committed `records` (index entries):
/// the objects they back, and, to a volume in another process, the
/// records to keep beside them, which it confirms before the write is
/// answered (flush_due): an acknowledged commit is on every volume it
/// names that outlives this process.
void send_commits(controller_pointer self, const std::vector<IndexEntry*>& records);

// -- rebuilding the index (controller/rebuild.cpp) ----------------------------

/// Volume `volume_id`, just registered, keeps `records`: what is newer than
/// the index and complete (every shard's volume reported it; a state
/// dict's whole commit; a version pointer's version) goes into the index.
/// `peers` are the volumes it knew of: the rebuild waits for them too.
/// Many records come in parts: `last` is false for each but the last, and
/// a part begins (or keeps alive) a rebuild of an empty index, which waits
/// for the volume's last part before anything waiting for it is decided.
void take_records(controller_pointer self, const std::string& volume_id,
                  std::vector<wire::KeyRecord> records, const std::vector<std::string>& peers,
                  bool last = true);
/// Registers volume `v` and takes the records it keeps into the index
/// (take_records), then answers; a volume that does not tell them within
/// the flush bound joins with none.
caf::result<caf::ok_atom> join_volume(controller_pointer self, const wire::VolumeInfo& info,
                                      protocol::storage_volume_actor v);
/// A part of registering volume `id`'s records, ahead of its answer to
/// held_records: taken as it comes, from that volume only.
void take_part(controller_pointer self, const std::string& id, wire::HeldRecords& records,
               const std::vector<std::string>& peers);
/// A client that reconnected to this controller knew volumes `ids`: while
/// the index is empty or being rebuilt, nothing is answered "no such key"
/// until they reported (or the deadline), since they may hold it.
void expect_volumes(controller_pointer self, const std::vector<std::string>& ids);
/// The rebuild's deadline `epoch` passed: what still waits for a volume is
/// dropped (its keys lost, naming that volume) and what waited runs.
void end_rebuild(controller_pointer self, std::uint64_t epoch);
/// A standby's controller starts: until a volume of the store it took over
/// reports, what a rebuild holds back waits (ControllerOptions::took_over).
void await_old_volumes(controller_pointer self);

// -- streams (controller/streams.cpp) -----------------------------------------

/// What a subscription to a stream answers: its kind (StreamKind), and
/// while it streams its manifest, records and the objects filled so far.
using SubscribeReply = caf::result<std::uint32_t, std::string, std::vector<wire::KeyRecord>,
                                   std::vector<std::uint64_t>>;

/// The sender begins writing `key` as a stream (a newer write ends the
/// older one's); readers waiting for it follow it from now.
void open_stream(controller_pointer self, const std::string& key, std::string manifest,
                 std::vector<wire::KeyRecord> records, std::vector<std::uint64_t> filled);
/// The writer filled `filled` of `key`'s objects: its readers are told.
void stream_progress(controller_pointer self, const std::string& key,
                     const std::vector<std::uint64_t>& filled);
/// The writer of `key`'s stream gave up (`why`); another sender's abort is
/// ignored.
void abort_stream(controller_pointer self, const std::string& key, const std::string& why);
/// The sender follows `key`: its stream now, its committed value, or,
/// with `wait_ms`, a stream that begins within that many milliseconds.
SubscribeReply subscribe(controller_pointer self, const std::string& key, std::uint64_t wait_ms);
/// Waiter `id` of `key` waited its time: it hears that nothing streams.
void expire_waiter(controller_pointer self, const std::string& key, std::uint64_t id);

/// Ends `key`'s stream, telling its readers how.
void end_stream(controller_pointer self, const std::string& key, protocol::StreamEnd end,
                const std::string& why);
/// Tells `reader` of `key`'s stream: objects filled, or how it ended.
void send_event(controller_pointer self, const caf::actor_addr& reader, const std::string& key,
                const std::vector<std::uint64_t>& filled, protocol::StreamEnd end,
                const std::string& why);
/// `key` committed: its stream ends, and readers waiting for it read it.
void streams_committed(controller_pointer self, const std::string& key);
/// A stream writer went down before committing: its streams are aborted;
/// false when `msg` is not of a writer.
bool writer_down(controller_pointer self, const caf::down_msg& msg);

}  // namespace meshstore::controller
