// store_bench --scenario soak --seconds N: a publisher and reader processes
// for N seconds, with readers killed (SIGKILL) and restarted at random.
// The publisher (this process) holds the store and publishes a state dict
// every round (publish_state_dict, keep 2), each version a pattern of its
// own; every reader follows the versions (get_next_state_dict_into) and
// checks every one it reads. Reports, each second, this process's resident
// memory and the store's /dev/shm bytes, and at the end whether both stayed
// within 1.2x of their level once warm (after the first minute, or the
// first third of a shorter run). Exits 1 when a reader read a wrong byte.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../bench_util.hpp"
#include "meshstore/store.hpp"
#include "peer.hpp"
#include "scenarios.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {

namespace {

constexpr int kReaders = 2;

// The state dict: a few large tensors and many small ones (packed).
struct Layout {
  std::vector<std::pair<std::string, std::int64_t>> tensors;  // name, elements (int32)
};

Layout layout(bool smoke) {
  Layout l;
  const std::int64_t big = smoke ? (1 << 16) : (1 << 21);  // 256 KiB / 8 MiB each
  for (int i = 0; i < 4; ++i) l.tensors.push_back({"big." + std::to_string(i), big});
  for (int i = 0; i < 64; ++i) l.tensors.push_back({"small." + std::to_string(i), 256});
  return l;
}

// Element e of tensor t in version v.
std::int32_t pattern(std::uint64_t v, std::size_t t, std::int64_t e) {
  return static_cast<std::int32_t>(v * 1000003u + t * 7919u + static_cast<std::uint64_t>(e));
}

struct Buffers {
  std::vector<std::vector<std::int32_t>> data;
  StateDict sd;
};

Buffers buffers(const Layout& l) {
  Buffers b;
  b.data.reserve(l.tensors.size());
  for (const auto& [name, n] : l.tensors) {
    b.data.emplace_back(static_cast<std::size_t>(n));
    must(b.sd.insert(name, TensorView::of(b.data.back().data(), {n})), "insert");
  }
  must(b.sd.insert("version", Value::int64(0)), "insert");
  return b;
}

// This process's resident bytes.
std::uint64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

// Bytes of /dev/shm segments this process created (meshstore names its
// segments meshstore.PID-START...; docs/shm.md).
std::uint64_t shm_bytes() {
  const std::string prefix = "meshstore." + std::to_string(getpid()) + "-";
  std::uint64_t total = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
      struct stat st {};
      if (stat(("/dev/shm/" + std::string(e->d_name)).c_str(), &st) == 0) {
        total += static_cast<std::uint64_t>(st.st_blocks) * 512;
      }
    }
    closedir(d);
  }
  return total;
}

struct Reader {
  std::unique_ptr<Child> child;
  std::thread drain;  // counts its "read V" lines
};

}  // namespace

// The reader process: follows the versions and checks each; prints "read V"
// per version, "bad V ..." and exits 3 on a wrong byte.
int run_soak_reader(const Args& a) {
  auto store = connect_helper(a, 1, "soak reader: connect");
  const Layout l = layout(a.smoke);
  Buffers b = buffers(l);
  std::uint64_t v = 0;
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) {
    auto got = store.state_dicts().get_next_into("soak", b.sd, v, 30s).get();
    if (!got.ok()) {
      if (got.status().code() == Errc::timeout) continue;
      std::fprintf(stderr, "soak reader: %s\n", got.status().to_string().c_str());
      return 2;
    }
    v = *got;
    if (b.sd.find("version")->value->as_int64() != static_cast<std::int64_t>(v)) {
      std::printf("bad %llu version value\n", static_cast<unsigned long long>(v));
      return 3;
    }
    for (std::size_t t = 0; t < l.tensors.size(); ++t) {
      const auto n = l.tensors[t].second;
      for (std::int64_t e : {std::int64_t{0}, n / 2, n - 1}) {
        if (b.data[t][static_cast<std::size_t>(e)] != pattern(v, t, e)) {
          std::printf("bad %llu tensor %zu element %lld\n", static_cast<unsigned long long>(v), t,
                      static_cast<long long>(e));
          std::fflush(stdout);
          return 3;
        }
      }
    }
    std::printf("read %llu\n", static_cast<unsigned long long>(v));
    std::fflush(stdout);
  }
}

