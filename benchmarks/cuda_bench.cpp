// cuda_bench: device tensors through the store against the bare CUDA copy
// of the same bytes in the same run (docs/gpu.md).
//
//   build/bin/cuda_bench [--bytes 1GiB] [--iters 5] [--transport NAME] [--json] [--smoke]
//                        [--emulated] [--calls] [--state-dict small|qwen3-0.6b|...]
//                        [--own-allocations]
//
// One process hosts an embedded store (the client reaches its volume over
// `--transport`, by default the store's choice). Figures, medians of
// --iters after a warm-up:
//   put_from_device_vs_d2h     cudaMemcpy device -> page-locked host / put of a device tensor
//   get_into_device_vs_h2d     cudaMemcpy page-locked host -> device / get_into a device tensor
//   put_vs_cudamemcpy          cudaMemcpy device -> device / put of a device tensor
//   get_into_vs_cudamemcpy     cudaMemcpy device -> device / get_into a device tensor
//   put_host_us, get_into_host_us
//                              the same bytes put from and read into host
//                              memory through the same store (what the
//                              device's copies come on top of)
// (with --transport cuda-ipc the last two are the figures: the bytes stay
// on the GPU; `store_bench --scenario single --transport cuda-ipc` runs this)
//   direct_get_into_vs_cudamemcpy
//                              cudaMemcpy device -> device / get_into of a
//                              version published direct (PublishMode::direct:
//                              the device tensor itself is lent, the reader
//                              copies straight out of it; with the store's
//                              choice or cuda-ipc only). The reader is this
//                              process, so it copies from the publisher's
//                              pointer; a reader in another process opens
//                              the allocation's IPC handle once, then the
//                              same copy runs (CudaDirectPublish tests).
//   direct_publish_ms           publish (the loan: no bytes move) + reclaim
// --state-dict instead times put_state_dict and get_state_dict_into of a
// state dict of device tensors (bf16; those under 1 MiB carved from 2 MiB
// blocks, as PyTorch's caching allocator places a model's parameters,
// larger ones each an allocation; --own-allocations: every one its own): "small" is 1,000 tensors
// of 4 KiB (the weight-sync scenario's many-small-tensors case, packed into one bucket), a Qwen3
// name its checkpoint's shapes (examples/weights/qwen3_shapes.hpp). Against one page-locked
// cudaMemcpy of the same bytes each way (put_vs_d2h, get_vs_h2d), with the cost per tensor beyond
// that, and against the same state dict in host memory through the same store (put_vs_host,
// get_vs_host: what the device adds to the store's work).
// --calls instead prints what the CUDA calls behind one transfer cost
// (median microseconds of 200): a 4-byte device-to-device copy, the IPC
// handle of an allocation, the allocation a pointer lies in.
// Above 1 the store is faster than the bare copy. Where CUDA cannot be
// used it prints why and exits 0. Built in every build: the copies go
// through meshstore's own CUDA calls, so --emulated runs it on emulated
// devices (docs/gpu.md), which CI's smoke run does so it never rots; its
// figures then mean nothing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "meshstore/internal/cuda_copy.hpp"
#include "meshstore/internal/cuda_emulation.hpp"
#include "meshstore/store.hpp"
#include "meshstore/tensor.hpp"
#include "qwen3_shapes.hpp"

using namespace std::chrono_literals;
using meshstore::bench::die;
using meshstore::bench::median;
using meshstore::bench::must;

namespace {

std::size_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit = end ? end : "";
  double mul = 1;
  if (unit == "KiB")
    mul = 1024.0;
  else if (unit == "MiB")
    mul = 1024.0 * 1024;
  else if (unit == "GiB")
    mul = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "B")
    die("--bytes: unknown unit '" + unit + "'");
  return static_cast<std::size_t>(v * mul);
}

// A copy between host and device memory (either way, or device to
// device), returning when the bytes are there.
void copy(void* dst, const void* src, std::size_t n, const char* what) {
  must(meshstore::internal::cuda::copy_bytes(dst, src, n), what);
}

