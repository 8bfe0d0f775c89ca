// The process-wide pool of large scratch buffers (state-dict packing and
// unpacking).

#include "meshstore/state_dicts/scratch_pool.hpp"

#include <utility>

#include "meshstore/internal/memory.hpp"

namespace meshstore::state_dicts {

ScratchPool& ScratchPool::instance() {
  static auto* pool = new ScratchPool();  // never destroyed: buffers may come back late
  return *pool;
}

std::shared_ptr<std::byte> ScratchPool::take(std::size_t n) {
  std::shared_ptr<std::byte> raw;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(n);
    if (it != free_.end()) {
      raw = std::move(it->second);
      free_.erase(it);
      free_bytes_ -= n;
    }
  }
  if (!raw) raw = internal::allocate_aligned(n);
  if (!raw) return nullptr;
  std::byte* p = raw.get();
  return std::shared_ptr<std::byte>(
      p, [this, raw, n](std::byte*) mutable { give(n, std::move(raw)); });
}

void ScratchPool::give(std::size_t n, std::shared_ptr<std::byte> raw) {
  if (n < kMinBytes) return;  // small: malloc is cheap, nothing to keep
  std::lock_guard<std::mutex> lock(mu_);
  if (free_bytes_ + n > kMaxBytes) return;  // freed now
  free_bytes_ += n;
  free_.emplace(n, std::move(raw));
}

}  // namespace meshstore::state_dicts
