"""meshstore.actor's actors and actor meshes: Actor, endpoint, the call
context, futures, ValueMesh, endpoints and their adverbs, send, and
ActorMesh (re-exported by the package)."""

import asyncio
import concurrent.futures
import math
import threading

from .. import _errors
from .._store import Future as _StoreFuture
from . import _runtime
from ._ports import Port
from ._runtime import ActorError, Point

class Actor:
    """Base class of an actor: its ``@endpoint`` methods are what a mesh of
    it answers. One instance per member; its calls run on the process's
    actor loop (a sync endpoint one call at a time, ``async def`` ones
    interleaved at their awaits).

    ``__cleanup__(self, exc)`` (sync or ``async def``), if defined, runs
    once as the member stops: its mesh's process mesh stopping, its process
    ending, or supervision stopping its mesh. ``exc`` is None for a normal
    stop, else a RuntimeError saying why. Its exceptions are printed on
    the member's stderr. ``stop()`` and a worker's end wait for it, at
    most 4 s."""


def endpoint(fn):
    """Marks a method of an Actor as an endpoint (sync or ``async def``)."""
    fn._meshstore_endpoint = True
    return fn


def context():
    """The current call's Context (inside an endpoint or an actor's
    ``__init__``); raises RuntimeError elsewhere."""
    c = _runtime.current()
    if c is None:
        raise RuntimeError("context(): not inside an actor's endpoint or __init__")
    return c


def current_rank():
    """This actor's rank in its mesh, as a Point (``.rank``, ``["dim"]``)."""
    return context().actor_rank


def current_size():
    """This actor's mesh's sizes, by dimension (a dict)."""
    return dict(context().actor_size)


class Future(_StoreFuture):
    """An adverb's pending result: ``await`` it, or ``get(timeout=None)``."""

    __slots__ = ()

    def get(self, timeout=None):
        """The result, waiting at most `timeout` seconds (None: as long as it
        takes); raises ActorError when an endpoint raised, meshstore.Error
        for a runtime failure (a member gone, the mesh stopped), or the
        built-in TimeoutError when the wait gives up."""
        return self.result(timeout)


class ValueMesh:
    """Every member's value of a ``call``, in member order, with the view's
    shape: ``values()``, ``items()`` (Point, value), ``item(**coords)``."""

    def __init__(self, dims, values):
        self._dims = list(dims)
        self._values = list(values)

    def __len__(self):
        return len(self._values)

    def __iter__(self):
        return iter(self._values)

    def __getitem__(self, i):
        return self._values[i]

    def values(self):
        return list(self._values)

    def items(self):
        names = [d for d, _ in self._dims]
        sizes = [s for _, s in self._dims]
        return [(Point(i, names, sizes), v) for i, v in enumerate(self._values)]

    def item(self, **coords):
        """The value at these coordinates (every dimension named once)."""
        names = {d for d, _ in self._dims}
        if set(coords) != names:
            raise ValueError(
                f"item(): name every dimension of {dict(self._dims)} once, got {coords}")
        index = 0
        for d, s in self._dims:
            c = coords[d]
            if not 0 <= c < s:
                raise IndexError(f"item(): {d}={c} outside [0, {s})")
            index = index * s + c
        return self._values[index]

    @property
    def extent(self):
        return dict(self._dims)

    def __repr__(self):
        return f"ValueMesh({dict(self._dims)}, {self._values})"


def _value(reply):
    ok, body = _runtime.decode(reply)
    if ok:
        return body
    raise ActorError(*body)


def _pack(args, kwargs, shm, receivers=0, port=None):
    try:
        return _runtime.pack(args, kwargs, shm, receivers, port)
    except Exception as e:
        raise TypeError(f"an endpoint's arguments must pickle: {e}") from e


def _after_unlink(segments, then):
    # The caller sees the call's value only once its segments are gone:
    # the done callback (below) unlinks them too, but on the completing
    # thread, which may run after a waiter woke.
    if not segments:
        return then

    def value(reply):
        _runtime.unlink(segments)
        return then(reply)
    return value


def _sent(send, segments):
    # send() makes the call; the arguments' segments go once it is done:
    # every receiver has mapped them by then (it answered, or it is gone).
    try:
        native_future = send()
    except BaseException:
        _runtime.unlink(segments)
        raise
    if segments:
        native_future.add_done_callback(lambda: _runtime.unlink(segments))
    return native_future


class _Stream:
    """Each member's value as it lands: ``for v in s`` or ``async for v in
    s``. An endpoint that raised ends the iteration with its ActorError."""

    def __init__(self, futures, segments):
        self._futures = futures
        self._segments = segments  # gone once the last value is out

    def _decode(self, i):
        return _value(self._futures[i].result())

    def __iter__(self):
        pending = {}
        done = concurrent.futures.Future
        for i, f in enumerate(self._futures):
            c = done()
            f.add_done_callback(lambda _f, c=c: c.set_result(None))
            pending[c] = i
        while pending:
            finished, _ = concurrent.futures.wait(
                list(pending), return_when=concurrent.futures.FIRST_COMPLETED)
            for c in finished:
                i = pending.pop(c)
                if not pending:
                    _runtime.unlink(self._segments)
                yield self._decode(i)

    async def __aiter__(self):
        async def one(i):
            await self._futures[i]
            return i
        tasks = [asyncio.ensure_future(one(i)) for i in range(len(self._futures))]
        try:
            left = len(tasks)
            for t in asyncio.as_completed(tasks):
                i = await t
                left -= 1
                if left == 0:
                    _runtime.unlink(self._segments)
                yield self._decode(i)
        finally:
            for t in tasks:
                t.cancel()


