"""The process's side of Python actors: the actor loop that runs every
endpoint call, the context an endpoint sees, and the replies' encoding.

The C++ member of a Python actor (python/src/actor_bindings.cpp) calls
`run` on a runtime thread, with the GIL; `run` only posts the call to the
actor loop, an asyncio loop on a thread of its own, and returns. A sync
endpoint runs on that loop thread, one call at a time; an async one runs
as a task on it, so several may be in flight at once. Either way the
reply goes back through `complete(bytes)`.
"""

import asyncio
import atexit
import contextvars
import fcntl
import importlib
import inspect
import io
import itertools
import mmap
import os
import pickle
import sys
import threading
import traceback

_VALUE, _ERROR = b"V", b"E"


class ActorError(Exception):
    """An endpoint raised: ``rank`` (the rank, in its mesh, of the member
    whose endpoint raised, whichever adverb reached it),
    ``exception_type`` (the name of the exception's type), ``message`` and
    ``remote_traceback`` (the endpoint's traceback, as text)."""

    def __init__(self, rank, exception_type, message, remote_traceback):
        super().__init__(
            f"rank {rank}: {exception_type}: {message}\n"
            f"--- the endpoint's traceback ---\n{remote_traceback}")
        self.rank = rank
        self.exception_type = exception_type
        self.message = message
        self.remote_traceback = remote_traceback

    def __reduce__(self):  # it crosses processes on a port (send(..., port=))
        return (ActorError, (self.rank, self.exception_type, self.message, self.remote_traceback))

# Arguments: a CPU tensor of at least this many bytes travels in a shared
# memory segment of its own, not in the pickle (between processes of one
# host): one copy in, mapped (copy-on-write) on the other side. Below it,
# a segment's create, map and unlink cost more than the bytes' copy
# through the message.
SHM_MIN_BYTES = 64 << 10
_SHM_DIR = "/dev/shm/"
_SHM_KIND = "meshstore.shm"
_segment_ids = itertools.count()
# What the argument pickler did in this process (tests read it).
stats = {"tensors_in_shm": 0, "bytes_in_shm": 0}
# Whether this process is a worker of spawn_procs (set by _worker.main).
in_worker = False


