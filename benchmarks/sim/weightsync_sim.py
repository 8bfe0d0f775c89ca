#!/usr/bin/env python3
"""weightsync_sim: a discrete-event simulator of a weight sync.

Flow-level: bytes move as flows through resources (a NIC's send or receive
side, a GPU's copy engine, a host's memory, a transport between two
processes), each with a capacity in bytes per second. Flows sharing a
resource share it max-min fairly (progressive filling), and the rates are
recomputed at every event: a flow starting or ending, or a timer. Fixed
costs (a control message's round trip, a transfer's setup) are timers.

Three commands:

  validate --single S.json --weight-sync W.json [--four-hosts F.json]
      Predicts figures this machine measured from other figures of the same
      run: the Qwen3-0.6B put_state_dict and get_state_dict_into of
      store_bench --scenario weight-sync, from the one-tensor bandwidth of
      store_bench --scenario single and the 1,000 x 4 KiB workload's time;
      and the four-host reads of four_hosts_bench.sh (one reader, three at
      once on one sender's link), from the raw link's goodput and the read
      of a 4 KiB state dict. Prints predicted against measured and the error.

  plan [--json]
      The 1T-parameter sync of docs/scale-out.md: 256 trainer GPUs to 128
      inference GPUs, 8 GPUs and 8 x 400 Gbps NICs a host, over RDMA, under
      several designs, against the bound the NICs alone set.

  smoke
      validate's and plan's code on tiny inputs (CI).

benchmarks/sim/README.md says where every parameter comes from.
"""

import argparse
import heapq
import json
import sys

INF = float("inf")


# ---------------------------------------------------------------- engine


class Resource:
    """Something bytes flow through, `capacity` bytes per second."""

    def __init__(self, name, capacity):
        if capacity <= 0:
            raise ValueError("resource %s: capacity must be positive, got %r" % (name, capacity))
        self.name = name
        self.capacity = float(capacity)
        self.flows = set()
        self.busy_bytes = 0.0  # bytes that went through (utilization)


class Flow:
    __slots__ = ("left", "resources", "done", "rate", "cap", "bytes")

    def __init__(self, nbytes, resources, done, cap):
        self.bytes = float(nbytes)
        self.left = float(nbytes)
        self.resources = resources
        self.done = done
        self.rate = 0.0
        self.cap = cap


class Sim:
    """The event loop: timers and flows."""

    EPS = 1e-9  # bytes: a flow with less left is done

    def __init__(self):
        self.now = 0.0
        self.timers = []
        self.seq = 0
        self.flows = set()
        self.dirty = False

    def after(self, delay, fn):
        """Calls fn() `delay` seconds from now."""
        if delay < 0:
            raise ValueError("negative delay %r" % delay)
        heapq.heappush(self.timers, (self.now + delay, self.seq, fn))
        self.seq += 1

    def flow(self, nbytes, resources, done, cap=INF):
        """Moves nbytes through every resource of `resources` at once (its
        rate is the least share it gets of any), at most `cap` bytes/s;
        calls done() when the last byte is through."""
        if nbytes <= 0:
            self.after(0.0, done)
            return
        f = Flow(nbytes, list(resources), done, cap)
        for r in f.resources:
            r.flows.add(f)
        self.flows.add(f)
        self.dirty = True

    def _share(self):
        """Max-min fair rates by progressive filling."""
        left = {}
        unfrozen = {}
        for f in self.flows:
            f.rate = None
            for r in f.resources:
                if r not in left:
                    left[r] = r.capacity
                    unfrozen[r] = 0
                unfrozen[r] += 1
        pending = set(self.flows)
        while pending:
            # The tightest constraint: a resource's equal share, or a flow's cap.
            best, best_r = INF, None
            for r, n in unfrozen.items():
                if n > 0 and left[r] / n < best:
                    best, best_r = left[r] / n, r
            capped = [f for f in pending if f.cap <= best]
            if capped:
                fixed = [min(capped, key=lambda f: f.cap)]
                rate = fixed[0].cap
            else:
                fixed = [f for f in best_r.flows if f in pending]
                rate = best
            for f in fixed:
                f.rate = rate
                pending.discard(f)
                for r in f.resources:
                    left[r] = max(0.0, left[r] - rate)
                    unfrozen[r] -= 1
        self.dirty = False

    def run(self, until=INF):
        while self.flows or self.timers:
            if self.dirty:
                self._share()
            t_flow = INF
            for f in self.flows:
                if f.rate > 0:
                    t_flow = min(t_flow, self.now + f.left / f.rate)
            t_timer = self.timers[0][0] if self.timers else INF
            t = min(t_flow, t_timer)
            if t == INF or t > until:
                break
            dt = t - self.now
            finished = []
            for f in self.flows:
                moved = f.rate * dt
                f.left -= moved
                for r in f.resources:
                    r.busy_bytes += moved
                if f.left <= self.EPS * max(1.0, f.bytes):
                    finished.append(f)
            self.now = t
            for f in finished:
                self.flows.discard(f)
                for r in f.resources:
                    r.flows.discard(f)
                self.dirty = True
            for f in finished:
                f.done()
            while self.timers and self.timers[0][0] <= self.now:
                _, _, fn = heapq.heappop(self.timers)
                fn()
        return self.now


