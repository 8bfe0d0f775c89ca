// store_bench --scenario python: the same calls from C++ and from Python
// (benchmarks/python/py_bench.py, torch tensors through DLPack), each on an
// embedded store of its own, in one run: a 4 KiB put + get_into, one large
// tensor's put and get_into, and a Qwen3-shaped bf16 state dict's
// put_state_dict and get_state_dict_into. Python's cost is the ratio.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../bench_util.hpp"
#include "meshstore/store.hpp"
#include "qwen3_shapes.hpp"
#include "scenarios.hpp"

using namespace std::chrono_literals;

namespace meshstore::bench {

namespace {

template <class F>
double median_seconds(int iters, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(secs(t0));
  }
  return median(t);
}

struct Figures {
  double small_p50_us = 0, small_p99_us = 0;
  double tensor_put_s = 0, tensor_get_into_s = 0;
  double sd_put_s = 0, sd_get_into_s = 0;
};

Figures run_cpp(std::size_t n, int iters, int small_iters, const qwen3::Tensors& shapes) {
  Figures f;
  auto store = must(Store::embedded(), "embedded store");
  std::vector<std::uint8_t> s4(4096, 7), d4(4096);
  const TensorView in4(s4.data(), DType::uint8, {4096}), out4(d4.data(), DType::uint8, {4096});
  must(store.put("small", in4).get(60s), "put");
  std::vector<double> lat;
  for (int i = 0; i < small_iters; ++i) {
    const auto t0 = Clock::now();
    must(store.put("small", in4).get(60s), "put");
    must(store.get_into("small", out4).get(60s), "get_into");
    lat.push_back(secs(t0) * 1e6);
  }
  f.small_p50_us = percentile(lat, 0.5);
  f.small_p99_us = percentile(lat, 0.99);
  {
    std::vector<std::uint8_t> big(n, 1), into(n, 0);
    const auto len = static_cast<std::int64_t>(n);
    const TensorView in(big.data(), DType::uint8, {len}), out(into.data(), DType::uint8, {len});
    must(store.put("big", in).get(600s), "put");
    must(store.get_into("big", out).get(600s), "get_into");
    f.tensor_put_s = median_seconds(iters, [&] { must(store.put("big", in).get(600s), "put"); });
    f.tensor_get_into_s =
        median_seconds(iters, [&] { must(store.get_into("big", out).get(600s), "get_into"); });
    must(store.remove("big").get(60s), "remove");
  }
  std::vector<std::vector<std::uint16_t>> src, dst;
  StateDict ssd, dsd;
  for (const auto& [name, shape] : shapes) {
    src.emplace_back(static_cast<std::size_t>(qwen3::numel(shape)), 0x3f80);  // bf16 1.0
    dst.emplace_back(static_cast<std::size_t>(qwen3::numel(shape)), 0);
    must(ssd.insert(name, TensorView(src.back().data(), DType::bfloat16, shape)), "insert");
    must(dsd.insert(name, TensorView(dst.back().data(), DType::bfloat16, shape)), "insert");
  }
  must(store.state_dicts().put("sd", ssd).get(600s), "put_state_dict");
  must(store.state_dicts().get_into("sd", dsd).get(600s), "get_state_dict_into");
  f.sd_put_s = median_seconds(
      iters, [&] { must(store.state_dicts().put("sd", ssd).get(600s), "put_state_dict"); });
  f.sd_get_into_s = median_seconds(iters, [&] {
    must(store.state_dicts().get_into("sd", dsd).get(600s), "get_state_dict_into");
  });
  store.close();
  return f;
}

Figures run_in_python(std::size_t n, int iters, int small_iters, const qwen3::Tensors& shapes) {
  const std::string bin = own_dir();
  const std::string script = bin + "/py_bench.py";
  char shapes_path[] = "/tmp/store_bench_shapes_XXXXXX";
  const int fd = ::mkstemp(shapes_path);
  if (fd < 0) die("mkstemp");
  ::close(fd);
  {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& [name, shape] : shapes) j.push_back({name, shape});
    std::ofstream(shapes_path) << j.dump();
  }
  // The package next to this program: build/python beside build/bin.
  std::string pythonpath = bin + "/../python";
  if (const char* old = std::getenv("PYTHONPATH"); old && *old)
    pythonpath += ":" + std::string(old);
  ::setenv("PYTHONPATH", pythonpath.c_str(), 1);
  auto child = spawn("/usr/bin/python3",
                     {script, "--bytes", std::to_string(n), "--iters", std::to_string(iters),
                      "--small-iters", std::to_string(small_iters), "--shapes", shapes_path});
  std::string line;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), child->from)) line += buf;
  child.reset();
  ::unlink(shapes_path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line.substr(line.rfind('{')));
  } catch (const std::exception& e) {
    die("py_bench.py gave no figures (" + std::string(e.what()) + "): " + line);
  }
  Figures f;
  f.small_p50_us = j.at("small_p50_us");
  f.small_p99_us = j.at("small_p99_us");
  f.tensor_put_s = j.at("tensor_put_s");
  f.tensor_get_into_s = j.at("tensor_get_into_s");
  f.sd_put_s = j.at("sd_put_s");
  f.sd_get_into_s = j.at("sd_get_into_s");
  return f;
}

}  // namespace

