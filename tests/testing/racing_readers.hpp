#pragma once

// Readers racing a writer: the scaffolding of the "never a torn value"
// tests. Each value the writer puts has every byte equal, so a read that
// returns mixed bytes saw two versions at once.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "meshstore/status.hpp"

namespace meshstore::testing {

/// Whether every byte of `v` is the same (a value the writer put whole).
inline bool uniform(const std::vector<std::uint8_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](std::uint8_t b) { return b == v.front(); });
}

/// What the racing readers saw.
struct RaceCounts {
  int reads = 0;   // reads that succeeded
  int failed = 0;  // reads that returned an error
  int torn = 0;    // successful reads whose bytes were not uniform
};

/// Runs `readers` threads, each calling `read` into its own buffer of
/// `bytes` over and over, while `write(pace)` runs on this thread; once
/// `write` returns (its assertions may end it early), the readers stop and
/// are joined, and their counts come back. `write` calls `pace()` before
/// each of its writes: it returns once a read ended since the last call
/// (bounded: 10 s), so the reads overlap the writes however slow the host,
/// and `reads` is never 0 for want of time.
inline RaceCounts race_readers(std::size_t bytes, int readers,
                               const std::function<Status(std::vector<std::uint8_t>&)>& read,
                               const std::function<void(const std::function<void()>&)>& write) {
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, failed{0}, torn{0};
  std::mutex mu;
  std::condition_variable ended;  // a read ended
  int reads_ended = 0;            // under mu
  std::vector<std::thread> threads;
  for (int r = 0; r < readers; ++r) {
    threads.emplace_back([&] {
      std::vector<std::uint8_t> mine(bytes);
      while (!done.load()) {
        const bool ok = read(mine).ok();
        if (!ok) {
          ++failed;
        } else {
          ++reads;
          if (!uniform(mine)) ++torn;
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          ++reads_ended;
        }
        ended.notify_all();
      }
    });
  }
  int paced = 0;
  write([&] {
    std::unique_lock<std::mutex> lock(mu);
    ended.wait_for(lock, std::chrono::seconds(10), [&] { return reads_ended > paced; });
    paced = reads_ended;
  });
  done.store(true);
  for (auto& t : threads) t.join();
  return RaceCounts{reads.load(), failed.load(), torn.load()};
}

}  // namespace meshstore::testing
