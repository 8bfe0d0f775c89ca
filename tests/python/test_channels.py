"""meshstore.actor's channels (docs/python.md, "Channels"): a port passed
to actors in calls, members sending to it from this process and from
worker processes, a port of ports, and sends that cannot be delivered."""

import asyncio
import os
import pickle
import signal
import threading
import time

import pytest

import meshstore
import meshstore.actor as ma
from meshstore.actor import Actor, Channel, Port, current_rank, endpoint


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
