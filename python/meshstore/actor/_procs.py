"""meshstore.actor's process meshes: ProcMesh (spawn, get_or_spawn),
this_proc, local_procs, from_env, HostMesh (this_host, hosts), the named
singletons of get_or_spawn_controller, and where a mesh's failures go
(re-exported by the package)."""

import asyncio
import atexit
import inspect
import json
import os
import pickle
import sys
import threading
import weakref

from .. import _errors, _native
from . import _checks, _runtime
from ._mesh import Actor, ActorMesh, Future, _selects, _value
from ._ports import _close_all as _close_ports
from ._supervision import Supervision

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
    hook = getattr(sys.modules[__package__], "unhandled_fault_hook")
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
