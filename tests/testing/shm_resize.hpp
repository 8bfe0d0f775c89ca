#pragma once

// Resizes a shared-memory segment as its owner (or a hostile client) could,
// under whoever has it mapped: the PeerMemory tests shrink a ring or a side
// buffer under the volume that maps it.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace meshstore::testing {

/// Sets segment `name` (without the leading '/') to `bytes` bytes.
inline void resize_segment(const std::string& name, off_t bytes) {
  const int fd = shm_open(("/" + name).c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
  EXPECT_EQ(ftruncate(fd, bytes), 0) << name << ": " << std::strerror(errno);
  close(fd);
}

/// A descriptor of segment `name`, opened while it still has a name, that
/// resizes it later: what a hostile client that kept its descriptor can do
/// to a ring whose name the volume took as it attached.
class SegmentHandle {
 public:
  explicit SegmentHandle(const std::string& name)
      : name_(name), fd_(shm_open(("/" + name).c_str(), O_RDWR, 0)) {
    EXPECT_GE(fd_, 0) << name << ": " << std::strerror(errno);
  }
  ~SegmentHandle() {
    if (fd_ >= 0) close(fd_);
  }
  SegmentHandle(const SegmentHandle&) = delete;
  SegmentHandle& operator=(const SegmentHandle&) = delete;
  void resize(off_t bytes) {
    EXPECT_EQ(ftruncate(fd_, bytes), 0) << name_ << ": " << std::strerror(errno);
  }

 private:
  std::string name_;
  int fd_;
};

}  // namespace meshstore::testing
