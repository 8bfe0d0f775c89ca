#pragma once

// The client's one cache of key locations: the last record seen per key,
// from this client's own commits (on the actors' path and the caller's
// alike) and the controller's answers. The client actor and the callers'
// threads (the fast path's reads and puts) share it, so a location one of
// them drops (a remove, an overwrite by this client, a volume that went
// down) is gone for all before the call that dropped it completes.
// Versions are store-wide commit numbers: a record older than the one
// cached (a locate answer that crossed this client's own put) never
// replaces it. Thread-safe.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "meshstore/protocol/records.hpp"
#include "meshstore/tensor.hpp"

namespace meshstore::client {

class LocationCache {
 public:
  /// A whole key's location (one shard covering it, nothing pending): what
  /// a read on the caller's thread needs.
  struct Entry {
    std::string volume_id;
    std::uint64_t object_id = 0;
    wire::ObjectKind kind = wire::ObjectKind::tensor;
    DType dtype = DType::uint8;
    Shape shape;
    std::uint64_t nbytes = 0;
    ObjectFormat format = ObjectFormat::bytes;
    std::uint64_t version = 0;    ///< the commit it came from: newer ones win
    std::string place;            ///< its record's shm place ("" unknown; a hint)
    std::uint64_t points_to = 0;  ///< a version pointer's version (KeyRecord::points_to)
  };

  /// Keeps at most `max` keys (at least 1): the whole cache is dropped
  /// when an insert would pass it.
  explicit LocationCache(std::size_t max = std::size_t{1} << 16) : max_(max) {}

  std::optional<wire::KeyRecord> find(const std::string& key) const;
  /// `key`'s location when it is a whole key; none otherwise.
  std::optional<Entry> entry(const std::string& key) const;
  /// The version of `key` last seen; none when nothing is cached.
  std::optional<std::uint64_t> version(const std::string& key) const;
  /// Remembers `r` (found) for r.key, unless a newer version is cached; a
  /// new key that finds the cache full drops everything first.
  void put(const wire::KeyRecord& r);
  void erase(const std::string& key);
  /// Erases `key` while its cached location still names `object_id` (a
  /// read found that object gone).
  void erase_object(const std::string& key, std::uint64_t object_id);
  void erase_under(const std::string& prefix);
  /// Erases every key with a shard on `volume_id` (it went down).
  void erase_on_volume(const std::string& volume_id);
  void clear();

 private:
  mutable std::mutex mu_;  // guards map_
  std::unordered_map<std::string, wire::KeyRecord> map_;
  std::size_t max_;
};

}  // namespace meshstore::client
