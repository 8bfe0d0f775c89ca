"""meshstore.actor: Python actors on the C++ runtime, with Monarch's names
(docs/python.md, "Actors"). Every mesh here is a mesh of this process
(this_proc, local_procs): its members are made in the test's process."""

import asyncio
import threading

import pytest

import meshstore
import meshstore.actor as ma
from meshstore.actor import (Actor, ActorError, ValueMesh, context, current_rank, current_size,
                             endpoint, local_procs, this_proc)


_arrived = []  # Counter.rendezvous: the ranks in it


class Counter(Actor):
    def __init__(self, start, step=1):
        self.n = start
        self.step = step
        self.made_as = current_rank().rank  # __init__ sees its rank

    @endpoint
    def incr(self, by=None):
        self.n += self.step if by is None else by
        return self.n

    @endpoint
    def value(self):
        return self.n

    @endpoint
    def where(self):
        c = context()
        return {"rank": current_rank().rank, "coords": dict(current_rank().coords),
                "size": current_size(), "message": c.message_rank.rank,
                "message_coords": dict(c.message_rank.coords), "made_as": self.made_as}

    @endpoint
    def fail(self, why):
        raise ValueError(why)

    @endpoint
    async def rendezvous(self, n):
        # Returns once `n` calls are in here at once (each waits for the
        # others, bounded): only calls that run concurrently get through.
        _arrived.append(current_rank().rank)
        for _ in range(1000):
            if len(_arrived) >= n:
                return sorted(_arrived)
            await asyncio.sleep(0.01)
        raise TimeoutError(f"{len(_arrived)} of {n} calls in flight at once")

    @endpoint
    async def nap(self, seconds):
        await asyncio.sleep(seconds)
        return current_rank().rank

    def not_an_endpoint(self):
        return "hidden"


@pytest.fixture
def grid():
    procs = local_procs(hosts=2, gpus=2)
    yield procs
    procs.stop()


def test_call_one_on_this_proc_keeps_the_actors_state():
    counters = this_proc().spawn("counters", Counter, 10, step=5)
    assert counters.incr.call_one().get(timeout=10) == 15
    assert counters.incr.call_one(100).get(timeout=10) == 115
    assert counters.value.call_one().get(timeout=10) == 115


def test_call_answers_a_value_mesh_found_by_coordinates(grid):
    m = grid.spawn("grid", Counter, 0)
    assert m.extent == {"hosts": 2, "gpus": 2}
    vm = m.where.call().get(timeout=10)
    assert isinstance(vm, ValueMesh) and len(vm) == 4
    assert vm.extent == {"hosts": 2, "gpus": 2}
    for point, v in vm.items():
        assert v["rank"] == point.rank == v["made_as"]
        assert v["coords"] == {"hosts": point["hosts"], "gpus": point["gpus"]}
        assert v["size"] == {"hosts": 2, "gpus": 2}
    assert vm.item(hosts=1, gpus=0)["rank"] == 2
    with pytest.raises(ValueError, match="name every dimension"):
        vm.item(hosts=1)
    with pytest.raises(IndexError):
        vm.item(hosts=2, gpus=0)


def test_slices_with_ints_and_python_slices_and_the_messages_rank(grid):
    m = grid.spawn("grid", Counter, 0)
    host1 = m.slice(hosts=1)  # an int drops the dimension
    assert host1.extent == {"gpus": 2}
    got = host1.where.call().get(timeout=10).values()
    assert [v["rank"] for v in got] == [2, 3]
    assert [v["message"] for v in got] == [0, 1]  # its rank in the view called
    assert [v["message_coords"] for v in got] == [{"gpus": 0}, {"gpus": 1}]
    column = m.slice(gpus=slice(1, 2))
    assert column.extent == {"hosts": 2, "gpus": 1}
    assert [v["rank"] for v in column.where.call().get(timeout=10).values()] == [1, 3]
    one = m.slice(hosts=0, gpus=1)
    assert one.where.call_one().get(timeout=10)["rank"] == 1
    with pytest.raises(TypeError):
        m.slice(hosts="0")
    # A process mesh slices the same way: a mesh spawned on it has the view's shape.
    small = grid.slice(hosts=slice(0, 2, 2)).spawn("small", Counter, 0)
    assert small.extent == {"hosts": 1, "gpus": 2}


def test_every_adverb(grid):
    m = grid.spawn("grid", Counter, 0)
    m.incr.broadcast(3)  # fire and forget; the members stay up
    assert m.value.call().get(timeout=10).values() == [3, 3, 3, 3]
    assert m.incr.choose(1).get(timeout=10) == 4
    seen = sorted(v["rank"] for v in m.where.stream())
    assert seen == [0, 1, 2, 3]
    with pytest.raises(meshstore.InvalidArgumentError, match="not 1"):
        m.value.call_one().get(timeout=10)


def test_futures_are_awaitable_and_async_endpoints_run_concurrently(grid):
    m = grid.spawn("grid", Counter, 0)

    async def main():
        assert await m.slice(hosts=0, gpus=0).incr.call_one(7) == 7
        _arrived.clear()
        vm = await m.rendezvous.call(4)  # each returns only once all four are in
        streamed = sorted([r async for r in m.nap.stream(0.01)])
        return vm.values(), streamed

    values, streamed = asyncio.run(main())
    assert values == [[0, 1, 2, 3]] * 4
    assert streamed == [0, 1, 2, 3]


def test_an_endpoint_that_raises_reaches_the_caller_with_its_rank_and_traceback(grid):
    m = grid.spawn("grid", Counter, 0)
    with pytest.raises(ActorError) as err:
        m.slice(hosts=1, gpus=0).fail.call_one("out of tokens").get(timeout=10)
    e = err.value
    assert e.rank == 2
    assert e.exception_type == "ValueError" and e.message == "out of tokens"
    assert "raise ValueError(why)" in e.remote_traceback
    with pytest.raises(ActorError, match="rank 0: ValueError: boom"):
        m.fail.call("boom").get(timeout=10)
    # The member is still up.
    assert m.incr.call().get(timeout=10).values() == [1, 1, 1, 1]


def test_bad_calls_are_refused_with_the_reason(grid):
    m = grid.spawn("grid", Counter, 0)
    with pytest.raises(AttributeError, match="no endpoint 'not_an_endpoint'"):
        m.not_an_endpoint.call()
    with pytest.raises(TypeError, match="must pickle"):
        m.incr.call(threading.Lock())
    with pytest.raises(TypeError, match="not a subclass of meshstore.actor.Actor"):
        grid.spawn("plain", dict)
    with pytest.raises(meshstore.InvalidArgumentError, match="already spawned"):
        grid.spawn("grid", Counter, 0)
    with pytest.raises(ValueError, match="at least one dimension"):
        local_procs()


def test_stop_ends_every_call(grid):
    m = grid.spawn("grid", Counter, 0)
    assert m.incr.call().get(timeout=10).values() == [1, 1, 1, 1]
    grid.stop()
    with pytest.raises(meshstore.ClosedError):
        m.incr.call().get(timeout=10)
    with pytest.raises(meshstore.ClosedError):
        grid.spawn("late", Counter, 0)


def test_a_get_that_gives_up_raises_the_builtin_timeout(grid):
    m = grid.spawn("grid", Counter, 0)
    with pytest.raises(TimeoutError):
        m.slice(hosts=0, gpus=0).nap.call_one(2).get(timeout=0.05)
    assert grid.initialized.get() is None
