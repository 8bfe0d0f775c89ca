#!/usr/bin/python3
"""peer_bench's meshstore-python contender: the meshstore contender, from Python.

    peer_meshstore.py --spec FILE --rounds N

FILE lists a workload's tensors, one "NAME NUMEL" line each (bf16). Process A
(this one) holds an embedded store listening on loopback and starts process
B, which connects. Each round A fills its torch tensors (untimed, as for every
contender), then publishes them (publish_state_dict); B, waiting in
get_next_state_dict_into, streams the version into its own torch tensors and
checks a sample of every tensor. B reports when it finished and whether the
bytes were right by publishing a small state dict back. Prints per round
"round R SECONDS OK": from A's publish to B's last byte (time.monotonic_ns is
CLOCK_MONOTONIC in both processes). Prints "skip REASON" and exits 0 where
torch or the meshstore package is missing.
"""
import argparse
import os
import subprocess
import sys
import time


def import_meshstore():
    try:
        import meshstore
    except ImportError:
        # Next to build/bin lies build/python.
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "python"))
        import meshstore
    return meshstore


def load_spec(path):
    with open(path) as f:
        return [(name, int(numel)) for name, numel in (line.split() for line in f)]


def fill(tensors, r, np):
    """Round r's bytes: element i of tensor t holds (i * 7 + t + r) mod 2^16."""
    import torch
    period = (np.arange(65536, dtype=np.uint32) * 7 & 0xFFFF).astype(np.uint16)
    for t, tensor in enumerate(tensors):
        a = tensor.view(torch.int16).numpy().view(np.uint16)
        a[:] = np.resize(period, a.size)
        a += np.uint16((t + r) & 0xFFFF)


def holds(tensors, r, np):
    """Whether the tensors hold round r (a sample of every tensor, like peer_bench)."""
    import torch
    for t, tensor in enumerate(tensors):
        a = tensor.view(torch.int16).numpy().view(np.uint16)
        n = a.size
        idx = np.append(np.arange(0, n, 1 + n // 64, dtype=np.int64), n - 1)
        if not np.array_equal(a[idx], ((idx * 7 + t + r) & 0xFFFF).astype(np.uint16)):
            return False
    return True


def writer(spec, rounds, meshstore):
    import numpy as np
    import torch
    torch.set_num_threads(1)
    store = meshstore.Store.embedded(listen="127.0.0.1:0")
    me = [sys.executable, os.path.abspath(__file__), "--spec", ARGS.spec, "--rounds", str(rounds),
          "--address", store.address]
    reader = subprocess.Popen(me)
    try:
        sd = {name: torch.empty(numel, dtype=torch.bfloat16) for name, numel in spec}
        tensors = list(sd.values())
        back = {"round": -1, "end": 0, "ok": False}
        for r in range(rounds + 1):
            # B is ready for round r, and reports round r - 1.
            store.get_next_state_dict_into("b", back, r, timeout=300).result()
            if r > 0:
                print(f"round {r - 1} {(back['end'] - t0) / 1e9:.9f} {int(back['ok'])}",
                      flush=True)
            if r == rounds:
                break
            fill(tensors, r, np)
            t0 = time.monotonic_ns()
            store.publish_state_dict("w", sd).result()
        if reader.wait(60) != 0:
            raise SystemExit(f"peer_meshstore: the reader exited with {reader.returncode}")
    finally:
        if reader.poll() is None:
            reader.kill()
        store.close()


def reader(spec, rounds, address, meshstore):
    import numpy as np
    import torch
    torch.set_num_threads(1)
    store = meshstore.Store.connect(address)
    sd = {name: torch.empty(numel, dtype=torch.bfloat16) for name, numel in spec}
    tensors = list(sd.values())
    report = {"round": -1, "end": 0, "ok": False}
    for r in range(rounds + 1):
        store.publish_state_dict("b", report).result()
        if r == rounds:
            break
        store.get_next_state_dict_into("w", sd, r, timeout=300).result()
        end = time.monotonic_ns()
        report = {"round": r, "end": end, "ok": holds(tensors, r, np)}
    store.close()


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--spec", required=True)
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--address")
    ARGS = p.parse_args()
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        meshstore = import_meshstore()
    except ImportError as e:
        print(f"skip {e} (build the Python package: docs/python.md)", flush=True)
        return 0
    spec = load_spec(ARGS.spec)
    if ARGS.address:
        reader(spec, ARGS.rounds, ARGS.address, meshstore)
    else:
        writer(spec, ARGS.rounds, meshstore)
    return 0


if __name__ == "__main__":
    sys.exit(main())
