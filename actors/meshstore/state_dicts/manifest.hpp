#pragma once

// The manifest of a stored state dict: its entries in order, how each is
// stored (alone, packed into a bucket, or as a value), and its binary codec.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "meshstore/state_dict.hpp"
#include "meshstore/status.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::state_dicts {

// How a state dict entry is stored.
enum class EntryKind : std::uint8_t { tensor = 0, value = 1, packed = 2 };

struct ManifestEntry {
  std::string name;
  EntryKind kind = EntryKind::tensor;
  DType dtype = DType::uint8;
  Shape shape;
  std::uint64_t offset = 0;  // packed: where it starts in the blob

  std::uint64_t nbytes() const {
    return static_cast<std::uint64_t>(shape_numel(shape)) * dtype_size(dtype);
  }
};

// The names in order, how each is stored, and the packed tensors' bytes:
// offsets run over all of them, cut into buckets (one object each) that
// start at `bucket_starts`. No packed tensor straddles two buckets.
struct Manifest {
  std::vector<ManifestEntry> entries;
  std::uint64_t packed_bytes = 0;
  std::vector<std::uint64_t> bucket_starts;  // starts at 0; empty when nothing is packed

  // The buckets that hold bytes (none when packed_bytes is 0).
  std::size_t buckets() const { return packed_bytes == 0 ? 0 : bucket_starts.size(); }
  std::uint64_t bucket_begin(std::size_t b) const { return bucket_starts[b]; }
  std::uint64_t bucket_end(std::size_t b) const {
    return b + 1 < bucket_starts.size() ? bucket_starts[b + 1] : packed_bytes;
  }
  std::uint64_t bucket_bytes(std::size_t b) const { return bucket_end(b) - bucket_begin(b); }
  // The bucket holding offset `at`.
  std::size_t bucket_of(std::uint64_t at) const {
    auto it = std::upper_bound(bucket_starts.begin(), bucket_starts.end(), at);
    return it == bucket_starts.begin() ? 0
                                       : static_cast<std::size_t>(it - bucket_starts.begin()) - 1;
  }
};

// Appends a tensor entry, packed when it has at most `pack_max` bytes (at
// a 64-byte aligned offset, kPackAlign; in a new bucket when it would take the
// current one past `bucket_max` bytes, 0 = no limit), else stored alone.
void lay_out(Manifest& m, std::string name, DType dtype, Shape shape, std::uint64_t pack_max,
             std::uint64_t bucket_max);

// Appends a value entry: stored alone as the uint8 tensor of its encoding.
void lay_out_value(Manifest& m, std::string name, const Value& v);

// The key of entry `name` of the state dict under `key`: "KEY/NAME".
std::string entry_key(const std::string& key, const std::string& name);

// The key of a state dict's packed bucket `b` ('#' keeps it apart from
// entry keys): "KEY#packed", then "KEY#packed.1", "KEY#packed.2", ...
std::string blob_key(const std::string& key, std::size_t b = 0);

// The manifest's bytes, as stored under the state dict's key.
std::string encode_manifest(const Manifest& m);

// The manifest stored under `key`; Errc::wrong_kind when `bytes` hold none.
Result<Manifest> decode_manifest(const std::string& bytes, const std::string& key);

}  // namespace meshstore::state_dicts