class Pipeline:
    """Moves `nbytes` in `chunks` pieces through `stages` in order; a
    stage of a piece starts when that piece's previous stage and the
    previous piece's same stage are done (a pipeline, in order per stage).
    A stage is (resources, setup_s, share): setup_s is a fixed cost per
    piece before it flows (posting a transfer); the stage moves `share` of
    the piece's bytes (a stage some bytes skip, or a per-byte cost in other
    units). Starts after `start` seconds; calls done() at the end."""

    def __init__(self, sim, nbytes, chunks, stages, done, start=0.0):
        self.sim, self.stages, self.done = sim, stages, done
        chunks = max(1, int(chunks))
        self.sizes = [nbytes / chunks] * chunks
        self.stage_done = [[False] * chunks for _ in stages]
        self.started = [[False] * chunks for _ in stages]
        self.remaining = chunks * len(stages)
        sim.after(start, lambda: [self._try(0, c) for c in range(chunks)])

    def _try(self, s, c):
        if s >= len(self.stages) or self.started[s][c]:
            return
        if s > 0 and not self.stage_done[s - 1][c]:
            return
        if c > 0 and not self.stage_done[s][c - 1]:
            return
        self.started[s][c] = True
        resources, setup, share = self.stages[s]

        def go():
            self.sim.flow(self.sizes[c] * share, resources, lambda: self._finish(s, c))

        if setup > 0:
            self.sim.after(setup, go)
        else:
            go()

    def _finish(self, s, c):
        self.stage_done[s][c] = True
        self.remaining -= 1
        if self.remaining == 0:
            self.done()
            return
        self._try(s + 1, c)
        if c + 1 < len(self.sizes):
            self._try(s, c + 1)


# ------------------------------------------------------------ validation


def qwen3_tensor_bytes(layers=28, hidden=1024, inter=3072, heads=16, kv_heads=8, head_dim=128,
                       vocab=151936):
    """The bf16 sizes of Qwen3-0.6B's tensors (benchmarks/store_bench/qwen3_shapes.hpp)."""
    out = [vocab * hidden * 2]  # embed_tokens (lm_head tied)
    for _ in range(layers):
        out += [
            heads * head_dim * hidden * 2,  # q_proj
            kv_heads * head_dim * hidden * 2,  # k_proj
            kv_heads * head_dim * hidden * 2,  # v_proj
            hidden * heads * head_dim * 2,  # o_proj
            head_dim * 2,  # q_norm
            head_dim * 2,  # k_norm
            inter * hidden * 2,  # gate_proj
            inter * hidden * 2,  # up_proj
            hidden * inter * 2,  # down_proj
            hidden * 2,  # input_layernorm
            hidden * 2,  # post_attention_layernorm
        ]
    out.append(hidden * 2)  # norm
    return out


PACK_MAX = 64 << 10  # StateDictPutOptions::pack_max_tensor_bytes
BUCKET = 64 << 20  # packed bucket bytes (state_dicts.md)


