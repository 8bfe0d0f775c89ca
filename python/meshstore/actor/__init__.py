"""Actor meshes from Python, with Monarch's names (``monarch.actor``), on
meshstore's C++ runtime (docs/python-actors.md).

    from meshstore.actor import Actor, endpoint, this_proc

    class Counter(Actor):
        def __init__(self, start):
            self.n = start

        @endpoint
        def incr(self, by=1):
            self.n += by
            return self.n

    counters = this_proc().spawn("counters", Counter, 0)
    counters.incr.call_one(5).get()          # 5

Worker processes on this host: ``this_host().spawn_procs(per_host={"gpus":
2})``; on several hosts through ``meshstore agent``: ``hosts([...])``; every
member in this process: ``this_proc()``, ``local_procs(...)``. A mesh's
failures go to the actor that spawned it (``__supervise__``, run on the
actor loop), else to ``unhandled_fault_hook``.
"""

import asyncio
import atexit
import concurrent.futures
import inspect
import json
import math
import os
import pickle
import sys
import threading
import weakref

from .. import _errors, _native
from .._store import Future as _StoreFuture
from . import _checks, _runtime
from ._runtime import ActorError, Context, Point
from ._ports import Channel, Port, PortReceiver
from ._ports import _close_all as _close_ports
from ._supervision import Supervision

__all__ = [
    "Actor", "ActorError", "ActorMesh", "Channel", "Context", "Endpoint", "Future", "HostMesh",
    "MeshFailure", "Point", "Port", "PortReceiver", "ProcMesh", "Supervision", "ValueMesh",
    "context", "current_rank", "current_size", "endpoint", "from_env", "get_or_spawn_controller",
    "hosts", "local_procs", "send", "this_host", "this_proc", "unhandled_fault_hook",
]


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


def unhandled_fault_hook(failure):
    """Called with a failure no supervisor handled (a dict: mesh, rank,
    why). The default prints it and ends this process, as Monarch's does;
    replace ``meshstore.actor.unhandled_fault_hook`` to do otherwise (a
    truthy answer means handled)."""
    print(f"meshstore.actor: unhandled failure of rank {failure['rank']} of mesh "
          f"'{failure['mesh']}': {failure['why']}", file=sys.stderr, flush=True)
    os._exit(1)


class MeshFailure(dict):
    """A member of an actor mesh failed: ``failure["mesh"]`` (its name),
    ``["rank"]`` and ``["why"]`` (the runtime's reason), also as
    attributes."""

    __getattr__ = dict.__getitem__


class _Faults:
    """Where a process mesh's failures go: to the actor that spawned the
    mesh (its ``__supervise__(failure)``; truthy means handled), else, or
    when it does not handle it, to ``unhandled_fault_hook``."""

    def __init__(self):
        self.owners = {}  # mesh name -> the actor instance that spawned it

    def __call__(self, mesh, rank, why):
        # On a runtime thread, with the GIL: it answers whether the failure
        # was handled (False: the runtime ends this process).
        failure = MeshFailure(mesh=mesh, rank=rank, why=why)
        owner = self.owners.get(mesh)
        supervise = getattr(owner, "__supervise__", None)
        if supervise is None:
            return _to_the_hook(failure)
        # The owner decides on the actor loop, between its endpoints' calls,
        # as an actor handles any message; no runtime thread runs it or
        # waits for it. The runtime hears "taken" now; what the owner does
        # not handle goes to the hook from there.
        try:
            asyncio.run_coroutine_threadsafe(
                _supervise(supervise, failure), _runtime.actor_loop())
        except RuntimeError:  # the loop has stopped: the process is ending
            return _to_the_hook(failure)
        return True


def _to_the_hook(failure):
    hook = getattr(sys.modules[__name__], "unhandled_fault_hook")
    return bool(hook(failure))


async def _supervise(supervise, failure):
    why = failure["why"]
    try:
        handled = supervise(failure)
        if inspect.isawaitable(handled):
            handled = await handled
        if handled:
            return
    except Exception as e:  # noqa: BLE001 (the hook hears of it)
        failure["why"] = f"{why}; __supervise__ raised {e!r}"
    if not _to_the_hook(failure):
        # What the runtime does with a failure no one handled.
        print(f"meshstore.actor: rank {failure['rank']} of mesh '{failure['mesh']}' failed and "
              f"neither __supervise__ nor unhandled_fault_hook handled it: {failure['why']}",
              file=sys.stderr, flush=True)
        os._exit(1)


_live = weakref.WeakSet()


