// store_bench --scenario safetensors-load: a model-like safetensors
// checkpoint loaded from the page cache by a loader process (run_loader)
// into the store in the peer process, or into the loader's own buffers,
// against plain read() of its files; with the peak resident memory of each.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../bench_util.hpp"
#include "meshstore/checkpoint.hpp"
#include "meshstore/safetensors.hpp"
#include "meshstore/store.hpp"
#include "peer.hpp"
#include "scenarios.hpp"

namespace meshstore::bench {

namespace {

// Peak resident memory of this process (VmHWM), in bytes.
std::uint64_t peak_rss() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (std::fgets(line, sizeof(line), f)) {
    if (std::sscanf(line, "VmHWM: %llu kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb * 1024;
}

// Reads every file of the checkpoint with plain read() into `buffer` (as
// large as the largest file): the baseline.
double read_files(const meshstore::safetensors::Checkpoint& c, std::vector<char>& buffer) {
  const auto t0 = Clock::now();
  for (const auto& f : c.files) {
    const int fd = open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::perror("store_bench: open");
      std::exit(1);
    }
    std::size_t at = 0;
    for (;;) {
      const ssize_t n = read(fd, buffer.data() + at, buffer.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    close(fd);
  }
  return secs(t0);
}

}  // namespace

// The loader peer: connects to the store and, by --load-mode, times loads
// ("time": read() baseline, load into the store, load into buffers, each
// --iters rounds after a warm-up; prints "times READ STORE BUFFERS COLD"),
// or does one load and reports its peak memory ("rss-store",
// "rss-buffers": prints "rss BYTES").
int run_loader(const Args& a) {
  auto c = must(meshstore::safetensors::open_checkpoint(a.dir), "loader: open_checkpoint");
  if (a.load_mode == "rss-buffers") {
    // Every tensor into buffers of its own, as a model would hold them.
    std::vector<meshstore::Tensor> buffers;
    for (const auto& f : c.files) {
      for (const auto& t : f.header().tensors) {
        auto b = must(meshstore::Tensor::empty(t.dtype, t.shape), "loader: buffer");
        must(meshstore::read_tensor_into(c, t.name, b.view()), "loader: read_tensor_into");
        f.release(t.name);
        buffers.push_back(std::move(b));
      }
    }
    std::printf("rss %llu\n", static_cast<unsigned long long>(peak_rss()));
    return 0;
  }
  auto store = connect_helper(a, 3, "loader: connect");
  meshstore::LoadOptions lo;
  lo.prefix = "ckpt";
  lo.batch_bytes = std::uint64_t{64} << 20;
  if (a.load_mode == "rss-store") {
    must(meshstore::load_checkpoint(store, a.dir, lo), "loader: load_checkpoint");
    std::printf("rss %llu\n", static_cast<unsigned long long>(peak_rss()));
    store.close();
    return 0;
  }
  std::uint64_t largest = 0;
  for (const auto& f : c.files) largest = std::max<std::uint64_t>(largest, f.size());
  std::vector<char> buffer(largest, 1);  // touched: no first-touch faults in the baseline
  std::vector<meshstore::Tensor> buffers;
  for (const auto& f : c.files) {
    for (const auto& t : f.header().tensors) {
      auto b = must(meshstore::Tensor::zeros(t.dtype, t.shape), "loader: buffer");
      buffers.push_back(std::move(b));
    }
  }
  read_files(c, buffer);  // the page cache is warm
  auto t0 = Clock::now();
  must(meshstore::load_checkpoint(store, a.dir, lo), "loader: load_checkpoint");
  const double cold = secs(t0);  // fresh segments at the volume
  std::vector<double> rd, st, bf;
  for (int i = 0; i < a.iters; ++i) {
    rd.push_back(read_files(c, buffer));
    t0 = Clock::now();
    must(meshstore::load_checkpoint(store, a.dir, lo), "loader: load_checkpoint");
    st.push_back(secs(t0));
    t0 = Clock::now();
    std::size_t k = 0;
    for (const auto& f : c.files) {
      for (const auto& t : f.header().tensors) {
        must(meshstore::read_tensor_into(c, t.name, buffers[k++].view()), "loader: read");
        f.release(t.name);
      }
    }
    bf.push_back(secs(t0));
  }
  std::printf("times %.6f %.6f %.6f %.6f\n", median(rd), median(st), median(bf), cold);
  std::fflush(stdout);
  store.close();
  return 0;
}

void run_safetensors_load(const Args& a) {
  namespace st = meshstore::safetensors;
  const std::uint64_t want =
      a.smoke ? (std::uint64_t{16} << 20) : (a.bytes_given ? a.bytes : (std::uint64_t{2} << 30));
  const int iters = a.iters ? a.iters : (a.smoke ? 1 : 3);
  // A model-like checkpoint: [rows, 4096] bf16 matrices and small norms,
  // in files of at most 1 GiB with the index.
  const std::int64_t cols = 4096;
  const std::int64_t matrices = 32;
  const std::int64_t rows =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(want / (matrices * cols * 2)));
  std::vector<std::pair<std::string, meshstore::Shape>> tensors;
  for (std::int64_t i = 0; i < matrices; ++i) {
    tensors.push_back({"model.layers." + std::to_string(i) + ".weight", {rows, cols}});
    tensors.push_back({"model.layers." + std::to_string(i) + ".norm", {cols}});
  }
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0;
  for (const auto& [n, shape] : tensors) {
    sizes.push_back(static_cast<std::uint64_t>(meshstore::shape_numel(shape)) * 2);
    total += sizes.back();
  }
  char tmpl[] = "/tmp/store_bench-ckpt-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  if (!a.json) std::fprintf(stderr, "store_bench safetensors-load: writing %s\n", dir.c_str());
  const auto [file_of, files] = st::plan_shards(sizes, std::uint64_t{1} << 30);
  std::map<std::string, std::string> weight_map;
  for (std::size_t f = 0; f < files; ++f) {
    const std::string name = files == 1 ? "model.safetensors" : st::shard_file_name(f, files);
    std::vector<st::Writer::Spec> specs;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (file_of[i] != f) continue;
      specs.push_back({tensors[i].first, meshstore::DType::bfloat16, tensors[i].second});
      weight_map[tensors[i].first] = name;
    }
    auto w = must(st::Writer::open(dir + "/" + name, specs), "writing the checkpoint");
    for (const auto& s : specs) {
      auto v = must(w.tensor(s.name), "writer tensor");
      auto* p = static_cast<std::uint16_t*>(v.data());
      for (std::int64_t i = 0; i < v.numel(); ++i) p[i] = static_cast<std::uint16_t>(i * 7 + 3);
    }
    must(w.commit(), "committing the checkpoint");
  }
  if (files > 1) must(st::write_index(dir, total, weight_map), "writing the index");

  auto peer = start_peer();
  auto ask = [&](const std::string& mode) {
    std::vector<std::string> args{"--peer",      "load",
                                  "--port",      std::to_string(peer->store_port),
                                  "--dir",       dir,
                                  "--load-mode", mode,
                                  "--iters",     std::to_string(iters),
                                  "--transport", a.transport};
    auto loader = spawn_self(args);
    char line[256] = {0};
    if (!std::fgets(line, sizeof(line), loader->from)) {
      die("the loader (" + mode + ") failed");
    }
    loader.reset();  // closes its stdin, waits for it
    return std::string(line);
  };
  if (!a.json) std::fprintf(stderr, "store_bench safetensors-load: timing\n");
  double rd = 0, stt = 0, bf = 0, cold = 0;
  if (std::sscanf(ask("time").c_str(), "times %lf %lf %lf %lf", &rd, &stt, &bf, &cold) != 4) {
    std::fprintf(stderr, "store_bench: the loader reported no times\n");
    std::exit(1);
  }
  unsigned long long rss_store = 0, rss_buffers = 0;
  std::sscanf(ask("rss-store").c_str(), "rss %llu", &rss_store);
  std::sscanf(ask("rss-buffers").c_str(), "rss %llu", &rss_buffers);
  peer.reset();
  std::system(("rm -rf '" + dir + "'").c_str());
  const double gb = static_cast<double>(total) / 1e9;
  const double w = static_cast<double>(total);
  if (a.json) {
    std::printf(
        "{\"scenario\":\"safetensors-load\",\"transport\":\"%s\",\"bytes\":%llu,\"files\":%zu,"
        "\"tensors\":%zu,\"iters\":%d,\"read_gbps\":%.3f,\"load_store_gbps\":%.3f,"
        "\"load_buffers_gbps\":%.3f,\"load_vs_read\":%.3f,\"load_buffers_vs_read\":%.3f,"
        "\"load_cold_vs_read\":%.3f,\"peak_rss_over_weights_store\":%.3f,"
        "\"peak_rss_over_weights_buffers\":%.3f}\n",
        a.transport.c_str(), static_cast<unsigned long long>(total), files, tensors.size(), iters,
        gb / rd, gb / stt, gb / bf, rd / stt, rd / bf, rd / cold, rss_store / w, rss_buffers / w);
    return;
  }
  std::printf(
      "scenario safetensors-load: %zu tensors (%.2f GB bf16) in %zu file(s) from the page cache, "
      "loader process -> store in a peer process, transport %s, median of %d\n",
      tensors.size(), gb, files, a.transport.c_str(), iters);
  std::printf("  %-34s %10s %10s %10s\n", "operation", "seconds", "GB/s", "vs read()");
  std::printf("  %-34s %10.4f %10.2f %10.2f\n", "read() of the files", rd, gb / rd, 1.0);
  std::printf("  %-34s %10.4f %10.2f %10.2f\n", "load into the store", stt, gb / stt, rd / stt);
  std::printf("  %-34s %10.4f %10.2f %10.2f\n", "load into caller buffers", bf, gb / bf, rd / bf);
  std::printf("  %-34s %10.4f %10.2f %10.2f   (fresh store memory)\n", "first load into the store",
              cold, gb / cold, rd / cold);
  std::printf(
      "  peak resident memory over the weights: %.2f (into the store), %.2f (into buffers)\n",
      rss_store / w, rss_buffers / w);
}

}  // namespace meshstore::bench
