#pragma once
// Where a storage volume's region memory comes from and where it goes: the
// transport server that places host memory (shm's segments), else process
// memory; GPU memory from the server that holds it (cuda-ipc). Released
// memory is kept for the next region of the same size, per place (host,
// each GPU), so a key's next version lands in memory already faulted in
// (first touch runs at 1-2 GB/s on the reference VM, reuse at memcpy speed)
// and, for shared memory, already mapped by the clients that wrote it.
// Every byte a region holds is counted in bytes_held() until the region's
// last owner (the object table, a lease, a transfer) lets go, on whatever
// thread that is. Used by the volume actor only, except that counting and
// pooling run on the thread that frees.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "meshstore/status.hpp"
#include "meshstore/transports/region.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::volume {

class VolumeMemory {
 public:
  /// Keeps at most `pool_bytes` of released memory for reuse per place.
  explicit VolumeMemory(std::uint64_t pool_bytes);
  ~VolumeMemory();
  VolumeMemory(const VolumeMemory&) = delete;
  VolumeMemory& operator=(const VolumeMemory&) = delete;

  /// The volume's transport servers: the first with an allocator places
  /// host memory; those that register memory (rdma) are told when memory
  /// is freed for good; GPU memory comes from the first that holds it.
  /// Once, before any allocate().
  void use_servers(const std::vector<std::unique_ptr<transports::TransportServer>>& servers);
  /// Before the servers shut down: memory freed later tells none of them.
  void forget_servers();

  /// A new object's region.
  struct Allocated {
    std::shared_ptr<transports::Region> region;
    /// Whether the memory goes back to the pool when the last owner lets
    /// go (true); clear it to free it instead (a discarded object).
    std::shared_ptr<std::atomic<bool>> reusable;
    /// The tag clients check around a lease-free read, set to the object's
    /// id here and cleared before the memory serves anything else; null
    /// for memory without one.
    std::atomic<std::uint64_t>* tag = nullptr;
  };
  /// Memory of `nbytes` for object `id`, on GPU `device` (>= 0) or the
  /// host: reused from the pool, else freshly allocated.
  /// Errc::out_of_capacity when there is none; unsupported for a GPU
  /// region where no server holds GPU memory.
  Result<Allocated> allocate(std::uint64_t id, std::uint64_t nbytes, int device = -1);
  /// `nbytes` at `data` that are not the volume's (a lent buffer), counted
  /// while held: `release` runs once the last owner lets go, after the
  /// servers forgot the memory. Never pooled.
  std::shared_ptr<std::byte> adopt(std::byte* data, std::uint64_t nbytes,
                                   std::function<void()> release);
  /// Bytes held by regions now (pooled memory not counted).
  std::uint64_t bytes_held() const;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace meshstore::volume