class _ArgPickler(pickle.Pickler):
    """Pickles an endpoint's arguments; large CPU tensors go to segments
    (named in `segments`, which the caller unlinks once the call is done).
    With `receivers` (a broadcast: no answer says when a segment may go),
    each segment counts the receivers left after the tensor's bytes, and
    the last to map it unlinks it."""

    def __init__(self, buf, segments, receivers=0):
        super().__init__(buf, protocol=pickle.HIGHEST_PROTOCOL)
        self.segments = segments
        self.receivers = receivers

    def persistent_id(self, obj):
        torch = sys.modules.get("torch")
        if (torch is None or not isinstance(obj, torch.Tensor) or obj.device.type != "cpu"
                or obj.is_sparse or obj.element_size() * obj.numel() < SHM_MIN_BYTES):
            return None
        from .. import _native
        t = obj.detach().contiguous()
        nbytes = t.element_size() * t.numel()
        name = f"{_native.shm_prefix()}arg{next(_segment_ids)}"
        fd = os.open(_SHM_DIR + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        self.segments.append(_SHM_DIR + name)
        try:
            # write(), not a mapping: tmpfs allocates the pages without a
            # fault each (half the time of a copy into a fresh mapping, on
            # the reference VM: 23 against 47 ms for 64 MiB).
            data = memoryview(t.reshape(-1).view(torch.uint8).numpy())
            done = 0
            while done < nbytes:
                done += os.pwrite(fd, data[done:], done)
            if self.receivers:
                os.pwrite(fd, self.receivers.to_bytes(8, "little"), nbytes)
        finally:
            os.close(fd)
        stats["tensors_in_shm"] += 1
        stats["bytes_in_shm"] += nbytes
        return (_SHM_KIND, name, str(t.dtype).rsplit(".", 1)[1], tuple(t.shape), nbytes,
                bool(self.receivers))


class _ArgUnpickler(pickle.Unpickler):
    """The other side: a segment's tensor, mapped copy-on-write (the
    endpoint may write to it; no other receiver sees that)."""

    def persistent_load(self, pid):
        kind, name, dtype, shape, nbytes, counted = pid
        if kind != _SHM_KIND or "/" in name:
            raise pickle.UnpicklingError(f"unknown argument reference {kind!r}")
        torch = importlib.import_module("torch")
        fd = os.open(_SHM_DIR + name, os.O_RDWR if counted else os.O_RDONLY)
        try:
            m = mmap.mmap(fd, nbytes, flags=mmap.MAP_PRIVATE,
                          prot=mmap.PROT_READ | mmap.PROT_WRITE)
            if counted:
                _count_receiver(fd, _SHM_DIR + name, nbytes)
        finally:
            os.close(fd)
        return torch.frombuffer(m, dtype=getattr(torch, dtype)).reshape(shape)


def _count_receiver(fd, path, at):
    """One receiver of a broadcast's segment has it mapped: the count after
    the bytes (at `at`) goes down, under the file's lock; the last unlinks
    the segment (its mappings keep the memory)."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        left = int.from_bytes(os.pread(fd, 8, at), "little") - 1
        os.pwrite(fd, max(left, 0).to_bytes(8, "little"), at)
        if left <= 0:
            unlink([path])
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def pack(args, kwargs, shm, receivers=0, port=None):
    """(payload, segments): the pickled arguments, and the segments to
    unlink once every receiver answered (none without `shm`). With
    `receivers` (a broadcast), the last of that many receivers unlinks each
    segment; the caller unlinks at exit those still there (a receiver that
    died first: `forget_at_exit`). With `port`, each member sends the
    endpoint's result there (`send(..., port=)`)."""
    segments = []
    buf = io.BytesIO()
    call = (args, kwargs) if port is None else (args, kwargs, port)
    try:
        if shm:
            _ArgPickler(buf, segments, receivers).dump(call)
        else:
            pickle.dump(call, buf, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:
        unlink(segments)
        raise
    return buf.getvalue(), segments


def unlink(segments):
    for path in segments:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


# A broadcast's segments, which their receivers unlink: those a receiver
# never mapped (it died first) go when this process exits.
_broadcast_segments = set()
_broadcast_lock = threading.Lock()


def forget_at_exit(segments):
    with _broadcast_lock:
        # Bounded: those already unlinked by their receivers go from the set.
        if len(_broadcast_segments) > 1024:
            for path in [p for p in _broadcast_segments if not os.path.exists(p)]:
                _broadcast_segments.discard(path)
        _broadcast_segments.update(segments)


@atexit.register
def _unlink_broadcast_segments():
    with _broadcast_lock:
        unlink(list(_broadcast_segments))
        _broadcast_segments.clear()

_loop = None
_loop_thread = None
_loop_lock = threading.Lock()


def actor_loop():
    """The process's actor loop, started on first use (a daemon thread)."""
    global _loop, _loop_thread
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="meshstore-actors", daemon=True)
            thread.start()
            _loop, _loop_thread = loop, thread
        return _loop


@atexit.register
def stop_loop(timeout=5.0):
    """Stops the actor loop and waits (at most `timeout` s) for its thread,
    once the members' __cleanup__ calls under way ended (at most
    CLEANUP_TIMEOUT s). At exit, before the interpreter finalizes: a daemon
    thread that ran torch code and is ended by finalization instead
    unwinds through torch's thread-local tensors, which need the GIL, and
    the process aborts ("terminate called without an active exception")."""
    global _loop, _loop_thread
    wait_for_cleanups()
    with _loop_lock:
        loop, thread = _loop, _loop_thread
        _loop = _loop_thread = None
    if loop is None:
        return
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout)
    if not thread.is_alive():
        loop.close()


# Monarch's __cleanup__ calls posted and not yet ended, and how long
# ProcMesh.stop() and a process's end wait for them.
CLEANUP_TIMEOUT = 4.0
_cleanups = 0
_cleanups_ended = threading.Condition()


def cleanup(instance, why):
    """Called by the runtime (GIL held) as a member stops: posts its
    __cleanup__(exc) to the actor loop (exc None for a normal stop, else a
    RuntimeError saying why). Nothing once the loop is gone."""
    global _cleanups
    if getattr(type(instance), "__cleanup__", None) is None:
        return
    with _loop_lock:
        loop = _loop
    if loop is None:
        return
    with _cleanups_ended:
        _cleanups += 1
    try:
        loop.call_soon_threadsafe(_run_cleanup, instance, why)
    except RuntimeError:  # the loop closed meanwhile
        _cleanup_ended()


def _cleanup_ended():
    global _cleanups
    with _cleanups_ended:
        _cleanups -= 1
        _cleanups_ended.notify_all()


