"""A rank of a sharded save or load under torchrun (test_checkpoint.py).

    sharded_worker.py save DIR    every rank saves its row, column and
                                  replicated boxes; rank 0 checks the files
                                  with the reference reader
    sharded_worker.py load DIR    every rank reads its boxes of another
                                  layout back and checks them
    sharded_worker.py kill DIR    rank 1 is killed with SIGKILL after the
                                  writes, before the files are renamed

Boxes are computed here, independently of meshstore: torch.chunk's rule
(pieces of ceil(size / ranks), the last ones shorter or empty).
"""

import os
import signal
import sys

import torch
import torch.distributed as dist

import meshstore
from meshstore.checkpoint import load_sharded, save_sharded

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "persistence"))
import safetensors_ref as ref  # noqa: E402

S, R = meshstore.Shard, meshstore.Replicate


def tensors():
    """The global tensors, the same on every rank."""
    g = torch.Generator().manual_seed(7)
    return {
        "embed": torch.randn(11, 6, generator=g).to(torch.bfloat16),
        "w": torch.randn(8, 10, generator=g),
        "cols": torch.randint(-100, 100, (5, 7), generator=g, dtype=torch.int64),
        "norm": torch.randn(6, generator=g),
        "mask": torch.rand(4, 9, generator=g) > 0.5,
        "step": torch.tensor(3.5),
    }


def box(t, dim, rank, ranks):
    size = t.shape[dim]
    piece = -(-size // ranks)
    start = min(rank * piece, size)
    return t.narrow(dim, start, min(start + piece, size) - start)


def local(global_tensors, placements, rank, ranks):
    out = {}
    for name, t in global_tensors.items():
        p = placements[name][0]
        out[name] = box(t, p.dim, rank, ranks).clone() if isinstance(p, S) else t.clone()
    return out


def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def main():
    mode, path = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    whole = tensors()
    if mode in ("save", "kill"):
        placements = {"embed": (S(0),), "w": (S(0),), "cols": (S(1),), "norm": (R(),),
                      "mask": (S(1),), "step": (R(),)}
        gather = None
        if mode == "kill":
            calls = []

            def gather(mine):
                calls.append(mine)
                if len(calls) == 2 and rank == 1:  # written and flushed, not yet renamed
                    os.kill(os.getpid(), signal.SIGKILL)
                out = [None] * ranks
                dist.all_gather_object(out, mine)
                return out
        result = save_sharded(path, local(whole, placements, rank, ranks), placements,
                              fqn_to_index={"embed": 1, "w": 2, "cols": 2, "norm": 1,
                                            "mask": 2, "step": 1},
                              metadata={"format": "pt"}, all_gather=gather)
        assert result.files == 2, result
        if rank == 0:
            back = ref.read_checkpoint(path)
            for name, t in whole.items():
                dtype, shape, data = back[name]
                assert shape == list(t.shape), (name, shape)
                assert data == raw(t), name
        print(f"sharded_worker: ok (rank {rank}, {result.tensors} tensors, {result.bytes} bytes)",
              flush=True)
    elif mode == "load":
        # Another layout: columns where the save had rows, and the reverse.
        placements = {"embed": (S(1),), "w": (S(1),), "cols": (S(0),), "norm": (S(0),),
                      "mask": (R(),), "step": (R(),)}
        mine = {name: torch.zeros_like(t) for name, t in
                local(whole, placements, rank, ranks).items()}
        load_sharded(path, mine, placements)
        expected = local(whole, placements, rank, ranks)
        for name, t in mine.items():
            assert torch.equal(t, expected[name]), name
        print(f"sharded_worker: ok (rank {rank})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
