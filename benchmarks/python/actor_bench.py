"""Python actors (meshstore.actor, docs/python-actors.md) against the C++
runtime they are built on, in the same run.

    PYTHONPATH=build/python python3 benchmarks/python/actor_bench.py [-n 4] [--iters 300]
        [--mesh-bench build/bin/mesh_bench] [--smoke]

Starts n Python worker processes with this_host().spawn_procs and spawns an
actor mesh on them (timed, from the call to the first answer of every
member), then times an empty endpoint: call_one to member 1 (p50, p99) and
call to all n (calls per second, one after the other), and a call_one that
sends a 64 MiB tensor the endpoint reads whole, against the same work done
here (one copy of the tensor, then its sum: what a route with no copy but
the one into shared memory costs), into memory touched before and into
fresh memory (what a new segment is). The C++ figures come
from `mesh_bench --launch -n N --json` run just before: ActorMesh::ask to
rank 1 and ActorMesh::call on n processes. Prints one line per figure and a
JSON line with the ratios (Python / C++ time; the goal is at most 3 for an
empty endpoint).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from meshstore.actor import Actor, endpoint, this_host


class Echo(Actor):
    @endpoint
    def ping(self):
        return None

    @endpoint
    def total(self, t):
        return float(t.sum())  # reads every byte it was sent


def cpp_figures(mesh_bench, n, smoke):
    cmd = [mesh_bench, "--launch", "-n", str(n), "--json"] + (["--smoke"] if smoke else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300).stdout
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"mesh_bench printed no JSON line:\n{out}")


def main():
    # Here, not at the top: the workers load this script (as __mp_main__),
    # and torch's import would be in the start-up time measured.
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--iters", type=int, default=300)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--mesh-bench", default=os.environ.get(
        "MESHSTORE_MESH_BENCH", os.path.join(here, "..", "..", "build", "bin", "mesh_bench")))
    ap.add_argument("--smoke", action="store_true", help="few iterations (CI)")
    a = ap.parse_args()
    iters = 30 if a.smoke else a.iters

    cpp = cpp_figures(a.mesh_bench, a.n, a.smoke)

    start = time.perf_counter()
    procs = this_host().spawn_procs(per_host={"procs": a.n})
    echoes = procs.spawn("echoes", Echo)
    echoes.ping.call().get(timeout=60)
    spawn_ms = (time.perf_counter() - start) * 1e3
    try:
        one = echoes.slice(procs=1)
        for _ in range(10):  # warm: connections, the workers' actor loops
            one.ping.call_one().get(timeout=60)
        lat = []
        for _ in range(iters):
            t = time.perf_counter()
            one.ping.call_one().get(timeout=60)
            lat.append((time.perf_counter() - t) * 1e6)
        t = time.perf_counter()
        for _ in range(iters):
            echoes.ping.call().get(timeout=60)
        calls_per_s = iters / (time.perf_counter() - t)
        big = torch.rand(16 << 20)  # 64 MiB
        scratch = torch.empty_like(big)
        one.total.call_one(big).get(timeout=60)  # warm
        moves, floor, fresh = [], [], []
        for _ in range(3 if a.smoke else 10):
            t = time.perf_counter()
            one.total.call_one(big).get(timeout=60)
            moves.append(time.perf_counter() - t)
            t = time.perf_counter()
            scratch.copy_(big)
            float(scratch.sum())
            floor.append(time.perf_counter() - t)
            t = time.perf_counter()
            float(big.clone().sum())  # into memory not touched before
            fresh.append(time.perf_counter() - t)
    finally:
        procs.stop()

    lat.sort()
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    out = {
        "bench": "actor", "processes": a.n, "iters": iters,
        "py_call_one_p50_us": round(p50, 1), "py_call_one_p99_us": round(p99, 1),
        "cpp_call_one_p50_us": cpp["call_one_p50_us"],
        "py_call_one_vs_cpp": round(p50 / cpp["call_one_p50_us"], 2),
        "py_calls_per_s": round(calls_per_s), "cpp_calls_per_s": cpp["call_per_s"],
        "py_call_vs_cpp": round(cpp["call_per_s"] / calls_per_s, 2),
        "py_spawn_procs_and_mesh_ms": round(spawn_ms, 1),
        "cpp_launch_spawn_ms": cpp["launch_spawn_ms"],
        "py_spawn_vs_cpp": round(spawn_ms / cpp["launch_spawn_ms"], 2),
        "py_64mib_call_one_ms": round(statistics.median(moves) * 1e3, 1),
        "copy_and_sum_64mib_ms": round(statistics.median(floor) * 1e3, 1),
        "py_64mib_vs_copy_and_sum": round(statistics.median(moves) / statistics.median(floor), 2),
        "fresh_copy_and_sum_64mib_ms": round(statistics.median(fresh) * 1e3, 1),
        "py_64mib_vs_fresh_copy_and_sum": round(statistics.median(moves) / statistics.median(fresh), 2),
    }
    print(f"call_one, empty endpoint, p50: Python {p50:.1f} us, C++ "
          f"{cpp['call_one_p50_us']} us: {out['py_call_one_vs_cpp']} x")
    print(f"call on {a.n}: Python {calls_per_s:.0f}/s, C++ {cpp['call_per_s']}/s: "
          f"{out['py_call_vs_cpp']} x the time")
    print(f"{a.n} processes and a mesh: Python {spawn_ms:.1f} ms, C++ "
          f"{cpp['launch_spawn_ms']} ms: {out['py_spawn_vs_cpp']} x")
    print(f"call_one with a 64 MiB tensor, read whole: {out['py_64mib_call_one_ms']} ms, "
          f"one copy and a sum here {out['copy_and_sum_64mib_ms']} ms: "
          f"{out['py_64mib_vs_copy_and_sum']} x; into fresh memory "
          f"{out['fresh_copy_and_sum_64mib_ms']} ms: {out['py_64mib_vs_fresh_copy_and_sum']} x")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