class ProcMesh:
    """Processes with a shape, to spawn actor meshes on. ``this_proc()``
    and ``local_procs(...)`` are meshes of this process."""

    def __init__(self, native, faults, same_host=True):
        self._native = native
        self._faults = faults
        self._same_host = same_host
        _live.add(self)

    @property
    def size(self):
        return self._native.size

    @property
    def extent(self):
        return dict(self._native.dims())

    def slice(self, **dims):
        return ProcMesh(self._native.slice(_selects(dims)), self._faults, self._same_host)

    def spawn(self, name, cls, *args, **kwargs):
        """An actor mesh `name` of `cls`, one member per process of this
        view, each made as ``cls(*args, **kwargs)`` (with its rank set for
        ``current_rank()``). ``spawn(Supervision(...), name, cls, ...)``
        says what a member's death does (the default: ``__supervise__``
        of the spawning actor, else ``unhandled_fault_hook``)."""
        supervision = None
        if isinstance(name, Supervision):
            if not args:
                raise TypeError("spawn(supervision, name, cls, *args): the actor class is missing")
            supervision, name, cls, args = name, cls, args[0], args[1:]
        if not isinstance(name, str) or not name:
            raise TypeError(f"spawn(): the mesh's name must be a non-empty str, not {name!r}")
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise TypeError(f"spawn(): {cls!r} is not a subclass of meshstore.actor.Actor")
        # Spawned from inside an actor's endpoint: that actor owns the mesh
        # and supervises it (__supervise__). Known before the first member
        # can fail; a name already spawned keeps its owner.
        owners = self._faults.owners
        added = name not in owners
        if added:
            owners[name] = _runtime.current_instance()
        try:
            return self._spawn(name, cls, args, kwargs,
                               supervision._native() if supervision else None)
        except BaseException:
            if added:
                owners.pop(name, None)
            raise

    def _spawn(self, name, cls, args, kwargs, supervision):
        dims = self._native.dims()
        names = [d for d, _ in dims]
        sizes = [s for _, s in dims]
        me = self._native.rank()
        if not self._native.is_local() and me < 0:
            return self._spawn_in_workers(name, cls, (cls, args, kwargs, names, sizes),
                                          supervision)
        # Every member made here (local), or, under from_env, this rank's
        # alone (the spawn is collective: each rank makes its own).
        instances = [None] * self._native.size
        for rank in range(self._native.size) if me < 0 else [me]:
            instances[rank] = _runtime.construct(cls, rank, names, sizes, args, kwargs)
        _runtime.actor_loop()
        return ActorMesh(self._native.spawn(name, instances, _runtime.run, supervision), cls,
                         name, self._same_host)

    def get_or_spawn(self, name, cls, *args, **kwargs):
        """The named singleton actor `name`, as an actor mesh of one member
        (extent ``{}``): the first call makes it, as ``cls(*args,
        **kwargs)``, on the first process of this view (under
        ``from_env()``, on rank 0, whichever rank calls first); every later
        call, from any thread or rank, gets that same actor and its
        arguments go unused. The class and its arguments must pickle (the
        member is made from them, as a worker's are). Raises ValueError
        when ``spawn`` made a mesh of that name, or it is a singleton of
        another class; the ActorError of an ``__init__`` that raised, at
        this call and every later one (the name stays taken)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"get_or_spawn(): the name must be a non-empty str, not {name!r}")
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise TypeError(f"get_or_spawn(): {cls!r} is not a subclass of meshstore.actor.Actor")
        try:
            made_as = pickle.dumps((cls, args, kwargs, [], []))
        except Exception as e:
            raise TypeError(f"get_or_spawn(): the class and its arguments must pickle: {e}") from e
        native = self._native.get_or_spawn_named(name, made_as)
        for ok, body in Future(native.init()).get():
            if not ok:
                raise _errors.from_status(*body)
            made = _value(body)  # raises the ActorError of a failed __init__
            if made != _runtime.class_name(cls):
                raise ValueError(f"get_or_spawn('{name}'): it is a singleton of {made}, "
                                 f"not {_runtime.class_name(cls)}")
        return ActorMesh(native, cls, name, self._same_host)

    @property
    def rank(self):
        """This process's rank in a mesh of from_env(); -1 for the others
        (this process is their controller, or every member)."""
        return self._native.rank()

    def _spawn_in_workers(self, name, cls, made, supervision):
        # The class, arguments and shape travel pickled, as the members'
        # spawn arguments (a restarted member is made again from them): the
        # class by reference, so the workers must import it (a module on
        # their path, or the controller's main script, which each worker
        # loads as __mp_main__).
        try:
            made_as = pickle.dumps(made)
        except Exception as e:
            raise TypeError(f"spawn(): the class and its arguments must pickle: {e}") from e
        native = self._native.spawn_named(name, made_as, supervision)
        # Each member answers once its __init__ ran.
        replies = Future(native.init()).get()
        for ok, body in replies:
            if not ok:
                raise _errors.from_status(*body)
            _value(body)  # raises the ActorError of a failed __init__
        return ActorMesh(native, cls, name, self._same_host)

    def pid(self, i):
        """The process id of member `i` of this view (-1 when unknown)."""
        return self._native.pid(i)

    def stop(self):
        """Stops every actor spawned here, and the processes started for
        it; their calls answer ClosedError. Returns once their
        ``__cleanup__`` ran (at most 4 s for this process's members; a
        worker process runs its own members' before it exits)."""
        self._native.stop()
        _runtime.wait_for_cleanups()

    @property
    def initialized(self):
        """Awaitable (and ``get()``-able): done once the processes are up,
        which they are once spawn_procs returned (and always for a mesh of
        this process)."""
        return _Ready()


class _Ready:
    def __await__(self):
        return None
        yield  # noqa: unreachable (makes this a generator)

    def get(self, timeout=None):
        return None


def from_env(*, tls_certificate=None, tls_key=None, tls_ca_file=None):
    """The ranks of a job a launcher started (torchrun, meshrun, mpirun,
    srun), each running this same script, as one process mesh (the C++
    ``ProcMesh::from_env``): shape {hosts: WORLD_SIZE / LOCAL_WORLD_SIZE,
    procs: LOCAL_WORLD_SIZE}, rank 0 holding the registry (MASTER_ADDR at
    MESHSTORE_MESH_PORT, default MASTER_PORT + 2). ``spawn`` on it is
    collective: every rank calls it, in the same order, and makes its own
    member; it returns once every rank's is in. Any rank may then call the
    mesh; a failure goes to rank 0's ``__supervise__`` or hook."""
    tls = HostMesh._tls(tls_certificate, tls_key, tls_ca_file, "from_env")
    faults = _Faults()
    native = _native.ProcMesh.from_env(faults, tls)
    one_host = all(n == 1 for d, n in native.dims() if d == "hosts")
    return ProcMesh(native, faults, same_host=one_host)


def local_procs(**shape):
    """A process mesh of this shape (``local_procs(gpus=4)``) whose every
    member is this process: each actor spawned on it is made here."""
    if not shape:
        raise ValueError("local_procs(): give at least one dimension, e.g. gpus=4")
    faults = _Faults()
    return ProcMesh(_native.ProcMesh.local(list(shape.items()), faults), faults)


class HostMesh:
    """Hosts to start processes on: ``this_host()`` is this one;
    ``hosts(agents)`` those whose ``meshstore agent`` runs at each address."""

    def __init__(self, agents=None, bind_host="127.0.0.1", advertise_host=""):
        self._agents = list(agents) if agents else None
        self._bind = (bind_host, advertise_host)

    @staticmethod
    def _tls(certificate, key, ca_file, caller="spawn_procs"):
        given = [f for f in (certificate, key, ca_file) if f]
        if not given:
            return []
        if len(given) != 3:
            raise ValueError(f"{caller}(): give tls_certificate, tls_key and tls_ca_file together")
        return [str(certificate), str(key), str(ca_file)]

    @property
    def extent(self):
        return {"hosts": len(self._agents) if self._agents else 1}

    def spawn_procs(self, per_host=None, bootstrap=None, *, max_relaunches=0,
                    relaunch_window=60.0, tls_certificate=None, tls_key=None, tls_ca_file=None):
        """Starts ``per_host`` worker processes on this host (``{"gpus": 4}``:
        a mesh of shape {gpus: 4}), each a Python interpreter running the
        C++ worker loop, and waits until they joined. ``bootstrap``, a
        function, runs first in every worker (module-level, so that it
        pickles by reference). Each worker's output comes back with its
        rank; the workers stop with ``stop()`` or when this process goes.
        With ``tls_certificate``, ``tls_key`` and ``tls_ca_file`` (PEM files,
        as the store takes them) every connection between this process and
        the workers, and between workers, is mutual TLS; the workers get the
        same files (docs/security.md). With ``max_relaunches=N`` a worker
        that dies is started again (same rank, bootstrap run again) at most
        N times within ``relaunch_window`` seconds; members of meshes
        spawned with ``Supervision("restart")`` come back in it, made
        again from their class and arguments."""
        per_host = dict(per_host or {"procs": 1})
        for d, n in per_host.items():
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"spawn_procs(): per_host[{d!r}] must be a positive int, not {n!r}")
        relaunch = _relaunch(max_relaunches, relaunch_window)
        env = [("MESHSTORE_ACTOR_SYSPATH", json.dumps([p for p in sys.path if p]))]
        main = sys.modules.get("__main__")
        main_file = getattr(main, "__file__", None)
        if main_file and getattr(main, "__spec__", None) is None:
            env.append(("MESHSTORE_ACTOR_MAIN", os.path.abspath(main_file)))
        if bootstrap is not None:
            env.append(("MESHSTORE_ACTOR_BOOTSTRAP", pickle.dumps(bootstrap).hex()))
        args = ["-m", "meshstore.actor._worker"]
        tls = self._tls(tls_certificate, tls_key, tls_ca_file)
        faults = _Faults()
        if self._agents:
            # Each agent starts its host's block of ranks: the mesh is
            # {hosts: len(agents), **per_host}.
            shape = [("hosts", len(self._agents))] + list(per_host.items())
            native = _native.ProcMesh.attach(
                self._agents, shape, sys.executable, args, env, faults, *self._bind, tls, relaunch)
            return ProcMesh(native, faults, same_host=False)
        native = _native.ProcMesh.launch(
            list(per_host.items()), sys.executable, args, env, faults, tls, relaunch)
        return ProcMesh(native, faults)


