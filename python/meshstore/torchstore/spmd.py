"""torchstore.spmd: a store for every rank of a torchrun-style job.

``initialize`` (``meshstore.torchstore.initialize_spmd``) is called by every
rank. Rank 0 creates the store on MASTER_ADDR at MESHSTORE_PORT (default
MASTER_PORT + 1, next to torch.distributed's MASTER_PORT), the others
connect, each hosts the volumes its strategy places on it, and every rank
returns only once all ``world_size`` ranks have joined: a key one rank puts
right after is readable by every other.

``shutdown`` is collective too: each rank says it leaves, and rank 0, whose
process holds the controller, closes last, once every other rank has left
(or after ``leave_timeout``).
"""

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from datetime import timedelta

from .. import _errors as meshstore_errors
from .._store import Store
from . import _keys, _sessions
from .strategy import HostStrategy, LocalRankStrategy, TorchStoreStrategy

logger = logging.getLogger(__name__)

_JOINED = _keys.hidden("spmd.joined")
_GO = _keys.hidden("spmd.go")
_READY = _keys.hidden("spmd.ready")


@dataclass(frozen=True)
class SPMDEnv:
    """A torchrun-style environment (torchstore.spmd.SPMDEnv)."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    master_addr: str
    master_port: int

    @property
    def num_hosts(self):
        return self.world_size // self.local_world_size

    @property
    def group_rank(self):
        """This rank's host index (torchrun's GROUP_RANK)."""
        return self.rank // self.local_world_size

    @staticmethod
    def _parse(name, default=None):
        value = os.environ.get(name, default)
        if value is None:
            raise RuntimeError(f"SPMD TorchStore initialization requires the {name} env var")
        return value

    @classmethod
    def from_env(cls, *, master_addr=None, master_port=None):
        """Reads RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR
        and MASTER_PORT (the last two default to the arguments).
        RuntimeError names a variable that is missing; ValueError a
        world_size that local_world_size does not divide."""
        values = {}
        for field_name, var in (("rank", "RANK"), ("local_rank", "LOCAL_RANK"),
                                ("world_size", "WORLD_SIZE"),
                                ("local_world_size", "LOCAL_WORLD_SIZE")):
            text = cls._parse(var)
            try:
                values[field_name] = int(text)
            except ValueError:
                raise ValueError(f"{var}={text!r} is not an integer") from None
        world, local_world = values["world_size"], values["local_world_size"]
        if local_world <= 0 or world % local_world != 0:
            raise ValueError(f"world_size ({world}) must be divisible by "
                             f"local_world_size ({local_world})")
        addr = cls._parse("MASTER_ADDR", master_addr)
        port = cls._parse("MASTER_PORT", None if master_port is None else str(master_port))
        try:
            port = int(port)
        except ValueError:
            raise ValueError(f"MASTER_PORT={port!r} is not an integer") from None
        return cls(master_addr=addr, master_port=port, **values)

    def environ(self):
        """The launcher's variables that say this environment."""
        return {"RANK": str(self.rank), "LOCAL_RANK": str(self.local_rank),
                "WORLD_SIZE": str(self.world_size),
                "LOCAL_WORLD_SIZE": str(self.local_world_size),
                "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port)}


def _seconds(timeout, what):
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ValueError(f"{what} must be a positive number of seconds or a timedelta, "
                         f"got {timeout!r}")
    return float(timeout)


async def _poll(ready, deadline, spin=0.0):
    """Awaits `ready()` (a coroutine answering True when done) until it is:
    at once again for `spin` seconds, then backing off from 1 ms to 50 ms;
    False once `deadline` has passed."""
    pause, spin_until = 0.001, time.monotonic() + spin
    while not await ready():
        now = time.monotonic()
        if now >= deadline:
            return False
        if now < spin_until:
            await asyncio.sleep(0)
            continue
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.05)
    return True


def joined_key(rank):
    """The key that says `rank` is in the job (and, removed, that it left)."""
    return f"{_JOINED}.{rank}"


def _ranks(stored_keys):
    return {int(k.rsplit(".", 1)[1]) for k in stored_keys}


async def _gather(store, prefix, count, deadline, spin=0.0, first=0):
    """Waits until keys prefix.first .. prefix.{first+count-1} exist; the
    ranks missing at the deadline (none: all there)."""
    seen, wanted = set(), set(range(first, first + count))

    async def everyone():
        seen.update(_ranks(await store.keys(prefix)))
        return wanted <= seen

    if await _poll(everyone, deadline, spin):
        return []
    return sorted(wanted - seen)


