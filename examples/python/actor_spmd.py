"""actor_spmd: Python actors across the ranks of a torchrun job.

    torchrun --nproc_per_node 2 examples/python/actor_spmd.py
    (ctest runs it through tests/python/torchrun.py, on a free port)

Every rank runs this script and joins the job as one process mesh
(``meshstore.actor.from_env``), then makes its own member of the
"squarers" mesh (``spawn`` is collective). Rank 0 calls every member and
one alone. Every rank then finds the same named singleton, a tally
living on rank 0 (``get_or_spawn``: whichever rank comes first makes it),
and adds its rank to it. A last collective spawn is the barrier before
leaving: it returns once every rank's member is in, so no rank goes while
another may still call it, and every rank's add is done.
"""

import meshstore.actor as ma


class Squarer(ma.Actor):
    @ma.endpoint
    def square(self, x):
        # The answer shows who gave it.
        return x * x + 1000 * ma.current_rank().rank


class Tally(ma.Actor):
    def __init__(self):
        self.seen = []

    @ma.endpoint
    def add(self, rank):
        self.seen.append(rank)
        return ma.current_rank().rank  # where it lives: rank 0

    @ma.endpoint
    def ranks(self):
        return sorted(self.seen)


class Done(ma.Actor):
    """Spawned by every rank last: the barrier before leaving."""


def main():
    procs = ma.from_env()
    squarers = procs.spawn("squarers", Squarer)
    rank, world = procs.rank, procs.size
    if rank == 0:
        squares = squarers.square.call(7).get(timeout=30)
        print(f"actor_spmd: rank 0: square(7) on every rank -> {squares.values()}", flush=True)
        assert squares.values() == [49 + 1000 * r for r in range(world)], squares
        last = squarers.slice(procs=world - 1).square.call_one(3).get(timeout=30)
        assert last == 9 + 1000 * (world - 1), last
        print(f"actor_spmd: rank 0: rank {world - 1} alone: square(3) -> {last}", flush=True)
    tally = procs.get_or_spawn("tally", Tally)
    assert tally.add.call_one(rank).get(timeout=30) == 0
    procs.spawn("done", Done)
    if rank == 0:
        ranks = tally.ranks.call_one().get(timeout=30)
        assert ranks == list(range(world)), ranks
        print(f"actor_spmd: rank 0: the tally singleton saw ranks {ranks}", flush=True)
    print(f"actor_spmd: ok (rank {rank} of {world})", flush=True)


if __name__ == "__main__":
    main()
