#include "meshstore/volume/memory.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "meshstore/internal/memory.hpp"

namespace meshstore::volume {
namespace {

// Memory of released regions by size, bounded; shared with region
// deleters, which run on any thread.
class RegionPool {
 public:
  explicit RegionPool(std::uint64_t max_bytes) : max_bytes_(max_bytes) {}
  std::optional<transports::RegionMemory> take(std::uint64_t nbytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(nbytes);
    if (it == free_.end()) return std::nullopt;
    auto memory = std::move(it->second);
    free_.erase(it);
    free_bytes_ -= nbytes;
    return memory;
  }
  void give(std::uint64_t nbytes, transports::RegionMemory memory) {
    std::lock_guard<std::mutex> lock(mu_);
    if (nbytes == 0 || free_bytes_ + nbytes > max_bytes_) return;  // dropped: freed now
    free_bytes_ += nbytes;
    free_.emplace(nbytes, std::move(memory));
  }

 private:
  std::mutex mu_;  // guards free_ and free_bytes_
  std::multimap<std::uint64_t, transports::RegionMemory> free_;
  std::uint64_t free_bytes_ = 0;
  const std::uint64_t max_bytes_;
};

// The servers to tell when region memory is freed for good (rdma drops its
// registration); the memory's deleters hold this weakly, since they may run
// after the volume is gone.
struct FreeHooks {
  std::mutex mu;                                      // guards servers
  std::vector<transports::TransportServer*> servers;  // cleared before they go
  void forget(const std::byte* data) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto* s : servers) s->forget(data);
  }
};

// A region's memory as its owners (object table, leases) hold it: when the
// last lets go, the bytes are accounted back and the memory is offered to
// the pool, unless the object was discarded (`reusable` false).
struct AccountedMemory {
  AccountedMemory(transports::RegionMemory m, std::weak_ptr<std::atomic<std::uint64_t>> c,
                  std::weak_ptr<RegionPool> p, std::uint64_t n)
      : memory(std::move(m)), counter(std::move(c)), pool(std::move(p)), nbytes(n) {}
  AccountedMemory(const AccountedMemory&) = delete;
  AccountedMemory& operator=(const AccountedMemory&) = delete;
  ~AccountedMemory() {
    // No object lives here any more (a staging given back, a dropped
    // object's last lease closed): cleared before the memory serves
    // anything else.
    if (memory.object_tag) memory.object_tag->store(0, std::memory_order_release);
    if (auto c = counter.lock()) c->fetch_sub(nbytes);
    if (reusable.load()) {
      if (auto p = pool.lock()) p->give(nbytes, std::move(memory));
    }
  }

  transports::RegionMemory memory;
  std::weak_ptr<std::atomic<std::uint64_t>> counter;
  std::weak_ptr<RegionPool> pool;
  std::uint64_t nbytes;
  std::atomic<bool> reusable{true};
};

// `nbytes` (under 64) of process memory, malloc-aligned (16 bytes).
std::shared_ptr<std::byte> small_memory(std::uint64_t nbytes) {
  void* p = std::malloc(nbytes == 0 ? 1 : nbytes);
  if (p == nullptr) return nullptr;
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

}  // namespace

struct VolumeMemory::Shared {
  std::uint64_t pool_bytes;
  // Decremented by region deleters, which may run on any thread (the last
  // lease can be dropped by a transport's actor), hence atomic and shared.
  std::shared_ptr<std::atomic<std::uint64_t>> held =
      std::make_shared<std::atomic<std::uint64_t>>(0);
  std::shared_ptr<RegionPool> pool;
  // Released GPU memory (cuda-ipc), one pool per device, apart from the
  // host pool: a device region never serves a host object. A trainer
  // publishing every step then reuses the same allocations: no cudaMalloc
  // or cudaFree (which synchronizes the device) per version, and readers'
  // cached IPC openings of them stay good.
  std::map<int, std::shared_ptr<RegionPool>> device_pools;
  std::shared_ptr<FreeHooks> hooks = std::make_shared<FreeHooks>();
  bool registers = false;  // a server registers memory: hooks has it
  std::shared_ptr<transports::RegionAllocator> allocator;
  std::vector<transports::TransportServer*> servers;  // for GPU memory

