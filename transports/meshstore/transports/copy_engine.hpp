#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "meshstore/future.hpp"

namespace meshstore::transports {

/// Runs memory copies off the caller's thread, so an actor that starts a
/// transfer is never blocked by it, and splits a large copy over several
/// threads (two cores copy faster than one). One per process, started on
/// first use with one thread per core up to 16, or MESHSTORE_COPY_THREADS
/// (1 to 256); its threads end at exit. Thread-safe.
class CopyEngine {
 public:
  /// The process's engine.
  static CopyEngine& instance();

  /// Copies `n` bytes from `src` to `dst`; the future completes when every
  /// byte is copied. A copy below `inline_below` bytes runs on the calling
  /// thread; one of at least `split_from` bytes is split over the threads.
  /// Both buffers must stay valid until the future completes.
  Future<void> copy(std::byte* dst, const std::byte* src, std::size_t n,
                    std::size_t split_from) noexcept;

  /// One copy of a batch: `n` bytes from `src` to `dst`.
  struct Copy {
    std::byte* dst = nullptr;
    const std::byte* src = nullptr;
    std::size_t n = 0;
  };

  /// Copies every one of `copies` (which must not overlap), their bytes cut
  /// into one run per MiB up to one per thread, whatever the copies' sizes,
  /// with the calling thread copying the first run and waiting for the
  /// others; returns when every byte is copied. Many tensors of a few MiB
  /// then keep every thread busy at once, where a copy_here() each would
  /// wait on each one's pieces in turn.
  void copy_all_here(const std::vector<Copy>& copies) noexcept;

  /// copy_all_here() of one copy.
  void copy_here(std::byte* dst, const std::byte* src, std::size_t n) noexcept;

  /// Runs `job` (a copy of some other shape: a box out of a shard) on a
  /// worker thread; the future completes when it returns.
  Future<void> run(std::function<void()> job) noexcept;

  /// Runs `job` on a worker thread; the future completes with its Status
  /// (a CUDA copy, which blocks until the bytes are there).
  Future<void> run_checked(std::function<Status()> job) noexcept;

  /// Worker threads.
  int threads() const noexcept;

  /// Copies below this size run on the calling thread.
  static constexpr std::size_t kInlineBelow = std::size_t{256} << 10;

 private:
  CopyEngine();
  struct Impl;
  Impl* impl_;  // never destroyed: the engine lives until exit
};

}  // namespace meshstore::transports
