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

std::size_t encoded_size(const PutRequest& r) {
  return kPutHeader + (r.expect_version ? 8 : 0) + 8 * r.shape.size() + r.key.size() + r.nbytes;
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
  const std::uint32_t flags = r.expect_version ? kExpectVersion : 0;
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
  if (r.nbytes > 0) std::memcpy(p, r.data, r.nbytes);
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
  if ((flags & ~kExpectVersion) != 0) {
    return bad("unknown put flags " + std::to_string(flags));
  }
  const std::size_t expect = (flags & kExpectVersion) != 0 ? 8 : 0;
  if (key_len == 0 || key_len > kMaxKeyBytes) {
    return bad("key length " + std::to_string(key_len) + " is outside [1, " +
               std::to_string(kMaxKeyBytes) + "]");
  }
  const std::size_t dims = small[3];
  if (dims > kMaxPutDims) return bad(std::to_string(dims) + " dimensions");
  if (r.nbytes > kMaxObjectBytes) {
    return bad("an object of " + std::to_string(r.nbytes) + " bytes");
  }
  const std::size_t want = kPutHeader + expect + 8 * dims + key_len + r.nbytes;
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
  r.data = p + key_len;
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

namespace {

// Appends fixed-size words and length-prefixed bytes to a message.
struct Writer {
  std::vector<std::byte>& out;
  void raw(const void* p, std::size_t n) {
    const auto at = out.size();
    out.resize(at + n);
    if (n > 0) std::memcpy(out.data() + at, p, n);
  }
  void u32(std::uint32_t v) { raw(&v, 4); }
  void u64(std::uint64_t v) { raw(&v, 8); }
  void bytes(const std::string& b) {
    u32(static_cast<std::uint32_t>(b.size()));
    raw(b.data(), b.size());
  }
};

// Reads them back, bounds-checked: each failure names what and where.
struct Reader {
  const std::vector<std::byte>& in;
  std::size_t at;
  const char* what;
  Status cut() const { return bad(std::string(what) + " cut short at byte " + std::to_string(at)); }
  Status raw(void* p, std::size_t n) {
    if (in.size() - at < n) return cut();
    if (n > 0) std::memcpy(p, in.data() + at, n);
    at += n;
    return Status();
  }
  Status u32(std::uint32_t& v) { return raw(&v, 4); }
  Status u64(std::uint64_t& v) { return raw(&v, 8); }
  Status bytes(std::string& out, std::size_t limit) {
    std::uint32_t len = 0;
    MESHSTORE_RETURN_IF_ERROR(u32(len));
    if (len > limit || len > in.size() - at) {
      return bad(std::string(what) + " field of " + std::to_string(len) + " bytes at byte " +
                 std::to_string(at));
    }
    out.assign(reinterpret_cast<const char*>(in.data()) + at, len);
    at += len;
    return Status();
  }
  Status end() const {
    if (at == in.size()) return Status();
    return bad(std::string(what) + " of " + std::to_string(in.size()) +
               " bytes where its fields end at " + std::to_string(at));
  }
};

}  // namespace

void encode_into(const CommitRequest& r, std::vector<std::byte>& out) {
  out.clear();
  Writer w{out};
  w.u32(kCommitMagic);
  w.u32(static_cast<std::uint32_t>(r.records.size()));
  w.u32(static_cast<std::uint32_t>(r.prefixes.size()));
  w.u32(static_cast<std::uint32_t>(r.release.size()));
  w.u32(static_cast<std::uint32_t>(r.stage.size()));
  w.u32(0);
  for (const auto& rec : r.records) w.bytes(wire::encode(rec));
  for (const auto& p : r.prefixes) w.bytes(p);
  for (auto id : r.release) w.u64(id);
  for (const auto& s : r.stage) {
    w.u64(s.nbytes);
    w.bytes(s.key);
  }
}

Result<CommitRequest> decode_commit(const std::vector<std::byte>& bytes) {
  if (bytes.size() < 24) {
    return bad("a commit of " + std::to_string(bytes.size()) + " bytes has no header");
  }
  std::uint32_t head[6];
  std::memcpy(head, bytes.data(), 24);
  if (head[0] != kCommitMagic) return bad("not a commit request (bad magic)");
  if (head[1] > kMaxCommitRecords || head[3] > kMaxCommitRecords || head[4] > kMaxCommitRecords) {
    return bad("a commit of " + std::to_string(head[1]) + " records, " + std::to_string(head[3]) +
               " releases and " + std::to_string(head[4]) + " stages");
  }
  if ((head[1] == 0 && head[2] != 0) || head[2] > kMaxCommitPrefixes) {
    return bad("a commit of " + std::to_string(head[1]) + " records under " +
               std::to_string(head[2]) + " prefixes");
  }
  if (head[1] == 0 && head[3] == 0 && head[4] == 0) return bad("a commit that asks nothing");
  if (head[5] != 0) return bad("a commit with reserved bits set");
  Reader r{bytes, 24, "a commit"};
  CommitRequest out;
  out.records.resize(head[1]);
  std::string field;
  for (auto& rec : out.records) {
    MESHSTORE_RETURN_IF_ERROR(r.bytes(field, bytes.size()));
    if (auto s = wire::decode(field, rec); !s.ok()) {
      return bad("a commit's record does not decode: " + s.message());
    }
  }
  out.prefixes.resize(head[2]);
  for (auto& p : out.prefixes) {
    MESHSTORE_RETURN_IF_ERROR(r.bytes(p, kMaxKeyBytes));
    if (p.empty()) return bad("a commit under an empty prefix");
  }
  out.release.resize(head[3]);
  for (auto& id : out.release) {
    MESHSTORE_RETURN_IF_ERROR(r.u64(id));
    if (id == 0) return bad("a release of object 0");
  }
  out.stage.resize(head[4]);
  for (auto& s : out.stage) {
    MESHSTORE_RETURN_IF_ERROR(r.u64(s.nbytes));
    MESHSTORE_RETURN_IF_ERROR(r.bytes(s.key, kMaxKeyBytes));
  }
  MESHSTORE_RETURN_IF_ERROR(r.end());
  return out;
}

namespace {
const std::string& shm_place(const wire::RegionRef& region) {
  static const std::string kNone;
  auto it = region.described.find("shm");
  return it == region.described.end() ? kNone : it->second;
}
}  // namespace

std::size_t encoded_size(const CommitDone& d) {
  std::size_t n = kReplyHeader + d.versions.size() * 8 + 4;
  for (const auto& r : d.staged) n += 20 + shm_place(r).size();
  return n;
}

std::vector<std::byte> encode_commit_done(const CommitDone& d) {
  std::vector<std::byte> out;
  out.reserve(encoded_size(d));
  Writer w{out};
  w.u32(static_cast<std::uint32_t>(ReplyStatus::ok));
  w.u32(0);
  for (auto v : d.versions) w.u64(v);
  w.u32(static_cast<std::uint32_t>(d.staged.size()));
  for (const auto& r : d.staged) {
    w.u64(r.region_id);
    w.u64(r.nbytes);
    w.bytes(shm_place(r));
  }
  return out;
}

Result<CommitDone> decode_commit_reply(const std::vector<std::byte>& bytes, std::size_t records,
                                       std::size_t stages, bool* refused) {
  *refused = false;
  auto status = reply_status(bytes);
  if (!status.ok()) return status.status();
  const std::byte* body = bytes.data() + kReplyHeader;
  const std::size_t n = bytes.size() - kReplyHeader;
  if (*status == ReplyStatus::ok) {
    Reader r{bytes, kReplyHeader, "a commit's reply"};
    CommitDone d;
    d.versions.resize(records);
    for (auto& v : d.versions) {
      MESHSTORE_RETURN_IF_ERROR(r.u64(v));
      if (v == 0) return bad("a commit's reply with a version 0");
    }
    std::uint32_t staged = 0;
    MESHSTORE_RETURN_IF_ERROR(r.u32(staged));
    if (staged != 0 && staged != stages) {
      return bad("a commit's reply with " + std::to_string(staged) + " objects staged of " +
                 std::to_string(stages));
    }
    d.staged.resize(staged);
    for (auto& region : d.staged) {
      MESHSTORE_RETURN_IF_ERROR(r.u64(region.region_id));
      MESHSTORE_RETURN_IF_ERROR(r.u64(region.nbytes));
      std::string place;
      MESHSTORE_RETURN_IF_ERROR(r.bytes(place, kMaxPlaceBytes));
      if (region.region_id == 0 || place.empty()) {
        return bad("a commit's reply with a staged object without id or place");
      }
      region.described.emplace("shm", std::move(place));
    }
    MESHSTORE_RETURN_IF_ERROR(r.end());
    return d;
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
