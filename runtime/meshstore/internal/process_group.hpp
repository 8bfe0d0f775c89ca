#pragma once

// Child processes started and watched by a controller (ProcMesh::launch, the
// host agent): each in its own process group, its stdout and stderr read
// line by line by one pump thread, reaped when it exits, and tied to this
// process by a lifeline pipe, so that a child whose controller dies (even
// by SIGKILL) sees end-of-file on the lifeline and stops itself. Internal.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshstore/status.hpp"

namespace meshstore::internal {

/// The environment variable naming the lifeline's file descriptor in a child.
inline constexpr const char* kLifelineEnv = "MESHSTORE_LIFELINE_FD";

/// One process to start.
struct ProcessSpec {
  /// A path, or a name looked up on PATH (before the fork).
  std::string program;
  /// argv[1..].
  std::vector<std::string> args;
  /// Set in the child on top of this process's environment.
  std::vector<std::pair<std::string, std::string>> env;
};

/// Started processes, by index. Thread-safe.
class ProcessGroup {
 public:
  /// A line the process at `index` wrote (without its newline), on the pump
  /// thread.
  using OnLine = std::function<void(int index, bool is_stderr, const std::string& line)>;
  /// The process at `index` exited with waitpid's `status`, on the pump
  /// thread.
  using OnExit = std::function<void(int index, int status)>;

  /// Starts every spec. Errc::not_found naming a program that is not there
  /// or not executable; Errc::unavailable when fork or pipe fails (the
  /// processes already started are stopped).
  static Result<std::unique_ptr<ProcessGroup>> start(const std::vector<ProcessSpec>& specs,
                                                     OnLine on_line, OnExit on_exit);
  /// stop(grace 5 s).
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int size() const noexcept;
  /// The pid of process `index` (it may have exited).
  pid_t pid(int index) const;
  /// Whether process `index` has not been reaped yet.
  bool running(int index) const;
  /// Sends `sig` to process `index`'s process group. Errc::out_of_range for
  /// a bad index, Errc::unavailable once it exited.
  Status signal(int index, int sig);
  /// Starts process `index` again, once it has exited, with the same
  /// program, arguments and environment, on the pump thread (from any
  /// thread, on_exit's included; asynchronous: a start that fails is
  /// logged and leaves it exited). Errc::out_of_range for a bad index,
  /// Errc::invalid_argument while it runs, Errc::shutdown once the group
  /// stops.
  Status relaunch(int index);
  /// Lets the processes exit on their own (after being told to by other
  /// means) for grace / 2; then closes their lifeline and sends SIGTERM to
  /// those still running, and SIGKILL to those left after `grace`. Returns
  /// once all are reaped and their output is drained. Idempotent.
  void stop(std::chrono::milliseconds grace);

  /// waitpid's status in words: "exited with status 3", "was killed by
  /// signal 9 (Killed)".
  static std::string describe(int status);

 private:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// In a child: calls `on_eof` (on a thread of its own) once the lifeline
/// named by MESHSTORE_LIFELINE_FD reaches end-of-file, that is once the
/// controller that started this process is gone. A no-op answering false
/// when the variable is not set. The watch ends with the returned handle.
class LifelineWatch {
 public:
  LifelineWatch();
  ~LifelineWatch();
  LifelineWatch(const LifelineWatch&) = delete;
  LifelineWatch& operator=(const LifelineWatch&) = delete;
  /// Starts watching; false when this process has no lifeline.
  bool start(std::function<void()> on_eof);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshstore::internal
