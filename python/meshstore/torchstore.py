"""A drop-in for torchstore's module-level API, on meshstore.

A torchstore script runs by changing its import::

    import meshstore.torchstore as ts      # was: import torchstore as ts

    await ts.initialize()                  # or ts.initialize_spmd() under torchrun
    await ts.put("w", torch.randn(3, 4))
    w = await ts.get("w")
    await ts.put_state_dict(model.state_dict(), "model")
    sd = await ts.get_state_dict("model", user_state_dict=model.state_dict())
    await ts.shutdown()

Semantics follow torchstore: a missing key raises KeyError; ``get(key,
inplace_tensor=t)`` returns ``t`` itself; ``keys(prefix)`` matches whole
'.'-separated components; ``exists`` is False for a sharded key not fully
put. docs/python.md lists what differs.
"""

import os
from dataclasses import dataclass

from . import _state_dict as sdmod
from ._errors import ConflictError, NotFoundError, WrongKindError
from ._store import Store
from ._store import TensorSlice as _Box
from ._tensors import Tensor

DEFAULT_TORCHSTORE_NAME = "TorchStore"

_stores = {}


# -- strategies --------------------------------------------------------------


class TorchStoreStrategy:
    """Where volumes live and which one each rank writes to."""

    placement = "singleton"

    def __repr__(self):
        return f"{type(self).__name__}()"


class ControllerStorageVolumes(TorchStoreStrategy):
    """Volumes next to the controller (the process that initialized)."""

    placement = "controller_colocated"


class SingletonStrategy(TorchStoreStrategy):
    """One volume, in the process that initialized."""

    placement = "singleton"


class LocalRankStrategy(TorchStoreStrategy):
    """One volume per rank; each rank writes to its own."""

    placement = "per_local_rank"


class HostStrategy(TorchStoreStrategy):
    """One volume per host; the ranks of a host share it."""

    placement = "per_host"


@dataclass(frozen=True)
class TensorSlice:
    """torchstore's slice spec: a box of a global tensor. ``coordinates``
    and ``mesh_shape`` (the writer's place in its mesh) are accepted and not
    needed: the box alone says what to read."""

    offsets: tuple
    coordinates: tuple
    global_shape: tuple
    local_shape: tuple
    mesh_shape: tuple

    def _box(self):
        return _Box(self.global_shape, self.offsets, self.local_shape)


@dataclass(frozen=True)
class SPMDEnv:
    """A torchrun-style environment (torchstore.spmd.SPMDEnv)."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    master_addr: str
    master_port: int


# -- setup -------------------------------------------------------------------


def _store(store_name):
    try:
        return _stores[store_name]
    except KeyError:
        raise RuntimeError(f"torchstore '{store_name}' is not initialized: call "
                           "initialize() or initialize_spmd() first") from None


def _strategy(strategy, num_storage_volumes):
    if strategy is None:
        if num_storage_volumes != 1:
            raise RuntimeError("Must specify controller strategy if num_storage_volumes > 1")
        strategy = ControllerStorageVolumes()
    if not isinstance(strategy, TorchStoreStrategy):
        raise TypeError(f"strategy must be a TorchStoreStrategy, got {type(strategy).__name__}")
    return strategy


async def initialize(num_storage_volumes=1, strategy=None, store_name=DEFAULT_TORCHSTORE_NAME,
                     mesh=None, **options):
    """Creates the store in this process (``num_storage_volumes`` volumes next
    to it). ``options`` are meshstore's store options (listen="127.0.0.1:0"
    lets other processes Store.connect to it). A Monarch ``mesh`` has no
    meaning here: spawn processes with meshrun or torchrun and use
    initialize_spmd()."""
    if mesh is not None:
        raise NotImplementedError("meshstore.torchstore has no Monarch ProcMesh: launch the "
                                  "ranks with torchrun or meshrun and call initialize_spmd()")
    if store_name in _stores:
        raise RuntimeError(f"torchstore '{store_name}' is already initialized")
    strategy = _strategy(strategy, num_storage_volumes)
    opts = dict(options)
    opts.setdefault("strategy", strategy.placement)
    if strategy.placement == "controller_colocated":
        opts.setdefault("num_volumes", num_storage_volumes)
    _stores[store_name] = Store.embedded(**opts)


async def initialize_spmd(strategy=None, store_name=DEFAULT_TORCHSTORE_NAME, *, env=None,
                          **options):
    """Joins a torchrun / meshrun / mpirun / srun job: rank 0 creates the
    store on MASTER_ADDR at MESHSTORE_PORT (default MASTER_PORT + 1), the
    other ranks connect, and volumes go where ``strategy`` puts them
    (LocalRankStrategy, the default: one per rank; HostStrategy: one per
    host). ``env`` (an SPMDEnv) overrides the launcher's variables."""
    if store_name in _stores:
        raise RuntimeError(f"torchstore '{store_name}' is already initialized")
    strategy = strategy or LocalRankStrategy()
    if not isinstance(strategy, TorchStoreStrategy):
        raise TypeError(f"strategy must be a TorchStoreStrategy, got {type(strategy).__name__}")
    if env is not None:
        os.environ.update({
            "RANK": str(env.rank), "LOCAL_RANK": str(env.local_rank),
            "WORLD_SIZE": str(env.world_size), "LOCAL_WORLD_SIZE": str(env.local_world_size),
            "MASTER_ADDR": env.master_addr, "MASTER_PORT": str(env.master_port)})
    opts = dict(options)
    opts.setdefault("strategy", strategy.placement)
    _stores[store_name] = Store.from_env(**opts)


