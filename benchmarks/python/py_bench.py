"""The Python half of `store_bench --scenario python`: the same calls as the
C++ half, from Python, on torch tensors through DLPack, in an embedded store.

store_bench starts it and reads one JSON line from its stdout; run alone:

    PYTHONPATH=build/python python3 benchmarks/python/py_bench.py --bytes 1073741824 \
        --iters 5 --small-iters 2000 --shapes shapes.json

shapes.json: [[name, [dims...]], ...] (bf16 tensors of a state dict).
"""

import argparse
import json
import statistics
import sys
import time

import torch

import meshstore


def median_seconds(fn, iters):
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def percentile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--small-iters", type=int, default=2000)
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--scheduler-threads", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = {}
    with meshstore.Store.embedded(scheduler_threads=args.scheduler_threads) as store:
        # 4 KiB put + get_into.
        src = torch.full((4096,), 7, dtype=torch.uint8)
        dst = torch.empty(4096, dtype=torch.uint8)
        store.put("small", src).result()
        lat = []
        for _ in range(args.small_iters):
            t0 = time.perf_counter()
            store.put("small", src).result()
            store.get_into("small", dst).result()
            lat.append((time.perf_counter() - t0) * 1e6)
        out["small_p50_us"] = percentile(lat, 0.5)
        out["small_p99_us"] = percentile(lat, 0.99)
        print("py_bench: small done", file=sys.stderr)

        # One large tensor: put and get_into, warm.
        big = torch.ones(args.bytes, dtype=torch.uint8)
        into = torch.zeros(args.bytes, dtype=torch.uint8)
        store.put("big", big).result()
        store.get_into("big", into).result()
        out["tensor_put_s"] = median_seconds(lambda: store.put("big", big).result(), args.iters)
        out["tensor_get_into_s"] = median_seconds(
            lambda: store.get_into("big", into).result(), args.iters)
        if not torch.equal(into[:: max(1, args.bytes // 4096)],
                           big[:: max(1, args.bytes // 4096)]):
            raise SystemExit("py_bench: get_into read wrong bytes")
        store.delete("big").result()
        del big, into
        print("py_bench: tensor done", file=sys.stderr)

        # A model's state dict (bf16), put and read in place.
        with open(args.shapes) as f:
            shapes = json.load(f)
        sd = {n: torch.full(s, 1.0, dtype=torch.bfloat16) for n, s in shapes}
        back = {n: torch.zeros(s, dtype=torch.bfloat16) for n, s in shapes}
        store.put_state_dict("sd", sd).result()
        store.get_state_dict_into("sd", back).result()
        out["sd_put_s"] = median_seconds(lambda: store.put_state_dict("sd", sd).result(),
                                         args.iters)
        out["sd_get_into_s"] = median_seconds(
            lambda: store.get_state_dict_into("sd", back).result(), args.iters)
        out["sd_bytes"] = sum(t.numel() * 2 for t in sd.values())
        out["sd_tensors"] = len(sd)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
