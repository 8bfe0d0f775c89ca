"""The weight-sync simulator's engine and plan (benchmarks/sim/weightsync_sim.py),
against answers worked by hand."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "sim"))
import weightsync_sim as ws  # noqa: E402


def run_flows(specs):
    """specs: (bytes, [resources], cap); returns each flow's end time."""
    sim = ws.Sim()
    ends = [None] * len(specs)
    for i, (nbytes, resources, cap) in enumerate(specs):
        sim.flow(nbytes, resources, lambda i=i: ends.__setitem__(i, sim.now), cap)
    sim.run()
    return ends


def test_flows_on_one_link_share_it_equally_then_the_survivor_takes_it_all():
    link = ws.Resource("link", 100.0)
    ends = run_flows([(100, [link], ws.INF), (300, [link], ws.INF)])
    assert ends == pytest.approx([2.0, 4.0])


def test_a_flow_gets_the_least_share_of_the_resources_it_crosses():
    # a and b share tx (100); b also crosses a slow rx (20): b gets 20, a
    # takes the remaining 80 (max-min fair, not 50/50).
    tx, rx = ws.Resource("tx", 100.0), ws.Resource("rx", 20.0)
    ends = run_flows([(80, [tx], ws.INF), (20, [tx, rx], ws.INF)])
    assert ends == pytest.approx([1.0, 1.0])


def test_a_capped_flow_leaves_the_rest_to_the_others():
    link = ws.Resource("link", 100.0)
    ends = run_flows([(10, [link], 10.0), (90, [link], ws.INF)])
    assert ends == pytest.approx([1.0, 1.0])


def test_timers_delay_flows():
    sim = ws.Sim()
    link = ws.Resource("link", 10.0)
    ends = []
    sim.after(0.5, lambda: sim.flow(10, [link], lambda: ends.append(sim.now)))
    sim.run()
    assert ends == pytest.approx([1.5])


def test_a_pipeline_overlaps_its_stages():
    # Two stages of 100 B/s each, 100 bytes in 4 pieces: 0.25 s a piece a
    # stage, so 5 piece-times (1.25 s), not 2 s.
    sim = ws.Sim()
    a, b = ws.Resource("a", 100.0), ws.Resource("b", 100.0)
    ends = []
    ws.Pipeline(sim, 100, 4, [([a], 0.0, 1.0), ([b], 0.0, 1.0)], lambda: ends.append(sim.now))
    sim.run()
    assert ends == pytest.approx([1.25])
    unpiped = ws.Sim()
    a2, b2 = ws.Resource("a", 100.0), ws.Resource("b", 100.0)
    ends2 = []
    ws.Pipeline(unpiped, 100, 1, [([a2], 0.0, 1.0), ([b2], 0.0, 1.0)],
                lambda: ends2.append(unpiped.now))
    unpiped.run()
    assert ends2 == pytest.approx([2.0])


def test_a_resource_needs_a_positive_capacity():
    with pytest.raises(ValueError, match="capacity"):
        ws.Resource("nic", 0)


def test_three_readers_of_one_sender_take_three_times_one():
    one = ws.four_hosts_read(1000, 1, 100.0, 0.0)
    three = ws.four_hosts_read(1000, 3, 100.0, 0.0)
    assert one == pytest.approx(10.0)
    assert three == pytest.approx(30.0)


def test_the_qwen3_shapes_add_up_to_the_benchmarks_model():
    # 0.6B parameters in bf16: 1.19 GB, 310 tensors (store_bench prints both).
    sizes = ws.qwen3_tensor_bytes()
    assert len(sizes) == 310
    assert sum(sizes) == pytest.approx(1.19e9, rel=0.01)


def test_the_plan_never_beats_the_nic_bound_and_its_choices_cost_what_they_should():
    cluster, model = ws.Cluster(), ws.Model()
    bound = ws.nic_bound(cluster, model)
    t = {d: ws.simulate_plan(cluster, model, d) for d, _ in ws.DESIGNS}
    assert all(v >= bound for v in t.values())
    assert t["direct"] <= 1.0 and t["direct"] <= 2 * bound
    assert t["direct"] < t["serial"]  # pipelining helps
    assert t["direct"] < t["volumes"]  # a copy through host memory costs
    assert t["direct"] < t["unpacked"]  # per-piece costs dominate without a schedule


def test_more_bandwidth_makes_the_sync_faster():
    model = ws.Model()
    slow = ws.simulate_plan(ws.Cluster(nic_gbps=200.0), model, "direct")
    fast = ws.simulate_plan(ws.Cluster(nic_gbps=400.0), model, "direct")
    assert fast < slow