def _relaunch(max_relaunches, window):
    # spawn_procs's relaunch budget as the native launch takes it.
    budget = _checks.count("spawn_procs(): max_relaunches", max_relaunches, 0)
    window = _checks.seconds("spawn_procs(): relaunch_window", window)
    return (budget, int(round(window * 1000)))


def this_host():
    """This host, to start worker processes on (``spawn_procs``)."""
    return HostMesh()


def hosts(agents, bind_host="127.0.0.1", advertise_host=""):
    """The hosts where ``meshstore agent --listen HOST:PORT`` runs, one
    "HOST:PORT" each: ``spawn_procs(per_host=...)`` starts that many worker
    processes through each agent (the C++ ``ProcMesh::attach``), as a mesh
    {hosts: len(agents), **per_host}. The interpreter's path
    (sys.executable) and the controller's sys.path must exist on every
    host. The workers join this process at ``bind_host`` (an address of
    this host they reach; with a wildcard such as 0.0.0.0, give
    ``advertise_host``)."""
    agents = list(agents)
    if not agents or not all(isinstance(a, str) and ":" in a for a in agents):
        raise ValueError(f"hosts(): one or more 'HOST:PORT' agent addresses, not {agents!r}")
    return HostMesh(agents, bind_host, advertise_host)


_this = None
_this_lock = threading.Lock()