def wait_for_cleanups(timeout=None):
    """Waits (at most `timeout` s, CLEANUP_TIMEOUT by default) until every
    __cleanup__ posted has ended; never on the actor loop itself."""
    if threading.current_thread() is _loop_thread:
        return
    with _cleanups_ended:
        _cleanups_ended.wait_for(
            lambda: _cleanups == 0, CLEANUP_TIMEOUT if timeout is None else timeout)


def _cleanup_failed(instance, exc):
    me = getattr(instance, "_meshstore_member", None)
    rank = me[0].rank if me is not None else "?"
    print(f"meshstore.actor: rank {rank}: {type(instance).__name__}.__cleanup__ raised:\n"
          f"{_traceback(exc)}", file=sys.stderr, flush=True)


def _run_cleanup(instance, why):
    ctx = contextvars.copy_context()
    member = getattr(instance, "_meshstore_member", None)
    if member is not None:
        me, size = member
        ctx.run(_context.set, Context(me, size, me, size))
    ctx.run(_instance.set, instance)
    try:
        result = ctx.run(instance.__cleanup__, None if why is None else RuntimeError(why))
    except BaseException as e:  # noqa: BLE001 (reported; the stop goes on)
        _cleanup_failed(instance, e)
        _cleanup_ended()
        return
    if not inspect.isawaitable(result):
        _cleanup_ended()
        return

    async def awaited():
        try:
            await result
        except BaseException as e:  # noqa: BLE001 (as above)
            _cleanup_failed(instance, e)
        finally:
            _cleanup_ended()
    asyncio.get_running_loop().create_task(awaited(), context=ctx)


class Point:
    """A rank in a mesh with its coordinates: `rank`, and `point["dim"]` (or
    `point.coords`) for the coordinate in each dimension."""

    __slots__ = ("rank", "coords")

    def __init__(self, rank, dims, sizes):
        self.rank = rank
        coords = {}
        rest = rank
        stride = 1
        for s in sizes:
            stride *= s
        for d, s in zip(dims, sizes):
            stride //= s if s > 0 else 1
            coords[d] = rest // stride if stride > 0 else 0
            rest -= coords[d] * stride
        self.coords = coords

    def __getitem__(self, dim):
        return self.coords[dim]

    def __int__(self):
        return self.rank

    def __eq__(self, other):
        if isinstance(other, Point):
            return self.rank == other.rank and self.coords == other.coords
        return self.rank == other

    def __hash__(self):
        return hash(self.rank)

    def __repr__(self):
        return f"Point({self.rank}, {self.coords})"


class Context:
    """What an endpoint sees of its call (`context()`): the actor's own rank
    in its mesh (`actor_rank`, a Point) and the message's rank in the view
    it was sent to (`message_rank`, a Point of that view)."""

    __slots__ = ("actor_rank", "actor_size", "message_rank", "message_size")

    def __init__(self, actor_rank, actor_size, message_rank, message_size):
        self.actor_rank = actor_rank
        self.actor_size = actor_size
        self.message_rank = message_rank
        self.message_size = message_size


_context = contextvars.ContextVar("meshstore_actor_context", default=None)
_instance = contextvars.ContextVar("meshstore_actor_instance", default=None)


def current():
    return _context.get()


def current_instance():
    """The actor whose endpoint (or __init__) runs, or None."""
    return _instance.get()


def construct(cls, rank, dims, sizes, args, kwargs):
    """Makes member `rank`'s instance, with its context set for __init__."""
    me = Point(rank, dims, sizes)
    size = dict(zip(dims, sizes))
    ctx = contextvars.copy_context()
    ctx.run(_context.set, Context(me, size, me, size))
    inst = ctx.run(cls, *args, **kwargs)
    inst._meshstore_member = (me, size)  # what its endpoints' context says of it
    return inst


def construct_here(made_as, rank, complete):
    """In a worker (GIL held, on a runtime thread): makes member `rank`'s
    instance from the pickled (class, args, kwargs, dims, sizes) on the
    actor loop, then calls complete(instance or None, reply). A member
    that supervision restarts is made here again from the same bytes."""
    actor_loop().call_soon_threadsafe(_construct, made_as, rank, complete)


