#pragma once

#include "meshstore/transports/shm/shm_segment.hpp"

// Runs programs for multi-process tests: start, signal, wait with a bound,
// and collect stdout+stderr.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

namespace meshstore::testing {

/// A child process whose stdout and stderr go to one pipe the test reads.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      for (const auto& kv : env) putenv(const_cast<char*>(kv.c_str()));
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    fcntl(fd_, F_SETFL, O_NONBLOCK);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      // A killed store process cannot unlink its shared memory: do it for it,
      // so the suite's leak check sees only what meshstore itself leaked.
      meshstore::transports::shm::garbage_collect(false, pid_);
    }
    if (fd_ >= 0) close(fd_);
  }

  pid_t pid() const { return pid_; }
  void signal(int sig) { kill(pid_, sig); }

  /// Waits until the child exits (true) or `timeout` passes (false),
  /// collecting its output meanwhile.
  bool wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exited_) {
      pump(50);
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        status_ = status;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
    }
    while (pump(0)) {
    }
    return true;
  }

  /// Waits until the output contains `needle` or `timeout` passes.
  bool wait_for_output(const std::string& needle, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (output_.find(needle) == std::string::npos) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      pump(50);
    }
    return true;
  }

  /// Exit code, or 128 + signal number; -1 while running.
  int exit_code() const {
    if (!exited_) return -1;
    if (WIFEXITED(status_)) return WEXITSTATUS(status_);
    return 128 + WTERMSIG(status_);
  }
  const std::string& output() const { return output_; }

 private:
  // Reads what is available; true if anything was read.
  bool pump(int timeout_ms) {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN, 0};
    poll(&p, 1, timeout_ms);
    char buf[65536];
    bool any = false;
    for (;;) {
      ssize_t n = read(fd_, buf, sizeof(buf));
      if (n <= 0) break;
      output_.append(buf, static_cast<std::size_t>(n));
      any = true;
    }
    return any;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string output_;
};

/// The address a `meshstore serve` child prints ("serving on HOST:PORT" on
/// loopback), once it has (within `timeout`); "" if it did not.
inline std::string served_address(Child& serve, std::chrono::milliseconds timeout) {
  if (!serve.wait_for_output("serving on", timeout)) return "";
  std::smatch m;
  const std::string out = serve.output();
  if (!std::regex_search(out, m, std::regex("serving on (127\\.0\\.0\\.1:[0-9]+)"))) return "";
  return m[1];
}

/// True while a process with `pid` exists (and is not a zombie of ours).
inline bool process_alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

}  // namespace meshstore::testing
