// peer_bench's workloads: their shapes, the bytes of each round, and the
// check of what B received (see workload.hpp).
#include "workload.hpp"

#include <cstdint>
#include <string>

#include "../bench_util.hpp"
#include "qwen3_shapes.hpp"

namespace meshstore::bench {

Workload make_workload(const std::string& name, bool smoke) {
  Workload w;
  w.name = name;
  if (name == "tensor") {
    const std::int64_t n = smoke ? (std::int64_t{4} << 20) : (std::int64_t{512} << 20);
    w.shapes.push_back({"w", {n}});  // bf16: 1 GiB (8 MiB in --smoke)
  } else if (name == "qwen") {
    qwen3::Config c;
    if (!qwen3::find("qwen3-0.6b", c)) die("no qwen3-0.6b shapes");
    if (smoke) c.layers = 1;
    for (auto& [n, s] : qwen3::tensors(c))
      w.shapes.push_back({n, meshstore::Shape(s.begin(), s.end())});
  } else if (name == "small") {
    const int count = smoke ? 500 : 10000;
    for (int i = 0; i < count; ++i) w.shapes.push_back({"t" + std::to_string(i), {2048}});
  } else {
    die("unknown workload '" + name + "' (tensor, qwen, small)");
  }
  w.buffers.reserve(w.shapes.size());
  for (const auto& [n, shape] : w.shapes) {
    w.buffers.emplace_back(static_cast<std::size_t>(meshstore::shape_numel(shape)), 0);
    must(w.sd.insert(
             n, meshstore::TensorView(w.buffers.back().data(), meshstore::DType::bfloat16, shape)),
         "state dict");
    w.bytes += w.buffers.back().size() * 2;
  }
  return w;
}

void fill(Workload& w, int r) {
  for (std::size_t t = 0; t < w.buffers.size(); ++t) {
    auto& b = w.buffers[t];
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint16_t>(i * 7 + t + r);
  }
}

void fill(const Workload& w, const meshstore::StateDict& sd, int r) {
  if (sd.size() != w.shapes.size()) die("the staged state dict has the wrong entries");
  for (std::size_t t = 0; t < sd.size(); ++t) {
    const auto& view = sd.entries()[t].view;
    auto* p = static_cast<std::uint16_t*>(view.data());
    const auto n = static_cast<std::size_t>(view.numel());
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint16_t>(i * 7 + t + r);
  }
}

bool holds(const Workload& w, int r) {
  for (std::size_t t = 0; t < w.buffers.size(); ++t) {
    const auto& b = w.buffers[t];
    for (std::size_t i = 0; i < b.size(); i += 1 + b.size() / 64) {
      if (b[i] != static_cast<std::uint16_t>(i * 7 + t + r)) return false;
    }
    if (b.back() != static_cast<std::uint16_t>((b.size() - 1) * 7 + t + r)) return false;
  }
  return true;
}

}  // namespace meshstore::bench
