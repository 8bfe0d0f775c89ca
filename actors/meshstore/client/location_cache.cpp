#include "meshstore/client/location_cache.hpp"

#include <algorithm>

namespace meshstore::client {

std::optional<wire::KeyRecord> LocationCache::find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  return it->second;
}

std::optional<LocationCache::Entry> LocationCache::entry(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  const auto& r = it->second;
  // A key kept as copies is read from its first copy.
  if (!r.found() || (r.shards.size() != 1 && !r.copied()) || !r.shards[0].slice.is_full() ||
      !r.pending.empty()) {
    return std::nullopt;
  }
  const auto& s = r.shards[0];
  return Entry{s.volume_id, s.object_id,     r.kind,    r.dtype, r.shape,
               s.nbytes,    r.object_format, r.version, s.place, r.points_to};
}

std::optional<std::uint64_t> LocationCache::version(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  return it->second.version;
}

void LocationCache::put(const wire::KeyRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(r.key);
  if (it != map_.end()) {
    if (r.version >= it->second.version) it->second = r;
    return;
  }
  if (map_.size() >= max_) map_.clear();
  map_.emplace(r.key, r);
}

void LocationCache::erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  map_.erase(key);
}

void LocationCache::erase_object(const std::string& key, std::uint64_t object_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return;
  const auto& shards = it->second.shards;
  if (shards.size() == 1 && shards[0].object_id == object_id) map_.erase(it);
}

void LocationCache::erase_under(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = map_.begin(); it != map_.end();) {
    it = it->first.compare(0, prefix.size(), prefix) == 0 ? map_.erase(it) : std::next(it);
  }
}

void LocationCache::erase_on_volume(const std::string& volume_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = map_.begin(); it != map_.end();) {
    const auto& shards = it->second.shards;
    const bool there = std::any_of(shards.begin(), shards.end(), [&](const wire::ShardRecord& s) {
      return s.volume_id == volume_id;
    });
    it = there ? map_.erase(it) : std::next(it);
  }
}

void LocationCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  map_.clear();
}

}  // namespace meshstore::client
