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

}  // namespace meshstore::testing
