#include "meshstore/transports/region.hpp"

namespace meshstore::transports {

void RegionTable::add(const std::shared_ptr<Region>& region) {
  std::lock_guard<std::mutex> lock(mu_);
  regions_[region->id()] = region;
}

std::shared_ptr<Region> RegionTable::find(std::uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(id);
  return it == regions_.end() ? nullptr : it->second.lock();
}

void RegionTable::prune() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = regions_.begin(); it != regions_.end();) {
    it = it->second.expired() ? regions_.erase(it) : std::next(it);
  }
}

std::size_t RegionTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.size();
}

}  // namespace meshstore::transports