void run_soak(const Args& a) {
  const int seconds = a.seconds > 0 ? a.seconds : (a.smoke ? 10 : 60);
  StoreOptions o;
  o.listen = "127.0.0.1:0";
  o.placement.local_rank = -1;
  auto store = must(Store::embedded(o), "soak: Store::embedded");
  const Layout l = layout(a.smoke);
  Buffers src = buffers(l);
  std::uint64_t bytes = 0;
  for (const auto& t : l.tensors) bytes += static_cast<std::uint64_t>(t.second) * 4;

  std::atomic<std::uint64_t> reads{0};
  std::atomic<bool> bad{false};
  std::mutex bad_mu;
  std::string bad_line;
  auto start_reader = [&] {
    Reader r;
    std::vector<std::string> args{"--peer",      "soak-read",
                                  "--port",      std::to_string(store.admin().port()),
                                  "--transport", a.transport};
    if (a.smoke) args.push_back("--smoke");
    r.child = spawn_self(args);
    FILE* from = r.child->from;
    char line[256];
    if (!std::fgets(line, sizeof(line), from) || std::strncmp(line, "ready", 5) != 0) {
      die("soak: a reader did not start");
    }
    r.drain = std::thread([from, &reads, &bad, &bad_mu, &bad_line] {
      char buf[256];
      while (std::fgets(buf, sizeof(buf), from)) {
        if (std::strncmp(buf, "read ", 5) == 0) {
          ++reads;
        } else if (std::strncmp(buf, "bad ", 4) == 0) {
          std::lock_guard<std::mutex> lock(bad_mu);
          bad_line = buf;
          bad = true;
        }
      }
    });
    return r;
  };
  auto stop_reader = [](Reader& r, bool kill) {
    if (kill) ::kill(r.child->pid, SIGKILL);
    r.child.reset();  // closes its stdin, reaps it, closes its stdout
    if (r.drain.joinable()) r.drain.join();
  };

  std::vector<Reader> readers;
  for (int i = 0; i < kReaders; ++i) readers.push_back(start_reader());
  std::mt19937 rng(22);
  const auto t0 = Clock::now();
  const double warm = std::min(60.0, seconds / 3.0);
  auto next_kill = t0 + std::chrono::milliseconds(1000 + rng() % 2000);
  auto next_sample = t0;
  std::uint64_t version = 0, kills = 0;
  std::uint64_t rss_base = 0, shm_base = 0, rss_peak = 0, shm_peak = 0;
  std::vector<std::string> samples;
  while (secs(t0) < seconds && !bad) {
    ++version;
    for (std::size_t t = 0; t < l.tensors.size(); ++t) {
      auto& d = src.data[t];
      for (std::size_t e = 0; e < d.size(); ++e)
        d[e] = pattern(version, t, static_cast<std::int64_t>(e));
    }
    must(src.sd.set_value("version", Value::int64(static_cast<std::int64_t>(version))), "value");
    must(store.state_dicts().publish("soak", src.sd, PublishOptions::by_copy(2)).get(120s),
         "soak: publish_state_dict");
    const auto now = Clock::now();
    if (now >= next_kill) {
      // A reader dies mid-whatever it was doing; a new one takes its place.
      const std::size_t victim = rng() % readers.size();
      stop_reader(readers[victim], true);
      readers[victim] = start_reader();
      ++kills;
      next_kill = now + std::chrono::milliseconds(1000 + rng() % 3000);
    }
    if (now >= next_sample) {
      const double at = secs(t0);
      const std::uint64_t rss = rss_bytes(), shm = shm_bytes();
      if (at >= warm) {
        // The level once warm: the first sample after the warm-up.
        if (rss_base == 0) rss_base = rss, shm_base = shm;
        rss_peak = std::max(rss_peak, rss);
        shm_peak = std::max(shm_peak, shm);
      }
      char line[160];
      std::snprintf(line, sizeof(line),
                    "%7.1f s  version %6llu  reads %7llu  rss %7.1f MB  shm %7.1f MB", at,
                    static_cast<unsigned long long>(version),
                    static_cast<unsigned long long>(reads.load()), rss / 1e6, shm / 1e6);
      samples.push_back(line);
      if (!a.json) std::fprintf(stderr, "%s\n", line);
      next_sample = now + 1s;
    }
  }
  for (auto& r : readers) stop_reader(r, true);
  store.close();
  const double rss_ratio = rss_base ? static_cast<double>(rss_peak) / rss_base : 0;
  const double shm_ratio = shm_base ? static_cast<double>(shm_peak) / shm_base : 0;
  const bool bounded = rss_ratio <= 1.2 && shm_ratio <= 1.2;
  if (a.json) {
    std::printf(
        "{\"scenario\":\"soak\",\"seconds\":%d,\"versions\":%llu,\"reads\":%llu,\"kills\":%llu,"
        "\"bytes_per_version\":%llu,\"wrong_reads\":%d,\"rss_warm_mb\":%.1f,\"rss_peak_mb\":%.1f,"
        "\"rss_peak_vs_warm\":%.3f,\"shm_warm_mb\":%.1f,\"shm_peak_mb\":%.1f,"
        "\"shm_peak_vs_warm\":%.3f,\"bounded\":%s}\n",
        seconds, static_cast<unsigned long long>(version),
        static_cast<unsigned long long>(reads.load()), static_cast<unsigned long long>(kills),
        static_cast<unsigned long long>(bytes), bad ? 1 : 0, rss_base / 1e6, rss_peak / 1e6,
        rss_ratio, shm_base / 1e6, shm_peak / 1e6, shm_ratio, bounded ? "true" : "false");
  } else {
    std::printf(
        "scenario soak: %d s, %llu versions of %.1f MB published, %llu read by %d readers, "
        "%llu reader kills\n",
        seconds, static_cast<unsigned long long>(version), bytes / 1e6,
        static_cast<unsigned long long>(reads.load()), kReaders,
        static_cast<unsigned long long>(kills));
    std::printf("  every version read was checked: %s\n", bad ? "A WRONG READ" : "all right");
    std::printf("  resident memory: %.1f MB once warm (%.0f s), peak %.1f MB after: %.2f x\n",
                rss_base / 1e6, warm, rss_peak / 1e6, rss_ratio);
    std::printf("  /dev/shm:        %.1f MB once warm, peak %.1f MB after: %.2f x\n",
                shm_base / 1e6, shm_peak / 1e6, shm_ratio);
    std::printf("  bounded (both at most 1.2 x): %s\n", bounded ? "yes" : "NO");
  }
  if (bad) {
    std::fprintf(stderr, "store_bench soak: a reader read a wrong byte: %s", bad_line.c_str());
    std::exit(1);
  }
}

}  // namespace meshstore::bench
