// The manifest of a stored state dict: its layout and its binary codec.

#include "meshstore/state_dicts/manifest.hpp"

#include <cstring>

namespace meshstore::state_dicts {
namespace {

constexpr char kManifestMagic[] = "meshstore.state_dict.v3";
// Packed tensors start at multiples of this inside the blob.
constexpr std::uint64_t kPackAlign = 64;

}  // namespace

void lay_out(Manifest& m, std::string name, DType dtype, Shape shape, std::uint64_t pack_max,
             std::uint64_t bucket_max) {
  ManifestEntry me;
  me.name = std::move(name);
  me.dtype = dtype;
  me.shape = std::move(shape);
  if (me.nbytes() <= pack_max) {
    me.kind = EntryKind::packed;
    me.offset = (m.packed_bytes + kPackAlign - 1) / kPackAlign * kPackAlign;
    if (m.bucket_starts.empty()) m.bucket_starts.push_back(0);
    if (bucket_max > 0 && me.nbytes() > 0 && me.offset > m.bucket_starts.back() &&
        me.offset + me.nbytes() - m.bucket_starts.back() > bucket_max) {
      m.bucket_starts.push_back(me.offset);
    }
    m.packed_bytes = me.offset + me.nbytes();
  }
  m.entries.push_back(std::move(me));
}

void lay_out_value(Manifest& m, std::string name, const Value& v) {
  ManifestEntry me;
  me.name = std::move(name);
  me.kind = EntryKind::value;
  me.dtype = DType::uint8;
  me.shape = {static_cast<std::int64_t>(v.encode().size())};
  m.entries.push_back(std::move(me));
}

std::string entry_key(const std::string& key, const std::string& name) { return key + "/" + name; }

std::string blob_key(const std::string& key, std::size_t b) {
  return b == 0 ? key + "#packed" : key + "#packed." + std::to_string(b);
}

std::string encode_manifest(const Manifest& m) {
  // Sized first, then written through a cursor: one allocation and no
  // per-field append (a state dict of 1,000 entries is 7,000 fields).
  const std::size_t buckets = m.buckets();
  std::size_t size = sizeof(kManifestMagic) + 8 + 4 + 8 * buckets + 4;
  for (const auto& e : m.entries) size += 1 + 4 + e.name.size() + 1 + 4 + 8 * e.shape.size() + 8;
  std::string out(size, '\0');
  char* at = out.data();
  auto put = [&at](const void* p, std::size_t n) {
    std::memcpy(at, p, n);
    at += n;
  };
  auto pod = [&put](auto v) { put(&v, sizeof(v)); };
  put(kManifestMagic, sizeof(kManifestMagic));
  pod(std::uint64_t{m.packed_bytes});
  pod(static_cast<std::uint32_t>(buckets));
  for (std::size_t b = 0; b < buckets; ++b) pod(std::uint64_t{m.bucket_starts[b]});
  pod(static_cast<std::uint32_t>(m.entries.size()));
  for (const auto& e : m.entries) {
    pod(static_cast<std::uint8_t>(e.kind));
    pod(static_cast<std::uint32_t>(e.name.size()));
    put(e.name.data(), e.name.size());
    pod(static_cast<std::uint8_t>(e.dtype));
    pod(static_cast<std::uint32_t>(e.shape.size()));
    for (auto d : e.shape) pod(std::int64_t{d});
    pod(std::uint64_t{e.offset});
  }
  return out;
}

Result<Manifest> decode_manifest(const std::string& bytes, const std::string& key) {
  auto bad = [&](const std::string& why) {
    return Status(Errc::wrong_kind, "'" + key + "' does not hold a state dict (" + why + ")");
  };
  std::size_t pos = sizeof(kManifestMagic);
  if (bytes.size() < pos || bytes.compare(0, pos, std::string(kManifestMagic, pos)) != 0) {
    return bad("no manifest");
  }
  auto get = [&](auto& v) {
    if (bytes.size() - pos < sizeof(v)) return false;
    std::memcpy(&v, bytes.data() + pos, sizeof(v));
    pos += sizeof(v);
    return true;
  };
  Manifest m;
  std::uint32_t n = 0;
  std::uint32_t buckets = 0;
  if (!get(m.packed_bytes) || !get(buckets)) return bad("truncated");
  if ((m.packed_bytes == 0) != (buckets == 0) || buckets > bytes.size() / 8) {
    return bad("malformed buckets");
  }
  for (std::uint32_t b = 0; b < buckets; ++b) {
    std::uint64_t start = 0;
    if (!get(start)) return bad("truncated");
    if (b == 0 ? start != 0 : (start <= m.bucket_starts.back() || start >= m.packed_bytes)) {
      return bad("malformed buckets");
    }
    m.bucket_starts.push_back(start);
  }
  if (!get(n)) return bad("truncated");
  // An entry takes at least 18 bytes: a hostile count reserves no more
  // than the bytes could hold.
  m.entries.reserve(std::min<std::size_t>(n, (bytes.size() - pos) / 18));
  for (std::uint32_t i = 0; i < n; ++i) {
    ManifestEntry e;
    std::uint8_t kind = 0, dtype = 0;
    std::uint32_t len = 0, ndim = 0;
    if (!get(kind) || kind > 2 || !get(len) || bytes.size() - pos < len)
      return bad("malformed entry");
    e.kind = static_cast<EntryKind>(kind);
    e.name.assign(bytes, pos, len);
    pos += len;
    if (!get(dtype) || !is_valid_dtype(dtype) || !get(ndim) || ndim > 64)
      return bad("malformed entry");
    e.dtype = static_cast<DType>(dtype);
    e.shape.reserve(ndim);
    for (std::uint32_t d = 0; d < ndim; ++d) {
      std::int64_t dim = 0;
      if (!get(dim) || dim < 0) return bad("malformed shape");
      e.shape.push_back(dim);
    }
    if (!get(e.offset)) return bad("truncated");
    if (e.kind == EntryKind::packed &&
        (e.offset > m.packed_bytes || e.nbytes() > m.packed_bytes - e.offset)) {
      return bad("packed entry outside the blob");
    }
    if (e.kind == EntryKind::packed && e.nbytes() > 0 &&
        e.offset + e.nbytes() > m.bucket_end(m.bucket_of(e.offset))) {
      return bad("packed entry across two buckets");
    }
    m.entries.push_back(std::move(e));
  }
  if (pos != bytes.size()) return bad("trailing bytes");
  return m;
}

}  // namespace meshstore::state_dicts
