"""A Qwen3-0.6B-shaped model built on the meta device and loaded from a
safetensors checkpoint at 1x memory (docs/persistence.md, "Loading a model").

    PYTHONPATH=build/python python3 examples/python/meta_load.py [--layers 28]

It writes a checkpoint of random weights first (in a child process, so this
one's memory stays clean), then builds the model with no memory for its
weights, fills it with meshstore.checkpoint.load_into, reads every weight,
and prints how much its resident memory grew against the checkpoint's bytes.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import torch

import meshstore.checkpoint
import meshstore.safetensors as st


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, device):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim, dtype=torch.bfloat16, device=device))


def linear(n_in, n_out, device):
    return torch.nn.Linear(n_in, n_out, bias=False, dtype=torch.bfloat16, device=device)


class Attention(torch.nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, device):
        super().__init__()
        self.q_proj = linear(hidden, heads * head_dim, device)
        self.k_proj = linear(hidden, kv_heads * head_dim, device)
        self.v_proj = linear(hidden, kv_heads * head_dim, device)
        self.o_proj = linear(heads * head_dim, hidden, device)
        self.q_norm = RMSNorm(head_dim, device)
        self.k_norm = RMSNorm(head_dim, device)


class MLP(torch.nn.Module):
    def __init__(self, hidden, intermediate, device):
        super().__init__()
        self.gate_proj = linear(hidden, intermediate, device)
        self.up_proj = linear(hidden, intermediate, device)
        self.down_proj = linear(intermediate, hidden, device)


class Layer(torch.nn.Module):
    def __init__(self, hidden, intermediate, device):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, device)
        self.self_attn = Attention(hidden, 16, 8, 128, device)
        self.post_attention_layernorm = RMSNorm(hidden, device)
        self.mlp = MLP(hidden, intermediate, device)


class Body(torch.nn.Module):
    def __init__(self, layers, vocab, hidden, intermediate, device):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(vocab, hidden, dtype=torch.bfloat16, device=device)
        self.layers = torch.nn.ModuleList(Layer(hidden, intermediate, device)
                                          for _ in range(layers))
        self.norm = RMSNorm(hidden, device)


class Qwen3Shaped(torch.nn.Module):
    """Qwen3-0.6B's parameter names and shapes; the LM head is tied to the
    embedding, as in the released checkpoint."""

    def __init__(self, layers=28, vocab=151936, hidden=1024, intermediate=3072, device=None):
        super().__init__()
        self.model = Body(layers, vocab, hidden, intermediate, device)
        self.lm_head = linear(hidden, vocab, device)
        self.lm_head.weight = self.model.embed_tokens.weight


def rss_bytes():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--write", help=argparse.SUPPRESS)  # the child: write the checkpoint
    args = ap.parse_args()
    if args.write:
        torch.manual_seed(0)
        model = Qwen3Shaped(args.layers)
        st.save_model(model, args.write)  # the tied head is saved once
        return
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.safetensors")
        subprocess.run([sys.executable, __file__, "--layers", str(args.layers), "--write", path],
                       check=True)
        size = os.path.getsize(path)
        before = rss_bytes()
        model = Qwen3Shaped(args.layers, device="meta")  # no memory for the weights
        missing, unexpected = meshstore.checkpoint.load_into(model, path)
        total = sum(float(p.sum()) for p in model.parameters())  # read every weight
        grew = (rss_bytes() - before) / size
        tied = model.lm_head.weight is model.model.embed_tokens.weight
        with st.safe_open(path, framework="pt") as f:
            same = torch.equal(f.get_tensor("model.norm.weight"), model.model.norm.weight)
        ok = not missing and not unexpected and tied and same and grew <= 1.05
        print(f"meta_load: {'ok' if ok else 'FAILED'}: {args.layers} layers, {size / 1e9:.2f} GB, "
              f"resident memory grew {grew:.3f} x the checkpoint, head tied {tied} "
              f"(sum {total:.1f})")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
