"""meshstore.checkpoint: models loaded from safetensors checkpoints at 1x
memory.

    model = build_model_on("meta")                    # no memory for the weights
    meshstore.checkpoint.load_into(model, "/models/qwen3-0.6b")   # a file or a sharded dir

With ``assign=True`` (the default) the module's parameters and buffers
become tensors over a copy-on-write mapping of the checkpoint: no second
copy, nothing read until used, and a page written (a training step) becomes
the process's own. With ``assign=False`` the checkpoint is copied into the
module's existing tensors in place, one tensor at a time, each tensor's
pages let go once copied. docs/persistence.md, "Loading a model".
"""

import collections
import os

from . import _native
from ._errors import NotFoundError
from ._tensors import export
from .safetensors import FileNotFound, _refuse_names

__all__ = ["LoadResult", "load_into"]

#: What ``load_into`` answers: the names the module has and the checkpoint
#: lacks, and the reverse (the fields of torch's ``load_state_dict`` result).
LoadResult = collections.namedtuple("LoadResult", ["missing_keys", "unexpected_keys"])

_SAFETENSORS_NAMES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}


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
    try:
        checkpoint = _native.SafetensorsCheckpoint.open(path, assign)
    except NotFoundError as e:
        raise FileNotFound(e.message, e.code, e.code_name) from None
    stored = {name: (dtype, tuple(shape)) for name, dtype, shape in checkpoint.entries()}
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
        want = _SAFETENSORS_NAMES.get(str(t.dtype).replace("torch.", ""), str(t.dtype))
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
                    _assign(module, name, t)
            else:
                dst, as_bool = export(old.detach(), what, for_write=True, name=names[0])
                checkpoint.read_into(source, dst, as_bool)
    return LoadResult(missing, unexpected)


def _assign(module, name, value):
    prefix, _, leaf = name.rpartition(".")
    owner = module.get_submodule(prefix) if prefix else module
    if leaf in owner._parameters:
        owner._parameters[leaf] = value
    else:
        owner._buffers[leaf] = value
