#pragma once
// The fast path's get protocol over a shared-memory ring (issue 26;
// transports/shm/ring.hpp): a client asks a same-host volume for a small
// committed object by id and key, and the volume's ring thread answers from
// its small-object table without going through the volume actor. Private to
// actors/. docs/architecture.md, "Not yet", describes the whole path; the
// volume side is built, the client side is not.
//
// Request:  u32 magic, u32 key length, u64 object id, key bytes.
// Reply:    u32 status, u32 reserved, then the object's bytes (ok) or a
//           message (error); "stale" carries nothing.
// Every field read from the ring is validated: a malformed message is an
// Errc::protocol_error, never a read out of bounds.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "meshstore/result.hpp"

namespace meshstore::actors::fast_get {

inline constexpr std::uint32_t kRequestMagic = 0x3147534d;  // "MSG1", little-endian
inline constexpr std::uint32_t kMaxKeyBytes = 4096;
/// Objects served over a ring at most (a ring slot holds the reply).
inline constexpr std::uint64_t kMaxObjectBytes = 60 << 10;

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
