#include "meshstore/transports/shm/shm_segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <utility>

namespace meshstore::transports::shm {
namespace {

constexpr const char* kShmDir = "/dev/shm/";

// Field 22 of /proc/<pid>/stat: the process's start time in clock ticks
// since boot. With the pid it names a process uniquely (pids are reused).
std::string start_time_of(long pid) { return proc_stat_field(pid, 22); }

std::string errno_text(int e) { return std::strerror(e); }

// The creator a segment name ("meshstore.<pid>-<start>...") names: its
// pid and start time; nullopt when the name does not parse.
std::optional<std::pair<long, std::string>> creator_of(const std::string& name) {
  if (name.rfind(kSegmentPrefix, 0) != 0) return std::nullopt;
  const std::string rest = name.substr(std::strlen(kSegmentPrefix));
  const auto dash = rest.find('-');
  const auto dot = rest.find('.');
  if (dash == std::string::npos || dot == std::string::npos || dash > dot) return std::nullopt;
  char* end = nullptr;
  const long pid = std::strtol(rest.c_str(), &end, 10);
  if (end != rest.c_str() + dash || pid <= 0) return std::nullopt;
  return std::make_pair(pid, rest.substr(dash + 1, dot - dash - 1));
}

// The owner of segment `name` is alive. Unparseable names count as alive:
// never remove what we do not understand.
bool owner_alive(const std::string& name) {
  const auto creator = creator_of(name);
  if (!creator) return true;
  const auto& [pid, start] = *creator;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  const std::string now = start_time_of(pid);
  // A live pid with another start time is a reused pid: the owner is gone.
  return now.empty() || now == start;
}

}  // namespace

ProcessWatch::ProcessWatch(long pid, const std::string& start_time) {
  if (pid <= 0) return;
  const long fd = syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  if (fd < 0) return;  // gone already, or no pidfd (a kernel before 5.3)
  fd_ = static_cast<int>(fd);
  // Checked after the pidfd holds the process: a reused pid is another one.
  if (!start_time.empty() && start_time_of(pid) != start_time) {
    ::close(fd_);
    fd_ = -1;
  }
}

std::unique_ptr<ProcessWatch> ProcessWatch::of_segment_prefix(const std::string& prefix) {
  const auto creator = creator_of(prefix);
  if (!creator) return nullptr;
  return std::make_unique<ProcessWatch>(creator->first, creator->second);
}

ProcessWatch::~ProcessWatch() {
  if (fd_ >= 0) ::close(fd_);
}

bool ProcessWatch::alive() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;  // readable (or an error): it exited
}

std::string proc_stat_field(long pid, int field) {
  if (field < 3) return "";
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return "";
  // The command name (field 2) may hold spaces; it ends at the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return "";
  std::istringstream rest(line.substr(close + 2));
  std::string value;
  for (int i = 3; i <= field; ++i) {
    if (!(rest >> value)) return "";
  }
  return value;
}

std::int64_t object_header_at(const std::byte* head, std::size_t size, std::uint64_t offset,
                              std::uint64_t nbytes) {
  if (offset < kObjectHeaderBytes || offset > size || nbytes > size - offset) return -1;
  const std::uint64_t header = offset - kObjectHeaderBytes;
  if (header == 0) return 0;  // a segment of one region
  SlabHeader slab;
  std::memcpy(&slab, head, sizeof(slab));
  if (slab.magic != kSlabMagic || slab.slot_bytes <= kObjectHeaderBytes ||
      slab.slot_bytes % kObjectHeaderBytes != 0 || header < kSlabHeaderBytes ||
      (header - kSlabHeaderBytes) % slab.slot_bytes != 0 ||
      nbytes > slab.slot_bytes - kObjectHeaderBytes) {
    return -1;
  }
  return static_cast<std::int64_t>(header);
}

std::string process_prefix() {
  // Computed again in a child after fork(): its segments must carry its
  // own pid, or gc would take them for the (live) parent's.
  static std::mutex mu;
  static pid_t for_pid = 0;
  static std::string prefix;
  std::lock_guard<std::mutex> lock(mu);
  if (for_pid != getpid()) {
    for_pid = getpid();
    prefix =
        std::string(kSegmentPrefix) + std::to_string(for_pid) + "-" + start_time_of(for_pid) + ".";
  }
  return prefix;
}

