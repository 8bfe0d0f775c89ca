"""A drop-in for torchstore's module-level API, on meshstore.

A torchstore script runs by changing its import::

    import meshstore.torchstore as ts      # was: import torchstore as ts

    await ts.initialize()                  # or ts.initialize_spmd() under torchrun
    await ts.put("w", torch.randn(3, 4))
    w = await ts.get("w")
    await ts.put_state_dict(model.state_dict(), "model")
    sd = await ts.get_state_dict("model", user_state_dict=model.state_dict())
    await ts.shutdown()

Semantics follow torchstore: any str is a key (the empty one too); a
missing key raises KeyError; ``get(key, inplace_tensor=t)`` returns ``t``
itself; ``keys(prefix)`` matches whole '.'-separated components;
``exists`` is False for a sharded key not fully put; objects of classes
defined in functions go through cloudpickle; optimizer state dicts keep
their int keys; a strategy's transport type picks the store's transport;
``initialize_spmd`` returns once every rank has joined. The submodules are
torchstore's: ``spmd`` (SPMDEnv), ``strategy``, ``transport``
(TransportType) and ``logging`` (init_logging). docs/torchstore.md lists what
differs.
"""

import atexit
from dataclasses import dataclass

from .. import _state_dict as sdmod
from .._errors import ConflictError, NotFoundError, WrongKindError
from .._store import Store
from .._store import _key as _checked
from .._store import TensorSlice as _Box
from .._tensors import Tensor
from . import _keys, _sessions, spmd  # strategy, transport, logging: bound by the imports below
from ._keys import encode as _enc
from .logging import init_logging
from .spmd import SPMDEnv
from .strategy import (ControllerStorageVolumes, HostStrategy, LocalRankStrategy,
                       SingletonStrategy, TorchStoreStrategy)
from .transport import TransportType

DEFAULT_TORCHSTORE_NAME = _sessions.DEFAULT_TORCHSTORE_NAME


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


# -- setup -------------------------------------------------------------------