class Endpoint:
    """An endpoint of an actor mesh, with the adverbs: ``call``,
    ``call_one``, ``choose``, ``broadcast`` and ``stream``."""

    def __init__(self, mesh, name):
        self._mesh = mesh
        self._name = name

    def call(self, *args, **kwargs):
        """Every member of the view: a Future of a ValueMesh. Raises the
        first ActorError (by member) when an endpoint raised."""
        native = self._mesh._native
        dims = native.dims()
        payload, segments = _pack(args, kwargs, self._mesh._shm)

        def values(replies):
            out = []
            for ok, body in replies:
                if not ok:  # a runtime failure (a member gone): meshstore.Error
                    raise _errors.from_status(*body)
                out.append(_value(body))
            return ValueMesh(dims, out)

        return Future(_sent(lambda: native.call(self._name, payload), segments),
                      _after_unlink(segments, values))

    def call_one(self, *args, **kwargs):
        """The view's one member (invalid_argument for more than one)."""
        payload, segments = _pack(args, kwargs, self._mesh._shm)
        return Future(_sent(lambda: self._mesh._native.call_one(self._name, payload), segments),
                      _after_unlink(segments, _value))

    def choose(self, *args, **kwargs):
        """One member of the view, the least busy with choose() calls."""
        payload, segments = _pack(args, kwargs, self._mesh._shm)
        return Future(_sent(lambda: self._mesh._native.choose(self._name, payload), segments),
                      _after_unlink(segments, _value))

    def broadcast(self, *args, **kwargs):
        """Every member, fire and forget (an endpoint's error is dropped).
        Its large tensors go through shared memory on a host as a call's
        do; with no answer to say when, the last member to map a segment
        unlinks it."""
        self._send(args, kwargs, None, "all")

    def _send(self, args, kwargs, port, selection):
        # broadcast() and send(): fire and forget, to every member or one.
        native = self._mesh._native
        if selection == "choose":
            payload, segments = _pack(args, kwargs, self._mesh._shm, port=port)
            _sent(lambda: native.choose(self._name, payload), segments)
            return
        receivers = math.prod(n for _, n in native.dims())
        payload, segments = _pack(args, kwargs, self._mesh._shm, receivers, port)
        try:
            native.tell(self._name, payload)
        except BaseException:
            _runtime.unlink(segments)
            raise
        if segments:
            _runtime.forget_at_exit(segments)

    def stream(self, *args, **kwargs):
        """Every member's value as it lands (sync or async iteration)."""
        payload, segments = _pack(args, kwargs, self._mesh._shm)
        try:
            natives = self._mesh._native.requests(self._name, payload)
        except BaseException:
            _runtime.unlink(segments)
            raise
        if segments:
            left = [len(natives)]
            lock = threading.Lock()

            def one_done():
                with lock:
                    left[0] -= 1
                    last = left[0] == 0
                if last:
                    _runtime.unlink(segments)

            for f in natives:
                f.add_done_callback(one_done)
        return _Stream([_StoreFuture(f) for f in natives], segments)


def send(endpoint, args=(), kwargs=None, port=None, selection="all"):
    """Monarch's ``send``: calls `endpoint` (``mesh.method``) with `args`
    and `kwargs` on every member of its view (``selection="all"``) or on
    one, the least busy (``"choose"``), without waiting for anything. With
    `port` (a Port of ``Channel.open()``), each member sends its result
    there itself, not through this process: the receiver gets one value
    per member, or an endpoint's ActorError raised by its ``recv()``.
    Without one the results are dropped, as ``broadcast`` drops them."""
    if not isinstance(endpoint, Endpoint):
        raise TypeError(f"send(): the endpoint must be an actor mesh's endpoint "
                        f"(mesh.method), not {type(endpoint).__name__}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"send(): args must be a tuple or list, not {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"send(): kwargs must be a dict or None, not {type(kwargs).__name__}")
    if port is not None and not isinstance(port, Port):
        raise TypeError(f"send(): port must be a meshstore.actor.Port or None, "
                        f"not {type(port).__name__}")
    if selection not in ("all", "choose"):
        raise ValueError(f"send(): selection must be 'all' or 'choose', not {selection!r}")
    endpoint._send(tuple(args), dict(kwargs or {}), port, selection)


class ActorMesh:
    """A mesh of actors of one class: its endpoints are attributes
    (``mesh.incr.call_one()``); ``slice(**dims)`` views part of it."""

    def __init__(self, native, cls, name, shm):
        self._native = native
        self._cls = cls
        self._name = name
        self._shm = shm  # its members share this host: tensors go through shared memory

    def __getattr__(self, name):
        attr = getattr(self._cls, name, None)
        if attr is None or not getattr(attr, "_meshstore_endpoint", False):
            raise AttributeError(f"{self._cls.__name__} has no endpoint '{name}'")
        return Endpoint(self, name)

    @property
    def size(self):
        return self._native.size

    def __len__(self):
        return self._native.size

    @property
    def extent(self):
        return dict(self._native.dims())

    def slice(self, **dims):
        """A view: ``slice(hosts=1)`` (an int drops the dimension),
        ``slice(gpus=slice(0, 2))`` or with a step."""
        return ActorMesh(self._native.slice(_selects(dims)), self._cls, self._name, self._shm)

    def __repr__(self):
        return f"<ActorMesh '{self._name}' of {self._cls.__name__} {self.extent}>"


def _selects(dims):
    out = []
    for d, sel in dims.items():
        if isinstance(sel, int):
            out.append((d, sel))
        elif isinstance(sel, slice):
            start = 0 if sel.start is None else sel.start
            if sel.stop is None:
                raise ValueError(f"slice({d}=...): give the slice's end")
            out.append((d, start, sel.stop, 1 if sel.step is None else sel.step))
        else:
            raise TypeError(f"slice({d}=...): an int or a slice, not {type(sel).__name__}")
    return out
