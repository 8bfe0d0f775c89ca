"""A torchstore SPMD script, run on meshstore by changing one import.

    python3 -m torch.distributed.run --standalone --nproc_per_node=2 torchstore_spmd.py

Every rank puts its own tensors, reads its peer's, lists keys, and moves a
model's state dict, as torchstore's SPMD examples do; then rank 0 publishes
its weights three times with direct_rdma and rank 1 pulls them straight out
of rank 0's memory.
"""

import asyncio
import os

import torch
import torch.distributed as dist

import meshstore.torchstore as ts   # was: import torchstore as ts


async def main():
    dist.init_process_group("gloo")   # torchrun's MASTER_PORT; the store uses MASTER_PORT + 1
    rank, world = dist.get_rank(), dist.get_world_size()
    await ts.initialize_spmd(strategy=ts.LocalRankStrategy())

    await ts.put(f"rank{rank}.weight", torch.full((4, 4), float(rank)))
    await ts.put(f"rank{rank}.meta", {"rank": rank, "host": os.uname().nodename})
    await ts.put_batch({f"rank{rank}.b.{i}": torch.arange(i + 1) for i in range(3)})
    dist.barrier()

    peer = (rank + 1) % world
    w = await ts.get(f"rank{peer}.weight")
    assert torch.equal(w, torch.full((4, 4), float(peer)))
    into = torch.empty(4, 4)
    assert await ts.get(f"rank{peer}.weight", inplace_tensor=into) is into
    assert (await ts.get(f"rank{peer}.meta"))["rank"] == peer
    batch = await ts.get_batch([f"rank{peer}.b.{i}" for i in range(3)])
    assert [t.tolist() for t in batch.values()] == [[0], [0, 1], [0, 1, 2]]
    assert await ts.exists(f"rank{peer}.weight") and not await ts.exists("rank9.weight")
    assert await ts.keys(f"rank{peer}.b") == [f"rank{peer}.b.{i}" for i in range(3)]
    try:
        await ts.get("no.such.key")
        raise AssertionError("a missing key must raise KeyError")
    except KeyError:
        pass

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    if rank == 0:
        await ts.put_state_dict(model.state_dict(), "model")
    dist.barrier()
    fresh = torch.nn.Linear(8, 8)
    await ts.get_state_dict("model", user_state_dict=fresh.state_dict())
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh.bias, model.bias)
    whole = await ts.get_state_dict("model")
    assert torch.equal(whole["weight"], model.weight)

    # Weight sync as an RL trainer does it: rank 0 lends its weights
    # (direct_rdma), rank 1 copies them straight out of rank 0's memory.
    torch.manual_seed(1)
    policy = torch.nn.Linear(256, 256)   # a 256 KiB weight: lent, not copied
    for step in range(3):
        if rank == 0:
            with torch.no_grad():
                policy.weight.add_(1.0)   # the optimizer's step; nobody reads now
            await ts.put_state_dict(policy.state_dict(), "policy", direct_rdma=True)
        else:
            with torch.no_grad():
                policy.weight.add_(1.0)   # what rank 0 did, to check the read
        dist.barrier()
        if rank == 1:
            pulled = torch.nn.Linear(256, 256)
            await ts.get_state_dict("policy", pulled.state_dict(), direct_rdma=True)
            assert torch.equal(pulled.weight, policy.weight), f"step {step}"
            assert torch.equal(pulled.bias, policy.bias)
        dist.barrier()   # the trainer steps only once the reader is done

    dist.barrier()   # nobody leaves while a peer still reads its volume
    await ts.shutdown()
    dist.destroy_process_group()
    print(f"torchstore_spmd: ok (rank {rank} of {world})", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
