#pragma once

// The tensor names and shapes of the Qwen3 family's checkpoints (bf16), as
// their model.safetensors files hold them, for synthetic weight-sync runs.
// Word embeddings are tied in these sizes, so there is no lm_head.weight.
// Header-only: shared by examples/weights/trainer_to_workers and store_bench.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace qwen3 {

struct Config {
  std::string name;
  std::int64_t hidden = 0;
  std::int64_t intermediate = 0;
  int layers = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 128;
  std::int64_t vocab = 151936;
};

/// The configurations: qwen3-0.6b, qwen3-1.7b, qwen3-4b-8layers (Qwen3-4B cut
/// to its first 8 layers, to fit small machines).
inline std::vector<Config> configs() {
  return {
      {"qwen3-0.6b", 1024, 3072, 28, 16, 8},
      {"qwen3-1.7b", 2048, 6144, 28, 16, 8},
      {"qwen3-4b-8layers", 2560, 9728, 8, 32, 8},
  };
}

/// The configuration named `name`, or false.
inline bool find(const std::string& name, Config& out) {
  for (const auto& c : configs()) {
    if (c.name == name) {
      out = c;
      return true;
    }
  }
  return false;
}

using Tensors = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;

/// Every tensor of the checkpoint, in the checkpoint's (sorted) order.
inline Tensors tensors(const Config& c) {
  Tensors out;
  out.push_back({"model.embed_tokens.weight", {c.vocab, c.hidden}});
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {c.hidden}});
    out.push_back({p + "mlp.down_proj.weight", {c.hidden, c.intermediate}});
    out.push_back({p + "mlp.gate_proj.weight", {c.intermediate, c.hidden}});
    out.push_back({p + "mlp.up_proj.weight", {c.intermediate, c.hidden}});
    out.push_back({p + "post_attention_layernorm.weight", {c.hidden}});
    out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    out.push_back({p + "self_attn.k_proj.weight", {c.kv_heads * c.head_dim, c.hidden}});
    out.push_back({p + "self_attn.o_proj.weight", {c.hidden, c.heads * c.head_dim}});
    out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
    out.push_back({p + "self_attn.q_proj.weight", {c.heads * c.head_dim, c.hidden}});
    out.push_back({p + "self_attn.v_proj.weight", {c.kv_heads * c.head_dim, c.hidden}});
  }
  out.push_back({"model.norm.weight", {c.hidden}});
  return out;
}

/// Elements of one tensor.
inline std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

}  // namespace qwen3
