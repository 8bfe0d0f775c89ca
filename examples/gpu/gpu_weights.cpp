// gpu_weights: a model's weights in GPU memory, put from the GPU and read
// back into other GPU buffers, as a tensor and as a state dict, with plain
// CUDA runtime calls (docs/guides/gpu.md). It exits 77 (skipped), naming
// why, where this process cannot use CUDA.

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "meshstore/store.hpp"

using namespace std::chrono_literals;

namespace {

int fail(const char* what, const meshstore::Status& s) {
  std::fprintf(stderr, "gpu_weights: %s: %s\n", what, s.to_string().c_str());
  return 1;
}

int fail_cuda(const char* what, cudaError_t e) {
  std::fprintf(stderr, "gpu_weights: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

// A float tensor of `n` elements in device memory, freed at scope exit.
struct DeviceBuffer {
  float* data = nullptr;
  explicit DeviceBuffer(std::size_t n) {
    if (cudaMalloc(reinterpret_cast<void**>(&data), n * sizeof(float)) != cudaSuccess) {
      data = nullptr;
    }
  }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace

int main() {
  if (auto s = meshstore::cuda::status(); !s.ok()) {
    std::printf("gpu_weights: skipped: %s\n", s.to_string().c_str());
    return 77;
  }
  auto store = meshstore::Store::embedded();
  if (!store.ok()) return fail("Store::embedded", store.status());
  for (const auto& [transport, status] : meshstore::Store::Admin::gpu_transport_status()) {
    std::printf("gpu_weights: %-9s %s\n", transport.c_str(), status.to_string().c_str());
  }

  // The trainer's weights, on cuda:0.
  const std::int64_t rows = 256, cols = 512;
  const std::size_t n = rows * cols;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) * 0.5f;
  DeviceBuffer w(n), b(cols), w_copy(n), b_copy(cols);
  if (!w.data || !b.data || !w_copy.data || !b_copy.data) {
    return fail_cuda("cudaMalloc", cudaErrorMemoryAllocation);
  }
  if (auto e = cudaMemcpy(w.data, host.data(), n * sizeof(float), cudaMemcpyHostToDevice)) {
    return fail_cuda("cudaMemcpy to the GPU", e);
  }
  if (auto e = cudaMemcpy(b.data, host.data(), cols * sizeof(float), cudaMemcpyHostToDevice)) {
    return fail_cuda("cudaMemcpy to the GPU", e);
  }

  const auto gpu = meshstore::Device::cuda(0);
  meshstore::TensorView weight(w.data, meshstore::DType::float32, {rows, cols}, {}, gpu);
  meshstore::TensorView weight_copy(w_copy.data, meshstore::DType::float32, {rows, cols}, {}, gpu);
  if (auto s = store->put("layer.0.weight", weight).get(30s); !s.ok()) {
    return fail("put from the GPU", s.status());
  }
  if (auto s = store->get_into("layer.0.weight", weight_copy).get(30s); !s.ok()) {
    return fail("get_into the GPU", s.status());
  }
  auto on_host = store->get("layer.0.weight").get(30s);  // a host tensor
  if (!on_host.ok()) return fail("get", on_host.status());

  meshstore::StateDict sd, sd_copy;
  if (auto s = sd.insert("weight", weight); !s.ok()) return fail("insert", s);
  if (auto s = sd.insert("bias",
                         meshstore::TensorView(b.data, meshstore::DType::float32, {cols}, {}, gpu));
      !s.ok()) {
    return fail("insert", s);
  }
  if (auto s = sd_copy.insert("weight", weight_copy); !s.ok()) return fail("insert", s);
  if (auto s = sd_copy.insert(
          "bias", meshstore::TensorView(b_copy.data, meshstore::DType::float32, {cols}, {}, gpu));
      !s.ok()) {
    return fail("insert", s);
  }
  if (auto s = store->state_dicts().put("model", sd).get(30s); !s.ok()) {
    return fail("state dict put from the GPU", s.status());
  }
  if (auto s = store->state_dicts().get_into("model", sd_copy).get(30s); !s.ok()) {
    return fail("state dict get_into the GPU", s.status());
  }

  // Every byte came back: the GPU copies, read to the host, and the host tensor.
  std::vector<float> back(n), bias_back(cols);
  if (auto e = cudaMemcpy(back.data(), w_copy.data, n * sizeof(float), cudaMemcpyDeviceToHost)) {
    return fail_cuda("cudaMemcpy from the GPU", e);
  }
  if (auto e =
          cudaMemcpy(bias_back.data(), b_copy.data, cols * sizeof(float), cudaMemcpyDeviceToHost)) {
    return fail_cuda("cudaMemcpy from the GPU", e);
  }
  if (back != host || std::memcmp(bias_back.data(), host.data(), cols * sizeof(float)) != 0 ||
      on_host->nbytes() != n * sizeof(float) ||
      std::memcmp(on_host->data(), host.data(), n * sizeof(float)) != 0) {
    std::fprintf(stderr, "gpu_weights: the bytes read back differ from those put\n");
    return 1;
  }
  store->close();
  std::printf("gpu_weights: ok (%zu bytes each way, twice)\n", (n + cols) * sizeof(float));
  return 0;
}
