// StateDir: a server's lock and "serving" marker in its state directory.

#include "meshstore/store/state_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace meshstore::store {

namespace {

constexpr const char* kLock = "/lock";
constexpr const char* kMarker = "/serving";

std::string why(int err) { return std::strerror(err); }

// The address a marker names; "" when it cannot be read or parsed.
std::string address_in(const std::string& marker) {
  std::ifstream in(marker);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (!j.is_object() || !j.contains("address") || !j["address"].is_string()) return {};
  return j["address"].get<std::string>();
}

}  // namespace

Result<std::unique_ptr<StateDir>> StateDir::claim(const std::string& dir) {
  const std::string ctx = "StoreOptions: state_dir '" + dir + "'";
  struct stat st {};
  if (dir.empty() || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status(Errc::invalid_argument, ctx + ": not a directory");
  }
  const int fd = ::open((dir + kLock).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status(Errc::io_error, ctx + ": cannot open its lock: " + why(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err != EWOULDBLOCK) return Status(Errc::io_error, ctx + ": cannot lock it: " + why(err));
    const auto at = address_in(dir + kMarker);
    return Status(Errc::unavailable, ctx + ": another live server holds it" +
                                         (at.empty() ? std::string() : " (serving at " + at + ")") +
                                         "; one server per state directory");
  }
  std::unique_ptr<StateDir> held(new StateDir(dir, fd));
  struct stat marker {};
  if (::stat((dir + kMarker).c_str(), &marker) == 0) {
    held->restarted_ = true;
    held->last_address_ = address_in(dir + kMarker);
  }
  return held;
}

Status StateDir::serving(const std::string& address) {
  const std::string marker = dir_ + kMarker;
  const std::string tmp = marker + ".tmp";
  nlohmann::json j;
  j["address"] = address;
  j["pid"] = static_cast<long>(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump() << "\n";
    out.flush();
    if (!out) {
      ::unlink(tmp.c_str());
      return Status(Errc::io_error, "state_dir '" + dir_ + "': cannot write " + tmp);
    }
  }
  if (::rename(tmp.c_str(), marker.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status(Errc::io_error,
                  "state_dir '" + dir_ + "': cannot write " + marker + ": " + why(err));
  }
  wrote_ = true;
  return Status();
}

StateDir::~StateDir() {
  if (wrote_) ::unlink((dir_ + kMarker).c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

}  // namespace meshstore::store
