"""Checkpoints from Python (docs/persistence.md, "The benchmark: checkpoint_bench.py"):
saves and loads of a Qwen3-0.6B-shaped bf16 state dict, each against a
baseline taken in the same run.

    PYTHONPATH=build/python python3 benchmarks/python/checkpoint_bench.py [--layers N]
        [--iters 3] [--dir /tmp] [--smoke]

Save, one rank: meshstore.safetensors.save_file against one large write() of
a prepared buffer of the same bytes (the disk and page-cache limit) and
torch.save, each flushed with fsync. Two ranks (processes on this host,
gloo): save_sharded (each rank writes its row halves into the final file)
against "each rank saves its own file, then one process consolidates" (the
same writer, then load_file of both and torch.cat into the final file).
Load, page cache warm: load_into(assign=True) of a model built on the meta
device, and load_file (lazily, and with every byte read), against torch.load
of the same weights and against readinto() of the file's bytes; the peak
resident memory of a fresh process doing load_into and reading every weight,
over the weights' bytes. Prints one line per figure and a JSON line.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import meshstore
import meshstore.checkpoint as ckpt
import meshstore.safetensors as st
from py_bench import median_seconds as timed  # this folder's: the median of timed runs


def qwen3_shapes(layers, vocab=151936, hidden=1024, intermediate=3072, heads=16, kv_heads=8,
                 head_dim=128):
    """Qwen3-0.6B's tensor names and shapes (examples/weights/qwen3_shapes.hpp)."""
    out = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (hidden,)),
                (p + "mlp.down_proj.weight", (hidden, intermediate)),
                (p + "mlp.gate_proj.weight", (intermediate, hidden)),
                (p + "mlp.up_proj.weight", (intermediate, hidden)),
                (p + "post_attention_layernorm.weight", (hidden,)),
                (p + "self_attn.k_norm.weight", (head_dim,)),
                (p + "self_attn.k_proj.weight", (kv_heads * head_dim, hidden)),
                (p + "self_attn.o_proj.weight", (hidden, heads * head_dim)),
                (p + "self_attn.q_norm.weight", (head_dim,)),
                (p + "self_attn.q_proj.weight", (heads * head_dim, hidden)),
                (p + "self_attn.v_proj.weight", (kv_heads * head_dim, hidden))]
    out.append(("model.norm.weight", (hidden,)))
    return out


