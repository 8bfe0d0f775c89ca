#pragma once
// The fast path's protocol over a shared-memory ring (issue 26;
// transports/shm/ring.hpp). Gets: a client asks a same-host volume for a
// small committed object by id and key, and the volume's small-op service
// (actors/volume/small_ops.hpp) answers from its small-object table without
// going through the volume actor. Puts (below): the service hands the
// object to the volume actor, which commits it and answers. Private to
// actors/; docs/architecture.md, "The fast path for small gets and puts",
// describes the whole path.
//
// Get request:  u32 magic, u32 key length, u64 object id, key bytes.
// Reply:        u32 status, u32 reserved, then the object's bytes (ok) or
//               a message (error); "stale" carries nothing.
// Every field read from the ring is validated: a malformed message is an
// Errc::protocol_error, never a read out of bounds.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshstore/actors/internal/limits.hpp"
#include "meshstore/result.hpp"
#include "meshstore/wire/records.hpp"

namespace meshstore::actors::fast_get {

inline constexpr std::uint32_t kRequestMagic = 0x3147534d;  // "MSG1", little-endian
inline constexpr std::uint32_t kMaxKeyBytes = 4096;
/// Objects served over a ring at most (a ring slot holds the reply).
inline constexpr std::uint64_t kMaxObjectBytes = limits::kRingReadBytes;

struct Request {
  std::uint64_t object_id = 0;
  std::string key;
};

enum class ReplyStatus : std::uint32_t {
  ok = 0,     ///< the object's bytes follow
  stale = 1,  ///< no committed object of that id and key here: locate again
  error = 2,  ///< the request was refused; a message follows
};

struct Reply {
  ReplyStatus status = ReplyStatus::ok;
  std::vector<std::byte> bytes;  ///< ok: the object; error: the message
};

// -- puts (issue 26) --------------------------------------------------------
//
// Put request: u32 magic "MSP1", u32 key length, u8 kind, u8 dtype,
//              u8 object format, u8 dims, u32 flags, u64 nbytes,
//              i64 x dims (shape), key bytes, the object's bytes (the
//              whole request fits one ring slot or tcp request; a larger
//              put is staged and committed: CommitRequest). With flag 1
//              (kExpectVersion) a u64 follows the header, before the
//              shape: the version the key must be at for the put to
//              commit (KeyRecord::expect_version).
//              No other flag is defined.
// Put reply:   the reply header (status), then ok: u64 version, u64 object
//              id, then the object's shm place (the rest, at most
//              kMaxPlaceBytes; none when the volume has no shm);
//              error: u32 Errc, then a message.
// The volume's small-op service hands a decoded put to the volume actor, which
// stages it and commits it at the controller as stage_commit does.

inline constexpr std::uint32_t kPutMagic = 0x3150534d;  // "MSP1", little-endian
inline constexpr std::size_t kMaxPutDims = 64;
inline constexpr std::uint32_t kExpectVersion = 1;

struct PutRequest {
  std::string key;
  std::uint8_t kind = 0;    ///< wire::ObjectKind
  std::uint8_t dtype = 0;   ///< meshstore::DType
  std::uint8_t format = 0;  ///< meshstore::ObjectFormat
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;  ///< encode: the bytes; decode: inside the message
  std::uint64_t nbytes = 0;
  /// Commits only while the key is at this version (0: absent).
  std::optional<std::uint64_t> expect_version;
};

/// The size of PutRequest `r`'s message (what must fit a ring slot).
std::size_t encoded_size(const PutRequest& r);
/// Encodes `r` into `out` (resized), reusing its memory.
void encode_into(const PutRequest& r, std::vector<std::byte>& out);
/// The first word of a request: which request it is.
Result<std::uint32_t> request_magic(const std::vector<std::byte>& bytes);
/// A put request inside `bytes` (its `data` points into them).
/// Errc::protocol_error naming what is wrong; the enum fields are checked by
/// the volume, which knows their ranges.
Result<PutRequest> decode_put(const std::vector<std::byte>& bytes);

inline constexpr std::size_t kMaxPlaceBytes = 1024;

struct PutDone {
  std::uint64_t version = 0;
  std::uint64_t object_id = 0;
  std::string place;  ///< the shm transport's description of its region ("" none)
};
std::vector<std::byte> encode_put_done(const PutDone& d);
/// An error reply of a put: the Errc and the message.
std::vector<std::byte> encode_put_error(const Status& s);
/// A put's reply: what it committed, or the volume's error (any Errc the
/// volume gave, so the caller can tell a full volume from a refusal).
/// Errc::protocol_error for a malformed reply.
Result<PutDone> decode_put_reply(const std::vector<std::byte>& bytes);

// -- staging and commits (issue 48) ---------------------------------------
//
// A client writes a state dict into objects this volume staged for it and
// commits them over the ring, on its caller's thread (docs/architecture.md,
// "Data path"). One request does what that put needs of the volume:
// gives back staged objects the client no longer wants, commits records of
// objects it staged here and wrote (the volume actor asks the controller's
// replace_atom, the keys under the prefixes replaced), and stages objects
// for the client's next put (after the commit, so they may land in the
// memory the commit retired). Each part may be empty.
// Request: u32 magic "MSC2", u32 records, u32 prefixes, u32 releases,
//          u32 stages, u32 zero; then per record u32 length + its encoding
//          (wire::encode); per prefix u32 length + its bytes; per release
//          a u64 object id; per stage a u64 size, u32 key length, key bytes.
//          Prefixes come with records only, at most kMaxCommitPrefixes.
// Reply:   the reply header, then ok: u64 version per record, u32 staged
//          objects (all that were asked for, or none when the volume had
//          no room after a commit), then per object u64 id, u64 size,
//          u32 length + its shm place; error: u32 Errc, then a message.
//          An error commits nothing and stages nothing; what the request
//          gives back goes unless it was malformed (protocol_error).
inline constexpr std::uint32_t kCommitMagic = 0x3243534d;  // "MSC2", little-endian
inline constexpr std::uint32_t kMaxCommitRecords = 4096;
inline constexpr std::uint32_t kMaxCommitPrefixes = 16;
/// One object to stage: the key it will hold (for messages) and its size.
struct StageSpec {
  std::string key;
  std::uint64_t nbytes = 0;
  bool operator==(const StageSpec& o) const { return key == o.key && nbytes == o.nbytes; }
};
struct CommitRequest {
  std::vector<wire::KeyRecord> records;
  std::vector<std::string> prefixes;
  std::vector<std::uint64_t> release;
  std::vector<StageSpec> stage;
};
/// Encodes `r` into `out` (resized).
void encode_into(const CommitRequest& r, std::vector<std::byte>& out);
/// Errc::protocol_error naming what is wrong (sizes, counts, a record that
/// does not decode, a key or prefix out of bounds, nothing asked).
Result<CommitRequest> decode_commit(const std::vector<std::byte>& bytes);
/// What the volume did: a version per record, and the objects it staged.
struct CommitDone {
  std::vector<std::uint64_t> versions;
  std::vector<wire::RegionRef> staged;  ///< id, size and the "shm" place each
};
/// The size of `d`'s reply (what must fit a ring slot).
std::size_t encoded_size(const CommitDone& d);
std::vector<std::byte> encode_commit_done(const CommitDone& d);
/// What the volume did for a request of `records` records and `stages`
/// stages, or its error (any Errc it gave: `*refused` is then set);
/// Errc::protocol_error for a malformed reply.
Result<CommitDone> decode_commit_reply(const std::vector<std::byte>& bytes, std::size_t records,
                                       std::size_t stages, bool* refused);

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

}  // namespace meshstore::actors::fast_get
