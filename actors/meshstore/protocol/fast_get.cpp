#include "meshstore/protocol/fast_get.hpp"

#include <algorithm>
#include <cstring>

namespace meshstore::protocol::fast_get {
namespace {

constexpr std::size_t kRequestHeader = 16;               // magic, key length, object id
constexpr std::size_t kReplyHeader = kReplyHeaderBytes;  // status, reserved

Status bad(const std::string& what) { return Status(Errc::protocol_error, "fast get: " + what); }

}  // namespace

Result<std::uint32_t> request_magic(const std::vector<std::byte>& bytes) {
  if (bytes.size() < 4) return bad("a request of " + std::to_string(bytes.size()) + " bytes");
  std::uint32_t magic = 0;
  std::memcpy(&magic, bytes.data(), 4);
  return magic;
}

std::vector<std::byte> encode_error(const Status& s) {
  const auto code = static_cast<std::uint32_t>(s.code());
  std::vector<std::byte> body(4 + s.message().size());
  std::memcpy(body.data(), &code, 4);
  if (!s.message().empty()) std::memcpy(body.data() + 4, s.message().data(), s.message().size());
  return encode(ReplyStatus::error, body.data(), body.size());
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
  w.u32((r.sharded ? kShardedCommit : 0) | (r.id != 0 ? kIdentifiedCommit : 0));
  if (r.id != 0) w.u64(r.id);
  for (std::size_t i = 0; i < r.records.size(); ++i) {
    w.bytes(wire::encode(r.records[i]));
    const auto* bytes = i < r.inlined.size() && r.inlined[i] ? &*r.inlined[i] : nullptr;
    w.u32(bytes ? kInlineObject : 0);
    if (!bytes) continue;
    w.u64(bytes->size());
    w.raw(bytes->data(), bytes->size());
  }
  for (const auto& p : r.prefixes) w.bytes(p);
  for (auto id : r.release) w.u64(id);
  for (const auto& s : r.stage) {
    w.u64(s.nbytes);
    w.u32(static_cast<std::uint32_t>(s.device));
    w.bytes(s.key);
  }
  if (!r.sharded) return;
  w.bytes(r.group);
  w.u64(r.layout);
  w.u32(static_cast<std::uint32_t>(r.members.size()));
  for (const auto& m : r.members) w.bytes(m);
}

namespace {

// A commit's header: its magic, counts within bounds, known flags.
Status check_commit_header(const std::uint32_t (&head)[6]) {
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
  if ((head[5] & ~(kShardedCommit | kIdentifiedCommit)) != 0) {
    return bad("a commit with unknown flags");
  }
  const bool sharded = (head[5] & kShardedCommit) != 0;
  if (sharded && (head[1] == 0 || head[2] != 0)) {
    return bad("a sharded commit of " + std::to_string(head[1]) + " records under " +
               std::to_string(head[2]) + " prefixes");
  }
  return Status();
}

// The commit's records, each with its object's bytes when they came inline
// (views into `bytes`).
Status decode_records(Reader& r, const std::vector<std::byte>& bytes, CommitRequest& out) {
  std::string field;
  for (auto& rec : out.records) {
    MESHSTORE_RETURN_IF_ERROR(r.bytes(field, bytes.size()));
    if (auto s = wire::decode(field, rec); !s.ok()) {
      return bad("a commit's record does not decode: " + s.message());
    }
    std::uint32_t flags = 0;
    MESHSTORE_RETURN_IF_ERROR(r.u32(flags));
    if ((flags & ~kInlineObject) != 0) {
      return bad("a commit's record of '" + rec.key + "' with unknown flags " +
                 std::to_string(flags));
    }
    if (flags == 0) continue;
    std::uint64_t n = 0;
    MESHSTORE_RETURN_IF_ERROR(r.u64(n));
    if (n > kMaxObjectBytes || n > bytes.size() - r.at) {
      return bad("a commit's object of " + std::to_string(n) + " bytes inline for '" + rec.key +
                 "'");
    }
    out.inlined.resize(out.records.size());
    out.inlined[static_cast<std::size_t>(&rec - out.records.data())] =
        std::string_view(reinterpret_cast<const char*>(bytes.data()) + r.at, n);
    r.at += n;
  }
  return Status();
}

// What follows the records: prefixes, releases, stages and a sharded
// commit's group.
Status decode_rest(Reader& r, CommitRequest& out) {
  for (auto& p : out.prefixes) {
    MESHSTORE_RETURN_IF_ERROR(r.bytes(p, kMaxKeyBytes));
    if (p.empty()) return bad("a commit under an empty prefix");
  }
  for (auto& id : out.release) {
    MESHSTORE_RETURN_IF_ERROR(r.u64(id));
    if (id == 0) return bad("a release of object 0");
  }
  for (auto& s : out.stage) {
    MESHSTORE_RETURN_IF_ERROR(r.u64(s.nbytes));
    std::uint32_t device = 0;
    MESHSTORE_RETURN_IF_ERROR(r.u32(device));
    s.device = static_cast<std::int32_t>(device);
    if (s.device < -1 || s.device >= kMaxDevices) {
      return bad("a stage on device " + std::to_string(s.device));
    }
    MESHSTORE_RETURN_IF_ERROR(r.bytes(s.key, kMaxKeyBytes));
  }
  if (!out.sharded) return Status();
  MESHSTORE_RETURN_IF_ERROR(r.bytes(out.group, kMaxKeyBytes));
  MESHSTORE_RETURN_IF_ERROR(r.u64(out.layout));
  std::uint32_t members = 0;
  MESHSTORE_RETURN_IF_ERROR(r.u32(members));
  if (members > kMaxCommitRecords || (members == 0) != out.group.empty()) {
    return bad("a sharded commit of group '" + out.group + "' with " + std::to_string(members) +
               " members");
  }
  out.members.resize(members);
  for (auto& m : out.members) MESHSTORE_RETURN_IF_ERROR(r.bytes(m, kMaxKeyBytes));
  return Status();
}

}  // namespace

Result<CommitRequest> decode_commit(const std::vector<std::byte>& bytes) {
  if (bytes.size() < 24) {
    return bad("a commit of " + std::to_string(bytes.size()) + " bytes has no header");
  }
  std::uint32_t head[6];
  std::memcpy(head, bytes.data(), 24);
  MESHSTORE_RETURN_IF_ERROR(check_commit_header(head));
  Reader r{bytes, 24, "a commit"};
  CommitRequest out;
  if ((head[5] & kIdentifiedCommit) != 0) {
    MESHSTORE_RETURN_IF_ERROR(r.u64(out.id));
    if (out.id == 0) return bad("a commit identified as 0");
  }
  out.records.resize(head[1]);
  MESHSTORE_RETURN_IF_ERROR(decode_records(r, bytes, out));
  out.prefixes.resize(head[2]);
  out.release.resize(head[3]);
  out.stage.resize(head[4]);
  out.sharded = (head[5] & kShardedCommit) != 0;
  MESHSTORE_RETURN_IF_ERROR(decode_rest(r, out));
  MESHSTORE_RETURN_IF_ERROR(r.end());
  return out;
}

namespace {
// A staged object's descriptions travel for every transport of its volume
// (the channel's client writes it with its own), at most this many.
constexpr std::uint32_t kMaxDescriptions = 16;
}  // namespace

std::size_t encoded_size(const CommitDone& d) {
  std::size_t n = kReplyHeader + d.versions.size() * 8 + 8;
  for (const auto& p : d.placed) n += 12 + p.place.size();
  for (const auto& r : d.staged) {
    n += 24;
    for (const auto& [name, desc] : r.described) n += 8 + name.size() + desc.size();
  }
  return n;
}

std::vector<std::byte> encode_commit_done(const CommitDone& d) {
  std::vector<std::byte> out;
  out.reserve(encoded_size(d));
  Writer w{out};
  w.u32(static_cast<std::uint32_t>(ReplyStatus::ok));
  w.u32(0);
  for (auto v : d.versions) w.u64(v);
  w.u32(static_cast<std::uint32_t>(d.placed.size()));
  for (const auto& p : d.placed) {
    w.u64(p.object_id);
    w.bytes(p.place);
  }
  w.u32(static_cast<std::uint32_t>(d.staged.size()));
  for (const auto& r : d.staged) {
    w.u64(r.region_id);
    w.u64(r.nbytes);
    w.u32(static_cast<std::uint32_t>(r.device));
    w.u32(static_cast<std::uint32_t>(r.described.size()));
    for (const auto& [name, desc] : r.described) {
      w.bytes(name);
      w.bytes(desc);
    }
  }
  return out;
}

Result<CommitDone> decode_commit_reply(const std::vector<std::byte>& bytes, std::size_t records,
                                       std::size_t inlined, std::size_t stages, bool* refused,
                                       bool sharded) {
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
      // A shard's key that still waits for other shards has none yet.
      if (v == 0 && !sharded) return bad("a commit's reply with a version 0");
    }
    std::uint32_t placed = 0;
    MESHSTORE_RETURN_IF_ERROR(r.u32(placed));
    if (placed != inlined) {
      return bad("a commit's reply placing " + std::to_string(placed) + " objects of " +
                 std::to_string(inlined) + " sent inline");
    }
    d.placed.resize(placed);
    for (auto& p : d.placed) {
      MESHSTORE_RETURN_IF_ERROR(r.u64(p.object_id));
      MESHSTORE_RETURN_IF_ERROR(r.bytes(p.place, kMaxPlaceBytes));
      if (p.object_id == 0) return bad("a commit's reply placing an object without id");
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
      std::uint32_t device = 0, described = 0;
      MESHSTORE_RETURN_IF_ERROR(r.u32(device));
      MESHSTORE_RETURN_IF_ERROR(r.u32(described));
      region.device = static_cast<std::int32_t>(device);
      if (region.region_id == 0 || described > kMaxDescriptions || region.device < -1 ||
          region.device >= kMaxDevices) {
        return bad("a commit's reply with a staged object without id, on device " +
                   std::to_string(region.device) + ", or with " + std::to_string(described) +
                   " descriptions");
      }
      for (std::uint32_t i = 0; i < described; ++i) {
        std::string name, desc;
        MESHSTORE_RETURN_IF_ERROR(r.bytes(name, kMaxPlaceBytes));
        MESHSTORE_RETURN_IF_ERROR(r.bytes(desc, kMaxPlaceBytes));
        region.described[std::move(name)] = std::move(desc);
      }
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
  const std::uint32_t magic = r.check ? kCheckMagic : kRequestMagic;
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
  if (magic != kRequestMagic && magic != kCheckMagic) return bad("not a get request (bad magic)");
  r.check = magic == kCheckMagic;
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
  // Reserved, then appended: the bytes are written once (a sized vector
  // would zero them first).
  std::vector<std::byte> out;
  out.reserve(kReplyHeader + n);
  const std::uint32_t head[2] = {static_cast<std::uint32_t>(status), 0};
  const auto* h = reinterpret_cast<const std::byte*>(head);
  out.insert(out.end(), h, h + kReplyHeader);
  const auto* b = static_cast<const std::byte*>(data);
  if (n > 0) out.insert(out.end(), b, b + n);
  return out;
}

Result<ReplyStatus> reply_status(const std::vector<std::byte>& bytes) {
  if (bytes.size() < kReplyHeader) {
    return bad("a reply of " + std::to_string(bytes.size()) + " bytes has no header");
  }
  std::uint32_t s = 0;
  std::memcpy(&s, bytes.data(), 4);
  if (s > static_cast<std::uint32_t>(ReplyStatus::more)) {
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

// -- parts ---------------------------------------------------------------

namespace {

std::vector<std::byte> part_of(std::uint32_t flags, const std::byte* data, std::size_t n) {
  std::vector<std::byte> out(kPartHeaderBytes + n);
  std::memcpy(out.data(), &kPartMagic, 4);
  std::memcpy(out.data() + 4, &flags, 4);
  if (n > 0) std::memcpy(out.data() + kPartHeaderBytes, data, n);
  return out;
}

// A reply part's header: status `more`, the second word 1 on the last.
std::vector<std::byte> reply_part(const std::byte* data, std::size_t n, bool last) {
  auto out = encode(ReplyStatus::more, data, n);
  const std::uint32_t flag = last ? 1 : 0;
  std::memcpy(out.data() + 4, &flag, 4);
  return out;
}

// Whether `reply` is a part of a larger one (`*last`: its last).
bool is_part(const std::vector<std::byte>& reply, bool* last) {
  if (reply.size() < kReplyHeader) return false;
  std::uint32_t head[2];
  std::memcpy(head, reply.data(), 8);
  *last = head[1] == 1;
  return head[0] == static_cast<std::uint32_t>(ReplyStatus::more);
}

// The rest of a reply whose first part is `first` (status `more`), each
// next part fetched with `one`: the whole reply.
Result<std::vector<std::byte>> fetch_rest(std::vector<std::byte> first, const ExchangeOne& one);

}  // namespace

Result<std::vector<std::byte>> exchange_in_parts(const std::byte* request, std::size_t n,
                                                 std::size_t message, const ExchangeOne& one,
                                                 bool* sent) {
  if (sent) *sent = false;
  if (n > kMaxAssembledBytes) {
    return Status(Errc::unsupported, "a request of " + std::to_string(n) + " bytes is over the " +
                                         std::to_string(kMaxAssembledBytes) +
                                         " one may take in parts");
  }
  if (message <= kPartHeaderBytes + kReplyHeader) {
    return Status(Errc::invalid_argument,
                  "a channel of " + std::to_string(message) + "-byte messages");
  }
  if (n <= message) {  // the common case: one message each way
    auto reply = one(request, n, sent);
    bool last = false;
    if (!reply.ok() || !is_part(*reply, &last)) return reply;
    return fetch_rest(std::move(reply).value(), one);
  }
  Result<std::vector<std::byte>> reply = std::vector<std::byte>();
  bool last_sent = false;
  {
    const std::size_t chunk = message - kPartHeaderBytes;
    for (std::size_t at = 0; at < n; at += chunk) {
      const std::size_t len = std::min(chunk, n - at);
      const bool last = at + len == n;
      const std::uint32_t flags = (at == 0 ? kPartFirst : 0) | (last ? kPartLast : 0);
      const auto part = part_of(flags, request + at, len);
      bool part_sent = false;
      reply = one(part.data(), part.size(), &part_sent);
      if (last) {
        last_sent = part_sent;
        break;
      }
      if (!reply.ok()) return reply.status();  // the request never reached the volume whole
      auto status = reply_status(*reply);
      if (!status.ok() || *status != ReplyStatus::ok || reply->size() != kReplyHeader) {
        return reply;  // refused (an error the caller decodes) or not a part's answer
      }
    }
  }
  if (sent) *sent = last_sent;
  if (!reply.ok()) return reply;
  bool last = false;
  if (!is_part(*reply, &last)) return reply;
  return fetch_rest(std::move(reply).value(), one);
}

namespace {

Result<std::vector<std::byte>> fetch_rest(std::vector<std::byte> first, const ExchangeOne& one) {
  bool last = false;
  (void)is_part(first, &last);
  // The reply comes in parts: each next one fetched.
  std::vector<std::byte> whole(first.begin() + kReplyHeader, first.end());
  const auto fetch = part_of(kPartFetch, nullptr, 0);
  while (!last) {
    auto next = one(fetch.data(), fetch.size(), nullptr);
    if (!next.ok()) return next.status();
    if (!is_part(*next, &last)) return bad("a reply's part is not one");
    if (whole.size() + (next->size() - kReplyHeader) > kMaxAssembledBytes) {
      return bad("a reply over " + std::to_string(kMaxAssembledBytes) + " bytes");
    }
    whole.insert(whole.end(), next->begin() + kReplyHeader, next->end());
  }
  return whole;
}

}  // namespace

std::optional<std::vector<std::byte>> PartAssembly::take(const std::vector<std::byte>& bytes,
                                                         std::vector<std::byte>* whole) {
  std::lock_guard<std::mutex> lock(mu_);
  auto refuse = [&](const std::string& why) {
    in_.clear();
    in_.shrink_to_fit();
    return encode_error(bad(why));
  };
  if (bytes.size() < kPartHeaderBytes) return refuse("a part without its header");
  std::uint32_t flags = 0;
  std::memcpy(&flags, bytes.data() + 4, 4);
  if ((flags & ~(kPartFirst | kPartLast | kPartFetch)) != 0)
    return refuse("a part's unknown flags");
  const std::size_t n = bytes.size() - kPartHeaderBytes;
  if ((flags & kPartFetch) != 0) {
    if (flags != kPartFetch || n != 0) return refuse("a fetch that is also a part");
    if (out_at_ >= out_.size() || message_ <= kReplyHeader) {
      return refuse("a fetch with no reply to fetch");
    }
    const std::size_t len = std::min(message_ - kReplyHeader, out_.size() - out_at_);
    const bool last = out_at_ + len == out_.size();
    auto part = reply_part(out_.data() + out_at_, len, last);
    out_at_ += len;
    if (last) {
      out_.clear();
      out_.shrink_to_fit();
      out_at_ = 0;
    }
    return part;
  }
  if ((flags & kPartFirst) != 0) in_.clear();
  if (in_.size() + n > kMaxAssembledBytes) {
    return refuse("a request over " + std::to_string(kMaxAssembledBytes) + " bytes in parts");
  }
  in_.insert(in_.end(), bytes.begin() + kPartHeaderBytes, bytes.end());
  if ((flags & kPartLast) == 0) return encode(ReplyStatus::ok, nullptr, 0);
  whole->swap(in_);
  in_.clear();
  in_.shrink_to_fit();
  return std::nullopt;
}

std::vector<std::byte> PartAssembly::first_part(std::vector<std::byte> reply, std::size_t message) {
  if (reply.size() <= message) {
    // A reply in parts its client gave up on (its request timed out) is
    // not kept past the next answer (a part of one being fetched passes).
    bool last = false;
    if (is_part(reply, &last)) return reply;
    std::lock_guard<std::mutex> lock(mu_);
    if (!out_.empty()) {
      out_.clear();
      out_.shrink_to_fit();
      out_at_ = 0;
    }
    return reply;
  }
  if (reply.size() > kMaxAssembledBytes || message <= kReplyHeader) {
    return encode_error(Status(
        Errc::unsupported, "a reply of " + std::to_string(reply.size()) + " bytes is over the " +
                               std::to_string(kMaxAssembledBytes) + " one may take in parts"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  message_ = message;
  out_ = std::move(reply);
  out_at_ = message - kReplyHeader;
  return reply_part(out_.data(), out_at_, false);
}

}  // namespace meshstore::protocol::fast_get