def state_dict_objects(tensors):
    """The objects a state dict of tensor sizes `tensors` is stored as:
    tensors above PACK_MAX one each, the rest packed into buckets."""
    objects = [b for b in tensors if b > PACK_MAX]
    packed = sum(b for b in tensors if b <= PACK_MAX)
    while packed > 0:
        objects.append(min(packed, BUCKET))
        packed -= BUCKET
    return sorted(objects, reverse=True)


def state_dict_op(tensors, per_tensor_s, per_object_s, bandwidth, window=4):
    """Simulated seconds of one put_state_dict or get_state_dict_into between
    two processes: every tensor costs per_tensor_s and every object
    per_object_s of the caller's time (serially: the client's actor), then
    the objects' bytes move through one transport of `bandwidth` bytes/s,
    `window` objects in flight."""
    sim = Sim()
    link = Resource("transport", bandwidth)
    objects = state_dict_objects(tensors)
    state = {"next": 0, "open": 0}

    def launch():
        while state["open"] < window and state["next"] < len(objects):
            nbytes = objects[state["next"]]
            state["next"] += 1
            state["open"] += 1
            sim.flow(nbytes, [link], finished)

    def finished():
        state["open"] -= 1
        launch()

    # The per-tensor and per-object work first (locating, describing,
    # packing), then the bytes: a conservative order (the store overlaps
    # some of it).
    sim.after(per_tensor_s * len(tensors) + per_object_s * len(objects), launch)
    return sim.run()


def validate_weight_sync(single, ws):
    """Predicts W's Qwen3 put and get from S's one-tensor bandwidth and W's
    two calibration workloads: 1,000 x 4 KiB (the per-tensor cost: packed,
    one object) and 64 x 4 MiB (the per-object cost: an object each)."""
    rows = []
    tensors = qwen3_tensor_bytes()
    if abs(sum(tensors) - ws["bytes"]) > 0.01 * ws["bytes"]:
        raise SystemExit("weight-sync measured %d bytes, the simulator's Qwen3 shapes %d: "
                         "not the same model" % (ws["bytes"], sum(tensors)))
    for op, gbps_key, small_key, medium_key, measured_key in (
            ("put_state_dict", "put_gbps", "small_put_ms", "medium_put_ms", "put_state_dict_s"),
            ("get_state_dict_into", "get_into_gbps", "small_get_ms", "medium_get_ms",
             "get_state_dict_into_s")):
        bandwidth = single[gbps_key] * 1e9
        # 1,000 tensors of 4 KiB, packed into one object: its time less its
        # bytes' transfer is the per-tensor cost.
        small_s = ws[small_key] / 1e3
        per_tensor = max(0.0, small_s - ws["small_bytes"] / bandwidth) / 1000.0
        # N tensors of 4 MiB, an object each: its time less the per-tensor
        # costs and the bytes' transfer is the per-object cost.
        n = ws["medium_tensors"]
        medium_s = ws[medium_key] / 1e3
        per_object = max(0.0, medium_s - n * per_tensor - ws["medium_bytes"] / bandwidth) / n
        predicted = state_dict_op(tensors, per_tensor, per_object, bandwidth)
        rows.append(("weight-sync %s (%s)" % (op, ws["transport"]), predicted,
                     ws[measured_key], "single %s %.2f GB/s, %.2f us a tensor, %.0f us an object" %
                     (gbps_key, single[gbps_key], per_tensor * 1e6, per_object * 1e6)))
    return rows


def four_hosts_read(nbytes, readers, goodput, fixed_s):
    """`readers` hosts read nbytes each from one host at once: one sender
    NIC (its link's goodput), a receiver NIC each."""
    sim = Sim()
    tx = Resource("host1.tx", goodput)
    done = []
    for i in range(readers):
        rx = Resource("reader%d.rx" % i, goodput)
        sim.after(fixed_s, lambda rx=rx: sim.flow(nbytes, [tx, rx], lambda: done.append(sim.now)))
    sim.run()
    return max(done)


