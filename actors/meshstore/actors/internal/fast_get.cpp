#include "meshstore/actors/internal/fast_get.hpp"

#include <cstring>

namespace meshstore::actors::fast_get {
namespace {

constexpr std::size_t kRequestHeader = 16;               // magic, key length, object id
constexpr std::size_t kReplyHeader = kReplyHeaderBytes;  // status, reserved

Status bad(const std::string& what) { return Status(Errc::protocol_error, "fast get: " + what); }

}  // namespace

namespace {
constexpr std::size_t kPutHeader = 24;  // magic, key length, kind/dtype/format/dims, nbytes
}  // namespace

std::string side_buffer_name(const std::string& ring_name) { return ring_name + ".put"; }

std::size_t encoded_size(const PutRequest& r) {
  return kPutHeader + (r.expect_version ? 8 : 0) + 8 * r.shape.size() + r.key.size() +
         (r.in_side_buffer ? 0 : r.nbytes);
}

void encode_into(const PutRequest& r, std::vector<std::byte>& out) {
  out.resize(encoded_size(r));
  std::byte* p = out.data();
  const std::uint32_t magic = kPutMagic;
  const auto key_len = static_cast<std::uint32_t>(r.key.size());
  const std::uint8_t small[4] = {r.kind, r.dtype, r.format,
                                 static_cast<std::uint8_t>(r.shape.size())};
  std::memcpy(p, &magic, 4);
  std::memcpy(p + 4, &key_len, 4);
  std::memcpy(p + 8, small, 4);
  const std::uint32_t flags =
      (r.in_side_buffer ? kInSideBuffer : 0) | (r.expect_version ? kExpectVersion : 0);
  std::memcpy(p + 12, &flags, 4);
  std::memcpy(p + 16, &r.nbytes, 8);
  p += kPutHeader;
  if (r.expect_version) {
    std::memcpy(p, &*r.expect_version, 8);
    p += 8;
  }
  if (!r.shape.empty()) std::memcpy(p, r.shape.data(), 8 * r.shape.size());
  p += 8 * r.shape.size();
  if (!r.key.empty()) std::memcpy(p, r.key.data(), r.key.size());
  p += r.key.size();
  if (r.nbytes > 0 && !r.in_side_buffer) std::memcpy(p, r.data, r.nbytes);
}

Result<std::uint32_t> request_magic(const std::vector<std::byte>& bytes) {
  if (bytes.size() < 4) return bad("a request of " + std::to_string(bytes.size()) + " bytes");
  std::uint32_t magic = 0;
  std::memcpy(&magic, bytes.data(), 4);
  return magic;
}

Result<PutRequest> decode_put(const std::vector<std::byte>& bytes) {
  if (bytes.size() < kPutHeader) {
    return bad("a put of " + std::to_string(bytes.size()) + " bytes has no header");
  }
  std::uint32_t magic = 0, key_len = 0, flags = 0;
  std::uint8_t small[4];
  PutRequest r;
  std::memcpy(&magic, bytes.data(), 4);
  std::memcpy(&key_len, bytes.data() + 4, 4);
  std::memcpy(small, bytes.data() + 8, 4);
  std::memcpy(&flags, bytes.data() + 12, 4);
  std::memcpy(&r.nbytes, bytes.data() + 16, 8);
  if (magic != kPutMagic) return bad("not a put request (bad magic)");
  if ((flags & ~(kInSideBuffer | kExpectVersion)) != 0) {
    return bad("unknown put flags " + std::to_string(flags));
  }
  r.in_side_buffer = (flags & kInSideBuffer) != 0;
  const std::size_t expect = (flags & kExpectVersion) != 0 ? 8 : 0;
  if (key_len == 0 || key_len > kMaxKeyBytes) {
    return bad("key length " + std::to_string(key_len) + " is outside [1, " +
               std::to_string(kMaxKeyBytes) + "]");
  }
  const std::size_t dims = small[3];
  if (dims > kMaxPutDims) return bad(std::to_string(dims) + " dimensions");
  if (r.nbytes > (r.in_side_buffer ? kMaxSideBytes : kMaxObjectBytes)) {
    return bad("an object of " + std::to_string(r.nbytes) + " bytes");
  }
  const std::size_t want =
      kPutHeader + expect + 8 * dims + key_len + (r.in_side_buffer ? 0 : r.nbytes);
  if (bytes.size() != want) {
    return bad("a put of " + std::to_string(bytes.size()) + " bytes where its fields say " +
               std::to_string(want));
  }
  r.kind = small[0];
  r.dtype = small[1];
  r.format = small[2];
  r.shape.resize(dims);
  const std::byte* p = bytes.data() + kPutHeader;
  if (expect) {
    std::uint64_t v = 0;
    std::memcpy(&v, p, 8);
    r.expect_version = v;
    p += 8;
  }
  if (dims) std::memcpy(r.shape.data(), p, 8 * dims);
  p += 8 * dims;
  r.key.assign(reinterpret_cast<const char*>(p), key_len);
  r.data = r.in_side_buffer ? nullptr : p + key_len;
  return r;
}

std::vector<std::byte> encode_put_done(const PutDone& d) {
  const std::size_t place = d.place.size() <= kMaxPlaceBytes ? d.place.size() : 0;  // longer: none
  std::vector<std::byte> body(16 + place);
  std::memcpy(body.data(), &d.version, 8);
  std::memcpy(body.data() + 8, &d.object_id, 8);
  if (place > 0) std::memcpy(body.data() + 16, d.place.data(), place);
  return encode(ReplyStatus::ok, body.data(), body.size());
}

std::vector<std::byte> encode_put_error(const Status& s) {
  const auto code = static_cast<std::uint32_t>(s.code());
  std::vector<std::byte> body(4 + s.message().size());
  std::memcpy(body.data(), &code, 4);
  if (!s.message().empty()) std::memcpy(body.data() + 4, s.message().data(), s.message().size());
  return encode(ReplyStatus::error, body.data(), body.size());
}

Result<PutDone> decode_put_reply(const std::vector<std::byte>& bytes) {
  auto status = reply_status(bytes);
  if (!status.ok()) return status.status();
  const std::byte* body = bytes.data() + kReplyHeader;
  const std::size_t n = bytes.size() - kReplyHeader;
  if (*status == ReplyStatus::ok) {
    if (n < 16 || n > 16 + kMaxPlaceBytes) {
      return bad("a put's reply of " + std::to_string(n) + " bytes");
    }
    PutDone d;
    std::memcpy(&d.version, body, 8);
    std::memcpy(&d.object_id, body + 8, 8);
    d.place.assign(reinterpret_cast<const char*>(body + 16), n - 16);
    if (d.version == 0 || d.object_id == 0) return bad("a put's reply without version or object");
    return d;
  }
  if (*status != ReplyStatus::error || n < 4) return bad("a put's reply of an unknown shape");
  std::uint32_t code = 0;
  std::memcpy(&code, body, 4);
  const auto errc = static_cast<Errc>(code);
  if (code == 0 || code > static_cast<std::uint32_t>(kLastErrc)) {
    return bad("a put's error with code " + std::to_string(code));
  }
  return Status(errc, std::string(reinterpret_cast<const char*>(body) + 4, n - 4));
}

void encode_into(const CommitRequest& r, std::vector<std::byte>& out) {
  std::vector<std::string> records;
  records.reserve(r.records.size());
  std::size_t n = 16;
  for (const auto& rec : r.records) {
    records.push_back(wire::encode(rec));
    n += 4 + records.back().size();
  }
  for (const auto& p : r.prefixes) n += 4 + p.size();
  out.resize(n);
  std::byte* at = out.data();
  auto u32 = [&](std::uint32_t v) {
    std::memcpy(at, &v, 4);
    at += 4;
  };
  auto bytes = [&](const std::string& b) {
    u32(static_cast<std::uint32_t>(b.size()));
    if (!b.empty()) std::memcpy(at, b.data(), b.size());
    at += b.size();
  };
  u32(kCommitMagic);
  u32(static_cast<std::uint32_t>(r.records.size()));
  u32(static_cast<std::uint32_t>(r.prefixes.size()));
  u32(0);
  for (const auto& b : records) bytes(b);
  for (const auto& p : r.prefixes) bytes(p);
}

Result<CommitRequest> decode_commit(const std::vector<std::byte>& bytes) {
  if (bytes.size() < 16) {
    return bad("a commit of " + std::to_string(bytes.size()) + " bytes has no header");
  }
  std::uint32_t head[4];
  std::memcpy(head, bytes.data(), 16);
  if (head[0] != kCommitMagic) return bad("not a commit request (bad magic)");
  if (head[1] == 0 || head[1] > kMaxCommitRecords) {
    return bad("a commit of " + std::to_string(head[1]) + " records");
  }
  if (head[2] == 0 || head[2] > kMaxCommitPrefixes) {
    return bad("a commit under " + std::to_string(head[2]) + " prefixes");
  }
  if (head[3] != 0) return bad("a commit with reserved bits set");
  std::size_t at = 16;
  auto next = [&](std::string& out, std::size_t limit) -> Status {
    if (bytes.size() - at < 4) return bad("a commit cut short at byte " + std::to_string(at));
    std::uint32_t len = 0;
    std::memcpy(&len, bytes.data() + at, 4);
    at += 4;
    if (len > limit || len > bytes.size() - at) {
      return bad("a commit field of " + std::to_string(len) + " bytes at byte " +
                 std::to_string(at));
    }
    out.assign(reinterpret_cast<const char*>(bytes.data()) + at, len);
    at += len;
    return Status();
  };
  CommitRequest r;
  r.records.resize(head[1]);
  std::string field;
  for (auto& rec : r.records) {
    MESHSTORE_RETURN_IF_ERROR(next(field, bytes.size()));
    if (auto s = wire::decode(field, rec); !s.ok()) {
      return bad("a commit's record does not decode: " + s.message());
    }
  }
  r.prefixes.resize(head[2]);
  for (auto& p : r.prefixes) {
    MESHSTORE_RETURN_IF_ERROR(next(p, kMaxKeyBytes));
    if (p.empty()) return bad("a commit under an empty prefix");
  }
  if (at != bytes.size()) {
    return bad("a commit of " + std::to_string(bytes.size()) + " bytes where its fields end at " +
               std::to_string(at));
  }
  return r;
}

std::vector<std::byte> encode_commit_done(const std::vector<std::uint64_t>& versions) {
  return encode(ReplyStatus::ok, versions.data(), versions.size() * 8);
}

Result<std::vector<std::uint64_t>> decode_commit_reply(const std::vector<std::byte>& bytes,
                                                       std::size_t records, bool* refused) {
  *refused = false;
  auto status = reply_status(bytes);
  if (!status.ok()) return status.status();
  const std::byte* body = bytes.data() + kReplyHeader;
  const std::size_t n = bytes.size() - kReplyHeader;
  if (*status == ReplyStatus::ok) {
    if (n != records * 8) {
      return bad("a commit's reply of " + std::to_string(n) + " bytes for " +
                 std::to_string(records) + " records");
    }
    std::vector<std::uint64_t> versions(records);
    if (n > 0) std::memcpy(versions.data(), body, n);
    for (auto v : versions) {
      if (v == 0) return bad("a commit's reply with a version 0");
    }
    return versions;
  }
  if (*status != ReplyStatus::error || n < 4) return bad("a commit's reply of an unknown shape");
  std::uint32_t code = 0;
  std::memcpy(&code, body, 4);
  if (code == 0 || code > static_cast<std::uint32_t>(kLastErrc)) {
    return bad("a commit's error with code " + std::to_string(code));
  }
  *refused = true;
  return Status(static_cast<Errc>(code),
                std::string(reinterpret_cast<const char*>(body) + 4, n - 4));
}

std::vector<std::byte> encode(const Request& r) {
  std::vector<std::byte> out;
  encode_into(r, out);
  return out;
}

void encode_into(const Request& r, std::vector<std::byte>& out) {
  out.resize(kRequestHeader + r.key.size());
  const std::uint32_t magic = kRequestMagic;
  const auto key_len = static_cast<std::uint32_t>(r.key.size());
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &key_len, 4);
  std::memcpy(out.data() + 8, &r.object_id, 8);
  if (!r.key.empty()) std::memcpy(out.data() + kRequestHeader, r.key.data(), r.key.size());
}

