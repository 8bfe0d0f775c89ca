"""meshstore.actor's channels (docs/python-actors.md, "Channels"): a port passed
to actors in calls, members sending to it from this process and from
worker processes, a port of ports, sends that cannot be delivered, and
``send(endpoint, ..., port=)``: members sending their results to a port."""

import asyncio
import os
import pickle
import signal
import threading
import time

import pytest

import meshstore
import meshstore.actor as ma
from meshstore.actor import Actor, ActorError, Channel, Port, current_rank, endpoint, send


class Reporter(Actor):
    @endpoint
    def report(self, port, value):
        port.send((current_rank().rank, os.getpid(), value)).get(timeout=30)
        return True

    @endpoint
    def try_send(self, port, value):
        try:
            port.send(value).get(timeout=30)
            return "sent"
        except meshstore.Error as e:
            return f"{type(e).__name__}: {e}"

    @endpoint
    def give_back(self, port):
        return port  # a port crosses in a result too

    @endpoint
    def open_inbox(self):
        # A port of this member's process, kept open with the member.
        port, self.inbox = Channel.open()
        return port, os.getpid()

    @endpoint
    async def serve_a_port(self, ports):
        # A channel of channels: this member opens its own port, sends it
        # through `ports`, and answers with what comes on it.
        mine, inbox = Channel.open()
        await ports.send(mine)
        with inbox:
            return await inbox.recv()


class Squarer(Actor):
    def __init__(self):
        self.calls = 0

    @endpoint
    def square(self, x):
        self.calls += 1
        return (current_rank().rank, os.getpid(), x * x)

    @endpoint
    async def later(self, x):
        await asyncio.sleep(0)
        return current_rank().rank + x

    @endpoint
    def fail_on(self, rank):
        if current_rank().rank == rank:
            raise KeyError(f"rank {rank} refuses")
        return "fine"

    @endpoint
    def unpicklable(self):
        return lambda: None

    @endpoint
    def count(self):
        return self.calls


def _received(receiver, n):
    return sorted(receiver.recv().get(timeout=30) for _ in range(n))


def test_members_of_this_process_send_to_a_port_passed_in_a_call():
    here = ma.local_procs(ranks=2)
    try:
        reporters = here.spawn("reporters", Reporter)
        port, receiver = Channel.open()
        with receiver:
            assert reporters.report.call(port, "hi").get(timeout=30).values() == [True, True]
            me = os.getpid()
            assert _received(receiver, 2) == [(0, me, "hi"), (1, me, "hi")]
            # A port handed back in a result still reaches the receiver.
            back = reporters.slice(ranks=0).give_back.call_one(port).get(timeout=30)
            assert isinstance(back, Port)
            back.send({"w": [1, 2]}).get(timeout=30)
            assert receiver.recv().get(timeout=30) == {"w": [1, 2]}
    finally:
        here.stop()


def test_worker_processes_send_to_the_controllers_port_and_serve_a_port_of_ports():
    procs = ma.this_host().spawn_procs(per_host={"procs": 2})
    try:
        reporters = procs.spawn("reporters", Reporter)
        pids = [procs.pid(0), procs.pid(1)]
        port, receiver = Channel.open()
        with receiver:
            assert reporters.report.call(port, 7).get(timeout=30).values() == [True, True]
            assert _received(receiver, 2) == [(0, pids[0], 7), (1, pids[1], 7)]
            # Rank 1 sends its own port through ours; a value sent on it
            # is what its endpoint answers.
            answer = reporters.slice(procs=1).serve_a_port.call_one(port)
            theirs = receiver.recv().get(timeout=30)
            assert isinstance(theirs, Port)
            theirs.send("through the port of ports").get(timeout=30)
            assert answer.get(timeout=30) == "through the port of ports"

            async def awaited():
                reporters.slice(procs=0).report.call_one(port, "async").get(timeout=30)
                return await receiver.recv()

            assert asyncio.run(awaited()) == (0, pids[0], "async")
    finally:
        procs.stop()


def test_a_send_that_cannot_be_delivered_fails_at_once_with_the_reason():
    procs = ma.this_host().spawn_procs(per_host={"procs": 1})
    try:
        reporter = procs.spawn("reporter", Reporter)
        port, receiver = Channel.open(capacity=1)
        assert reporter.try_send.call_one(port, "first").get(timeout=30) == "sent"
        full = reporter.try_send.call_one(port, "second").get(timeout=30)
        assert full.startswith("OutOfCapacityError") and "full (1 values not received)" in full
        receiver.close()
        closed = reporter.try_send.call_one(port, "third").get(timeout=30)
        assert closed.startswith("ConnectionError"), closed
        # What arrived before the close is still there; then it is closed.
        assert receiver.recv().get(timeout=30) == "first"
        with pytest.raises(meshstore.ClosedError):
            receiver.recv().get(timeout=30)
    finally:
        procs.stop()


