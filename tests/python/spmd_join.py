"""Every rank sees every other rank straight after initialize_spmd.

    python3 tests/python/torchrun.py 2 tests/python/spmd_join.py CYCLES

Each cycle joins a fresh store (LocalRankStrategy, then HostStrategy, in
turn) and checks, with no barrier of its own before: that every rank's
volume is already there (stats), that a key put by one rank straight after
is found by every other once that put is done, and that shutdown, called
by every rank, ends cleanly whichever rank gets there first. Prints
"spmd_join: ok" per rank.
"""

import asyncio
import sys

import torch
import torch.distributed as dist

import meshstore.torchstore as ts


async def cycle(n, rank, world):
    name = f"join{n}"
    strategy = ts.LocalRankStrategy() if n % 2 == 0 else ts.HostStrategy()
    await ts.initialize_spmd(strategy=strategy, store_name=name)
    store = await ts.client(name)
    volumes = len(await store.stats())
    expected = world if n % 2 == 0 else 1
    assert volumes == expected, f"cycle {n}, rank {rank}: {volumes} volumes, want {expected}"
    await ts.put(f"r{rank}.x", torch.full((4,), float(rank + n)), store_name=name)
    # Each rank's put is done here; the barrier only tells the others so.
    dist.barrier()
    for peer in range(world):
        got = await ts.get(f"r{peer}.x", store_name=name)
        assert torch.equal(got, torch.full((4,), float(peer + n))), f"cycle {n}: r{peer}"
    assert await ts.keys("", store_name=name) == []
    assert await ts.keys(store_name=name) == [f"r{p}.x" for p in range(world)]
    dist.barrier()
    await ts.shutdown(store_name=name)


async def main(cycles):
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for n in range(cycles):
        await cycle(n, rank, world)
    dist.destroy_process_group()
    print(f"spmd_join: ok (rank {rank}, {cycles} cycles)", flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