def validate_four_hosts(f):
    goodput, fixed = f["raw_goodput_bytes_per_s"], f["tiny_ms"] / 1e3
    basis = "raw link %.1f MB/s, 4 KiB read %.1f ms" % (goodput / 1e6, f["tiny_ms"])
    return [
        ("four hosts: one reader", four_hosts_read(f["bytes"], 1, goodput, fixed),
         f["one_ms"] / 1e3, basis),
        ("four hosts: three readers at once", four_hosts_read(f["bytes"], 3, goodput, fixed),
         f["three_ms"] / 1e3, basis),
    ]


def print_validation(rows, as_json):
    worst = max(abs(p / m - 1) for _, p, m, _ in rows)
    if as_json:
        print(json.dumps({"validation": [
            {"figure": n, "predicted_s": p, "measured_s": m, "error": p / m - 1, "from": b}
            for n, p, m, b in rows], "worst_error": worst}))
        return worst
    print("%-46s %12s %12s %8s  %s" % ("figure", "predicted s", "measured s", "error", "predicted from"))
    for name, p, m, basis in rows:
        print("%-46s %12.4f %12.4f %+7.1f%%  %s" % (name, p, m, (p / m - 1) * 100, basis))
    print("worst error: %.1f%% (goal: within 20%%)" % (worst * 100))
    return worst


# ------------------------------------------------------------------ plan


class Cluster:
    """The plan's cluster. Every figure is a parameter (README.md)."""

    def __init__(self, **kw):
        self.train_gpus = kw.get("train_gpus", 256)
        self.infer_gpus = kw.get("infer_gpus", 128)
        self.gpus_per_host = kw.get("gpus_per_host", 8)
        self.nic_gbps = kw.get("nic_gbps", 400.0)  # one NIC per GPU
        self.rdma_efficiency = kw.get("rdma_efficiency", 0.92)  # goodput / line rate
        self.nvlink_bytes = kw.get("nvlink_bytes", 400e9)  # per GPU, each way
        self.hbm_copy_bytes = kw.get("hbm_copy_bytes", 1.3e12)  # device-to-device gather
        self.pcie_bytes = kw.get("pcie_bytes", 50e9)  # per GPU, each way
        self.host_memory_bytes = kw.get("host_memory_bytes", 500e9)  # a host's DRAM, all traffic
        self.post_s = kw.get("post_s", 3.4e-6)  # a transfer's setup (measured per-tensor cost)
        self.control_rtt_s = kw.get("control_rtt_s", 50e-6)  # one control round trip
        self.chunks = kw.get("chunks", 8)  # pipeline pieces per (source, destination) pair

    @property
    def nic_bytes(self):
        return self.nic_gbps * 1e9 / 8 * self.rdma_efficiency

    @property
    def train_hosts(self):
        return self.train_gpus // self.gpus_per_host

    @property
    def infer_hosts(self):
        return self.infer_gpus // self.gpus_per_host


class Model:
    """A 1T-parameter MoE in bf16, Kimi-K2's shape: routed experts (sharded
    over the inference GPUs, expert parallel) and the rest (attention,
    embeddings, shared experts, the dense layer: tensor parallel within a
    host, so every inference host holds all of it)."""

    def __init__(self, expert_params=1.0146e12, dense_params=25.4e9, bytes_per_param=2):
        self.expert_bytes = expert_params * bytes_per_param
        self.dense_bytes = dense_params * bytes_per_param

    @property
    def total_bytes(self):
        return self.expert_bytes + self.dense_bytes


def traffic(cluster, model):
    """Bytes each inference GPU receives and each trainer GPU sends: the
    experts once over all inference GPUs, the dense part once per inference
    host (spread over its GPUs), every byte sent by the trainer GPU holding
    it (FSDP: each trainer GPU holds 1/train_gpus of every tensor)."""
    per_infer = model.expert_bytes / cluster.infer_gpus + \
        model.dense_bytes / cluster.gpus_per_host
    total = per_infer * cluster.infer_gpus
    return per_infer, total / cluster.train_gpus


def nic_bound(cluster, model):
    """The time the NICs alone need at line rate: the busiest NIC's bytes
    over its bandwidth, receivers or senders."""
    per_infer, per_train = traffic(cluster, model)
    line = cluster.nic_gbps * 1e9 / 8
    return max(per_infer, per_train) / line