async def shutdown(store_name=DEFAULT_TORCHSTORE_NAME):
    """Closes the store (this process's part of it), which ends the loans of
    its direct_rdma puts. Idempotent."""
    for lent in [k for k in _lent if k[0] == store_name]:
        del _lent[lent]
    store = _stores.pop(store_name, None)
    if store is not None:
        store.close()


def reset_client(store_name=DEFAULT_TORCHSTORE_NAME):
    """Forgets the store without closing it (torchstore compatibility)."""
    _stores.pop(store_name, None)


# -- DTensor (where torch has it) -------------------------------------------------


def _dtensor_type():
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        try:
            from torch.distributed._tensor import DTensor
        except ImportError:
            return None
    return DTensor


def _is_dtensor(x):
    dt = _dtensor_type()
    return dt is not None and isinstance(x, dt)


def _dtensor_box(dt):
    """The box a DTensor's local shard covers, and whether this rank is the
    one that writes it (the first replica along every replicated mesh dim)."""
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:
        from torch.distributed._tensor._utils import compute_local_shape_and_global_offset
    shape, offset = compute_local_shape_and_global_offset(dt.shape, dt.device_mesh,
                                                          dt.placements)
    coords = dt.device_mesh.get_coordinate() or ()
    writer = all(c == 0 for c, p in zip(coords, dt.placements) if p.is_replicate())
    return _Box(tuple(dt.shape), tuple(offset), tuple(shape)), writer


# -- values ------------------------------------------------------------------------


def _no_grad():
    import torch
    return torch.no_grad()


def _out(v):
    return v.torch() if isinstance(v, Tensor) else v


async def put(key, value, store_name=DEFAULT_TORCHSTORE_NAME):
    """Stores a tensor (a DTensor's local shard, resharded on read) or an
    object under `key`."""
    store = _store(store_name)
    if _is_dtensor(value):
        box, writer = _dtensor_box(value)
        if writer:
            await store.put(key, value.to_local(), slice=box)
        return
    await store.put(key, value)


async def put_batch(items, store_name=DEFAULT_TORCHSTORE_NAME):
    """Stores several tensors and objects ({key: value})."""
    await _store(store_name).put_batch(items)