def test_a_send_to_a_port_whose_process_died_fails_naming_it(monkeypatch):
    died = threading.Event()
    monkeypatch.setattr(ma, "unhandled_fault_hook", lambda f: died.set() or True)
    procs = ma.this_host().spawn_procs(per_host={"procs": 1})
    try:
        reporter = procs.spawn("reporter", Reporter)
        port, pid = reporter.open_inbox.call_one().get(timeout=30)
        port.send("while it lives").get(timeout=30)
        os.kill(pid, signal.SIGKILL)
        assert died.wait(30), "the worker's death was never reported"
        started = time.monotonic()
        with pytest.raises(meshstore.ConnectionError, match="its receiver is gone"):
            port.send("after").get(timeout=30)
        # At once: not after the send's timeout.
        assert time.monotonic() - started < 10
        # A copy never sent from before asks the dead process, which does
        # not answer: gone within the lookup's 5 s bound, not the send's.
        copy = pickle.loads(pickle.dumps(port))
        started = time.monotonic()
        with pytest.raises(meshstore.ConnectionError, match="gone"):
            copy.send("after", timeout=60).get(timeout=60)
        assert time.monotonic() - started < 10
    finally:
        procs.stop()


def test_send_with_a_port_has_every_member_send_its_result_there():
    here = ma.local_procs(ranks=3)
    try:
        squarers = here.spawn("squarers", Squarer)
        port, receiver = Channel.open()
        with receiver:
            assert send(squarers.square, (4,), port=port) is None  # waits for nothing
            me = os.getpid()
            assert _received(receiver, 3) == [(0, me, 16), (1, me, 16), (2, me, 16)]
            # A view is the selection; kwargs and async endpoints too.
            send(squarers.slice(ranks=slice(1, 3)).later, kwargs={"x": 10}, port=port)
            assert _received(receiver, 2) == [11, 12]
            # An endpoint that raises: the receiver's recv() raises its
            # ActorError, naming the rank; the others' values still come.
            send(squarers.fail_on, (1,), port=port)
            values, errors = [], []
            for _ in range(3):
                try:
                    values.append(receiver.recv().get(timeout=30))
                except ActorError as e:
                    errors.append(e)
            assert values == ["fine", "fine"]
            assert len(errors) == 1 and errors[0].rank == 1
            assert errors[0].exception_type == "KeyError" and "refuses" in errors[0].message
            # A result that cannot be pickled reaches the port as why.
            send(squarers.slice(ranks=0).unpicklable, port=port)
            with pytest.raises(ActorError, match="cannot be pickled"):
                receiver.recv().get(timeout=30)
    finally:
        here.stop()


def test_send_to_worker_processes_and_to_one_chosen_member():
    procs = ma.this_host().spawn_procs(per_host={"procs": 2})
    try:
        squarers = procs.spawn("squarers", Squarer)
        pids = [procs.pid(0), procs.pid(1)]
        port, receiver = Channel.open()
        with receiver:
            send(squarers.square, (3,), port=port)
            assert _received(receiver, 2) == [(0, pids[0], 9), (1, pids[1], 9)]
            # "choose": one member runs it (every member's count, asked
            # after the send from this process, sees it: 1 call in all).
            send(squarers.square, (5,), port=port, selection="choose")
            rank, pid, value = receiver.recv().get(timeout=30)
            assert value == 25 and pid == pids[rank]
            counts = squarers.count.call().get(timeout=30).values()
            assert sum(counts) == 3 and counts[rank] == 2
            # Without a port the results are dropped, as broadcast drops them.
            send(squarers.square, (6,))
            assert sum(squarers.count.call().get(timeout=30).values()) == 5
    finally:
        procs.stop()


def test_a_port_carries_an_exception_that_recv_raises():
    ma.this_proc()
    port, receiver = Channel.open()
    with receiver:
        port.exception(ValueError("from the sender")).get(timeout=30)
        port.send("after").get(timeout=30)
        with pytest.raises(ValueError, match="from the sender"):
            receiver.recv().get(timeout=30)
        assert receiver.recv().get(timeout=30) == "after"
        with pytest.raises(TypeError, match="an exception, not str"):
            port.exception("not an exception")


def test_bad_send_arguments_are_refused():
    here = ma.this_proc()
    squarers = here.spawn("refusing", Squarer)
    port, receiver = Channel.open()
    with receiver:
        with pytest.raises(TypeError, match="must be an actor mesh's endpoint"):
            send(lambda x: x, (1,), port=port)
        with pytest.raises(TypeError, match="args must be a tuple or list"):
            send(squarers.square, 1, port=port)
        with pytest.raises(TypeError, match="kwargs must be a dict or None"):
            send(squarers.square, (1,), kwargs=[1], port=port)
        with pytest.raises(TypeError, match="port must be a meshstore.actor.Port"):
            send(squarers.square, (1,), port=receiver)
        with pytest.raises(ValueError, match="selection must be 'all' or 'choose'"):
            send(squarers.square, (1,), port=port, selection="some")
        with pytest.raises(TypeError, match="arguments must pickle"):
            send(squarers.square, (lambda: None,), port=port)


def test_bad_channel_arguments_are_refused():
    ma.this_proc()
    with pytest.raises(ValueError, match="capacity must be an int >= 1"):
        Channel.open(capacity=0)
    port, receiver = Channel.open()
    with receiver:
        with pytest.raises(ValueError, match="timeout must be a number of seconds"):
            port.send(1, timeout=0)
        with pytest.raises(TypeError, match="the value must pickle"):
            port.send(lambda: None)
        with pytest.raises(meshstore.InvalidArgumentError, match="not a port's bytes"):
            ma._ports._port_from_bytes(b"not a port").send(1).get(timeout=30)