double time_it(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// --state-dict: put_state_dict of device tensors and get_state_dict_into
// device tensors, against one page-locked copy of all their bytes.
int run_state_dict(const std::string& which, int iters, const std::string& transport, bool json,
                   bool own_allocations) {
  qwen3::Tensors shapes;
  if (which == "small") {
    for (int i = 0; i < 1000; ++i) shapes.push_back({"t." + std::to_string(i), {2048}});
  } else {
    qwen3::Config c;
    if (!qwen3::find(which, c)) die("--state-dict: 'small' or a Qwen3 name, not '" + which + "'");
    shapes = qwen3::tensors(c);
  }
  auto bytes_of = [](const std::vector<std::int64_t>& shape) {
    return static_cast<std::size_t>(qwen3::numel(shape)) * 2;  // bf16
  };
  std::size_t total = 0;
  for (const auto& [name, shape] : shapes) total += bytes_of(shape);
  // Device memory as PyTorch's caching allocator hands it out: tensors
  // under 1 MiB carved from 2 MiB blocks, 512-byte aligned, larger ones
  // each their own allocation; with --own-allocations, every one its own.
  std::vector<std::shared_ptr<std::byte>> blocks;
  std::size_t block_used = 0;
  auto device_memory = [&](std::size_t n) -> std::byte* {
    constexpr std::size_t kSmall = std::size_t{1} << 20, kBlock = std::size_t{2} << 20;
    if (own_allocations || n >= kSmall) {
      blocks.push_back(must(meshstore::internal::cuda::device_alloc(n, 0), "device memory"));
      return blocks.back().get();
    }
    const std::size_t at = (block_used + 511) / 512 * 512;
    if (blocks.empty() || at + n > kBlock || block_used == kBlock) {
      blocks.push_back(must(meshstore::internal::cuda::device_alloc(kBlock, 0), "device memory"));
      block_used = n;
      return blocks.back().get();
    }
    block_used = at + n;
    return blocks.back().get() + at;
  };
  std::vector<std::byte*> src, dst;
  meshstore::StateDict in, out;
  auto host = meshstore::internal::cuda::pinned(total);
  if (!host) die("no host memory for " + std::to_string(total) + " bytes");
  std::memset(host.get(), 0x3c, total);
  std::size_t at = 0;
  for (const auto& [name, shape] : shapes) {
    const auto n = bytes_of(shape);
    src.push_back(device_memory(n));
    dst.push_back(device_memory(n));
    copy(src.back(), host.get() + at, n, "H2D fill");
    at += n;
    const meshstore::Shape s(shape.begin(), shape.end());
    must(in.insert(name, meshstore::TensorView(src.back(), meshstore::DType::bfloat16, s, {},
                                               meshstore::Device::cuda(0))),
         "state dict");
    must(out.insert(name, meshstore::TensorView(dst.back(), meshstore::DType::bfloat16, s, {},
                                                meshstore::Device::cuda(0))),
         "state dict");
  }
  // The same state dict in host memory, through the same store: what the
  // store's own work costs, which the device's copies come on top of.
  std::vector<std::vector<std::byte>> host_src, host_dst;
  meshstore::StateDict host_in, host_out;
  for (const auto& [name, shape] : shapes) {
    const auto n = bytes_of(shape);
    host_src.emplace_back(n, std::byte{0x3c});
    host_dst.emplace_back(n);
    const meshstore::Shape s(shape.begin(), shape.end());
    must(host_in.insert(
             name, meshstore::TensorView(host_src.back().data(), meshstore::DType::bfloat16, s)),
         "state dict");
    must(host_out.insert(
             name, meshstore::TensorView(host_dst.back().data(), meshstore::DType::bfloat16, s)),
         "state dict");
  }
  // The floor: all the bytes in one copy each way, between the page-locked
  // host buffer and one device buffer of their size.
  auto scratch = must(meshstore::internal::cuda::device_alloc(total, 0), "device memory");
  meshstore::StoreOptions o;
  o.transport.name = transport;
  auto store = must(meshstore::Store::embedded(o), "Store::embedded");
  must(store.state_dicts().put("sd", in).get(600s), "put_state_dict (warm-up)");
  must(store.state_dicts().get_into("sd", out).get(600s), "get_state_dict_into (warm-up)");
  must(store.state_dicts().put("hsd", host_in).get(600s), "put_state_dict (host, warm-up)");
  must(store.state_dicts().get_into("hsd", host_out).get(600s),
       "get_state_dict_into (host, warm-up)");
  std::vector<double> put, get, d2h, h2d, host_put, host_get;
  for (int r = 0; r < iters; ++r) {
    host_put.push_back(
        time_it([&] { must(store.state_dicts().put("hsd", host_in).get(600s), "put (host)"); }));
    host_get.push_back(time_it(
        [&] { must(store.state_dicts().get_into("hsd", host_out).get(600s), "get_into (host)"); }));
    d2h.push_back(time_it([&] { copy(host.get(), scratch.get(), total, "D2H"); }));
    h2d.push_back(time_it([&] { copy(scratch.get(), host.get(), total, "H2D"); }));
    put.push_back(time_it([&] { must(store.state_dicts().put("sd", in).get(600s), "put"); }));
    get.push_back(
        time_it([&] { must(store.state_dicts().get_into("sd", out).get(600s), "get_into"); }));
  }
  // What came back is what went in (the first and last tensors).
  for (std::size_t i : {std::size_t{0}, shapes.size() - 1}) {
    const auto n = bytes_of(shapes[i].second);
    std::vector<unsigned char> back(std::min<std::size_t>(n, 1 << 20));
    copy(back.data(), dst[i], back.size(), "D2H check");
    for (auto c : back) {
      if (c != 0x3c) die("get_state_dict_into returned the wrong bytes");
    }
  }
  const double m_put = median(put), m_get = median(get), m_d2h = median(d2h), m_h2d = median(h2d);
  const double m_host_put = median(host_put), m_host_get = median(host_get);
  const double per_tensor_us =
      ((m_put - m_d2h) + (m_get - m_h2d)) / 2 / static_cast<double>(shapes.size()) * 1e6;
  if (json) {
    std::printf(
        "{\"state_dict\":\"%s\",\"own_allocations\":%s,\"transport\":\"%s\",\"tensors\":%zu,"
        "\"bytes\":%zu,"
        "\"put_ms\":%.3f,\"get_ms\":%.3f,\"d2h_ms\":%.3f,\"h2d_ms\":%.3f,"
        "\"put_vs_d2h\":%.3f,\"get_vs_h2d\":%.3f,\"per_tensor_us\":%.2f,"
        "\"host_put_ms\":%.3f,\"host_get_ms\":%.3f,\"put_vs_host\":%.3f,\"get_vs_host\":%.3f}\n",
        which.c_str(), own_allocations ? "true" : "false",
        transport.empty() ? "chosen" : transport.c_str(), shapes.size(), total, m_put * 1e3,
        m_get * 1e3, m_d2h * 1e3, m_h2d * 1e3, m_d2h / m_put, m_h2d / m_get, per_tensor_us,
        m_host_put * 1e3, m_host_get * 1e3, m_host_put / m_put, m_host_get / m_get);
  } else {
    std::printf(
        "cuda_bench --state-dict %s: %zu device tensors (%s), %.2f MB, transport %s, median of "
        "%d\n",
        which.c_str(), shapes.size(),
        own_allocations ? "each its own allocation" : "small ones carved from 2 MiB blocks",
        static_cast<double>(total) / 1e6,
        transport.empty() ? "(the store's choice)" : transport.c_str(), iters);
    std::printf(
        "  put_state_dict          %9.3f ms   one page-locked D2H %9.3f ms   put_vs_d2h %.3f\n",
        m_put * 1e3, m_d2h * 1e3, m_d2h / m_put);
    std::printf(
        "  get_state_dict_into     %9.3f ms   one page-locked H2D %9.3f ms   get_vs_h2d %.3f\n",
        m_get * 1e3, m_h2d * 1e3, m_h2d / m_get);
    std::printf("  beyond the copies       %9.2f us per tensor\n", per_tensor_us);
    std::printf(
        "  in host memory: put     %9.3f ms   get_into %9.3f ms   put_vs_host %.3f  "
        "get_vs_host %.3f\n",
        m_host_put * 1e3, m_host_get * 1e3, m_host_put / m_put, m_host_get / m_get);
  }
  store.close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t bytes = std::size_t{1} << 30;
  int iters = 5;
  bool json = false, smoke = false, emulated = false, calls = false, own_allocations = false;
  std::string transport, state_dict;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--bytes")
      bytes = parse_bytes(next());
    else if (a == "--iters")
      iters = std::max(1, std::atoi(next().c_str()));
    else if (a == "--transport")
      transport = next();
    else if (a == "--json")
      json = true;
    else if (a == "--smoke")
      smoke = true;
    else if (a == "--emulated")
      emulated = true;
    else if (a == "--calls")
      calls = true;
    else if (a == "--state-dict")
      state_dict = next();
    else if (a == "--own-allocations")
      own_allocations = true;
    else
      die("unknown argument '" + a + "' (see the comment at the top of cuda_bench.cpp)");
  }
  if (smoke) {
    bytes = std::size_t{8} << 20;
    iters = 2;
  }
  if (emulated) {
    must(meshstore::internal::cuda::emulate_devices(1), "emulate_devices");
    std::printf("cuda_bench: on an emulated device: the figures mean nothing\n");
  }
  if (auto s = meshstore::cuda::status(); !s.ok()) {
    std::printf("cuda_bench: skipped: %s\n", s.message().c_str());
    return 0;
  }
  if (!state_dict.empty()) {
    return run_state_dict(state_dict, smoke ? 2 : iters, transport, json, own_allocations);
  }
  bytes = bytes / 4 * 4;
  const std::int64_t n = static_cast<std::int64_t>(bytes / 4);
  if (calls) {
    auto dev = must(meshstore::internal::cuda::device_alloc(1 << 20, 0), "device memory");
    auto* p = dev.get();
    auto us = [](const std::function<void()>& f) {
      std::vector<double> t;
      for (int i = 0; i < 200; ++i) t.push_back(time_it(f) * 1e6);
      return median(t);
    };
    std::printf("cuda_bench --calls: median microseconds of 200\n");
    std::printf("  copy_bytes, 4 B device to device   %8.1f\n",
                us([&] { copy(p + 4096, p, 4, "D2D"); }));
    std::printf("  ipc_handle (cudaIpcGetMemHandle)   %8.1f\n",
                us([&] { must(meshstore::internal::cuda::ipc_handle(p), "ipc_handle"); }));
    std::printf("  is_device_pointer (cudaPointerGetAttributes) %6.1f\n", us([&] {
                  if (!meshstore::internal::cuda::is_device_pointer(p + 64))
                    die("not device memory");
                }));
    std::printf("  allocation_of (cuMemGetAddressRange) %6.1f\n", us([&] {
                  must(meshstore::internal::cuda::allocation_of(p + 64), "allocation_of");
                }));
    return 0;
  }
  auto dev_a = must(meshstore::internal::cuda::device_alloc(bytes, 0), "device memory");
  auto dev_b = must(meshstore::internal::cuda::device_alloc(bytes, 0), "device memory");
  auto host = meshstore::internal::cuda::pinned(bytes);  // page-locked where CUDA works
  if (!host) die("no host memory for " + std::to_string(bytes) + " bytes");
  std::vector<unsigned char> zeros(bytes, 0);
  std::memset(host.get(), 0x5a, bytes);
  copy(dev_a.get(), host.get(), bytes, "H2D");

  meshstore::StoreOptions o;
  o.transport.name = transport;
  auto store = must(meshstore::Store::embedded(o), "Store::embedded");
  const meshstore::TensorView a(dev_a.get(), meshstore::DType::float32, {n}, {},
                                meshstore::Device::cuda(0));
  const meshstore::TensorView b(dev_b.get(), meshstore::DType::float32, {n}, {},
                                meshstore::Device::cuda(0));
  // The same bytes from and into host memory through the same store: the
  // store's own cost, which a device tensor's copies come on top of.
  std::vector<std::byte> host_src(bytes, std::byte{0x5a}), host_dst(bytes);
  const meshstore::TensorView ha(host_src.data(), meshstore::DType::float32, {n});
  const meshstore::TensorView hb(host_dst.data(), meshstore::DType::float32, {n});
  std::vector<double> d2h, h2d, d2d, put, get, host_put, host_get;
  for (int r = 0; r < iters + 1; ++r) {
    const double t_host_put = time_it([&] { must(store.put("host", ha).get(600s), "put (host)"); });
    const double t_host_get =
        time_it([&] { must(store.get_into("host", hb).get(600s), "get_into (host)"); });
    const double t_d2h = time_it([&] { copy(host.get(), dev_a.get(), bytes, "D2H"); });
    const double t_h2d = time_it([&] { copy(dev_b.get(), host.get(), bytes, "H2D"); });
    const double t_d2d = time_it([&] { copy(dev_b.get(), dev_a.get(), bytes, "D2D"); });
    const double t_put = time_it([&] { must(store.put("bench", a).get(600s), "put"); });
    copy(dev_b.get(), zeros.data(), bytes, "clearing the destination");
    const double t_get = time_it([&] { must(store.get_into("bench", b).get(600s), "get_into"); });
    if (r == 0) continue;  // warm-up: page-locked pools and store memory fault in
    d2h.push_back(t_d2h);
    h2d.push_back(t_h2d);
    d2d.push_back(t_d2d);
    put.push_back(t_put);
    get.push_back(t_get);
    host_put.push_back(t_host_put);
    host_get.push_back(t_host_get);
  }
  // The bytes made it: compare what came back with what went in.
  auto check = [&](const char* what) {
    std::vector<unsigned char> back(std::min<std::size_t>(bytes, 1 << 20));
    copy(back.data(), dev_b.get(), back.size(), "D2H check");
    for (auto c : back) {
      if (c != 0x5a) die(std::string(what) + " returned the wrong bytes");
    }
  };
  check("get_into a device tensor");
  // Direct publishing: each round lends `a` as a new version, the reader
  // copies it out, and reclaim gives it back (no retain: nothing is copied).
  const bool direct = transport.empty() || transport == "cuda-ipc";
  std::vector<double> lend, direct_get;
  if (direct) {
    meshstore::StateDict sd;
    must(sd.insert("w", a), "state dict");
    meshstore::PublishOptions po;
    po.mode = meshstore::PublishMode::direct;
    po.put.pack_max_tensor_bytes =
        0;  // lend it at every --bytes (small tensors are packed by default)
    for (int r = 0; r < iters + 1; ++r) {
      meshstore::Publication pub;
      const double t_pub = time_it(
          [&] { pub = must(store.state_dicts().publish("direct", sd, po).get(600s), "publish"); });
      if (pub.mode() != meshstore::PublishMode::direct)
        die("publish did not lend the device tensor");
      copy(dev_b.get(), zeros.data(), bytes, "clearing the destination");
      const std::string key = "direct/v" + std::to_string(pub.version()) + "/w";
      const double t_get =
          time_it([&] { must(store.get_into(key, b).get(600s), "direct get_into"); });
      const double t_reclaim = time_it([&] { must(pub.reclaim().get(600s), "reclaim"); });
      if (r == 0) continue;
      lend.push_back(t_pub + t_reclaim);
      direct_get.push_back(t_get);
    }
    check("get_into of a direct version");
  }
  const double gb = static_cast<double>(bytes) / 1e9;
  const double m_d2h = median(d2h), m_h2d = median(h2d), m_d2d = median(d2d), m_put = median(put),
               m_get = median(get);
  if (json) {
    std::printf(
        "{\"bytes\":%zu,\"transport\":\"%s\",\"d2h_gbps\":%.2f,\"h2d_gbps\":%.2f,"
        "\"d2d_gbps\":%.2f,"
        "\"put_from_device_gbps\":%.2f,\"get_into_device_gbps\":%.2f,"
        "\"put_from_device_vs_d2h\":%.3f,\"get_into_device_vs_h2d\":%.3f,"
        "\"put_vs_cudamemcpy\":%.3f,\"get_into_vs_cudamemcpy\":%.3f",
        bytes, transport.empty() ? "chosen" : transport.c_str(), gb / m_d2h, gb / m_h2d, gb / m_d2d,
        gb / m_put, gb / m_get, m_d2h / m_put, m_h2d / m_get, m_d2d / m_put, m_d2d / m_get);
    if (direct) {
      std::printf(
          ",\"direct_publish_ms\":%.3f,\"direct_get_into_gbps\":%.2f,"
          "\"direct_get_into_vs_cudamemcpy\":%.3f",
          median(lend) * 1e3, gb / median(direct_get), m_d2d / median(direct_get));
    }
    std::printf(",\"put_host_us\":%.1f,\"get_into_host_us\":%.1f}\n", median(host_put) * 1e6,
                median(host_get) * 1e6);
  } else {
    std::printf("cuda_bench: %.2f GB, transport %s, median of %d\n", gb,
                transport.empty() ? "(the store's choice)" : transport.c_str(), iters);
    std::printf("  cudaMemcpy D2H (page-locked)   %8.2f GB/s\n", gb / m_d2h);
    std::printf("  cudaMemcpy H2D (page-locked)   %8.2f GB/s\n", gb / m_h2d);
    std::printf("  cudaMemcpy D2D                 %8.2f GB/s\n", gb / m_d2d);
    std::printf("  put from the device            %8.2f GB/s  put_from_device_vs_d2h %.3f\n",
                gb / m_put, m_d2h / m_put);
    std::printf("  get_into the device            %8.2f GB/s  get_into_device_vs_h2d %.3f\n",
                gb / m_get, m_h2d / m_get);
    std::printf("  the same bytes in host memory: put %.1f us, get_into %.1f us\n",
                median(host_put) * 1e6, median(host_get) * 1e6);
    std::printf(
        "  against one D2D cudaMemcpy     put_vs_cudamemcpy %.3f  get_into_vs_cudamemcpy %.3f\n",
        m_d2d / m_put, m_d2d / m_get);
    if (direct) {
      std::printf("  publish direct + reclaim       %8.3f ms (the loan: no bytes move)\n",
                  median(lend) * 1e3);
      std::printf(
          "  get_into of a direct version   %8.2f GB/s  direct_get_into_vs_cudamemcpy %.3f\n",
          gb / median(direct_get), m_d2d / median(direct_get));
    }
  }
  store.close();
  return 0;
}