def _construct(made_as, rank, complete):
    try:
        cls, args, kwargs, dims, sizes = pickle.loads(made_as)
        inst = construct(cls, rank, list(dims), list(sizes), args, kwargs)
    except BaseException as e:  # noqa: BLE001 (the spawn fails with it)
        complete(None, _error_reply(e, rank))
        return
    complete(inst, _value_reply(class_name(cls), rank))


def class_name(cls):
    """What a worker's member answers to init: its class, by name (the
    controller's script is __mp_main__ in a worker, __main__ there)."""
    module = "__main__" if cls.__module__ == "__mp_main__" else cls.__module__
    return f"{module}.{cls.__qualname__}"


def _traceback(exc):
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _error_reply(exc, rank):
    # With the member's rank: the caller of choose() does not know which
    # member answered.
    return _ERROR + pickle.dumps((rank, type(exc).__name__, str(exc), _traceback(exc)))


def _value_reply(value, rank):
    try:
        return _VALUE + pickle.dumps(value)
    except Exception as e:  # noqa: BLE001 (the caller learns why)
        return _error_reply(TypeError(f"the endpoint's result cannot be pickled: {e}"), rank)


class _Outcome:
    """Where a call's outcome goes: the caller's answer (`complete`), and,
    for a send with a port, the port: the endpoint's value, or its
    ActorError, which the receiver's recv() raises."""

    __slots__ = ("complete", "rank", "port", "what")

    def __init__(self, complete, rank, port=None, what=""):
        self.complete = complete
        self.rank = rank
        self.port = port
        self.what = what

    def value(self, value):
        if self.port is None:
            self.complete(_value_reply(value, self.rank))
            return
        try:
            sent = self.port.send(value)
        except TypeError as e:  # the value does not pickle: the port hears why
            sent = self.port.exception(ActorError(
                self.rank, "TypeError", f"the endpoint's result cannot be pickled: {e}", ""))
        self._watch(sent)
        self.complete(_value_reply(None, self.rank))

    def error(self, exc):
        if self.port is not None:
            self._watch(self.port.exception(
                ActorError(self.rank, type(exc).__name__, str(exc), _traceback(exc))))
        self.complete(_error_reply(exc, self.rank))

    def task(self, task):
        if task.cancelled():
            self.error(asyncio.CancelledError("the endpoint's task was cancelled"))
        elif task.exception() is not None:
            self.error(task.exception())
        else:
            self.value(task.result())

    def _watch(self, sent):
        # An undeliverable result comes back to its sender: this member,
        # which has no caller waiting, says so on its stderr.
        def check(f):
            e = f.exception()
            if e is not None:
                print(f"meshstore.actor: rank {self.rank}: {self.what}'s result could not be "
                      f"sent to its port: {e}", file=sys.stderr, flush=True)
        sent.add_done_callback(check)


def run(instance, rank, msg_rank, dims, sizes, endpoint, payload, complete):
    """Called by the runtime (GIL held): posts the call to the actor loop."""
    actor_loop().call_soon_threadsafe(
        _start, instance, rank, msg_rank, dims, sizes, endpoint, payload, complete)


def _start(instance, rank, msg_rank, dims, sizes, endpoint, payload, complete):
    ctx = contextvars.copy_context()
    outcome = _Outcome(complete, rank)
    try:
        member = getattr(instance, "_meshstore_member", None)
        me, my_size = member if member is not None else (Point(rank, [], []), {})
        ctx.run(_context.set, Context(
            me, my_size, Point(msg_rank, dims, sizes), dict(zip(dims, sizes))))
        ctx.run(_instance.set, instance)
        call = _ArgUnpickler(io.BytesIO(payload)).load()
        if len(call) > 2:
            outcome.port, outcome.what = call[2], f"{type(instance).__name__}.{endpoint}"
        method = getattr(type(instance), endpoint, None)
        if method is None or not getattr(method, "_meshstore_endpoint", False):
            raise AttributeError(
                f"{type(instance).__name__} has no endpoint '{endpoint}'")
        result = ctx.run(getattr(instance, endpoint), *call[0], **call[1])
    except BaseException as e:  # noqa: BLE001 (the caller gets it)
        outcome.error(e)
        return
    if inspect.isawaitable(result):
        async def awaited():
            return await result
        task = asyncio.get_running_loop().create_task(awaited(), context=ctx)
        task.add_done_callback(outcome.task)
    else:
        outcome.value(result)


def decode(reply):
    """(True, value) or (False, (member rank, type name, message, traceback))."""
    kind, body = reply[:1], reply[1:]
    return kind == _VALUE, pickle.loads(body)
