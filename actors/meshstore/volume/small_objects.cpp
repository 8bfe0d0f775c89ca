// SmallObjects (small_ops.hpp): the volume's objects by id, as the
// small-op service and the controller's thread see them.
#include "meshstore/volume/small_ops.hpp"

namespace meshstore::volume {

void SmallObjects::track(std::uint64_t id, const std::shared_ptr<transports::Region>& region,
                         std::atomic<std::uint64_t>* tag) {
  std::lock_guard<std::mutex> lock(mu_);
  map_[id] = Entry{std::string(), region, tag, false};
}

void SmallObjects::commit(std::uint64_t id, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(id);
  if (it == map_.end()) return;
  it->second.key = key;
  it->second.committed = true;
}

void SmallObjects::remove(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  map_.erase(id);
}

std::vector<std::byte> SmallObjects::read(std::uint64_t id, const std::string& key,
                                          std::size_t message) const {
  std::shared_ptr<transports::Region> region;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Entry* e = committed_on_host(id, key);
    if (e && e->region->size() + protocol::fast_get::kReplyHeaderBytes <= message) {
      region = e->region;
    }
  }
  // Committed bytes never change, and the region held keeps its memory
  // from being reused: a copy of an object retired meanwhile is still
  // that object's, as a read racing a put may return.
  if (!region)
    return protocol::fast_get::encode(protocol::fast_get::ReplyStatus::stale, nullptr, 0);
  return protocol::fast_get::encode(protocol::fast_get::ReplyStatus::ok, region->data(),
                                    region->size());
}

std::vector<std::byte> SmallObjects::check(std::uint64_t id, const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const bool ok = committed_on_host(id, key) != nullptr;
  return protocol::fast_get::encode(
      ok ? protocol::fast_get::ReplyStatus::ok : protocol::fast_get::ReplyStatus::stale, nullptr,
      0);
}

const SmallObjects::Entry* SmallObjects::committed_on_host(std::uint64_t id,
                                                           const std::string& key) const {
  auto it = map_.find(id);
  if (it == map_.end()) return nullptr;
  const Entry& e = it->second;
  return e.committed && e.key == key && e.region->device() < 0 ? &e : nullptr;
}

bool SmallObjects::current(std::uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.count(id) != 0;
}

bool SmallObjects::retire(const std::vector<std::uint64_t>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  bool all = true;
  for (auto id : ids) {
    auto it = map_.find(id);
    if (it == map_.end()) continue;  // dropped (the actor cleared its tag), or retired
    if (it->second.tag) {
      // The region is held here, so its memory (and the tag in it) is this
      // object's until the actor drops it; the tag names it until then.
      std::uint64_t expected = id;
      it->second.tag->compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
    } else {
      all = false;
    }
    map_.erase(it);
  }
  return all;
}

}  // namespace meshstore::volume
