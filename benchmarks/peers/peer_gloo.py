#!/usr/bin/python3
"""peer_bench's torch.distributed (gloo) contender.

    peer_gloo.py --spec FILE --rounds N

FILE lists a workload's tensors, one "NAME NUMEL" line each (bf16: 2 bytes
an element; moved here as int16, the same bytes). Starts two processes on
loopback: rank 0 (process A) sends every tensor to rank 1 (process B) with
one batch_isend_irecv per round, the way torch users batch point-to-point
sends; B receives into its own tensors and checks them. Prints per round
"round R SECONDS OK": from A's first send to B's last byte (time.monotonic_ns
is CLOCK_MONOTONIC in both processes). Prints "skip REASON" and exits 0
where torch is missing.
"""
import argparse
import datetime
import os
import socket
import subprocess
import sys
import time


def load_spec(path):
    out = []
    with open(path) as f:
        for line in f:
            name, numel = line.split()
            out.append((name, int(numel)))
    return out


def expected(numel, t, r, np):
    """Round r's elements of tensor t: element i holds (i * 7 + t + r) mod 2^16."""
    period = (np.arange(65536, dtype=np.uint32) * 7 & 0xFFFF).astype(np.uint16)
    values = np.resize(period, numel)
    values += np.uint16((t + r) & 0xFFFF)
    return values


def holds(tensors, r, np):
    """Whether B's tensors hold round r (a sample of every tensor, like peer_bench)."""
    for t, tensor in enumerate(tensors):
        a = tensor.numpy().view(np.uint16)
        n = a.size
        idx = np.append(np.arange(0, n, 1 + n // 64, dtype=np.int64), n - 1)
        want = ((idx * 7 + t + r) & 0xFFFF).astype(np.uint16)
        if not np.array_equal(a[idx], want):
            return False
    return True


def rank_main(rank, port, spec, rounds):
    import numpy as np
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=300))
    if rank == 0:
        tensors = [None] * len(spec)
    else:
        tensors = [torch.empty(numel, dtype=torch.int16) for _, numel in spec]
    for r in range(rounds):
        if rank == 0:
            tensors = [torch.from_numpy(expected(numel, t, r, np).view(np.int16))
                       for t, (_, numel) in enumerate(spec)]
        dist.barrier()
        if rank == 0:
            t0 = time.monotonic_ns()
            ops = [dist.P2POp(dist.isend, t, 1) for t in tensors]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            end = torch.zeros(2, dtype=torch.int64)
            dist.recv(end, 1)
            print(f"round {r} {(int(end[0]) - t0) / 1e9:.9f} {int(end[1])}", flush=True)
        else:
            ops = [dist.P2POp(dist.irecv, t, 0) for t in tensors]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            end = time.monotonic_ns()
            ok = 1 if holds(tensors, r, np) else 0
            dist.send(torch.tensor([end, ok], dtype=torch.int64), 0)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--spec", required=True)
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--rank", type=int)
    p.add_argument("--port", type=int)
    a = p.parse_args()
    spec = load_spec(a.spec)
    if a.rank is not None:
        rank_main(a.rank, a.port, spec, a.rounds)
        return 0
    try:
        import numpy  # noqa: F401
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_gloo_available():
            print("skip this torch has no gloo backend", flush=True)
            return 0
    except ImportError as e:
        print(f"skip {e} (Debian: apt-get install python3-torch python3-numpy)", flush=True)
        return 0
    port = free_port()
    me = [sys.executable, os.path.abspath(__file__), "--spec", a.spec, "--rounds",
          str(a.rounds), "--port", str(port)]
    b = subprocess.Popen(me + ["--rank", "1"])
    a_rc = subprocess.call(me + ["--rank", "0"])
    if a_rc != 0:
        b.kill()  # it would wait for rank 0 until gloo's timeout
    b_rc = b.wait()
    if a_rc != 0 or b_rc != 0:
        print(f"peer_gloo: rank 0 exited with {a_rc}, rank 1 with {b_rc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