async def _join(store, env, timeout):
    """Says this rank joined and returns once every rank has.

    Rank 0 waits until every rank has put its word, then publishes a version
    of GO; the others wait for it (a subscription, not a poll), put an
    acknowledgement without waiting for it, and return; rank 0 returns once
    every acknowledgement is in. Rank 0, whose process holds the controller
    and whose own calls are the quickest, so returns about when the others
    do rather than first. (Nothing orders one rank's first call against
    another rank's first put: that takes a barrier of the caller's, as with
    torchstore.)"""
    await store.put(joined_key(env.rank), b"")
    deadline = time.monotonic() + timeout
    if env.rank != 0:
        try:
            await store.get_next_state_dict_into(_GO, {"world_size": 0}, 0, timeout)
        except meshstore_errors.TimeoutError:
            raise RuntimeError(f"initialize_spmd: rank 0 did not see all {env.world_size} ranks "
                               f"join within {timeout:g} s") from None
        # Not awaited: rank 0 returns when it lands, while this rank goes on.
        store.put(f"{_READY}.{env.rank}", b"")
        return
    missing = await _gather(store, _JOINED, env.world_size, deadline)
    if missing:
        raise RuntimeError(f"initialize_spmd: ranks {missing} of {env.world_size} did not join "
                           f"within {timeout:g} s")
    await store.publish_state_dict(_GO, {"world_size": env.world_size})
    missing = await _gather(store, _READY, env.world_size - 1, deadline, spin=0.05, first=1)
    if missing:
        raise RuntimeError(f"initialize_spmd: ranks {missing} of {env.world_size} did not see "
                           f"every rank join within {timeout:g} s")


async def initialize(strategy=None, store_name=_sessions.DEFAULT_TORCHSTORE_NAME, *, env=None,
                     rendezvous_timeout=timedelta(seconds=120), **options):
    """Joins a torchrun / meshrun / mpirun / srun job; returns once every
    rank has joined. Volumes go where ``strategy`` puts them
    (LocalRankStrategy, the default: one per rank; HostStrategy: one per
    host). ``env`` (an SPMDEnv) replaces the launcher's variables.
    ``options`` are meshstore's store options; a transport given to the
    strategy is the store's ``transport``."""
    _sessions.claim(store_name)
    strategy = strategy if strategy is not None else LocalRankStrategy()
    if not isinstance(strategy, (LocalRankStrategy, HostStrategy)):
        if isinstance(strategy, TorchStoreStrategy):
            raise RuntimeError("SPMD mode requires an explicit HostStrategy or LocalRankStrategy, "
                               f"got {strategy!r}")
        raise TypeError(f"strategy must be a TorchStoreStrategy, got {type(strategy).__name__}")
    timeout = _seconds(rendezvous_timeout, "rendezvous_timeout")
    if env is None:
        env = SPMDEnv.from_env()
    else:
        os.environ.update(env.environ())
    opts = {**strategy.options(), **options}
    opts.setdefault("connect_timeout", timeout)
    store = Store.from_env(**opts)
    try:
        await _join(store, env, timeout)
    except BaseException:
        store.close()
        raise
    _sessions.sessions[store_name] = _sessions.Session(store, rank=env.rank, spmd=True)


async def leave(session, leave_timeout):
    """This rank's part of shutdown. Every rank says it leaves; rank 0,
    whose process holds the controller the others use, then waits until
    every other rank has, and the others wait until rank 0's controller is
    gone (as torchstore's ranks wait for its primary's teardown), so that a
    rank that goes on to initialize again never finds the old store. Each
    wait is at most `leave_timeout` seconds."""
    store = session.store
    deadline = time.monotonic() + leave_timeout
    try:
        await store.delete(joined_key(session.rank))
    except meshstore_errors.ConnectionError:
        return  # rank 0 is gone already (it saw this rank's word go)
    except Exception as e:  # noqa: BLE001 (the store is going anyway)
        logger.warning("torchstore shutdown: rank %d could not say it leaves: %s",
                       session.rank, e)
        return
    if session.rank != 0:
        async def controller_gone():
            try:
                await store.exists(_GO)
            except (meshstore_errors.ConnectionError, meshstore_errors.ClosedError):
                return True
            return False

        if not await _poll(controller_gone, deadline):
            logger.warning("torchstore shutdown: rank 0 had not closed the store after %g s",
                           leave_timeout)
        return
    left = []

    async def everyone_left():
        left[:] = sorted(_ranks(await store.keys(_JOINED)))
        return not left

    if not await _poll(everyone_left, deadline):
        logger.warning("torchstore shutdown: ranks %s had not left after %g s; closing the "
                       "store under them", left, leave_timeout)


__all__ = ["SPMDEnv", "initialize"]
