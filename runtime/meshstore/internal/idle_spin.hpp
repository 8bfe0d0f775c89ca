#pragma once
// How threads that expect a reply soon wait for it: spinning (a busy core,
// an answer in about a microsecond) or sleeping (a free core, an answer
// after the kernel wakes the thread: 15-30 us on the 2-vCPU reference VM,
// more on the 16-core Firecracker host). Which pays depends on the host:
// on 2 vCPUs a spinner takes the core the thread it waits for needs; with
// many cores it takes a core nobody needs. docs/internals/wire-and-threads.md,
// "Scheduler threads and waiting", has the rule; docs/performance.md the
// figures.
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

namespace meshstore::internal {

/// The number of CPUs from which a process counts as one whose waiting
/// threads spin (spinning_host()).
inline constexpr unsigned kSpinningHostCores = 8;

/// The CPUs this process may use now: its affinity mask's (taskset, a
/// cpuset, srun's binding), else the host's hardware threads, and at most
/// what its cgroup's CPU quota allows, rounded up (a container's --cpus:
/// cgroup v2's cpu.max, v1's cpu.cfs_quota_us). Not cached.
unsigned usable_cpus();

/// CPUs a CPU quota of `quota_us` per `period_us` allows, rounded up; 0
/// for no quota (either not positive).
unsigned cpus_of_quota(long long quota_us, long long period_us);
/// cpus_of_quota of cgroup v2's cpu.max text ("200000 100000"); 0 for
/// "max ..." (no quota) and for text it cannot read.
unsigned cpus_of_cpu_max(const std::string& text);

/// Whether waiting threads spin in this process (read once):
/// MESHSTORE_SPIN=on or off where set, else (auto) whether it may use at
/// least kSpinningHostCores CPUs (usable_cpus()): a rank bound to 2 cores
/// of a large host, or a container allowed 2 CPUs of it, counts as small.
/// A bad value is logged and auto used.
bool spinning_host();

/// Polls an idle CAF scheduler worker makes before it sleeps on its
/// condition variable: MESHSTORE_SCHEDULER_POLLS (0 to 1,000,000) where
/// set, else 5,000 on a spinning host (a worker stays awake about 40 us
/// after its last message, so the next of a stream of small requests finds
/// it running: runtime_bench's BM_IdleSchedulerCpu) and CAF's own 100
/// elsewhere. Read once; a bad value is logged and the default used.
std::size_t scheduler_polls();

/// The CPU's hint that this thread is spinning.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

/// Spins until ready() or `spin` passed; returns ready()'s last answer.
template <class Ready>
bool spin_until(Ready ready, std::chrono::microseconds spin) {
  const auto end = std::chrono::steady_clock::now() + spin;
  for (unsigned i = 0;; ++i) {
    if (ready()) return true;
    if ((i & 63) == 0 && std::chrono::steady_clock::now() >= end) return ready();
    cpu_relax();
  }
}

}  // namespace meshstore::internal
