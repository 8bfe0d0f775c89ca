"""Channels and supervision with Monarch-style actors (docs/python-actors.md,
"Channels" and "Supervision"): the controller opens a channel and hands
its port to two worker processes, which report each step's progress on it
as they work; the controller reads the reports as they arrive. The
workers' mesh is supervised with restart: a worker killed with -9 is
started again, its member made again, and it reports from its new
process.

    PYTHONPATH=build/python python3 examples/python/actor_channels.py
"""

import os
import signal
import time

import meshstore
from meshstore.actor import Actor, Channel, Supervision, current_rank, endpoint, this_host


class Worker(Actor):
    def __init__(self, steps):
        self.steps = steps

    @endpoint
    async def run(self, progress):
        # Each step's report goes to the controller's port as it happens.
        for step in range(self.steps):
            await progress.send({"rank": current_rank().rank, "pid": os.getpid(), "step": step})
        return self.steps

    @endpoint
    def pid(self):
        return os.getpid()


def reports(receiver, n):
    return [receiver.recv().get(timeout=30) for _ in range(n)]


def main():
    procs = this_host().spawn_procs(per_host={"procs": 2}, max_relaunches=1)
    try:
        workers = procs.spawn(Supervision("restart"), "workers", Worker, 3)
        progress, receiver = Channel.open()
        with receiver:
            done = workers.run.call(progress)
            got = reports(receiver, 6)
            assert done.get(timeout=30).values() == [3, 3]
            for rank in (0, 1):
                steps = [r["step"] for r in got if r["rank"] == rank]
                assert steps == [0, 1, 2], (rank, steps)  # in order, per sender
            print(f"actor_channels: {len(got)} reports from ranks 0 and 1")

            # Kill rank 1's process: it is started again, and the member
            # made again in it reports from there.
            old = workers.slice(procs=1).pid.call_one().get(timeout=30)
            os.kill(old, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while True:
                try:
                    new = workers.slice(procs=1).pid.call_one().get(timeout=30)
                    break
                except meshstore.Error:
                    assert time.monotonic() < deadline, "rank 1 never came back"
                    time.sleep(0.05)
            assert new != old
            workers.slice(procs=1).run.call_one(progress).get(timeout=30)
            again = reports(receiver, 3)
            assert {r["pid"] for r in again} == {new}
            print(f"actor_channels: rank 1 came back as pid {new} and reported {len(again)} steps")
    finally:
        procs.stop()
    print("actor_channels: ok")


if __name__ == "__main__":  # the workers load this script without running this part
    main()
