"""meshstore.checkpoint: models loaded from safetensors checkpoints at 1x
memory, and sharded saves straight into the final files.

    model = build_model_on("meta")                    # no memory for the weights
    meshstore.checkpoint.load_into(model, "/models/qwen3-0.6b")   # a file or a sharded dir

With ``assign=True`` (the default) the module's parameters and buffers
become tensors over a copy-on-write mapping of the checkpoint: no second
copy, nothing read until used, and a page written (a training step) becomes
the process's own. With ``assign=False`` the checkpoint is copied into the
module's existing tensors in place, one tensor at a time, each tensor's
pages let go once copied. docs/persistence.md, "Loading a model".

``save_sharded`` has every rank of a job (torchrun) write its own part of
each tensor into one consolidated Hugging Face checkpoint, with no gather and
no second pass; ``load_sharded`` fills each rank's part back from any
checkpoint, whatever layout wrote it. docs/persistence.md, "A sharded save".
"""

import collections
import os
from collections.abc import Mapping

from . import _native
from ._placement import Replicate, Shard, dims_of
from ._tensors import export
from .safetensors import _items, _metadata, _open, _refuse_names, _safetensors_name

__all__ = ["LoadResult", "Replicate", "SaveResult", "Shard", "load_into", "load_sharded",
           "save_sharded"]

#: What ``save_sharded`` answers: this rank's tensors and bytes written, and
#: the checkpoint's files.
SaveResult = collections.namedtuple("SaveResult", ["tensors", "bytes", "files"])

#: What ``load_into`` answers: the names the module has and the checkpoint
#: lacks, and the reverse (the fields of torch's ``load_state_dict`` result).
LoadResult = collections.namedtuple("LoadResult", ["missing_keys", "unexpected_keys"])

def load_into(module, path, *, device="cpu", strict=True, assign=True):
    """Fills ``module`` (an ``nn.Module``) from the checkpoint at ``path``: a
    ``.safetensors`` file, or a directory of shards with
    ``model.safetensors.index.json`` (or a single file).

    - ``assign=True``: each parameter and buffer is replaced by a tensor over
      the mapped checkpoint (on ``device``: a GPU device gets a copy there),
      keeping ``requires_grad``; the module may be on the meta device.
    - ``assign=False``: the checkpoint is copied into the module's tensors in
      place (host or GPU memory; not meta).

    Tied tensors (one tensor under two names) stay tied: a checkpoint that
    holds one of the names (as ``save_model`` writes it) fills both, and with
    ``assign=True`` both names are the same tensor afterwards. Names behave as
    ``load_state_dict(strict=...)``: with ``strict``, a name the module has
    and the checkpoint lacks, or the reverse, raises RuntimeError naming
    them. A dtype or shape mismatch raises ValueError naming every one.
    Everything is checked before anything is written. Answers
    ``LoadResult(missing_keys, unexpected_keys)``.
    """
    import torch
    path = os.fspath(path)
    what = f"load_into '{path}'"
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{what}: expected a torch.nn.Module, got {type(module).__name__}")
    target = torch.device(device)
    checkpoint, stored = _open_checkpoint(path, assign)
    state = module.state_dict(keep_vars=True)

    # Names that are one tensor (tied weights), in the module's order.
    groups = {}
    for name, t in state.items():
        groups.setdefault(id(t), []).append(name)
    plan = []  # (names, the stored name to read)
    missing = []
    for names in groups.values():
        source = next((n for n in names if n in stored), None)
        if source is None:
            missing.extend(names)
        else:
            plan.append((names, source))
    unexpected = [n for n in stored if n not in state]

    wrong = []
    for names, source in plan:
        t = state[names[0]]
        dtype, shape = stored[source]
        want = _safetensors_name(t.dtype) or str(t.dtype)
        if dtype != want or shape != tuple(t.shape):
            wrong.append(f"'{source}': the checkpoint holds {dtype} {list(shape)}, the module "
                         f"{want} {list(t.shape)}")
        if not assign and t.is_meta:
            wrong.append(f"'{names[0]}' is on the meta device, which has no memory to copy "
                         "into: load with assign=True")
    if wrong:
        raise ValueError(f"{what}: " + "; ".join(wrong))
    if strict:
        _refuse_names(what, module, missing, unexpected)

    owners = dict(module.named_modules(remove_duplicate=False)) if assign else {}
    with torch.no_grad():
        for names, source in plan:
            old = state[names[0]]
            if assign:
                t = checkpoint.tensor(source).torch()
                if target.type != "cpu":
                    t = t.to(target)
                if isinstance(old, torch.nn.Parameter):
                    t = torch.nn.Parameter(t, requires_grad=old.requires_grad)
                for name in names:
                    _assign(owners, name, t)
            else:
                dst, as_bool = export(old.detach(), what, for_write=True, name=names[0])
                checkpoint.read_into(source, dst, as_bool)
    return LoadResult(missing, unexpected)


