#pragma once

// Whether this kernel (and its sandbox) lets a process open a pidfd, which
// lease-free and direct reads need to watch a volume's process (Linux 5.3):
// without it they are off, and the tests of them have nothing to check.

#include <sys/syscall.h>
#include <unistd.h>

namespace meshstore::testing {

inline bool have_pidfd() {
  const long fd = syscall(SYS_pidfd_open, getpid(), 0);
  if (fd < 0) return false;
  close(static_cast<int>(fd));
  return true;
}

}  // namespace meshstore::testing