def simulate_plan(cluster, model, design):
    """Simulated seconds of one sync under `design`:
      direct    readers' buffers are written one-sided (RDMA WRITE with
                GPUDirect) straight from the trainers' GPU memory by a static
                schedule: each source packs the pieces for one destination
                into one buffer (an HBM gather) and writes it in pipelined
                pieces; one rail per local GPU index, so the pieces a rail
                source sends but other GPUs of its host hold cross NVLink
                first (PXN).
      serial    direct, not pipelined: pack everything, then write.
      volumes   trainers copy their shards into their host's volume (host
                memory, over PCIe), inference GPUs pull them from there
                (RDMA READ into GPU memory), pipelined.
      unpacked  direct, without the static schedule: each reader locates
                and reads every tensor piece on its own, a fixed cost each,
                paid by the reader's one client actor.
    One rail is simulated (the 8 are alike by symmetry); a host's DRAM is
    divided among its rails."""
    per_infer, _ = traffic(cluster, model)
    g = cluster.gpus_per_host
    n_src, n_dst = cluster.train_hosts, cluster.infer_hosts  # one rail's GPUs
    sim = Sim()
    nic = cluster.nic_bytes
    tx = [Resource("train%d.tx" % i, nic) for i in range(n_src)]
    rx = [Resource("infer%d.rx" % j, nic) for j in range(n_dst)]
    nvl = [Resource("train%d.nvlink" % i, cluster.nvlink_bytes) for i in range(n_src)]
    hbm = [Resource("train%d.hbm" % i, cluster.hbm_copy_bytes) for i in range(n_src)]
    pcie = [Resource("train%d.pcie" % i, cluster.pcie_bytes) for i in range(n_src)]
    dram = [Resource("trainhost%d.dram" % i, cluster.host_memory_bytes / g) for i in range(n_src)]
    client = [Resource("infer%d.client" % j, 1.0) for j in range(n_dst)]  # seconds of work
    pair = per_infer / n_src  # what one rail source sends one rail destination
    off_rail = (g - 1) / g  # of it, the share held by the host's other GPUs
    control = 2 * cluster.control_rtt_s  # publish's notice, the readers' locate
    # Tensors a destination holds: 3 experts a layer over 60 MoE layers, 3
    # matrices each, and a share of the dense part's ~10 tensors a layer.
    tensors = 3 * 60 * 3 + 10 * 61
    finished = []
    for i in range(n_src):
        for j in range(n_dst):
            end = lambda: finished.append(sim.now)
            if design in ("direct", "serial"):
                stages = [([nvl[i]], 0.0, off_rail), ([hbm[i]], 0.0, 1.0),
                          ([tx[i], rx[j]], cluster.post_s, 1.0)]
                chunks = 1 if design == "serial" else cluster.chunks
            elif design == "volumes":
                stages = [([pcie[i], dram[i]], 0.0, 1.0),
                          ([tx[i], rx[j], dram[i]], cluster.post_s, 1.0)]
                chunks = cluster.chunks
            elif design == "unpacked":
                # Every tensor's piece from each of the g GPUs behind this
                # source: a locate (batched 8 a round trip) and a read each.
                pieces = tensors * g
                work = pieces * (cluster.post_s + cluster.control_rtt_s / 8)
                stages = [([client[j]], 0.0, work / pair), ([tx[i], rx[j]], 0.0, 1.0)]
                chunks = cluster.chunks
            else:
                raise ValueError("unknown design %r" % design)
            Pipeline(sim, pair, chunks, stages, end, start=control)
    sim.run()
    if len(finished) != n_src * n_dst:
        raise RuntimeError("%d of %d transfers finished" % (len(finished), n_src * n_dst))
    return sim.now + cluster.control_rtt_s  # the readers learn the version is complete


DESIGNS = (
    ("direct", "direct publishing, static schedule, pipelined one-sided writes"),
    ("serial", "the same, not pipelined (pack all, then write)"),
    ("volumes", "per-host volumes (copy to host memory, readers pull)"),
    ("unpacked", "direct, no static schedule (a transfer per tensor piece)"),
)