Result<std::unique_ptr<Segment>> Segment::create(const std::string& name, std::size_t nbytes) {
  const std::size_t size = nbytes == 0 ? 1 : nbytes;
  const std::string path = "/" + name;
  const int fd = shm_open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    return Status(
        e == ENOSPC || e == EMFILE || e == ENFILE ? Errc::out_of_capacity : Errc::io_error,
        "shm_open('" + name + "'): " + errno_text(e));
  }
  // posix_fallocate, not ftruncate alone: it reserves the pages now, so a
  // full /dev/shm is an error here instead of a SIGBUS at the first write.
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(size)); e != 0) {
    close(fd);
    shm_unlink(path.c_str());
    return Status(e == ENOSPC ? Errc::out_of_capacity : Errc::io_error,
                  "cannot reserve " + std::to_string(size) + " bytes in /dev/shm for segment '" +
                      name + "': " + errno_text(e));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int e = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(path.c_str());
    return Status(
        e == ENOMEM ? Errc::out_of_capacity : Errc::io_error,
        "mmap of segment '" + name + "' (" + std::to_string(size) + " bytes): " + errno_text(e));
  }
  return std::unique_ptr<Segment>(new Segment(name, static_cast<std::byte*>(p), size, true));
}

Result<std::unique_ptr<Segment>> Segment::open(const std::string& name, bool read_only) {
  const std::string path = "/" + name;
  const int fd = shm_open(path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC, 0);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) {
      return Status(Errc::not_found, "shm segment '" + name + "' is gone");
    }
    if (e == EACCES || e == EPERM) {
      return Status(Errc::unavailable,
                    "shm segment '" + name + "' belongs to another user: " + errno_text(e));
    }
    return Status(Errc::io_error, "shm_open('" + name + "'): " + errno_text(e));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return Status(Errc::io_error, "fstat of shm segment '" + name + "': " + errno_text(e));
  }
  if (st.st_size <= 0) {
    close(fd);
    return Status(Errc::io_error, "shm segment '" + name + "' is empty (0 bytes)");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  const int prot = read_only ? PROT_READ : PROT_READ | PROT_WRITE;
  void* p = mmap(nullptr, size, prot, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int e = errno;
  close(fd);
  if (p == MAP_FAILED) {
    return Status(e == ENOMEM ? Errc::out_of_capacity : Errc::io_error,
                  "mmap of shm segment '" + name + "': " + errno_text(e));
  }
  return std::unique_ptr<Segment>(new Segment(name, static_cast<std::byte*>(p), size, false));
}

Segment::~Segment() {
  munmap(data_, size_);
  if (owner_) shm_unlink(("/" + name_).c_str());
}

void Segment::unlink() noexcept {
  remove_segment(name_);
  owner_ = false;
}

void remove_segment(const std::string& name) noexcept { shm_unlink(("/" + name).c_str()); }

bool segment_exists(const std::string& name) {
  struct stat st {};
  return stat((kShmDir + name).c_str(), &st) == 0;
}

GcReport garbage_collect(bool dry_run, long only_pid) {
  GcReport report;
  DIR* dir = opendir(kShmDir);
  if (!dir) return report;
  const std::size_t plen = std::strlen(kSegmentPrefix);
  const std::string pid_prefix =
      only_pid > 0 ? std::string(kSegmentPrefix) + std::to_string(only_pid) + "-" : "";
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.compare(0, plen, kSegmentPrefix) != 0) continue;
    if (!pid_prefix.empty() && name.compare(0, pid_prefix.size(), pid_prefix) != 0) continue;
    if (owner_alive(name)) {
      ++report.live;
      continue;
    }
    struct stat st {};
    const std::uint64_t bytes =
        stat((kShmDir + name).c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    if (dry_run || shm_unlink(("/" + name).c_str()) == 0) {
      report.removed.push_back(name);
      report.bytes_freed += bytes;
    }
  }
  closedir(dir);
  return report;
}

std::vector<std::string> own_segments() {
  std::vector<std::string> out;
  DIR* dir = opendir(kShmDir);
  if (!dir) return out;
  const std::string prefix = process_prefix();
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) == 0) out.push_back(name);
  }
  closedir(dir);
  return out;
}

}  // namespace meshstore::transports::shm
