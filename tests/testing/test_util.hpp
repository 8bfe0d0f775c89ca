#pragma once

// Helpers shared by meshstore's tests.

#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "meshstore/status.hpp"

namespace meshstore::testing {

/// How long a test waits on any future before calling it a hang.
constexpr std::chrono::seconds kWait{60};

inline ::testing::AssertionResult is_ok(const Status& s) {
  if (s.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << s.to_string();
}
template <class T>
::testing::AssertionResult is_ok(const Result<T>& r) {
  return is_ok(r.status());
}

/// Asserts `status` is an error with `code` whose message contains `needle`.
inline ::testing::AssertionResult is_error(const Status& s, Errc code,
                                           const std::string& needle = "") {
  if (s.ok()) return ::testing::AssertionFailure() << "expected " << errc_name(code) << ", got ok";
  if (s.code() != code) {
    return ::testing::AssertionFailure()
           << "expected " << errc_name(code) << ", got " << s.to_string();
  }
  if (!needle.empty() && s.message().find(needle) == std::string::npos) {
    return ::testing::AssertionFailure() << "message lacks '" << needle << "': " << s.to_string();
  }
  return ::testing::AssertionSuccess();
}
template <class T>
::testing::AssertionResult is_error(const Result<T>& r, Errc code, const std::string& needle = "") {
  return is_error(r.status(), code, needle);
}

/// Polls `pred` (every 5 ms) until it holds, for at most `bound`: for
/// what has no event to wait on (a process gone, a restart done).
template <class P>
bool eventually(P pred, std::chrono::milliseconds bound = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

/// The threads of process `pid` (0: this one), by /proc.
inline int thread_count(int pid = 0) {
  const std::string dir =
      pid == 0 ? std::string("/proc/self/task") : "/proc/" + std::to_string(pid) + "/task";
  int n = 0;
  if (auto* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

/// Whether every thread of process `pid` is stopped (state T in
/// /proc/PID/task/TID/stat): a SIGSTOP takes effect in each thread when it
/// next runs, which on a loaded host may be well after kill() returned.
inline bool all_threads_stopped(int pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  int threads = 0, stopped = 0;
  if (auto* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      ++threads;
      std::ifstream stat(dir + "/" + e->d_name + "/stat");
      std::string line;
      std::getline(stat, line);
      // The state follows the command, which is in parentheses.
      const auto close = line.rfind(')');
      if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T') {
        ++stopped;
      }
    }
    ::closedir(d);
  }
  return threads > 0 && stopped == threads;
}

/// How many threads of this process are named `name` (their comm, as
/// `top -H` and perf show it), by /proc.
inline int threads_named(const std::string& name) {
  int n = 0;
  if (auto* d = ::opendir("/proc/self/task")) {
    while (auto* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string got;
      if (std::getline(comm, got) && got == name) ++n;
    }
    ::closedir(d);
  }
  return n;
}

}  // namespace meshstore::testing

#define ASSERT_OK(expr) ASSERT_TRUE(::meshstore::testing::is_ok(expr))
#define EXPECT_OK(expr) EXPECT_TRUE(::meshstore::testing::is_ok(expr))
#define EXPECT_ERROR(expr, code, needle) \
  EXPECT_TRUE(::meshstore::testing::is_error((expr), (code), (needle)))