void run_python(const Args& a) {
  const std::size_t n =
      a.smoke ? (std::size_t{4} << 20) : (a.bytes_given ? a.bytes : std::size_t{1} << 30);
  const int iters = a.iters ? a.iters : (a.smoke ? 2 : 5);
  const int small_iters = a.smoke ? 50 : 2000;
  qwen3::Config config;
  if (!qwen3::find(a.model, config)) usage(("unknown model '" + a.model + "'").c_str());
  auto shapes = qwen3::tensors(config);
  if (a.smoke) {
    // The layer norms and small projections only: the same many-tensor
    // shape, a few MB.
    qwen3::Tensors small;
    for (auto& t : shapes)
      if (qwen3::numel(t.second) <= (std::int64_t{1} << 20)) small.push_back(t);
    shapes = small;
  }
  std::uint64_t sd_bytes = 0;
  for (const auto& t : shapes) sd_bytes += static_cast<std::uint64_t>(qwen3::numel(t.second)) * 2;
  if (!a.json) std::fprintf(stderr, "store_bench python: the calls from C++...\n");
  const Figures c = run_cpp(n, iters, small_iters, shapes);
  if (!a.json) std::fprintf(stderr, "store_bench python: the same calls from Python...\n");
  const Figures p = run_in_python(n, iters, small_iters, shapes);
  const double gb = static_cast<double>(n) / 1e9, sd_gb = static_cast<double>(sd_bytes) / 1e9;
  if (a.json) {
    std::printf(
        "{\"scenario\":\"python\",\"bytes\":%zu,\"sd_bytes\":%llu,\"sd_tensors\":%zu,"
        "\"iters\":%d,\"cpp\":{\"small_p50_us\":%.2f,\"small_p99_us\":%.2f,"
        "\"tensor_put_gbs\":%.3f,\"tensor_get_into_gbs\":%.3f,\"sd_put_gbs\":%.3f,"
        "\"sd_get_into_gbs\":%.3f},\"python\":{\"small_p50_us\":%.2f,\"small_p99_us\":%.2f,"
        "\"tensor_put_gbs\":%.3f,\"tensor_get_into_gbs\":%.3f,\"sd_put_gbs\":%.3f,"
        "\"sd_get_into_gbs\":%.3f},\"python_small_vs_cpp\":%.2f,"
        "\"python_tensor_put_vs_cpp\":%.2f,\"python_tensor_get_into_vs_cpp\":%.2f,"
        "\"python_sd_put_vs_cpp\":%.2f,\"python_sd_get_into_vs_cpp\":%.2f}\n",
        n, static_cast<unsigned long long>(sd_bytes), shapes.size(), iters, c.small_p50_us,
        c.small_p99_us, gb / c.tensor_put_s, gb / c.tensor_get_into_s, sd_gb / c.sd_put_s,
        sd_gb / c.sd_get_into_s, p.small_p50_us, p.small_p99_us, gb / p.tensor_put_s,
        gb / p.tensor_get_into_s, sd_gb / p.sd_put_s, sd_gb / p.sd_get_into_s,
        p.small_p50_us / c.small_p50_us, c.tensor_put_s / p.tensor_put_s,
        c.tensor_get_into_s / p.tensor_get_into_s, c.sd_put_s / p.sd_put_s,
        c.sd_get_into_s / p.sd_get_into_s);
    return;
  }
  std::printf(
      "scenario python: the same calls from C++ and from Python (torch tensors through DLPack),\n"
      "each on an embedded store of its own, one run; median of %d (4 KiB: %d rounds)\n",
      iters, small_iters);
  std::printf("  %-44s %12s %12s %14s\n", "", "C++", "Python", "Python vs C++");
  std::printf("  %-44s %9.1f us %9.1f us %12.2f x  (time; goal <= 2)\n", "4 KiB put + get_into p50",
              c.small_p50_us, p.small_p50_us, p.small_p50_us / c.small_p50_us);
  std::printf("  %-44s %9.1f us %9.1f us %12.2f x  (time)\n", "4 KiB put + get_into p99",
              c.small_p99_us, p.small_p99_us, p.small_p99_us / c.small_p99_us);
  char what[96];
  std::snprintf(what, sizeof(what), "%.3f GB tensor put", gb);
  std::printf("  %-44s %7.2f GB/s %7.2f GB/s %12.2f x  (rate; goal >= 0.9)\n", what,
              gb / c.tensor_put_s, gb / p.tensor_put_s, c.tensor_put_s / p.tensor_put_s);
  std::snprintf(what, sizeof(what), "%.3f GB tensor get_into", gb);
  std::printf("  %-44s %7.2f GB/s %7.2f GB/s %12.2f x  (rate; goal >= 0.9)\n", what,
              gb / c.tensor_get_into_s, gb / p.tensor_get_into_s,
              c.tensor_get_into_s / p.tensor_get_into_s);
  std::snprintf(what, sizeof(what), "%s put_state_dict (%zu tensors, %.2f GB)", a.model.c_str(),
                shapes.size(), sd_gb);
  std::printf("  %-44s %7.2f GB/s %7.2f GB/s %12.2f x  (rate; goal >= 0.9)\n", what,
              sd_gb / c.sd_put_s, sd_gb / p.sd_put_s, c.sd_put_s / p.sd_put_s);
  std::snprintf(what, sizeof(what), "%s get_state_dict_into", a.model.c_str());
  std::printf("  %-44s %7.2f GB/s %7.2f GB/s %12.2f x  (rate; goal >= 0.9)\n", what,
              sd_gb / c.sd_get_into_s, sd_gb / p.sd_get_into_s, c.sd_get_into_s / p.sd_get_into_s);
}

}  // namespace meshstore::bench
