"""Weight sync with Monarch-style actors on meshstore
(docs/python-actors.md): one controller script starts three worker
processes, spans a store over them (torchstore's API), spawns a trainer
on one and a mesh of generators on the other two. Each step the trainer
trains and publishes its weights; every generator pulls them into its own
model, in place, and both sides report a checksum the controller compares.

    PYTHONPATH=build/python python3 examples/python/actor_weight_sync.py
"""

import asyncio

import torch

import meshstore.torchstore as ts
from meshstore.actor import Actor, current_rank, endpoint, this_host
from meshstore.torchstore.strategy import LocalRankStrategy


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))


def checksum(model):
    return round(sum(float(p.double().sum()) for p in model.state_dict().values()), 6)


class Trainer(Actor):
    def __init__(self):
        self.model = make_model()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    @endpoint
    async def step(self, step):
        x, y = torch.randn(32, 64), torch.randn(32, 8)
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        await ts.put_state_dict(self.model.state_dict(), "weights")
        return checksum(self.model)


class Generator(Actor):
    def __init__(self):
        self.model = make_model()

    @endpoint
    async def pull(self):
        sd = self.model.state_dict()
        before = {k: t.data_ptr() for k, t in sd.items()}
        await ts.get_state_dict("weights", user_state_dict=sd)
        assert all(t.data_ptr() == before[k] for k, t in sd.items()), "not pulled in place"
        return current_rank().rank, checksum(self.model)


def main():
    procs = this_host().spawn_procs(per_host={"procs": 3})
    try:
        asyncio.run(ts.initialize(mesh=procs, strategy=LocalRankStrategy()))
        trainer = procs.slice(procs=0).spawn("trainer", Trainer)
        generators = procs.slice(procs=slice(1, 3)).spawn("generators", Generator)
        for step in range(3):
            published = trainer.step.call_one(step).get(timeout=120)
            for rank, pulled in generators.pull.call().get(timeout=120).values():
                assert pulled == published, f"generator {rank}: {pulled} != {published}"
            print(f"step {step}: both generators hold the trainer's weights ({published})")
        asyncio.run(ts.shutdown())
    finally:
        procs.stop()
    print("actor_weight_sync: ok")


if __name__ == "__main__":
    main()
