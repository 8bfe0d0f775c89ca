#pragma once
// The fast path's protocol over a shared-memory ring (issue 26;
// transports/shm/ring.hpp). Gets: a client asks a same-host volume for a
// small committed object by id and key, and the volume's small-op service
// (volume/small_ops.hpp) answers from its small-object table without
// going through the volume actor. Puts are commit requests (below): the
// service hands them to the volume actor, which commits them and answers.
// Private to actors/; docs/internals/data-path.md, "Data path", and
// docs/internals/data-path-small-ops.md describe the whole path.
//
// Get request:  u32 magic, u32 key length, u64 object id, key bytes.
// Reply:        u32 status, u32 reserved, then the object's bytes (ok) or
//               a message (error); "stale" carries nothing.
// Check:        a get request under kCheckMagic, for an object larger than
//               one message: "ok" carries nothing, and says the object is
//               committed under that key, current and in host memory, so
//               the client reads it with the transport's bulk read (by its
//               id, which is its region's); "stale" as for a get.
// Every field read from the ring is validated: a malformed message is an
// Errc::protocol_error, never a read out of bounds.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshstore/protocol/limits.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/status.hpp"

namespace meshstore::protocol::fast_get {

inline constexpr std::uint32_t kRequestMagic = 0x3147534d;  // "MSG1", little-endian
inline constexpr std::uint32_t kCheckMagic = 0x314b534d;    // "MSK1", little-endian
inline constexpr std::uint32_t kMaxKeyBytes = 4096;
/// Objects served over a ring at most (a ring slot holds the reply).
inline constexpr std::uint64_t kMaxObjectBytes = limits::kRingReadBytes;

struct Request {
  std::uint64_t object_id = 0;
  std::string key;
  bool check = false;  ///< a check (kCheckMagic): no bytes in the reply
};

enum class ReplyStatus : std::uint32_t {
  ok = 0,     ///< the object's bytes follow
  stale = 1,  ///< no committed object of that id and key here: locate again
  error = 2,  ///< the request was refused; a message follows
  more = 3,   ///< a part of a reply larger than a message (below)
};

struct Reply {
  ReplyStatus status = ReplyStatus::ok;
  std::vector<std::byte> bytes;  ///< ok: the object; error: the message
};

/// The first word of a request: which request it is (kRequestMagic,
/// kCheckMagic, kCommitMagic or kPartMagic).
Result<std::uint32_t> request_magic(const std::vector<std::byte>& bytes);

inline constexpr std::size_t kMaxPlaceBytes = 1024;

/// An error reply of a commit: the Errc and the message.
std::vector<std::byte> encode_error(const Status& s);

// -- puts: staging and commits (issue 48) ---------------------------------
//
// Every put over a channel is one commit request, on the caller's thread
// (docs/internals/data-path-small-ops.md, "Puts on the caller's thread"). A record's object
// either came with the request (its bytes inline: a put that fits one
// request; the volume stages the object and copies them in) or is one this
// volume staged for the client, which wrote it. One request does what a
// put needs of the volume: gives back staged objects the client no longer
// wants, commits the records (at the controller, the keys under the
// prefixes replaced), and stages objects for the client's next put. Each
// part may be empty.
// Request: u32 magic "MSC4", u32 records, u32 prefixes, u32 releases,
//          u32 stages, u32 flags; then per record u32 length + its encoding
//          (wire::encode), u32 flags, and with flag 1 (kInlineObject) u64
//          n + the object's n bytes (its shard names volume, not object);
//          per prefix u32 length + its bytes; per release a u64 object id;
//          per stage a u64 size, i32 device (-1: host memory), u32 key
//          length, key bytes. Prefixes come
//          with records only, at most kMaxCommitPrefixes. With flag 1
//          (kShardedCommit): the records are shards of sharded keys (the
//          controller's put_shards; no prefixes), and after the stages
//          come the group (u32 length + bytes, "" none), u64 layout, u32
//          members and each u32 length + its key. With flag 2
//          (kIdentifiedCommit) a u64 commit id (not 0) follows the header:
//          the volume answers a request sent again with an id it has seen
//          (its channel failed with the first on its way) what it answered
//          the first, and does it once.
// Reply:   the reply header, then ok: u64 version per record, u32 objects
//          placed (one per record sent inline), each u64 id + u32 length
//          + its shm place ("" when the volume has no shm); u32 staged
//          objects (all that were asked for, or none when the volume had
//          no room after a commit), then per object u64 id, u64 size, i32
//          device (-1: host memory), u32 descriptions, each u32 length
//          + its transport's name and u32 length + its description;
//          error: u32 Errc, then a message.
//          An error commits nothing and stages nothing; what the request
//          gives back goes unless it was malformed (protocol_error).
inline constexpr std::uint32_t kCommitMagic = 0x3443534d;  // "MSC4", little-endian
inline constexpr std::uint32_t kInlineObject = 1;          ///< a record's flag
inline constexpr std::uint32_t kShardedCommit = 1;         ///< a request's flag
inline constexpr std::uint32_t kIdentifiedCommit = 2;      ///< a request's flag
inline constexpr std::uint32_t kMaxCommitRecords = std::uint32_t{1} << 20;
inline constexpr std::uint32_t kMaxCommitPrefixes = 16;
inline constexpr std::int32_t kMaxDevices = 1024;  ///< a stage's device is below it
/// One object to stage: the key it will hold (for messages), its size, and
/// the volume's GPU to hold it (cuda-ipc; -1: host memory).
struct StageSpec {
  std::string key;
  std::uint64_t nbytes = 0;
  std::int32_t device = -1;
  bool operator==(const StageSpec& o) const {
    return key == o.key && nbytes == o.nbytes && device == o.device;
  }
};
struct CommitRequest {
  std::vector<wire::KeyRecord> records;
  /// Per record, or empty when none is: the bytes of a record's object
  /// when they come inline (encode: the caller's; decode: inside the
  /// message, valid as long as it is).
  std::vector<std::optional<std::string_view>> inlined;
  std::vector<std::string> prefixes;
  std::vector<std::uint64_t> release;
  std::vector<StageSpec> stage;
  /// Shards of sharded keys, committed as put_shards commits them: each
  /// key once its shards cover it, a group's members all at once.
  bool sharded = false;
  std::string group;
  std::uint64_t layout = 0;
  std::vector<std::string> members;
  /// The commit's id, chosen by its client (0: none): a request sent again
  /// with it is answered as the first was, not done twice.
  std::uint64_t id = 0;
};
/// Encodes `r` into `out` (resized).
void encode_into(const CommitRequest& r, std::vector<std::byte>& out);
/// Errc::protocol_error naming what is wrong (sizes, counts, a record that
/// does not decode, a key or prefix out of bounds, nothing asked).
Result<CommitRequest> decode_commit(const std::vector<std::byte>& bytes);
/// What the volume did: a version per record, and the objects it staged.
struct CommitDone {
  std::vector<std::uint64_t> versions;
  /// The objects staged for the records sent inline, in order.
  struct Placed {
    std::uint64_t object_id = 0;
    std::string place;  ///< the shm transport's description ("" none)
  };
  std::vector<Placed> placed;
  /// Id, size and each transport's description (the writer's own).
  std::vector<wire::RegionRef> staged;
};
/// The size of `d`'s reply (what must fit a ring slot).
std::size_t encoded_size(const CommitDone& d);
std::vector<std::byte> encode_commit_done(const CommitDone& d);
/// What the volume did for a request of `records` records (`inlined` of
/// them inline) and `stages` stages, or its error (any Errc it gave:
/// `*refused` is then set); Errc::protocol_error for a malformed reply.
/// Every version is non-zero, except a `sharded` request's keys that wait
/// for more shards.
Result<CommitDone> decode_commit_reply(const std::vector<std::byte>& bytes, std::size_t records,
                                       std::size_t inlined, std::size_t stages, bool* refused,
                                       bool sharded = false);

// -- requests and replies larger than one message ------------------------
//
// A channel carries messages of a bounded size (a ring slot, a tcp small
// op). A request larger than that travels in parts: u32 magic "MSPT", u32
// flags (kPartFirst on the first, kPartLast on the last), then its next
// bytes. The volume answers each part but the last with an empty ok, and
// serves the request once the last arrives, as if it had come whole. A
// reply larger than a message comes back the same way: the reply header
// with status `more` (its second word 1 on the last part), then its next
// bytes; the client asks for each next part with a part of flag
// kPartFetch and no bytes. How bytes travel, not a route: the request and
// its reply are the same either way. Parts assemble to at most
// kMaxAssembledBytes; a channel carries one request at a time, so its
// parts never interleave.
inline constexpr std::uint32_t kPartMagic = 0x5450534d;  // "MSPT", little-endian
inline constexpr std::uint32_t kPartFirst = 1;
inline constexpr std::uint32_t kPartLast = 2;
inline constexpr std::uint32_t kPartFetch = 4;
inline constexpr std::size_t kPartHeaderBytes = 8;
inline constexpr std::size_t kMaxAssembledBytes = std::size_t{64} << 20;

/// Sends one message of `n` bytes at `p` and answers its reply; `*sent`
/// false when it certainly did not leave.
using ExchangeOne =
    std::function<Result<std::vector<std::byte>>(const std::byte* p, std::size_t n, bool* sent)>;

/// Sends the `n`-byte request at `request` with `one`, whose messages
/// take at most `message` bytes: whole when it fits, else in parts; and
/// answers its reply, assembled when it came in parts. `*sent` (when
/// given) is false when the request certainly did not reach the volume
/// (a part before the last failed, or the last did not leave): then
/// nothing of it was served. Errc::unsupported when the request is over
/// kMaxAssembledBytes (nothing sent); Errc::protocol_error for parts that
/// do not fit together.
Result<std::vector<std::byte>> exchange_in_parts(const std::byte* request, std::size_t n,
                                                 std::size_t message, const ExchangeOne& one,
                                                 bool* sent = nullptr);

/// A volume's end of one channel's parts: the request being assembled and
/// the reply being fetched (thread-safe; one request at a time per
/// channel).
class PartAssembly {
 public:
  /// `bytes` is a part (its magic kPartMagic). Answers the reply to send
  /// for it, or nullopt for the last part of a request, which it moves to
  /// `*whole`, to be served as one. A part that is malformed, or that
  /// takes the request over kMaxAssembledBytes, drops what was assembled
  /// and is answered a protocol_error.
  std::optional<std::vector<std::byte>> take(const std::vector<std::byte>& bytes,
                                             std::vector<std::byte>* whole);
  /// `reply` to send over a channel of `message`-byte messages: itself
  /// when it fits, else its first part, the rest kept for the client's
  /// fetches (a reply over kMaxAssembledBytes is answered as an error).
  /// A reply abandoned part way is dropped at the next one.
  std::vector<std::byte> first_part(std::vector<std::byte> reply, std::size_t message);

 private:
  std::mutex mu_;
  std::vector<std::byte> in_;   // the request's parts so far
  std::vector<std::byte> out_;  // the reply being fetched
  std::size_t out_at_ = 0;      // what of it was sent
  std::size_t message_ = 0;     // the channel's message size (from first_part)
};

std::vector<std::byte> encode(const Request& r);
/// encode() into `out` (resized), reusing its memory.
void encode_into(const Request& r, std::vector<std::byte>& out);
/// Errc::protocol_error naming what is wrong (size, magic, key length).
Result<Request> decode_request(const std::vector<std::byte>& bytes);

/// A reply's header; the object's bytes or the message follow it.
inline constexpr std::size_t kReplyHeaderBytes = 8;

std::vector<std::byte> encode(ReplyStatus status, const void* data, std::size_t n);
/// A reply's status, its payload being the bytes after kReplyHeaderBytes.
/// Errc::protocol_error as decode_reply.
Result<ReplyStatus> reply_status(const std::vector<std::byte>& bytes);
/// Errc::protocol_error for a reply too short or of an unknown status.
Result<Reply> decode_reply(const std::vector<std::byte>& bytes);

}  // namespace meshstore::protocol::fast_get