def save_sharded(dir, state_dict, placements, *, mesh_shape=None, fqn_to_index=None,
                 max_shard_bytes=None, metadata=None, all_gather=None):
    """Every rank's part of one consolidated checkpoint in the directory
    ``dir``: full tensors in ``model-0000i-of-0000n.safetensors`` and
    ``model.safetensors.index.json`` (or one ``model.safetensors``), each rank
    writing its own boxes at their offsets. Call it on every rank.

    - ``state_dict``: this rank's local tensors (its box of each).
    - ``placements``: name -> a tuple with one ``Shard(dim)`` or
      ``Replicate()`` per mesh dimension (DTensor's names); an uneven split
      follows torch.chunk. A box several ranks hold is written once.
    - ``mesh_shape``: defaults to ``(world size,)``; a rank's coordinates are
      its rank in row-major order.
    - ``fqn_to_index``: name -> file number from 1 (torchtitan's
      ``fqn_to_index_mapping``); else ``max_shard_bytes`` (an int, or a size
      such as "5GB") cuts files, else one file.
    - ``all_gather``: how ranks exchange bytes (bytes -> every rank's bytes, in
      rank order); by default torch.distributed's ``all_gather_object`` on the
      default group, which is initialized (gloo, from torchrun's environment)
      if it is not yet.

    Nothing a reader accepts exists until every rank has written and flushed
    its part: files are written under temporary names and renamed by rank 0
    at the end. A failure on any rank fails the call on every rank that
    hears of it, and the temporaries are removed. Answers ``SaveResult``.
    """
    path = os.fspath(dir)
    what = f"save_sharded '{path}'"
    rank, world, gather = _world(all_gather, what)
    mesh = _mesh(mesh_shape, world, what)
    if not isinstance(placements, Mapping):
        raise TypeError(f"{what}: placements must be a dict of name to placement")
    items = _items(state_dict, what)
    specs = {}
    for name, _, _ in items:
        if name not in placements:
            raise ValueError(f"{what}: '{name}' has no placement")
        specs[name] = (mesh, dims_of(placements[name], mesh, f"{what}: '{name}'"))
    file_of = {}
    for name, index in (fqn_to_index or {}).items():
        if not isinstance(index, int) or isinstance(index, bool) or index < 1:
            raise ValueError(f"{what}: fqn_to_index['{name}'] must be a file number from 1, "
                             f"got {index!r}")
        file_of[name] = index
    if max_shard_bytes is None:
        limit = 0
    elif isinstance(max_shard_bytes, str):
        limit = _native.parse_size(max_shard_bytes)
    elif isinstance(max_shard_bytes, int) and max_shard_bytes > 0:
        limit = max_shard_bytes
    else:
        raise ValueError(f"{what}: max_shard_bytes must be a positive int or a size such as "
                         f"'5GB', got {max_shard_bytes!r}")
    out = _native.save_sharded(path, items, specs, rank, world, file_of, limit,
                               _metadata(metadata, what), gather)
    return SaveResult(*out)


def load_sharded(dir, state_dict, placements, *, mesh_shape=None):
    """Fills this rank's local tensors (``state_dict``: name -> its box of the
    tensor, in place) from any checkpoint at ``dir`` (a file or a sharded
    directory), whatever layout wrote it: each rank reads only its box.
    ``placements`` and ``mesh_shape`` as for ``save_sharded``. Every name is
    checked (in the checkpoint, its box's shape and dtype) before anything
    is read. Answers ``state_dict``."""
    import torch
    path = os.fspath(dir)
    what = f"load_sharded '{path}'"
    rank, world, _ = _world(None, what, exchange=False)
    mesh = _mesh(mesh_shape, world, what)
    checkpoint, stored = _open_checkpoint(path, False)
    reads = []
    for name, t in state_dict.items():
        if name not in stored:
            raise KeyError(f"{what}: the checkpoint has no tensor '{name}'")
        if name not in placements:
            raise ValueError(f"{what}: '{name}' has no placement")
        dims = dims_of(placements[name], mesh, f"{what}: '{name}'")
        offsets, shape = _native.placement_box(list(stored[name][1]), list(mesh), dims, rank)
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{what}: '{name}': rank {rank}'s box of {list(stored[name][1])} is "
                             f"{list(shape)}, the tensor given is {list(t.shape)}")
        if isinstance(t, torch.Tensor):
            t = t.detach()
        reads.append((name, t, (list(offsets), list(shape))))
    for name, t, box in reads:
        dst, as_bool = export(t, what, for_write=True, name=name)
        checkpoint.read_into(name, dst, as_bool, box)
    return state_dict


def _open_checkpoint(path, writable):
    """The checkpoint at `path`, and {name: (safetensors dtype, shape)} of its
    tensors."""
    checkpoint = _open(_native.SafetensorsCheckpoint, path, writable)
    return checkpoint, {e[0]: (e[1], tuple(e[2])) for e in checkpoint.entries()}


def _world(all_gather, what, exchange=True):
    """(rank, world size, all_gather) of this process."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        try:
            rank = int(os.environ.get("RANK", "0"))
            world = int(os.environ.get("WORLD_SIZE", "1"))
        except ValueError as e:
            raise ValueError(f"{what}: RANK and WORLD_SIZE must be integers: {e}") from None
        if exchange and world > 1 and all_gather is None:
            dist.init_process_group("gloo")  # from torchrun's MASTER_ADDR / MASTER_PORT
    if all_gather is not None or world == 1 or not exchange:
        return rank, world, all_gather

    def gather(mine):
        out = [None] * world
        dist.all_gather_object(out, mine)
        return out
    return rank, world, gather


def _mesh(mesh_shape, world, what):
    mesh = (world,) if mesh_shape is None else tuple(mesh_shape)
    size = 1
    for d in mesh:
        if not isinstance(d, int) or d < 1:
            raise ValueError(f"{what}: mesh_shape {mesh_shape!r} must hold positive ints")
        size *= d
    if size != world:
        raise ValueError(f"{what}: mesh_shape {mesh} has {size} ranks, the world {world}")
    return mesh


def _assign(owners, name, value):
    """Sets `name` (a parameter or buffer of the state dict) to `value`;
    `owners` maps each module's qualified name to the module."""
    prefix, _, leaf = name.rpartition(".")
    owner = owners[prefix]
    if leaf in owner._parameters:
        owner._parameters[leaf] = value
    else:
        owner._buffers[leaf] = value
