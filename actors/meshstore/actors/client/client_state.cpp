// The helpers every file of the client uses: settling futures, naming calls.

#include "meshstore/actors/client/client_state.hpp"

#include <algorithm>

namespace meshstore::actors::client_detail {

void LocationCache::make_room(std::size_t n) {
  if (map_.size() + n <= max) return;
  map_.clear();
  if (fast) fast->forget_all_keys();
}

void LocationCache::put(const wire::KeyRecord& r) {
  // Versions are store-wide commit numbers: an answer older than what is
  // cached (a locate that crossed this client's own put over the fast
  // path) does not replace it.
  auto [it, fresh] = map_.try_emplace(r.key, r);
  if (!fresh) {
    if (r.version < it->second.version) return;
    it->second = r;
  }
  if (fast) fast->learn(r);
}

void LocationCache::erase(const std::string& key) {
  map_.erase(key);
  if (fast) fast->forget(key);
}

void LocationCache::erase_under(const std::string& prefix) {
  for (auto it = map_.begin(); it != map_.end();) {
    it = it->first.compare(0, prefix.size(), prefix) == 0 ? map_.erase(it) : std::next(it);
  }
  if (fast) fast->forget_under(prefix);
}

void LocationCache::erase_on_volume(const std::string& volume_id) {
  for (auto it = map_.begin(); it != map_.end();) {
    const auto& shards = it->second.shards;
    const bool there = std::any_of(shards.begin(), shards.end(), [&](const wire::ShardRecord& s) {
      return s.volume_id == volume_id;
    });
    it = there ? map_.erase(it) : std::next(it);
  }
  if (fast) fast->forget_volume(volume_id);
}

Future<void> settle_all(std::vector<Future<void>> futures) {
  return when_all(std::move(futures)).then([](const std::vector<Result<void>>& results) -> Status {
    for (const auto& r : results) {
      if (!r.ok()) return r.status();
    }
    return Status();
  });
}

std::string describe(const std::string& op, const std::vector<std::string>& keys) {
  if (keys.size() == 1) return op + " '" + keys.front() + "'";
  return op + " of " + std::to_string(keys.size()) + " keys" +
         (keys.empty() ? std::string() : " (first '" + keys.front() + "')");
}

}  // namespace meshstore::actors::client_detail