async def get(key, inplace_tensor=None, tensor_slice_spec=None,
              store_name=DEFAULT_TORCHSTORE_NAME):
    """The tensor or object under `key`; into `inplace_tensor` when given
    (returned itself; a DTensor receives its own shard); `tensor_slice_spec`
    reads one box."""
    store = _store(store_name)
    box = tensor_slice_spec._box() if tensor_slice_spec is not None else None
    if inplace_tensor is not None:
        if _is_dtensor(inplace_tensor):
            dbox, _ = _dtensor_box(inplace_tensor)
            await store.get_into(key, inplace_tensor.to_local(), slice=dbox)
            return inplace_tensor
        return await store.get_into(key, inplace_tensor, slice=box)
    return _out(await store.get(key, slice=box))


async def get_batch(keys, store_name=DEFAULT_TORCHSTORE_NAME):
    """{key: value} for several keys; `keys` may be a dict of key -> tensor
    to read into (or None)."""
    store = _store(store_name)
    if isinstance(keys, dict):
        out = {}
        fresh = [k for k, t in keys.items() if t is None]
        into = {k: t for k, t in keys.items() if t is not None}
        if into:
            await store.get_into_batch(into)
        values = await store.get_batch(fresh) if fresh else []
        got = dict(zip(fresh, values))
        for k in keys:
            out[k] = into[k] if k in into else _out(got[k])
        return out
    keys = list(keys)
    return {k: _out(v) for k, v in zip(keys, await store.get_batch(keys))}


async def delete(key, *, store_name=DEFAULT_TORCHSTORE_NAME):
    """Removes `key`; KeyError when there is none. A state dict goes whole
    (a direct_rdma one's loan ends)."""
    await _store(store_name).delete(key)
    _lent.pop((store_name, key), None)


async def delete_batch(keys, *, store_name=DEFAULT_TORCHSTORE_NAME):
    """Removes the keys that exist; answers how many were."""
    keys = list(keys)
    removed = await _store(store_name).delete_batch(keys)
    for key in keys:
        _lent.pop((store_name, key), None)
    return removed


async def keys(prefix=None, *, store_name=DEFAULT_TORCHSTORE_NAME):
    """Keys under `prefix` (whole '.'-separated components), sorted."""
    return await _store(store_name).keys(prefix or "")


async def exists(key, store_name=DEFAULT_TORCHSTORE_NAME):
    """True when `key` exists (False while a sharded key is partly put)."""
    return await _store(store_name).exists(key)


# -- state dicts -------------------------------------------------------------------


async def put_state_dict(state_dict, key, store_name=DEFAULT_TORCHSTORE_NAME,
                         transfer_dtype=None, direct_rdma=False):
    """Stores a state dict under `key`, visible as a whole. transfer_dtype
    (torch.bfloat16 or torch.float16) stores float32 tensors in it.

    direct_rdma=True lends the tensors instead of copying them: readers copy
    straight out of this process's memory (cma on this host, rdma or tcp
    from others, cuda-ipc for GPU tensors). The tensors stay lent until the
    next put_state_dict of `key` (which waits for reads still copying out of
    them) or shutdown(): as with torchstore, write them only when no reader
    is pulling (docs/python.md, "direct_rdma"). With transfer_dtype, the
    cast tensors are copies, published by copy."""
    store = _store(store_name)
    if direct_rdma:
        previous = _lent.get((store_name, key))
        # Cast tensors are copies whatever the mode: those go by copy.
        mode = "direct" if transfer_dtype is None else "auto"
        try:
            pub = await store.publish(key, state_dict, mode=mode, transfer_dtype=transfer_dtype)
        except WrongKindError:
            # `key` holds a state dict put by copy: a put replaces it.
            await store.delete(key)
            pub = await store.publish(key, state_dict, mode=mode, transfer_dtype=transfer_dtype)
        _lent[(store_name, key)] = pub
        if previous is not None:
            await previous.reclaim()  # retired by the publish: waits for its reads
        return
    await _end_loan(store_name, key)
    await store.put_state_dict(key, state_dict, transfer_dtype=transfer_dtype)


# -- direct_rdma: this process's lent state dicts ------------------------------------

# (store_name, key) -> the Publication whose tensors readers copy out of.
_lent = {}


