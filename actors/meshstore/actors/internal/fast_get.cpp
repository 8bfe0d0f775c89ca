#include "meshstore/actors/internal/fast_get.hpp"

#include <cstring>

namespace meshstore::actors::fast_get {
namespace {

constexpr std::size_t kRequestHeader = 16;               // magic, key length, object id
constexpr std::size_t kReplyHeader = kReplyHeaderBytes;  // status, reserved

Status bad(const std::string& what) { return Status(Errc::protocol_error, "fast get: " + what); }

}  // namespace

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