def this_proc():
    """This process as a mesh of one."""
    global _this
    with _this_lock:
        if _this is None:
            faults = _Faults()
            _this = ProcMesh(_native.ProcMesh.local([("procs", 1)], faults), faults)
        return _this


def get_or_spawn_controller(name, cls, *args, **kwargs):
    """Monarch's named singleton: the actor `name` of this process,
    ``this_proc().get_or_spawn(name, cls, *args, **kwargs)``, made by the
    first caller of any thread. Returns a done future of its actor mesh
    (``.get()`` or ``await``). Raises RuntimeError in a worker process of
    ``spawn_procs``: Monarch's controller lives in the process that started
    the workers, and an actor mesh cannot be sent to a worker yet; under
    ``from_env()``, ``procs.get_or_spawn`` makes one for every rank."""
    if _runtime.in_worker:
        raise RuntimeError(
            f"get_or_spawn_controller('{name}') in a worker process: the controller lives "
            "in the process that started the workers, and an actor mesh cannot be sent to "
            "a worker yet; get it there and call it from there")
    return _Done(this_proc().get_or_spawn(name, cls, *args, **kwargs))


class _Done:
    """A future that is already done (awaitable, and ``get()``-able)."""

    def __init__(self, value):
        self._value = value

    def __await__(self):
        return self._value
        yield  # noqa: unreachable (makes this a generator)

    def get(self, timeout=None):
        return self._value


@atexit.register
def _stop_all():
    # Before the interpreter goes: no runtime thread may wait for Python then.
    _close_ports()
    for p in list(_live):
        try:
            p.stop()
        except Exception:  # noqa: BLE001 (exiting anyway)
            pass
