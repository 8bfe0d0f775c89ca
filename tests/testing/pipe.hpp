#pragma once

// A forked child tells its parent a line (a segment's name) through a pipe:
// the tests that kill a child with SIGKILL and look at what it left.

#include <unistd.h>

#include <string>

namespace meshstore::testing {

/// Everything `fd` delivers until its writer closes it (or an error); `fd`
/// is closed.
inline std::string read_to_end(int fd) {
  std::string out;
  char buf[256];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

}  // namespace meshstore::testing
