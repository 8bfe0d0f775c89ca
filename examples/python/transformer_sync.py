"""A torch.nn.Transformer's weights from one process to another.

Run with two ranks, under torchrun or meshrun:

    python3 -m torch.distributed.run --standalone --nproc_per_node=2 transformer_sync.py
    build/bin/meshrun -n 2 -- python3 transformer_sync.py

Rank 0 (the trainer) publishes its model's state dict every step; rank 1
(the inference worker) pulls each version into its own model in place and
checks it against the trainer's weights with torch.equal.
"""

import torch
import torch.distributed as dist

import meshstore

STEPS = 3


def model():
    return torch.nn.Transformer(d_model=64, nhead=4, num_encoder_layers=2,
                                num_decoder_layers=2, dim_feedforward=128)


def trainer(store):
    """Publishes a version per step, each once the worker has the previous."""
    torch.manual_seed(0)
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for step in range(1, STEPS + 1):
        loss = m(torch.randn(5, 2, 64), torch.randn(3, 2, 64)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sd = dict(m.state_dict())
        sd["step"] = step
        v = store.publish_state_dict("transformer", sd).result()
        # Wait for the worker to say it has version v before changing the weights.
        store.get_next_state_dict_into("ack", {"step": 0}, v - 1, timeout=120).result()


def worker(store):
    torch.manual_seed(1)  # different weights until the first pull
    m = model()
    sd = dict(m.state_dict())
    sd["step"] = 0
    version = 0
    for _ in range(STEPS):
        version = store.get_next_state_dict_into("transformer", sd, version, timeout=120).result()
        assert sd["step"] == version
        # The check: the trainer's weights are rebuilt here the same way.
        expected = store.get_state_dict(f"transformer/v{version}").result()
        for name, t in m.state_dict().items():
            assert torch.equal(t, expected[name].torch()), name
        store.publish_state_dict("ack", {"step": version}).result()


def main():
    # torch.distributed keeps MASTER_PORT; the store listens on MASTER_PORT + 1.
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with meshstore.Store.from_env() as store:
        (trainer if rank == 0 else worker)(store)
        # Rank 0's process holds the store: nobody leaves while a peer's
        # last call may still be talking to it.
        dist.barrier()
    dist.destroy_process_group()
    print(f"transformer_sync: ok (rank {rank}, {STEPS} versions)", flush=True)


if __name__ == "__main__":
    main()