  std::shared_ptr<RegionPool>& device_pool(int device) {
    auto& p = device_pools[device];
    if (!p) p = std::make_shared<RegionPool>(pool_bytes);
    return p;
  }
  // Host memory: reused from the pool, else freshly allocated. Pooled
  // memory keeps what one-sided servers registered for it; memory freed
  // for good tells them first (FreeHooks).
  Result<transports::RegionMemory> host_memory(std::uint64_t nbytes) {
    if (auto m = pool->take(nbytes)) return std::move(*m);
    transports::RegionMemory m;
    if (allocator) {
      auto a = allocator->allocate(nbytes);
      if (!a.ok()) return a.status();
      m = std::move(a).value();
    } else {
      // An object smaller than a cache line needs no 64-byte alignment
      // (malloc's 16 serves every dtype) and would pay for it in padding:
      // an index of a million tiny values is mostly such objects.
      auto memory = nbytes < 64 ? small_memory(nbytes) : internal::allocate_aligned(nbytes);
      if (!memory) {
        return Status(Errc::out_of_capacity,
                      "cannot allocate " + std::to_string(nbytes) + " bytes");
      }
      m = transports::RegionMemory{std::move(memory), "", 0};
    }
    if (!registers) return m;
    std::weak_ptr<FreeHooks> weak = hooks;
    std::byte* raw = m.memory.get();
    m.memory =
        std::shared_ptr<std::byte>(raw, [inner = std::move(m.memory), weak](std::byte* p) mutable {
          if (auto h = weak.lock()) h->forget(p);
          inner.reset();
        });
    return m;
  }
  // GPU memory: reused from that device's pool, else from the first server
  // that holds GPU memory (cuda-ipc).
  Result<transports::RegionMemory> device_memory(std::uint64_t nbytes, int device) {
    if (auto m = device_pool(device)->take(nbytes)) return std::move(*m);
    for (auto* s : servers) {
      auto m = s->allocate_device(nbytes, device);
      if (m.ok()) return m;
      if (m.status().code() != Errc::unsupported) return m.status();
    }
    return Status(Errc::unsupported,
                  "no transport of this volume holds GPU memory (cuda-ipc is "
                  "not offered: a build without CUDA, or no usable GPU)");
  }
};

VolumeMemory::VolumeMemory(std::uint64_t pool_bytes) : shared_(std::make_shared<Shared>()) {
  shared_->pool_bytes = pool_bytes;
  shared_->pool = std::make_shared<RegionPool>(pool_bytes);
}

VolumeMemory::~VolumeMemory() { forget_servers(); }

void VolumeMemory::use_servers(
    const std::vector<std::unique_ptr<transports::TransportServer>>& servers) {
  for (const auto& server : servers) {
    shared_->servers.push_back(server.get());
    if (!shared_->allocator) shared_->allocator = server->allocator();
    if (!server->registers_memory()) continue;
    std::lock_guard<std::mutex> lock(shared_->hooks->mu);
    shared_->hooks->servers.push_back(server.get());
    shared_->registers = true;
  }
}

void VolumeMemory::forget_servers() {
  shared_->servers.clear();
  std::lock_guard<std::mutex> lock(shared_->hooks->mu);
  shared_->hooks->servers.clear();
}

Result<VolumeMemory::Allocated> VolumeMemory::allocate(std::uint64_t id, std::uint64_t nbytes,
                                                       int device) {
  auto& s = *shared_;
  auto fresh = device >= 0 ? s.device_memory(nbytes, device) : s.host_memory(nbytes);
  if (!fresh.ok()) return fresh.status();
  transports::RegionMemory memory = std::move(fresh).value();
  // Named from its staging: only its writer knows the id until the commit,
  // and nobody reads an object it has not seen committed.
  if (memory.object_tag) memory.object_tag->store(id, std::memory_order_release);
  auto* tag = memory.object_tag;
  const int on_device = memory.device;
  std::byte* data = memory.memory.get();
  std::string segment = memory.segment;
  const std::uint64_t segment_offset = memory.segment_offset;
  s.held->fetch_add(nbytes);
  std::weak_ptr<RegionPool> weak_pool = on_device >= 0 ? s.device_pool(on_device) : s.pool;
  auto block =
      std::make_shared<AccountedMemory>(std::move(memory), s.held, std::move(weak_pool), nbytes);
  // The region's memory and the object's reuse flag point into the one
  // block, so a tiny object pays for one control block, not three.
  std::shared_ptr<std::byte> accounted(block, data);
  Allocated out;
  out.region = std::make_shared<transports::Region>(id, std::move(accounted), nbytes,
                                                    std::move(segment), segment_offset);
  out.region->set_device(on_device);
  out.reusable = std::shared_ptr<std::atomic<bool>>(block, &block->reusable);
  out.tag = tag;
  return out;
}

std::shared_ptr<std::byte> VolumeMemory::adopt(std::byte* data, std::uint64_t nbytes,
                                               std::function<void()> release) {
  shared_->held->fetch_add(nbytes);
  std::weak_ptr<std::atomic<std::uint64_t>> counter = shared_->held;
  std::weak_ptr<FreeHooks> hooks = shared_->hooks;
  return std::shared_ptr<std::byte>(
      data, [release = std::move(release), counter, hooks, nbytes](std::byte* p) mutable {
        if (auto h = hooks.lock()) h->forget(p);
        if (auto c = counter.lock()) c->fetch_sub(nbytes);
        release();
      });
}

std::uint64_t VolumeMemory::bytes_held() const { return shared_->held->load(); }

}  // namespace meshstore::volume
