"""meshstore.actor's supervision from Python (docs/python-actors.md, "Supervision"):
Supervision's policies on worker processes, spawn_procs(max_relaunches=...)
bringing a killed worker back with its members made again, and a store
whose controller process is killed coming back with its keys."""

import asyncio
import os
import signal
import time

import pytest

import meshstore
import meshstore.actor as ma
from meshstore.actor import Actor, Supervision, current_rank, endpoint


class Tally(Actor):
    def __init__(self, start, step=1):
        self.n = start
        self.step = step

    @endpoint
    def add(self):
        self.n += self.step
        return self.n

    @endpoint
    def seen(self):
        return os.getpid(), current_rank().rank, self.n


def _until(what, call, timeout=60.0):
    """call() until it stops raising meshstore.Error (a member on its way
    back answers unavailable), at most `timeout` seconds; its value."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except meshstore.Error as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after {timeout} s: {e}") from e
        time.sleep(0.02)


@pytest.fixture
def hooked(monkeypatch):
    """The failures that reached unhandled_fault_hook (handled: the test
    process goes on)."""
    seen = []
    monkeypatch.setattr(ma, "unhandled_fault_hook", lambda f: seen.append(dict(f)) or True)
    return seen


def test_a_restarted_member_is_made_again_in_its_relaunched_worker(hooked):
    procs = ma.this_host().spawn_procs(per_host={"procs": 2}, max_relaunches=1)
    try:
        tallies = procs.spawn(Supervision("restart"), "tallies", Tally, 10, step=5)
        assert tallies.add.call().get(timeout=30).values() == [15, 15]
        before = tallies.seen.call().get(timeout=30).values()
        os.kill(before[1][0], signal.SIGKILL)
        # Rank 1 answers again from a new process, made again from the
        # spawn's class and arguments (its state is the __init__'s).
        pid, rank, n = _until("rank 1 after the kill",
                              lambda: tallies.slice(procs=1).seen.call_one().get(timeout=30))
        assert pid != before[1][0] and rank == 1 and n == 10
        assert tallies.slice(procs=1).add.call_one().get(timeout=30) == 15
        # Rank 0 was not touched: its state is still there.
        assert tallies.slice(procs=0).seen.call_one().get(timeout=30) == before[0]
        # The policy handled it: no failure climbed to the hook.
        assert hooked == []
    finally:
        procs.stop()


def test_under_stop_a_members_death_stops_its_mesh(hooked):
    procs = ma.this_host().spawn_procs(per_host={"procs": 2})
    try:
        tallies = procs.spawn(Supervision("stop"), "tallies", Tally, 0)
        pids = [pid for pid, _, _ in tallies.seen.call().get(timeout=30).values()]
        os.kill(pids[1], signal.SIGKILL)
        # The live member's mesh is stopped too: its calls fail, naming
        # the failure.
        deadline = time.monotonic() + 60
        while True:
            try:
                tallies.slice(procs=0).seen.call_one().get(timeout=30)
            except meshstore.ConnectionError as e:
                assert "tallies" in str(e) and "rank 1" in str(e), e
                break
            assert time.monotonic() < deadline, "the mesh never stopped"
            time.sleep(0.02)
        assert hooked == []
    finally:
        procs.stop()


def test_bad_supervision_and_relaunch_budgets_are_refused():
    with pytest.raises(ValueError, match="policy must be one of propagate, stop, restart"):
        Supervision("respawn")
    with pytest.raises(ValueError, match="max_restarts must be an int >= 0"):
        Supervision("restart", max_restarts=-1)
    with pytest.raises(ValueError, match="window must be a number of seconds"):
        Supervision("restart", window=0)
    with pytest.raises(ValueError, match="window must be a number of seconds"):
        Supervision("restart", window=float("nan"))
    with pytest.raises(ValueError, match="max_relaunches must be an int >= 0"):
        ma.this_host().spawn_procs(per_host={"procs": 1}, max_relaunches=-1)
    with pytest.raises(ValueError, match="relaunch_window must be a number of seconds"):
        ma.this_host().spawn_procs(per_host={"procs": 1}, max_relaunches=1, relaunch_window=0)
    here = ma.this_proc()
    with pytest.raises(TypeError, match="the actor class is missing"):
        here.spawn(Supervision("stop"), "tallies")
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        here.spawn("", Tally, 0)
    # Accepted on a mesh of this process too (a member here only dies
    # with the process).
    mine = here.spawn(Supervision("restart", max_restarts=1, window=5), "mine", Tally, 1)
    assert mine.add.call_one().get(timeout=30) == 2
    assert repr(Supervision("stop")) == "Supervision('stop', max_restarts=3, window=60.0)"


class Publisher(Actor):
    @endpoint
    async def publish(self, step):
        import torch

        import meshstore.torchstore as ts
        await ts.put_state_dict({"w": torch.full((64, 64), float(step)),
                                 "b": torch.arange(4) + step}, "weights")
        return os.getpid()


def test_a_store_whose_controller_process_is_killed_comes_back_with_its_keys():
    import torch

    import meshstore.torchstore as ts
    from meshstore.torchstore.strategy import LocalRankStrategy

    with pytest.raises(TypeError, match="meshstore.actor.Supervision"):
        asyncio.run(ts.initialize(supervision="restart"))
    with pytest.raises(ValueError, match="only with mesh="):
        asyncio.run(ts.initialize(supervision=Supervision("restart")))
    procs = ma.this_host().spawn_procs(per_host={"procs": 2}, max_relaunches=1)
    try:
        # The controller (the index) in worker 1, every store mesh under
        # restart: kill -9 of worker 1 brings it back, rebuilt from the
        # volumes.
        asyncio.run(ts.initialize(mesh=procs, strategy=LocalRankStrategy(), controller_process=1,
                                  supervision=Supervision("restart")))
        writer = procs.slice(procs=0).spawn("publisher", Publisher)
        assert writer.publish.call_one(3).get(timeout=60) == procs.pid(0)
        controller_pid = procs.pid(1)
        os.kill(controller_pid, signal.SIGKILL)

        async def read_back():
            got = await ts.get_state_dict("weights")
            return got["w"], got["b"]

        # Worker 0's volume held the keys: they read back bit-exact once
        # the new controller rebuilt its index (the call waits out the
        # failover within its own timeout).
        w, b = asyncio.run(read_back())
        assert torch.equal(w, torch.full((64, 64), 3.0)) and b.tolist() == [3, 4, 5, 6]
        assert procs.pid(1) != controller_pid
        # And it takes new commits.
        assert writer.publish.call_one(4).get(timeout=60) == procs.pid(0)
        w, b = asyncio.run(read_back())
        assert w[0, 0].item() == 4.0 and b.tolist() == [4, 5, 6, 7]
    finally:
        asyncio.run(ts.shutdown())
        procs.stop()