def _store(store_name):
    return _sessions.store(store_name)


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
    lets other processes Store.connect to it); a transport given to the
    strategy is the store's ``transport``.

    With ``mesh``, a meshstore.actor ProcMesh (``this_host().spawn_procs``):
    the store spans its processes, as torchstore's does a Monarch mesh's.
    The controller (this process) holds the index; the strategy places the
    volumes in the processes (LocalRankStrategy: one in each), and the
    actors there reach it with the module's calls (any store name resolves
    to the one store their process joined). ``supervision``, a
    meshstore.actor.Supervision, says what a store process's death does
    (``Supervision("restart")`` with ``spawn_procs(max_relaunches=N)``: the
    process comes back and its volume rejoins; with
    ``controller_process=i`` the controller too, rebuilt from the
    volumes; docs/failover.md)."""
    supervision = options.pop("supervision", None)
    if supervision is not None:
        from ..actor import Supervision
        if not isinstance(supervision, Supervision):
            raise TypeError("initialize(supervision=...): a meshstore.actor.Supervision, "
                            f"not {type(supervision).__name__}")
        if mesh is None:
            raise ValueError("initialize(supervision=...): only with mesh=..., whose processes "
                             "it supervises")
    _sessions.claim(store_name)
    strategy = _strategy(strategy, num_storage_volumes)
    opts = {**strategy.options(), **options}
    if mesh is not None:
        native = getattr(mesh, "_native", None)
        if native is None:
            raise TypeError("initialize(mesh=...): a meshstore.actor ProcMesh "
                            f"(this_host().spawn_procs(...)), not {type(mesh).__name__}")
        if strategy.placement == "controller_colocated":
            opts.setdefault("num_volumes", num_storage_volumes)
        _sessions.sessions[store_name] = _sessions.Session(Store._spawn_on(native, opts, supervision))
        return
    if strategy.placement == "controller_colocated":
        opts.setdefault("num_volumes", num_storage_volumes)
    _sessions.sessions[store_name] = _sessions.Session(Store.embedded(**opts))


async def initialize_spmd(strategy=None, store_name=DEFAULT_TORCHSTORE_NAME, *, env=None,
                          **options):
    """Joins a torchrun / meshrun / mpirun / srun job and returns once every
    rank has (meshstore.torchstore.spmd.initialize)."""
    await spmd.initialize(strategy, store_name, env=env, **options)


async def shutdown(store_name=DEFAULT_TORCHSTORE_NAME, *, leave_timeout=60.0):
    """Closes the store (this process's part of it), which ends the loans of
    its direct_rdma puts. Under initialize_spmd every rank calls it: rank 0,
    whose process holds the controller, closes once the other ranks have
    (at most `leave_timeout` seconds). Idempotent."""
    session = _sessions.sessions.pop(store_name, None)
    if session is None:
        return
    session.lent.clear()
    try:
        if session.spmd:
            await spmd.leave(session, leave_timeout)
    finally:
        session.store.close()


def reset_client(store_name=DEFAULT_TORCHSTORE_NAME):
    """Forgets the store without closing it (torchstore compatibility)."""
    _sessions.sessions.pop(store_name, None)


async def client(store_name=DEFAULT_TORCHSTORE_NAME):
    """The meshstore.Store behind `store_name` (torchstore's client()): its
    calls are meshstore's (docs/python.md), with meshstore's key rules."""
    return _store(store_name)


@atexit.register
def _leave_at_exit():
    # A rank that ends without shutdown() still says it leaves, so that rank
    # 0's shutdown does not wait for it. Runs before meshstore closes the
    # stores (atexit is last in, first out).
    for name, session in list(_sessions.sessions.items()):
        if session.spmd and session.rank != 0 and not session.store.closed:
            try:
                session.store.delete(spmd.joined_key(session.rank)).result(5)
            except Exception:  # noqa: BLE001 (exiting: rank 0 times out instead)
                pass


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


def _key(key, op):
    return _enc(_checked(key, op))


async def put(key, value, store_name=DEFAULT_TORCHSTORE_NAME):
    """Stores a tensor (a DTensor's local shard, resharded on read) or an
    object (pickled; cloudpickle for what pickle cannot, such as instances
    of classes defined in a function) under `key`; any str is a key."""
    store = _store(store_name)
    key = _key(key, "put")
    if _is_dtensor(value):
        box, writer = _dtensor_box(value)
        if writer:
            await store.put(key, value.to_local(), slice=box)
        return
    await store.put(key, value)


async def put_batch(items, store_name=DEFAULT_TORCHSTORE_NAME):
    """Stores several tensors and objects ({key: value})."""
    await _store(store_name).put_batch({_key(k, "put_batch"): v for k, v in items.items()})


async def get(key, inplace_tensor=None, tensor_slice_spec=None,
              store_name=DEFAULT_TORCHSTORE_NAME):
    """The tensor or object under `key`; into `inplace_tensor` when given
    (returned itself; a DTensor receives its own shard); `tensor_slice_spec`
    reads one box."""
    store = _store(store_name)
    key = _key(key, "get")
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
    to read into (or None). All or nothing: one missing key raises
    KeyError."""
    store = _store(store_name)
    if isinstance(keys, dict):
        fresh = [k for k, t in keys.items() if t is None]
        into = {k: t for k, t in keys.items() if t is not None}
        if into:
            await store.get_into_batch({_key(k, "get_batch"): t for k, t in into.items()})
        values = await store.get_batch([_key(k, "get_batch") for k in fresh]) if fresh else []
        got = dict(zip(fresh, values))
        return {k: into[k] if k in into else _out(got[k]) for k in keys}
    keys = list(keys)
    values = await store.get_batch([_key(k, "get_batch") for k in keys])
    return {k: _out(v) for k, v in zip(keys, values)}


async def delete(key, *, store_name=DEFAULT_TORCHSTORE_NAME):
    """Removes `key`; KeyError when there is none. A state dict goes whole
    (a direct_rdma one's loan ends)."""
    session = _sessions.session(store_name)
    await session.store.delete(_key(key, "delete"))
    session.lent.pop(key, None)


async def delete_batch(keys, *, store_name=DEFAULT_TORCHSTORE_NAME):
    """Removes the keys that exist (missing ones are ignored); answers how
    many were."""
    session = _sessions.session(store_name)
    keys = list(keys)
    removed = await session.store.delete_batch(list(dict.fromkeys(
        _key(k, "delete_batch") for k in keys)))
    for key in keys:
        session.lent.pop(key, None)
    return removed


async def keys(prefix=None, *, store_name=DEFAULT_TORCHSTORE_NAME):
    """Keys under `prefix`, sorted: those whose first '.'-separated
    components are `prefix` (``keys("")``: "" and keys starting with '.');
    every key when `prefix` is None."""
    if prefix is not None:
        _checked(prefix, "keys")
    stored = await _store(store_name).keys(_keys.search_prefix(prefix))
    return _keys.listed(stored, prefix)


async def exists(key, store_name=DEFAULT_TORCHSTORE_NAME):
    """True when `key` exists (False while a sharded key is partly put)."""
    return await _store(store_name).exists(_key(key, "exists"))


# -- state dicts -------------------------------------------------------------------


async def put_state_dict(state_dict, key, store_name=DEFAULT_TORCHSTORE_NAME,
                         transfer_dtype=None, direct_rdma=False):
    """Stores a state dict under `key`, visible as a whole: a model's, an
    optimizer's (int keys, nested dicts, lists and tuples come back as they
    went in), or a dict of both. transfer_dtype (torch.bfloat16 or
    torch.float16) stores float32 tensors in it.

    direct_rdma=True lends the tensors instead of copying them: readers copy
    straight out of this process's memory (cma on this host, rdma or tcp
    from others, cuda-ipc for GPU tensors). The tensors stay lent until the
    next put_state_dict of `key` (which waits for reads still copying out of
    them) or shutdown(): as with torchstore, write them only when no reader
    is pulling (docs/torchstore.md, "direct_rdma"). With transfer_dtype, the
    cast tensors are copies, published by copy."""
    session = _sessions.session(store_name)
    store, stored = session.store, _key(key, "put_state_dict")
    if direct_rdma:
        previous = session.lent.get(key)
        # Cast tensors are copies whatever the mode: those go by copy.
        mode = "direct" if transfer_dtype is None else "auto"
        try:
            pub = await store.publish(stored, state_dict, mode=mode,
                                      transfer_dtype=transfer_dtype)
        except WrongKindError:
            # `key` holds a state dict put by copy: a put replaces it.
            await store.delete(stored)
            pub = await store.publish(stored, state_dict, mode=mode,
                                      transfer_dtype=transfer_dtype)
        session.lent[key] = pub
        if previous is not None:
            await previous.reclaim()  # retired by the publish: waits for its reads
        return
    await _end_loan(session, key)
    await store.put_state_dict(stored, state_dict, transfer_dtype=transfer_dtype)


# -- direct_rdma: this process's lent state dicts ------------------------------------


async def _end_loan(session, key):
    """Withdraws this process's direct version of `key`, if any, and waits
    for reads still copying out of its tensors."""
    pub = session.lent.pop(key, None)
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
    raise ConflictError(f"get_state_dict '{_keys.decode(key)}': each of 8 versions found was "
                        "retired before it could be read", 17, "conflict")


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
    if isinstance(node, tuple):
        return tuple(_to_torch_tree(v) for v in node)
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
    store, key = _store(store_name), _key(key, "get_state_dict")
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
    "SPMDEnv", "SingletonStrategy", "TensorSlice", "TorchStoreStrategy", "TransportType",
    "client", "delete", "delete_batch", "exists", "get", "get_batch", "get_state_dict",
    "init_logging", "initialize", "initialize_spmd", "keys", "put", "put_batch",
    "put_state_dict", "reset_client", "shutdown", "spmd",
]
