#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "meshstore/status.hpp"

namespace meshstore::transports {

/// Memory backing a region: process memory, or a slice of a shared-memory
/// segment that same-host clients can map by name.
struct RegionMemory {
  /// The bytes; the deleter returns them to whoever allocated them.
  std::shared_ptr<std::byte> memory;
  /// The shared-memory segment holding them ("" = process memory).
  std::string segment;
  /// Where `memory` starts inside `segment`.
  std::uint64_t segment_offset = 0;
  /// The GPU whose device memory `memory` is (cuda-ipc), -1 for host memory.
  int device = -1;
  /// The word naming the object that lives in `memory` (0: none), in
  /// memory same-host clients map (the shm server's segment header): the
  /// volume writes it, a client reads it around a read made without a
  /// lease (docs/internals/data-path.md, "Lease-free reads"). Null where there is none.
  std::atomic<std::uint64_t>* object_tag = nullptr;
};

/// Where a volume's region memory comes from when a transport needs it in a
/// particular place (the shm transport: POSIX shared memory). Thread-safe:
/// memory may be released on any thread.
class RegionAllocator {
 public:
  virtual ~RegionAllocator() = default;
  /// `nbytes` of memory, prefaulted; Errc::out_of_capacity when it cannot
  /// be had (the message says why: no space in /dev/shm, too many maps).
  virtual Result<RegionMemory> allocate(std::size_t nbytes) = 0;
};

/// A block of memory a storage volume exposes to transports: a stored (or
/// staged) object's bytes. Owned through shared_ptr: the volume's object
/// table and every open read lease hold one, so a region stays valid for
/// exactly as long as someone may still read or write it.
/// Thread-safe for concurrent byte access to disjoint ranges; the protocol
/// (stage, write, commit, lease) orders the rest.
class Region {
 public:
  /// A region of `nbytes` at `memory`; `memory`'s deleter runs when the last
  /// owner lets go.
  Region(std::uint64_t id, std::shared_ptr<std::byte> memory, std::size_t nbytes) noexcept
      : id_(id), memory_(std::move(memory)), nbytes_(nbytes) {}
  /// A region inside shared-memory segment `segment` at `segment_offset`.
  Region(std::uint64_t id, std::shared_ptr<std::byte> memory, std::size_t nbytes,
         std::string segment, std::uint64_t segment_offset) noexcept
      : id_(id),
        memory_(std::move(memory)),
        nbytes_(nbytes),
        segment_(std::move(segment)),
        segment_offset_(segment_offset) {}

  std::uint64_t id() const noexcept { return id_; }
  std::byte* data() const noexcept { return memory_.get(); }
  std::size_t size() const noexcept { return nbytes_; }
  /// The shared-memory segment holding the bytes, "" for process memory.
  const std::string& segment() const noexcept { return segment_; }
  std::uint64_t segment_offset() const noexcept { return segment_offset_; }
  /// The GPU holding the bytes (device memory: only cuda-ipc touches it),
  /// -1 for host memory.
  int device() const noexcept { return device_; }
  void set_device(int device) noexcept { device_ = device; }

 private:
  std::uint64_t id_;
  std::shared_ptr<std::byte> memory_;
  std::size_t nbytes_;
  std::string segment_;
  std::uint64_t segment_offset_ = 0;
  int device_ = -1;
};

/// Errc::out_of_range unless [offset, offset + length) lies inside region
/// `id` of `size` bytes; `op` names the operation. The one range check of
/// every transport, client side and server side.
Status check_range(std::uint64_t id, std::uint64_t size, std::uint64_t offset, std::uint64_t length,
                   const std::string& op);

/// The regions of one volume, by id, as its transport endpoints see them.
/// Holds weak references: a region the volume released and no lease pins is
/// gone, and find() says so. Thread-safe.
/// Errc::unsupported naming device region `id` (on GPU `device`), which
/// transport operation `op` cannot touch.
Status device_region_error(std::uint64_t id, int device, const std::string& op);

class RegionTable {
 public:
  /// Makes `region` findable by its id.
  void add(const std::shared_ptr<Region>& region);
  /// The live region with `id`, or nullptr.
  std::shared_ptr<Region> find(std::uint64_t id) const;
  /// The live host-memory region with `id` when [offset, offset + length)
  /// lies inside it: what a transport server checks before touching bytes.
  /// `op` names the operation in the message. Errc::not_found when the
  /// region is gone, Errc::out_of_range when the bytes leave it,
  /// Errc::unsupported when it is device memory (only cuda-ipc moves that).
  Result<std::shared_ptr<Region>> checked(std::uint64_t id, std::uint64_t offset,
                                          std::uint64_t length, const std::string& op) const;
  /// Forgets entries whose region is gone.
  void prune();
  /// Forgets the regions `ids` at once, live or not (a revoked loan): no
  /// transfer of them starts from now on, while one already under way
  /// keeps its region until it ends (TransportServer::interrupt ends it).
  void withdraw(const std::vector<std::uint64_t>& ids);
  /// Entries, live or not yet pruned.
  std::size_t size() const;

 private:
  mutable std::mutex mu_;  // guards regions_
  std::unordered_map<std::uint64_t, std::weak_ptr<Region>> regions_;
};

}  // namespace meshstore::transports
