#include "meshstore/internal/idle_spin.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/logging.hpp"

namespace meshstore::internal {

namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// This process's cgroup paths from /proc/self/cgroup: v2's ("0::PATH") and
// v1's cpu controller's ("N:cpu,cpuacct:PATH").
void cgroup_paths(std::string* v2, std::string* v1_cpu) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (controllers.empty()) {
      *v2 = path;
      continue;
    }
    std::stringstream list(controllers);
    std::string c;
    while (std::getline(list, c, ',')) {
      if (c == "cpu") *v1_cpu = path;
    }
  }
}

// The CPUs this process's cgroup CPU quota allows, 0 for none (or none
// found): cgroup v2's cpu.max, else v1's cfs quota, in the process's own
// cgroup or at the mount's root (a container's view).
unsigned quota_cpus() {
  std::string v2, v1;
  cgroup_paths(&v2, &v1);
  std::vector<std::string> v2_files{"/sys/fs/cgroup/cpu.max"};
  if (!v2.empty() && v2 != "/")
    v2_files.insert(v2_files.begin(), "/sys/fs/cgroup" + v2 + "/cpu.max");
  for (const auto& f : v2_files) {
    const std::string text = read_line(f);
    if (!text.empty()) return cpus_of_cpu_max(text);
  }
  std::vector<std::string> v1_dirs;
  for (const std::string mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    if (!v1.empty() && v1 != "/") v1_dirs.push_back(mount + v1);
    v1_dirs.push_back(mount);
  }
  for (const auto& d : v1_dirs) {
    const std::string quota = read_line(d + "/cpu.cfs_quota_us");
    const std::string period = read_line(d + "/cpu.cfs_period_us");
    if (quota.empty() || period.empty()) continue;
    return cpus_of_quota(std::atoll(quota.c_str()), std::atoll(period.c_str()));
  }
  return 0;
}

}  // namespace

unsigned cpus_of_quota(long long quota_us, long long period_us) {
  if (quota_us <= 0 || period_us <= 0) return 0;
  return static_cast<unsigned>(std::max<long long>(1, (quota_us + period_us - 1) / period_us));
}

unsigned cpus_of_cpu_max(const std::string& text) {
  std::istringstream in(text);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max") return 0;
  char* end = nullptr;
  const long long q = std::strtoll(quota.c_str(), &end, 10);
  if (*end != '\0') return 0;
  return cpus_of_quota(q, period);
}

unsigned usable_cpus() {
  unsigned n = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    n = static_cast<unsigned>(CPU_COUNT(&set));
  }
  if (const unsigned q = quota_cpus(); q > 0) n = std::min(n, q);
  return n;
}

bool spinning_host() {
  static const bool spinning = [] {
    const bool by_cpus = usable_cpus() >= kSpinningHostCores;
    const char* env = std::getenv("MESHSTORE_SPIN");
    if (!env || !*env) return by_cpus;
    const std::string v = env;
    if (v == "on" || v == "1") return true;
    if (v == "off" || v == "0") return false;
    if (v != "auto") {
      log::get("runtime")->warn("MESHSTORE_SPIN='{}' is not on, off or auto: using auto ({})", v,
                                by_cpus ? "on" : "off");
    }
    return by_cpus;
  }();
  return spinning;
}

std::size_t scheduler_polls() {
  // On the 16-core H200 host, 5,000 polls took a 4 KiB put across
  // processes from 56-67 to 35-40 us (p50), CAF's 100 leaving the worker
  // asleep when the ring's thread hands it the put; on the 2-vCPU VM they
  // made an actor 4 x slower to reach after 200 us idle (64 against 15
  // us), the spinning workers holding both cores (docs/performance.md,
  // "On the 16-core host: waking threads").
  static const std::size_t polls = [] {
    const std::size_t fallback = spinning_host() ? 5000 : 100;
    const char* env = std::getenv("MESHSTORE_SCHEDULER_POLLS");
    if (!env || !*env) return fallback;
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end != '\0' || v < 0 || v > 1000000) {
      log::get("runtime")->warn(
          "MESHSTORE_SCHEDULER_POLLS='{}' is not a number from 0 to 1000000: using {}", env,
          fallback);
      return fallback;
    }
    return static_cast<std::size_t>(v);
  }();
  return polls;
}

}  // namespace meshstore::internal
