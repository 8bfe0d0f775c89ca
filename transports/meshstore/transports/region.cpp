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

Status check_range(std::uint64_t id, std::uint64_t size, std::uint64_t offset, std::uint64_t length,
                   const std::string& op) {
  if (offset <= size && length <= size - offset) return Status();
  return Status(Errc::out_of_range, op + ": bytes [" + std::to_string(offset) + ", " +
                                        std::to_string(offset + length) + ") outside region " +
                                        std::to_string(id) + " of " + std::to_string(size) +
                                        " bytes");
}

Status device_region_error(std::uint64_t id, int device, const std::string& op) {
  return Status(Errc::unsupported,
                op + ": region " + std::to_string(id) +
                    " lives in GPU memory (cuda:" + std::to_string(device) +
                    " of its volume: it was put over cuda-ipc); only the cuda-ipc transport, "
                    "on the volume's host, reads it");
}

Result<std::shared_ptr<Region>> RegionTable::checked(std::uint64_t id, std::uint64_t offset,
                                                     std::uint64_t length,
                                                     const std::string& op) const {
  auto region = find(id);
  if (!region) {
    return Status(Errc::not_found, op + ": region " + std::to_string(id) +
                                       " does not exist (released, revoked or never staged)");
  }
  MESHSTORE_RETURN_IF_ERROR(check_range(id, region->size(), offset, length, op));
  if (region->device() >= 0) return device_region_error(id, region->device(), op);
  return region;
}

void RegionTable::prune() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = regions_.begin(); it != regions_.end();) {
    it = it->second.expired() ? regions_.erase(it) : std::next(it);
  }
}

void RegionTable::withdraw(const std::vector<std::uint64_t>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto id : ids) regions_.erase(id);
}

std::size_t RegionTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.size();
}

}  // namespace meshstore::transports
