#include "meshstore/transports/copy_engine.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "meshstore/internal/idle_spin.hpp"
#include "meshstore/internal/thread_name.hpp"
#include "meshstore/logging.hpp"

namespace meshstore::transports {

struct CopyEngine::Impl {
  std::mutex mu;  // guards jobs
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  std::vector<std::thread> workers;

  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !jobs.empty(); });
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job();
    }
  }
};

CopyEngine& CopyEngine::instance() {
  static CopyEngine* engine = new CopyEngine();  // never destroyed: used until exit
  return *engine;
}

namespace {

// Worker threads: MESHSTORE_COPY_THREADS (1 to 256) where set, else one per
// core this process may run on (internal::usable_cpus(): a rank bound to 2
// cores of a large host gets 2) up to 16 (at least 2). On a 16-core host, 16 threads took shm
// get_into from 0.60-0.79 to 0.90-0.91 x of a copy over every core, where 8
// fell short (docs/performance.md, "One tensor").
unsigned worker_count() {
  const unsigned hw = std::max(2u, internal::usable_cpus());
  const unsigned fallback = std::min(hw, 16u);
  const char* env = std::getenv("MESHSTORE_COPY_THREADS");
  if (!env || !*env) return fallback;
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  if (*end != '\0' || v < 1 || v > 256) {
    log::get("copy")->warn("MESHSTORE_COPY_THREADS='{}' is not a number from 1 to 256: using {}",
                           env, fallback);
    return fallback;
  }
  return static_cast<unsigned>(v);
}

// The bytes of each piece of a copy of `n` bytes split over `workers`
// threads: one piece per MiB up to one per thread, on 4 KiB boundaries so
// no two threads share a page.
std::size_t split_step(std::size_t n, std::size_t workers) {
  const std::size_t pieces =
      std::max<std::size_t>(1, std::min<std::size_t>(workers, n / (std::size_t{1} << 20)));
  return ((n / pieces) + 4095) & ~std::size_t{4095};
}

}  // namespace

CopyEngine::CopyEngine() : impl_(new Impl()) {
  const unsigned n = worker_count();
  for (unsigned i = 0; i < n; ++i) {
    impl_->workers.emplace_back([this] { impl_->run(); });
    internal::name_thread(impl_->workers.back().native_handle(), "ms.copy");
    // Detached: the engine outlives main's return; the OS ends the threads.
    impl_->workers.back().detach();
  }
}

int CopyEngine::threads() const noexcept { return static_cast<int>(impl_->workers.size()); }

Future<void> CopyEngine::run(std::function<void()> job) noexcept {
  auto promise =
      std::make_shared<Promise<void>>(Status(Errc::internal, "copy engine dropped a job"));
  auto fut = promise->future();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->jobs.push_back([job = std::move(job), promise] {
      job();
      promise->set_value();
    });
  }
  impl_->cv.notify_one();
  return fut;
}

Future<void> CopyEngine::run_checked(std::function<Status()> job) noexcept {
  auto promise =
      std::make_shared<Promise<void>>(Status(Errc::internal, "copy engine dropped a job"));
  auto fut = promise->future();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->jobs.push_back([job = std::move(job), promise] { promise->set(Result<void>(job())); });
  }
  impl_->cv.notify_one();
  return fut;
}

Future<void> CopyEngine::copy(std::byte* dst, const std::byte* src, std::size_t n,
                              std::size_t split_from) noexcept {
  if (n < kInlineBelow) {
    if (n) std::memcpy(dst, src, n);
    return make_ready_future();
  }
  auto promise =
      std::make_shared<Promise<void>>(Status(Errc::internal, "copy engine dropped a copy"));
  auto fut = promise->future();
  const std::size_t step = n >= split_from ? split_step(n, impl_->workers.size()) : n;
  auto left = std::make_shared<std::atomic<std::size_t>>(0);
  std::vector<std::function<void()>> jobs;
  for (std::size_t pos = 0; pos < n; pos += step) {
    const std::size_t len = std::min(step, n - pos);
    left->fetch_add(1);
    jobs.emplace_back([=] {
      std::memcpy(dst + pos, src + pos, len);
      if (left->fetch_sub(1) == 1) promise->set_value();
    });
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& j : jobs) impl_->jobs.push_back(std::move(j));
  }
  impl_->cv.notify_all();
  return fut;
}

void CopyEngine::copy_all_here(const std::vector<Copy>& copies) noexcept {
  std::size_t total = 0;
  for (const auto& c : copies) total += c.n;
  if (total == 0) return;
  // Runs of `step` bytes of the batch each (the last shorter), cut across
  // and inside copies.
  const std::size_t step = split_step(total, impl_->workers.size());
  std::vector<std::vector<Copy>> runs(1);
  std::size_t in_run = 0;
  for (const auto& c : copies) {
    for (std::size_t at = 0; at < c.n;) {
      if (in_run == step) {
        runs.emplace_back();
        in_run = 0;
      }
      const std::size_t len = std::min(c.n - at, step - in_run);
      runs.back().push_back(Copy{c.dst + at, c.src + at, len});
      at += len;
      in_run += len;
    }
  }
  auto copy_run = [](const std::vector<Copy>& run) {
    for (const auto& c : run) std::memcpy(c.dst, c.src, c.n);
  };
  std::vector<Future<void>> others;
  for (std::size_t r = 1; r < runs.size(); ++r) {
    others.push_back(run([&copy_run, &mine = runs[r]] { copy_run(mine); }));
  }
  copy_run(runs[0]);
  for (const auto& f : others) f.wait();
}

void CopyEngine::copy_here(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  if (split_step(n, impl_->workers.size()) >= n) {  // one run: no batch to build
    if (n > 0) std::memcpy(dst, src, n);
    return;
  }
  copy_all_here({Copy{dst, src, n}});
}

}  // namespace meshstore::transports
