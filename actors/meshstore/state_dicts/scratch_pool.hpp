#pragma once

// The process-wide pool of large scratch buffers that state-dict puts pack
// into and state-dict reads unpack from.

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

namespace meshstore::state_dicts {

/// Large scratch buffers (a state dict's packed buckets when putting, the
/// scratch it is read into when getting), reused by the next call of the
/// same size: a fresh 40 MB buffer costs a page fault per 4 KiB on every
/// call (the first touch of memory runs at about 1 GB/s on the reference
/// VM). Process-wide, bounded; a buffer goes back when its last user lets go.
/// Thread-safe.
class ScratchPool {
 public:
  /// The process's pool.
  static ScratchPool& instance();
  /// A buffer of `n` bytes (contents unspecified), or nullptr.
  std::shared_ptr<std::byte> take(std::size_t n);

 private:
  void give(std::size_t n, std::shared_ptr<std::byte> raw);
  static constexpr std::size_t kMinBytes = std::size_t{1} << 20;
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 30;
  std::mutex mu_;  // guards free_, free_bytes_
  std::multimap<std::size_t, std::shared_ptr<std::byte>> free_;
  std::size_t free_bytes_ = 0;
};

}  // namespace meshstore::state_dicts
