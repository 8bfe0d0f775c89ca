"""Channels: a port that actors send values to, and its receiver (Monarch's
``Channel``, ``Port``, ``PortReceiver``), on the C++ ``Port<T>`` and
``PortReceiver<T>`` (runtime/meshstore/mesh_values.hpp).

    port, receiver = Channel.open()
    workers.report.call(port).get()      # each member: port.send(value)
    first = receiver.recv().get(timeout=10)
"""

import pickle
import weakref

from .. import _native
from .._store import Future as _StoreFuture
from ._checks import count, seconds


class _Future(_StoreFuture):
    __slots__ = ()

    def get(self, timeout=None):
        """The result, waiting at most `timeout` seconds (None: as long as
        it takes); the built-in TimeoutError when the wait gives up."""
        return self.result(timeout)


class Port:
    """The sending end of a channel. Pass it to actors in a call's
    arguments (or return it from one): it pickles as a handle on the
    receiver's port, valid in every process of the mesh."""

    __slots__ = ("_native",)

    def __init__(self, native):
        self._native = native

    def send(self, value, timeout=30.0):
        """Sends `value` (pickled) to the receiver. The Future completes
        with None once the port took it. It raises ConnectionError when the
        port is closed or its receiver's process is gone: at once when this
        Port reached it before, else once that process fails to answer a
        lookup (at most 5 s); OutOfCapacityError when ``capacity`` values
        wait unreceived; TimeoutError after `timeout` seconds."""
        timeout = seconds("Port.send(): timeout", timeout)
        try:
            payload = pickle.dumps(value)
        except Exception as e:
            raise TypeError(f"Port.send(): the value must pickle: {e}") from e
        return _Future(self._native.send(payload, timeout))

    def exception(self, exc, timeout=30.0):
        """Sends `exc`, an exception (pickled), which the receiver's recv()
        raises instead of returning a value. The Future is send()'s."""
        if not isinstance(exc, BaseException):
            raise TypeError(f"Port.exception(): an exception, not {type(exc).__name__}")
        return self.send(_Raised(exc), timeout)

    def __reduce__(self):
        return (_port_from_bytes, (self._native.to_bytes(),))

    def __repr__(self):
        return "Port()"


class _Raised:
    """An exception on its way through a port (Port.exception)."""

    __slots__ = ("exc",)

    def __init__(self, exc):
        self.exc = exc

    def __reduce__(self):
        return (_Raised, (self.exc,))


def _received(payload):
    value = pickle.loads(payload)
    if isinstance(value, _Raised):
        raise value.exc
    return value


def _port_from_bytes(handle):
    return Port(_native.Port.from_bytes(handle))


_open = weakref.WeakSet()  # receivers to close before the runtime goes


class PortReceiver:
    """The receiving end of a channel: values in arrival order. Closing it
    (or dropping it) makes later sends fail."""

    __slots__ = ("_native", "__weakref__")

    def __init__(self, native):
        self._native = native
        _open.add(self)

    def recv(self):
        """A Future of the next value, at once when one waits; one sent
        with Port.exception() is raised instead (an endpoint's ActorError,
        for a send with a port). After ``close()``: the values that
        arrived before it, then ClosedError."""
        return _Future(self._native.recv(), _received)

    def close(self):
        """Later sends fail with ConnectionError; waiting recv()s raise
        ClosedError. Idempotent."""
        self._native.close()
        _open.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Channel:
    """Monarch's ``Channel``: ``Channel.open()`` makes a port and its
    receiver."""

    @staticmethod
    def open(capacity=1024):
        """(Port, PortReceiver) of a new port in this process, holding at
        most `capacity` values not yet received (a send past that raises
        OutOfCapacityError). Open it once the meshes it is passed to exist
        (``spawn_procs``, ``this_proc()``, ``from_env()``): it lives on this
        process's actor runtime, which they share."""
        capacity = count("Channel.open(): capacity", capacity, 1)
        receiver = PortReceiver(_native.PortReceiver.open(capacity))
        return Port(receiver._native.port()), receiver


def _close_all():
    # At exit, before the meshes stop: an open port's actor would keep its
    # runtime waiting.
    for r in list(_open):
        try:
            r.close()
        except Exception:  # noqa: BLE001 (exiting anyway)
            pass
