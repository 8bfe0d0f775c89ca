"""An in-process stand-in for monarch.actor, enough for torchstore's tests
to drive meshstore.torchstore: each "actor" of a mesh is an object in the
test's own process, with its rank.

What this does not give, and what a test relying on it cannot show here:
separate processes (each rank's own LOCAL_RANK, its own client and volume),
and values crossing a process boundary. Tests that need those wait for
meshstore's Python actors (docs/torchstore.md, "What differs from torchstore").
"""

import asyncio
import contextvars
from dataclasses import dataclass

_rank = contextvars.ContextVar("monarch_stand_in_rank", default=0)


@dataclass(frozen=True)
class Point:
    """A member's place in its mesh."""

    rank: int


def current_rank():
    """The rank of the actor whose constructor or endpoint is running."""
    return Point(_rank.get())


class Actor:
    """Base class of an actor type."""


class _Endpoint:
    def __init__(self, fn):
        self.fn = fn


def endpoint(fn):
    """Marks an async method as callable through a mesh."""
    return _Endpoint(fn)


class _ValueMesh(list):
    """[(Point, value)] of a call, in rank order."""


class _Port:
    def __init__(self, mesh, name):
        self._mesh, self._name = mesh, name

    async def call(self, *args, **kwargs):
        return _ValueMesh(await asyncio.gather(
            *(self._mesh._call(rank, self._name, args, kwargs) for rank in self._mesh._ranks)))

    async def call_one(self, *args, **kwargs):
        if len(self._mesh._ranks) != 1:
            raise ValueError(f"call_one on a mesh of {len(self._mesh._ranks)} actors")
        return (await self.call(*args, **kwargs))[0][1]


class _ActorMesh:
    def __init__(self, actors, ranks):
        self._actors, self._ranks = actors, ranks

    async def _call(self, rank, name, args, kwargs):
        token = _rank.set(rank)
        try:
            fn = getattr(type(self._actors[rank]), name).fn
            return Point(rank), await fn(self._actors[rank], *args, **kwargs)
        finally:
            _rank.reset(token)

    def slice(self, **dims):
        (index,) = dims.values()
        return _ActorMesh(self._actors, [self._ranks[index]])

    def __getattr__(self, name):
        if isinstance(getattr(type(self._actors[self._ranks[0]]), name, None), _Endpoint):
            return _Port(self, name)
        raise AttributeError(name)


async def spawn_actors(num, actor_cls, name, **kwargs):
    """torchstore.utils.spawn_actors: `num` actors of `actor_cls`."""
    actors = {}
    for rank in range(num):
        token = _rank.set(rank)
        try:
            actors[rank] = actor_cls(**kwargs)
        finally:
            _rank.reset(token)
    return _ActorMesh(actors, list(range(num)))