def run_plan(as_json, cluster=None, model=None):
    cluster = cluster or Cluster()
    model = model or Model()
    bound = nic_bound(cluster, model)
    per_infer, per_train = traffic(cluster, model)
    results = []
    for name, what in DESIGNS:
        t = simulate_plan(cluster, model, name)
        results.append((name, what, t))
    if as_json:
        print(json.dumps({
            "model_bytes": model.total_bytes, "per_inference_gpu_bytes": per_infer,
            "per_trainer_gpu_bytes": per_train, "nic_bound_s": bound,
            "designs": [{"design": n, "what": w, "seconds": t, "vs_bound": t / bound}
                        for n, w, t in results]}))
        return results, bound
    print("1T-parameter sync: %d trainer GPUs -> %d inference GPUs, %d GPUs and %d x %.0f Gbps a host"
          % (cluster.train_gpus, cluster.infer_gpus, cluster.gpus_per_host, cluster.gpus_per_host,
             cluster.nic_gbps))
    print("  model %.2f TB bf16; each inference GPU receives %.1f GB, each trainer GPU sends %.1f GB"
          % (model.total_bytes / 1e12, per_infer / 1e9, per_train / 1e9))
    print("  NIC bound (line rate, busiest NIC): %.3f s" % bound)
    print("  %-9s %-62s %9s %9s" % ("design", "", "seconds", "vs bound"))
    for name, what, t in results:
        print("  %-9s %-62s %9.3f %9.2f" % (name, what, t, t / bound))
    return results, bound


# ------------------------------------------------------------------ main


def self_check():
    """The engine against answers worked by hand (pytest runs these too)."""
    sim = Sim()
    link = Resource("l", 100.0)
    ends = []
    sim.flow(100, [link], lambda: ends.append(sim.now))
    sim.flow(300, [link], lambda: ends.append(sim.now))
    sim.run()
    # Both at 50 B/s until the first ends at 2 s; the second then has 200
    # left at 100 B/s: 4 s.
    assert abs(ends[0] - 2.0) < 1e-9 and abs(ends[1] - 4.0) < 1e-9, ends


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validate")
    v.add_argument("--single", required=True, help="store_bench --scenario single --json output")
    v.add_argument("--weight-sync", required=True,
                   help="store_bench --scenario weight-sync --json output")
    v.add_argument("--four-hosts", help="four_hosts_bench.sh's last line")
    v.add_argument("--json", action="store_true")
    pl = sub.add_parser("plan")
    pl.add_argument("--json", action="store_true")
    pl.add_argument("--chunks", type=int, default=8)
    sub.add_parser("smoke")
    a = p.parse_args(argv)
    if a.cmd == "smoke":
        self_check()
        single = {"put_gbps": 4.0, "get_into_gbps": 3.0}
        ws = {"bytes": sum(qwen3_tensor_bytes()), "transport": "tcp", "small_put_ms": 4.0,
              "medium_tensors": 64, "medium_bytes": 64 << 22, "medium_put_ms": 70.0,
              "medium_get_ms": 95.0,
              "small_get_ms": 5.0, "small_bytes": 4096000, "put_state_dict_s": 0.3,
              "get_state_dict_into_s": 0.4}
        four = {"raw_goodput_bytes_per_s": 1.2e8, "tiny_ms": 5.0, "bytes": 1 << 22,
                "one_ms": 40.0, "three_ms": 110.0}
        print_validation(validate_weight_sync(single, ws) + validate_four_hosts(four), False)
        run_plan(False, Cluster(train_gpus=32, infer_gpus=16, chunks=2),
                 Model(expert_params=1e9, dense_params=1e8))
        print("weightsync_sim smoke: ok")
        return 0
    if a.cmd == "validate":
        def load(path):
            with open(path) as f:
                lines = [l for l in f.read().splitlines() if l.startswith("{")]
            if not lines:
                raise SystemExit("%s: no JSON line in it" % path)
            return json.loads(lines[-1])
        rows = validate_weight_sync(load(a.single), load(a.weight_sync))
        if a.four_hosts:
            rows += validate_four_hosts(load(a.four_hosts))
        print_validation(rows, a.json)
        return 0
    if a.cmd == "plan":
        run_plan(a.json, Cluster(chunks=a.chunks))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