def make_state(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {n: torch.empty(s, dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
            for n, s in shapes}


def fsynced(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def raw_write(path, buf):
    with open(path, "wb") as f:
        f.write(buf)
        f.flush()
        os.fsync(f.fileno())


def torch_save(path, state):
    torch.save(state, path)
    fsynced(path)


def read_bytes(path, buf):
    with open(path, "rb", buffering=0) as f:
        f.readinto(buf)


def build_model(shapes, device):
    """A module whose state dict holds `shapes` under their names (nested
    modules along the dots), bf16, on `device`."""
    root = torch.nn.Module()
    for name, shape in shapes:
        *path, leaf = name.split(".")
        m = root
        for part in path:
            if part not in m._modules:
                m.add_module(part, torch.nn.Module())
            m = m._modules[part]
        m.register_parameter(leaf, torch.nn.Parameter(
            torch.empty(shape, dtype=torch.bfloat16, device=device), requires_grad=False))
    return root


def status_bytes(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) * 1024


def probe(path, shapes, nbytes):
    """In a fresh process (--probe): load_into a meta model, read every
    weight, print the peak RSS growth over the weights' bytes."""
    model = build_model(shapes, "meta")
    before = status_bytes("VmRSS:")
    ckpt.load_into(model, path)
    for p in model.parameters():
        p.sum()
    print((status_bytes("VmHWM:") - before) / nbytes)


def peak_rss_over_weights(path, args, nbytes):
    out = subprocess.run([sys.executable, __file__, "--probe", path, "--layers", str(args.layers),
                          "--vocab", str(args.vocab), "--bytes", str(nbytes)],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return float(out.stdout.strip())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, world, port, workdir, shapes, iters, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    whole = make_state(shapes)
    S, R = meshstore.Shard, meshstore.Replicate
    placements = {n: ((S(0),) if len(s) > 1 else (R(),)) for n, s in shapes}
    local = {n: (torch.chunk(t, world, 0)[rank].clone() if len(t.shape) > 1 else t.clone())
             for n, t in whole.items()}
    del whole
    sharded, two_pass = [], []
    for i in range(iters):
        out = os.path.join(workdir, f"sharded{i}")
        if rank == 0:
            os.makedirs(out)
        dist.barrier()
        t0 = time.perf_counter()
        ckpt.save_sharded(out, local, placements)
        dist.barrier()
        sharded.append(time.perf_counter() - t0)
        if rank == 0:
            shutil.rmtree(out, ignore_errors=True)
        dist.barrier()
        # Each rank its own file, then rank 0 consolidates.
        t0 = time.perf_counter()
        mine = {n: t for n, t in local.items() if len(t.shape) > 1 or rank == 0}
        st.save_file(mine, os.path.join(workdir, f"rank{rank}.safetensors"))
        dist.barrier()
        if rank == 0:
            parts = [st.load_file(os.path.join(workdir, f"rank{r}.safetensors"))
                     for r in range(world)]
            full = {n: (torch.cat([p[n] for p in parts]) if len(s) > 1 else parts[0][n])
                    for n, s in shapes}
            st.save_file(full, os.path.join(workdir, "consolidated.safetensors"))
            del full, parts
        dist.barrier()
        two_pass.append(time.perf_counter() - t0)
        if rank == 0:
            for r in range(world):
                os.remove(os.path.join(workdir, f"rank{r}.safetensors"))
            os.remove(os.path.join(workdir, "consolidated.safetensors"))
        dist.barrier()
    if rank == 0:
        results.put((statistics.median(sharded), statistics.median(two_pass)))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--smoke", action="store_true",
                    help="2 layers, a 4,096-word vocabulary, 1 iteration")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    ap.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:
        return probe(args.probe, qwen3_shapes(args.layers, vocab=args.vocab), args.bytes)
    if args.smoke:
        args.layers, args.vocab, args.iters = 2, 4096, 1
    torch.set_num_threads(1)
    shapes = qwen3_shapes(args.layers, vocab=args.vocab)
    workdir = tempfile.mkdtemp(prefix="checkpoint_bench.", dir=args.dir)
    fig = {}
    try:
        state = make_state(shapes)
        nbytes = sum(t.numel() * t.element_size() for t in state.values())
        gb = nbytes / 1e9
        path = os.path.join(workdir, "model.safetensors")
        pt = os.path.join(workdir, "model.pt")
        flat = torch.empty(nbytes, dtype=torch.uint8)
        at = 0
        for t in state.values():
            n = t.numel() * t.element_size()
            flat[at:at + n] = t.reshape(-1).view(torch.uint8)
            at += n
        buf = memoryview(flat.numpy())
        raw = os.path.join(workdir, "raw.bin")

        # The contenders alternate, each into a file removed beforehand: the
        # VM's writeback of one run's bytes otherwise slows the next one.
        saves = {"raw": (raw, lambda: raw_write(raw, buf)),
                 "save_file": (path, lambda: st.save_file(state, path)),
                 "torch.save": (pt, lambda: torch_save(pt, state))}
        took = {k: [] for k in saves}
        for _ in range(args.iters):
            for name, (target, fn) in saves.items():
                if os.path.exists(target):
                    os.remove(target)
                took[name].append(timed(fn, 1))
        t_raw, t_save, t_torch_save = (statistics.median(took[k]) for k in saves)
        fig["save_file_vs_raw_write"] = t_raw / t_save
        fig["save_file_vs_torch_save"] = t_torch_save / t_save
        print(f"save, 1 rank, {gb:.2f} GB: raw write {gb / t_raw:.2f} GB/s, torch.save "
              f"{gb / t_torch_save:.2f} GB/s, save_file {gb / t_save:.2f} GB/s "
              f"({fig['save_file_vs_raw_write']:.2f} x raw write, goal 0.8)")

        t_read = timed(lambda: read_bytes(path, buf), args.iters)
        t_torch_load = timed(lambda: torch.load(pt), args.iters)

        def load_meta():
            ckpt.load_into(build_model(shapes, "meta"), path)

        def load_touched():
            for t in st.load_file(path).values():
                t.sum()

        t_into = timed(load_meta, args.iters)
        t_lazy = timed(lambda: st.load_file(path), args.iters)
        t_touched = timed(load_touched, args.iters)
        fig["load_into_vs_torch_load"] = t_torch_load / t_into
        fig["load_file_vs_torch_load"] = t_torch_load / t_lazy
        fig["load_file_read_vs_read"] = t_read / t_touched
        fig["load_file_read_vs_torch_load"] = t_torch_load / t_touched
        print(f"load, page cache warm: torch.load {t_torch_load * 1e3:.1f} ms, readinto "
              f"{t_read * 1e3:.1f} ms; load_into(meta, assign) {t_into * 1e3:.2f} ms "
              f"({fig['load_into_vs_torch_load']:.0f} x torch.load, goal 50), load_file "
              f"{t_lazy * 1e3:.2f} ms ({fig['load_file_vs_torch_load']:.0f} x), load_file + "
              f"every byte read {t_touched * 1e3:.1f} ms "
              f"({fig['load_file_read_vs_read']:.2f} x readinto, "
              f"{fig['load_file_read_vs_torch_load']:.1f} x torch.load)")
        fig["peak_rss_over_weights"] = peak_rss_over_weights(path, args, nbytes)
        print(f"load_into on the meta device, every weight read: peak RSS "
              f"{fig['peak_rss_over_weights']:.3f} x the weights (goal 1.05)")
        del state, flat, buf
        for p in (path, pt, raw):
            os.remove(p)

        ctx = mp.get_context("spawn")
        results = ctx.SimpleQueue()
        port = free_port()
        procs = [ctx.Process(target=rank_main,
                             args=(r, 2, port, workdir, shapes, args.iters, results))
                 for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            raise RuntimeError("a rank of the 2-rank save failed")
        t_sharded, t_two_pass = results.get()
        fig["sharded_vs_save_then_consolidate"] = t_two_pass / t_sharded
        print(f"save, 2 ranks: save_sharded {gb / t_sharded:.2f} GB/s, save then consolidate "
              f"{gb / t_two_pass:.2f} GB/s ({fig['sharded_vs_save_then_consolidate']:.2f} x, "
              "goal 1.8)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({k: round(v, 4) for k, v in fig.items()}))


if __name__ == "__main__":
    main()
