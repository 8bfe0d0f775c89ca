#pragma once
// What the benchmarks share: failing loudly, timing, medians, and starting
// this program again as the other process of a measurement.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/status.hpp"

extern char** environ;

namespace meshstore::bench {

/// Prints "PROGRAM: why" and exits with 1.
[[noreturn]] inline void die(const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, why.c_str());
  std::exit(1);
}

/// The value of `r`, or die naming `what` and the status.
template <class T>
T must(Result<T> r, const char* what) {
  if (!r.ok()) die(std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}
inline void must(Result<void> r, const char* what) {
  if (!r.ok()) die(std::string(what) + ": " + r.status().to_string());
}

/// The clock every figure is timed with.
using Clock = std::chrono::steady_clock;

/// Seconds since `t0`.
inline double secs(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// The median (the upper one of an even count); `v` must not be empty.
inline double median(std::vector<double> v) {
  if (v.empty()) die("median of no samples");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The `p` quantile of `v` (0 <= p < 1), by nearest rank; `v` must not be
/// empty.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) die("percentile of no samples");
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

/// This program's path.
inline std::string own_path() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) die("readlink /proc/self/exe");
  return std::string(exe, static_cast<std::size_t>(n));
}

/// The directory this program lies in (build/bin: the scripts and programs
/// the benchmarks run lie there too).
inline std::string own_dir() {
  const std::string path = own_path();
  return path.substr(0, path.rfind('/'));
}

/// A child process whose stdin and stdout are pipes to this one. Dropping
/// it closes its stdin (the child's cue to stop), reaps it, then closes its
/// stdout.
struct Child {
  pid_t pid = -1;
  FILE* to = nullptr;    ///< the child's stdin
  FILE* from = nullptr;  ///< the child's stdout
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (to) std::fclose(to);
    if (pid > 0) ::waitpid(pid, nullptr, 0);
    if (from) std::fclose(from);
  }
};

/// Starts `program` with `args` (after the program name) as a Child; with
/// `with_stderr` its stderr comes through `from` too.
inline std::unique_ptr<Child> spawn(const std::string& program, std::vector<std::string> args,
                                    bool with_stderr = false) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) die("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  if (with_stderr) posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  args.insert(args.begin(), program);
  std::vector<char*> argv;
  for (auto& x : args) argv.push_back(x.data());
  argv.push_back(nullptr);
  auto child = std::make_unique<Child>();
  const int rc = posix_spawn(&child->pid, program.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    child->pid = -1;
    die("starting " + program + ": " + std::strerror(rc));
  }
  child->to = ::fdopen(in[1], "w");
  child->from = ::fdopen(out[0], "r");
  return child;
}

/// One piece of a copy: `n` bytes from `src` to `dst`.
struct CopyPiece {
  void* dst;
  const void* src;
  std::size_t n;
};

/// The threads "memcpy, all cores" uses: every core the machine has.
inline unsigned all_cores() { return std::max(1u, std::thread::hardware_concurrency()); }

/// memcpy split evenly by bytes over every core: one range on the calling
/// thread, the others on threads that already run (as a copy engine's do),
/// so a round times the copy and its hand-off, not thread starts. The
/// host's copy bandwidth: the limit a copy spread over threads can reach.
class AllCoresCopier {
 public:
  explicit AllCoresCopier(unsigned threads = all_cores()) : ranges_(threads) {
    for (unsigned t = 1; t < threads; ++t) workers_.emplace_back([this, t] { work(t); });
  }
  ~AllCoresCopier() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& w : workers_) w.join();
  }
  /// Copies `pieces` (a piece may be split between two threads); returns
  /// the seconds taken.
  double copy(const std::vector<CopyPiece>& pieces) {
    std::size_t total = 0;
    for (const auto& p : pieces) total += p.n;
    const std::size_t share = (total + ranges_.size() - 1) / ranges_.size();
    const auto t0 = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      pieces_ = &pieces;
      for (std::size_t t = 0; t < ranges_.size(); ++t) {
        ranges_[t] = {std::min(total, t * share), std::min(total, (t + 1) * share)};
      }
      pending_ = workers_.size();
      ++round_;
    }
    start_.notify_all();
    copy_range(pieces, ranges_[0]);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    return secs(t0);
  }

 private:
  using Range = std::pair<std::size_t, std::size_t>;
  static void copy_range(const std::vector<CopyPiece>& pieces, Range r) {
    std::size_t at = 0;
    for (const auto& p : pieces) {
      const std::size_t lo = std::max(r.first, at), hi = std::min(r.second, at + p.n);
      if (lo < hi) {
        std::memcpy(static_cast<char*>(p.dst) + (lo - at),
                    static_cast<const char*>(p.src) + (lo - at), hi - lo);
      }
      at += p.n;
      if (at >= r.second) break;
    }
  }
  void work(unsigned t) {
    std::uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || round_ != seen; });
      if (stop_) return;
      seen = round_;
      const auto* pieces = pieces_;
      const Range r = ranges_[t];
      lock.unlock();
      copy_range(*pieces, r);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mu_;  // guards everything below but the threads
  std::condition_variable start_, done_;
  const std::vector<CopyPiece>* pieces_ = nullptr;
  std::vector<Range> ranges_;
  std::size_t pending_ = 0;
  std::uint64_t round_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

/// One "memcpy, all cores" round of `pieces` on a process-wide copier.
inline double memcpy_all_cores(const std::vector<CopyPiece>& pieces) {
  static AllCoresCopier copier;
  return copier.copy(pieces);
}

/// Starts this program again with `args`.
inline std::unique_ptr<Child> spawn_self(std::vector<std::string> args) {
  return spawn("/proc/self/exe", std::move(args));
}

/// Where iproute2's `ip` is; dies when it is not installed.
inline std::string ip_tool() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  die("ip (iproute2) is not installed: --peer-netns needs it");
}

/// This program, with `args`, in network namespace `netns` (ip netns exec:
/// the child is this program once it starts).
inline std::unique_ptr<Child> spawn_in_netns(const std::string& netns,
                                             std::vector<std::string> args) {
  args.insert(args.begin(), {"netns", "exec", netns, own_path()});
  return spawn(ip_tool(), std::move(args));
}

}  // namespace meshstore::bench