async def _end_loan(store_name, key):
    """Withdraws this process's direct version of `key`, if any, and waits
    for reads still copying out of its tensors."""
    pub = _lent.pop((store_name, key), None)
    if pub is not None:
        await pub.reclaim()


async def _latest_version(store, key):
    """The newest direct version of `key`; 0 when there is none (nothing
    there, or a state dict put by copy)."""
    try:
        return await store.latest_version(key)
    except WrongKindError:
        return 0


async def _latest(store, key):
    """The newest direct version of `key` as a dict, or None when there is
    none. A version retired between finding and reading it is found again."""
    for _ in range(8):
        version = await _latest_version(store, key)
        if version == 0:
            return None
        try:
            return await store.get_state_dict(f"{key}/v{version}")
        except NotFoundError:
            continue  # a newer put_state_dict retired it: read that one
    raise ConflictError(f"get_state_dict '{key}': each of 8 versions found was retired "
                        "before it could be read", 17, "conflict")


async def _latest_into(store, key, user_state_dict):
    """Reads the newest direct version of `key` into `user_state_dict`;
    False when there is none."""
    try:
        await store.get_latest_state_dict_into(key, user_state_dict)
        return True
    except WrongKindError:
        return False  # a state dict put by copy (or an object) holds `key`
    except NotFoundError:
        if await _latest_version(store, key) == 0:
            return False  # nothing published
        raise  # the version the pointer names is gone


def _to_torch_tree(node):
    if isinstance(node, dict):
        return {k: _to_torch_tree(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_to_torch_tree(v) for v in node]
    return _out(node)


async def _either(direct_first, by_copy, direct):
    """Reads a state dict put by copy (`by_copy()`: KeyError or TypeError
    when there is none) or put directly (`direct()`: None when there is
    none), the kind `direct_first` names first."""
    if direct_first:
        got = await direct()
        return got if got is not None else await by_copy()
    try:
        return await by_copy()
    except (NotFoundError, WrongKindError):  # none, or a direct put's version pointer
        got = await direct()
        if got is None:
            raise
        return got


async def get_state_dict(key, user_state_dict=None, strict=True,
                         store_name=DEFAULT_TORCHSTORE_NAME, direct_rdma=False):
    """The state dict under `key`. With `user_state_dict`, its tensors are
    filled in place and it is returned; strict=True requires the same names,
    dtypes and shapes (ValueError listing the differences), strict=False
    fills the names both have and leaves the rest.

    A state dict put with direct_rdma=True is read straight out of its
    writer's tensors, with or without direct_rdma here: the flag only says
    which kind of put to look for first."""
    store = _store(store_name)
    if user_state_dict is not None and strict:
        async def latest_into():
            return user_state_dict if await _latest_into(store, key, user_state_dict) else None
        return await _either(direct_rdma, lambda: store.get_state_dict_into(key, user_state_dict),
                             latest_into)
    whole = await _either(direct_rdma, lambda: store.get_state_dict(key),
                          lambda: _latest(store, key))
    if user_state_dict is None:
        return _to_torch_tree(whole)
    stored = sdmod.leaves(whole)
    for name, (path, leaf) in sdmod.leaves(user_state_dict).items():
        if name not in stored:
            continue
        value = stored[name][1]
        if isinstance(value, Tensor):
            value = value.torch()
            if hasattr(leaf, "copy_") and tuple(leaf.shape) == tuple(value.shape):
                with _no_grad():
                    leaf.copy_(value)
            continue
        sdmod.set_leaf(user_state_dict, path, value)
    return user_state_dict


__all__ = [
    "ControllerStorageVolumes", "DEFAULT_TORCHSTORE_NAME", "HostStrategy", "LocalRankStrategy",
    "SPMDEnv", "SingletonStrategy", "TensorSlice", "TorchStoreStrategy", "delete",
    "delete_batch", "exists", "get", "get_batch", "get_state_dict", "initialize",
    "initialize_spmd", "keys", "put", "put_batch", "put_state_dict", "reset_client", "shutdown",
]
