#include "meshstore/transports/host_identity.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace meshstore::transports {
namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string inode_of(const char* path) {
  struct stat st {};
  if (stat(path, &st) != 0) return "-";
  return std::to_string(static_cast<unsigned long long>(st.st_dev)) + "." +
         std::to_string(static_cast<unsigned long long>(st.st_ino));
}

std::string compute() {
  std::string boot = first_line("/proc/sys/kernel/random/boot_id");
  if (boot.empty()) {
    // No procfs: fall back to the hostname, the best we can do.
    char buf[256] = {};
    gethostname(buf, sizeof(buf) - 1);
    boot = std::string("host:") + buf;
  }
  return boot + "/net:" + inode_of("/proc/self/ns/net") + "/shm:" + inode_of("/dev/shm");
}

}  // namespace

const std::string& host_identity() {
  static const std::string id = compute();
  return id;
}

Status same_host(const std::string& host_id) {
  if (host_id == host_identity()) return Status();
  return Status(Errc::unsupported, "the volume is on another host (host identity '" + host_id +
                                       "', this process '" + host_identity() + "')");
}

}  // namespace meshstore::transports