Result<Request> decode_request(const std::vector<std::byte>& bytes) {
  if (bytes.size() < kRequestHeader) {
    return bad("a request of " + std::to_string(bytes.size()) + " bytes has no header");
  }
  std::uint32_t magic = 0, key_len = 0;
  Request r;
  std::memcpy(&magic, bytes.data(), 4);
  std::memcpy(&key_len, bytes.data() + 4, 4);
  std::memcpy(&r.object_id, bytes.data() + 8, 8);
  if (magic != kRequestMagic) return bad("not a get request (bad magic)");
  if (key_len == 0 || key_len > kMaxKeyBytes) {
    return bad("key length " + std::to_string(key_len) + " is outside [1, " +
               std::to_string(kMaxKeyBytes) + "]");
  }
  if (bytes.size() != kRequestHeader + key_len) {
    return bad("a request of " + std::to_string(bytes.size()) + " bytes for a key of " +
               std::to_string(key_len));
  }
  r.key.assign(reinterpret_cast<const char*>(bytes.data()) + kRequestHeader, key_len);
  return r;
}

std::vector<std::byte> encode(ReplyStatus status, const void* data, std::size_t n) {
  std::vector<std::byte> out(kReplyHeader + n);
  const auto s = static_cast<std::uint32_t>(status);
  std::memcpy(out.data(), &s, 4);
  if (n > 0) std::memcpy(out.data() + kReplyHeader, data, n);
  return out;
}

Result<ReplyStatus> reply_status(const std::vector<std::byte>& bytes) {
  if (bytes.size() < kReplyHeader) {
    return bad("a reply of " + std::to_string(bytes.size()) + " bytes has no header");
  }
  std::uint32_t s = 0;
  std::memcpy(&s, bytes.data(), 4);
  if (s > static_cast<std::uint32_t>(ReplyStatus::error)) {
    return bad("unknown reply status " + std::to_string(s));
  }
  return static_cast<ReplyStatus>(s);
}

Result<Reply> decode_reply(const std::vector<std::byte>& bytes) {
  auto status = reply_status(bytes);
  if (!status.ok()) return status.status();
  Reply r;
  r.status = *status;
  r.bytes.assign(bytes.begin() + kReplyHeader, bytes.end());
  return r;
}

}  // namespace meshstore::actors::fast_get
