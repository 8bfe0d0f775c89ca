"""meshstore.Store and meshstore.Future: the store's calls from Python."""

import asyncio
import atexit
import pickle
import threading
import weakref
from dataclasses import dataclass

from . import _native
from . import _state_dict as sdmod
from ._errors import CancelledError
from ._tensors import Tensor, export, is_tensor

_FORMAT_BYTES, _FORMAT_UTF8, _FORMAT_PICKLE = 0, 1, 2


def _wake(waiter):
    if not waiter.done():
        waiter.set_result(None)


class Future:
    """The pending result of a store call. Await it in asyncio, or block on
    ``result(timeout=None)``. The call runs whether or not anyone waits: a
    future dropped unawaited still completes, and the buffers it uses are
    kept alive until it does. Thread-safe."""

    __slots__ = ("_native", "_then", "__weakref__")

    def __init__(self, native, then=None):
        self._native = native
        self._then = then

    def done(self):
        """True once the call has completed (successfully or not)."""
        return self._native.done()

    def result(self, timeout=None):
        """The call's value, waiting at most `timeout` seconds (None: as long
        as it takes). Raises the call's meshstore.Error, or the built-in
        TimeoutError when the wait gives up (the call keeps running). The GIL
        is released while waiting."""
        value = self._native.result(timeout)
        return self._then(value) if self._then is not None else value

    def exception(self, timeout=None):
        """The call's exception, or None when it succeeded; raises the
        built-in TimeoutError when the wait gives up."""
        if not self._native.wait(timeout):
            raise _WaitTimeout(f"the call did not complete within {timeout} s")
        try:
            self.result()
        except Exception as e:  # noqa: BLE001 (handed to the caller)
            return e
        return None

    def add_done_callback(self, fn):
        """Calls fn(self) once the call completes: on the thread completing it
        (a store thread, with the GIL held), or at once when it has."""
        self._native.add_done_callback(lambda: fn(self))

    def cancel(self):
        """Cancels a put or get_into (put, put_batch, a put or get_into with
        a slice, get_into, get_into_batch). True when it stopped the call:
        the call then raises CancelledError, nothing of a put is visible, and
        the store no longer touches the tensor's memory. False when the call
        had completed or was committing (it then ends as it would have), or
        cannot be cancelled (every other call). Waits, with the GIL released,
        for copies already running (at most the store's request_timeout).
        Cancelling an asyncio task that awaits a store call cancels the
        call."""
        return self._native.cancel()

    def cancelled(self):
        """True when the call ended cancelled."""
        if not self._native.done():
            return False
        try:
            self._native.result(0)
        except CancelledError:
            return True
        except Exception:  # noqa: BLE001 (any other outcome: not cancelled)
            return False
        return False

    def __await__(self):
        if not self._native.done():
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()

            def wake():  # on a store thread, GIL held
                try:
                    loop.call_soon_threadsafe(_wake, waiter)
                except RuntimeError:
                    pass  # the loop is closed: nobody waits any more

            self._native.add_done_callback(wake)
            try:
                yield from waiter
            except asyncio.CancelledError:
                self.cancel()  # the task was cancelled: so is the call
                raise
        return self.result()

    def __repr__(self):
        return f"<meshstore.Future {'done' if self.done() else 'pending'}>"


_WaitTimeout = TimeoutError  # the built-in one: meshstore.TimeoutError is the store's


class _All:
    """A native-future stand-in for several: done when all are, the list of
    their values (the first error raised)."""

    __slots__ = ("_futs", "_lock", "_left", "_callbacks")

    def __init__(self, futs):
        self._futs = futs
        self._lock = threading.Lock()
        self._left = len(futs)
        self._callbacks = []
        for f in futs:
            f.add_done_callback(self._one_done)

    def _one_done(self, *_):
        with self._lock:
            self._left -= 1
            if self._left:
                return
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()

    def done(self):
        return all(f.done() for f in self._futs)

    def wait(self, timeout=None):
        return all(f._native.wait(timeout) for f in self._futs)

    def result(self, timeout=None):
        return [f.result(timeout) for f in self._futs]

    def add_done_callback(self, fn):
        with self._lock:
            if self._left > 0:
                self._callbacks.append(fn)
                return
        fn()


def _decode_object(pair):
    data, fmt = pair
    if fmt == _FORMAT_UTF8:
        return data.decode("utf-8")
    if fmt == _FORMAT_PICKLE:
        return pickle.loads(data)
    return data


def _value_out(v):
    return v if isinstance(v, Tensor) else _decode_object(v)


def _encode_object(obj):
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj), _FORMAT_BYTES
    if isinstance(obj, str):
        return obj.encode("utf-8"), _FORMAT_UTF8
    return sdmod.dumps(obj), _FORMAT_PICKLE


@dataclass(frozen=True)
class TensorSlice:
    """A box of a global tensor: its global shape, the offsets of its first
    element, and its own (local) shape. A shard put with ``put(key, shard,
    slice=...)`` covers this box; ``get(key, slice=...)`` reads one."""

    global_shape: tuple
    offsets: tuple
    local_shape: tuple

    def __post_init__(self):
        for f in ("global_shape", "offsets", "local_shape"):
            object.__setattr__(self, f, tuple(int(v) for v in getattr(self, f)))

    def _args(self):
        return list(self.global_shape), list(self.offsets), list(self.local_shape)


def _key(key, what):
    if not isinstance(key, str):
        raise TypeError(f"{what}: a key is a str, got {type(key).__name__}")
    return key


_open_stores = weakref.WeakSet()


@atexit.register
def _close_all():
    # Before the interpreter goes: no store thread may want the GIL after.
    for store in list(_open_stores):
        store.close()


class Store:
    """A meshstore tensor store. Every call returns a meshstore.Future at
    once; await it, or call .result(). Use Store.embedded(), Store.connect()
    or Store.from_env(), with the C++ StoreOptions as keyword arguments
    (durations in seconds; mutual TLS as tls_certificate, tls_key and
    tls_ca_file, which from_env also takes from MESHSTORE_TLS_*). Thread-safe. Close it (or use ``with``); open
    stores are closed at interpreter exit."""

    def __init__(self, native):
        self._s = native
        _open_stores.add(self)

    # -- creation ---------------------------------------------------------

    @classmethod
    def embedded(cls, **options):
        """A whole store inside this process."""
        return cls(_native.Store.embedded(options))

    @classmethod
    def connect(cls, address, **options):
        """Joins the store published at "HOST:PORT" (retrying up to
        connect_timeout seconds)."""
        return cls(_native.Store.connect(address, options))

    @classmethod
    def from_env(cls, **options):
        """A store for a launched rank (torchrun, meshrun, mpirun, srun): rank
        0 creates it on MASTER_ADDR at MESHSTORE_PORT (default MASTER_PORT +
        1), the other ranks connect."""
        return cls(_native.Store.from_env(options))

    @classmethod
    def _spawn_on(cls, native_procs, options, supervision=None):
        # A store across a meshstore.actor ProcMesh (torchstore's
        # initialize(mesh=...)): the C++ spawn_store, its meshes supervised
        # by `supervision` (a meshstore.actor.Supervision; None: the
        # ProcMesh's default).
        native_sup = supervision._native() if supervision is not None else None
        return cls(_native.Store.spawn_on(native_procs, options, native_sup))

    @classmethod
    def _of_this_worker(cls):
        # In a worker of a ProcMesh: the store its process joined (closed by
        # the process when it stops serving; close() here does nothing).
        return cls(_native.Store.of_this_worker())

    def close(self):
        """Stops the store; calls in flight end with ClosedError. Idempotent."""
        self._s.close()

    @property
    def closed(self):
        return self._s.closed

    @property
    def address(self):
        """"HOST:PORT" this store listens on, or "" when private."""
        return self._s.address

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- tensors and objects -----------------------------------------------

    def put(self, key, value, slice=None, replicas=None):  # noqa: A002 (torchstore's name)
        """Stores `value` under `key`: a tensor (anything with __dlpack__) is
        copied in; bytes and str are stored as themselves; any other object
        is pickled (by cloudpickle where pickle cannot: a class defined in
        a function). With `slice` (a TensorSlice), `value` is that box of a
        sharded tensor: the key appears once the shards cover it. With
        `replicas` (1 to 16), a tensor put whole is kept on that many
        volumes instead of the store's `replicas`."""
        _key(key, "put")
        if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool)):
            raise TypeError(f"put '{key}': replicas must be an int, got {type(replicas).__name__}")
        if is_tensor(value):
            src, as_bool = export(value, f"put '{key}'")
            if slice is not None:
                if replicas is not None:
                    raise ValueError(f"put '{key}': replicas are of keys put whole, not of a slice")
                return Future(self._s.put_shard(key, src, as_bool, *slice._args()))
            return Future(self._s.put(key, src, as_bool, -1 if replicas is None else replicas))
        if slice is not None:
            raise TypeError(f"put '{key}': a slice needs a tensor, got {type(value).__name__}")
        if replicas is not None:
            raise TypeError(f"put '{key}': replicas need a tensor, got {type(value).__name__}")
        data, fmt = _encode_object(value)
        return Future(self._s.put_object(key, data, fmt))

    def put_batch(self, items):
        """Stores several tensors ({key: tensor} or [(key, tensor)]); they
        become visible together. Objects among them are put one by one."""
        pairs = list(items.items()) if isinstance(items, dict) else list(items)
        tensors, objects = [], []
        for key, value in pairs:
            _key(key, "put_batch")
            if is_tensor(value):
                src, as_bool = export(value, f"put_batch '{key}'")
                tensors.append((key, src, as_bool))
            else:
                objects.append(self.put(key, value))
        futs = [Future(self._s.put_batch(tensors))] if tensors else []
        return Future(_All(futs + objects), lambda _: None)

    def get(self, key, slice=None):  # noqa: A002
        """The value under `key`: a meshstore.Tensor (torch.from_dlpack and
        numpy.from_dlpack share its bytes) or the object that was put. With
        `slice`, that box of the tensor. NotFoundError (a KeyError) when
        there is no such key."""
        _key(key, "get")
        if slice is not None:
            return Future(self._s.get_slice(key, *slice._args()))
        return Future(self._s.get(key), _value_out)

    def get_view(self, key):
        """The tensor under `key` without a copy where the store's memory is
        shared with this process: a read-only meshstore.Tensor (numpy.asarray
        gives a read-only array over it). Elsewhere a copy, like get()."""
        return Future(self._s.get_view(_key(key, "get_view")))

    def get_into(self, key, dst, slice=None, cast=False):  # noqa: A002
        """Copies `key` (or its box `slice`) into `dst` in place and answers
        `dst` itself. dtype and shape must match (MismatchError, a
        ValueError, with `dst` untouched), unless `cast` is true: then a
        bfloat16 or float16 key is converted into a float32 `dst` as it is
        copied, or float32 into bfloat16 / float16 (whole keys only)."""
        _key(key, "get_into")
        if not isinstance(cast, bool):
            raise TypeError(f"get_into '{key}': cast wants a bool, got {type(cast).__name__}")
        src, as_bool = export(dst, f"get_into '{key}'", for_write=True)
        if slice is not None:
            if cast:
                raise NotImplementedError(f"get_into '{key}': a box is not read with a cast")
            return Future(self._s.get_into_slice(key, src, as_bool, *slice._args()),
                          lambda _: dst)
        return Future(self._s.get_into(key, src, as_bool, cast), lambda _: dst)

    def get_batch(self, keys):
        """The values of several keys, in order."""
        keys = [_key(k, "get_batch") for k in keys]
        return Future(self._s.get_batch(keys), lambda vs: [_value_out(v) for v in vs])

    def get_into_batch(self, items):
        """get_into for several ({key: dst} or [(key, dst)]); answers the
        destinations in order."""
        pairs = list(items.items()) if isinstance(items, dict) else list(items)
        native = []
        for key, dst in pairs:
            src, as_bool = export(dst, f"get_into '{_key(key, 'get_into_batch')}'",
                                  for_write=True)
            native.append((key, src, as_bool))
        return Future(self._s.get_into_batch(native), lambda _: [d for _, d in pairs])

    # -- the key space ------------------------------------------------------

    def keys(self, prefix=""):
        """Keys under `prefix` (whole '.'- or '/'-separated components), sorted."""
        return Future(self._s.keys(_key(prefix, "keys")))

    def list(self, prefix=""):
        """Metadata of the keys under `prefix`: dicts with key, kind, dtype,
        shape (tensors) or format (objects), nbytes, version, shards."""
        return Future(self._s.list(_key(prefix, "list")))

    def exists(self, key):
        """True when `key` exists (False for a sharded key not fully put)."""
        return Future(self._s.exists(_key(key, "exists")))

    def delete(self, key):
        """Removes `key`; NotFoundError when there is none. A state dict's
        key removes the whole state dict (its packed and stored-alone
        tensors too); a published prefix removes every version."""
        return Future(self._s.remove(_key(key, "delete")))

    def delete_batch(self, keys):
        """Removes the keys that exist; answers how many were removed."""
        return Future(self._s.remove_batch([_key(k, "delete_batch") for k in keys]))

    def stats(self):
        """Usage of every volume (dicts)."""
        return Future(self._s.stats())

    def fast_path_stats(self):
        """What this process's calls on the caller's thread did, now (a
        dict: hits, misses, stale, rings, puts,
        lease_free_reads, lease_free_stale, direct_reads,
        direct_state_dicts, state_dict_puts, resent_commits). Not a future: read on the
        caller's thread."""
        return self._s.fast_path_stats()

    def metrics_address(self):
        """Where this store serves /metrics, /healthz and /readyz
        ("HOST:PORT", the option metrics= with the port it got), or "" when
        it does not (docs/operations.md)."""
        return self._s.metrics_address()

    # -- state dicts --------------------------------------------------------

    def put_state_dict(self, key, state_dict, transfer_dtype=None, **options):
        """Stores a state dict (nested dicts and lists of tensors and values)
        under `key`; it becomes visible as a whole. transfer_dtype
        ("bfloat16" or "float16", or a torch dtype) stores float32 tensors
        in that dtype. Options: pack_max_tensor_bytes, pack_bucket_bytes."""
        flat = sdmod.flatten(state_dict, f"put_state_dict '{_key(key, 'put_state_dict')}'")
        return Future(self._s.put_state_dict(key, flat.entries,
                                             _put_options(transfer_dtype, options)))

    def get_state_dict(self, key):
        """The state dict under `key`, as it was put (flat stays flat, nested
        stays nested), with meshstore.Tensor tensors."""
        return Future(self._s.get_state_dict(_key(key, "get_state_dict")), sdmod.unflatten)

    def get_state_dict_into(self, key, state_dict, cast=False):
        """Reads the state dict under `key` into `state_dict`'s own tensors, in
        place, and its values; answers `state_dict`. It must hold exactly the
        stored names, dtypes and shapes (the error lists every difference),
        unless `cast` is true: then float32, bfloat16 and float16 entries are
        converted into the tensors' dtypes as they are read."""
        _check_cast("get_state_dict_into", key, cast)
        flat = sdmod.flatten(state_dict, f"get_state_dict_into '{_key(key, 'get')}'", True)
        return Future(self._s.get_state_dict_into(key, flat.entries, cast),
                      lambda values: _written_back(state_dict, flat, values))

    def publish_state_dict(self, prefix, state_dict, keep=1, transfer_dtype=None, **options):
        """Publishes `state_dict` as the next version under `prefix` and
        answers its number (readers: get_next_state_dict_into)."""
        flat = sdmod.flatten(state_dict, f"publish_state_dict '{_key(prefix, 'publish')}'")
        return Future(self._s.publish_state_dict(prefix, flat.entries, int(keep),
                                                 _put_options(transfer_dtype, options)))

    def publish(self, prefix, state_dict, keep=1, mode="auto", retain=False,
                reclaim_timeout=30.0, revoke_on_timeout=False, transfer_dtype=None,
                **options):
        """Publishes `state_dict` as the next version under `prefix`, in the
        mode the store picks (``mode="auto"``) or asks ("direct", "copy"):
        direct lends the large tensors themselves, which readers copy out
        of. Answers a Publication; the tensors must not be written until
        ``publication.returned()`` completes (``reclaim()`` ends the loan;
        docs/python.md, "Direct publishing"). With revoke_on_timeout,
        ``reclaim()`` revokes the loan once reclaim_timeout has passed:
        readers still copying lose it (their read locates the key again)."""
        flat = sdmod.flatten(state_dict, f"publish '{_key(prefix, 'publish')}'")
        published, returned = self._s.publish(prefix, flat.entries, int(keep), str(mode),
                                              bool(retain), reclaim_timeout,
                                              bool(revoke_on_timeout),
                                              _put_options(transfer_dtype, options))
        return Future(published, lambda native: Publication(native, returned))

    def latest_version(self, prefix):
        """The newest version published under `prefix`; 0 when none is."""
        return Future(self._s.latest_version(_key(prefix, "latest_version")))

    def get_latest_state_dict_into(self, prefix, state_dict, cast=False):
        """Reads the newest version under `prefix` into `state_dict`; answers
        its number."""
        flat = sdmod.flatten(state_dict, f"get_latest_state_dict_into '{prefix}'", True)
        _check_cast("get_latest_state_dict_into", prefix, cast)
        return Future(self._s.get_latest_state_dict_into(_key(prefix, "get"), flat.entries, cast),
                      lambda r: _written_back(state_dict, flat, r[1], r[0]))

    def get_next_state_dict_into(self, prefix, state_dict, after=0, timeout=60.0, cast=False):
        """Waits up to `timeout` seconds for a version newer than `after` under
        `prefix`, reads it into `state_dict` (streamed while its writer still
        puts it) and answers its number. The worker loop:
        ``v = await store.get_next_state_dict_into("weights", sd, v)``."""
        _check_cast("get_next_state_dict_into", prefix, cast)
        flat = sdmod.flatten(state_dict, f"get_next_state_dict_into '{prefix}'", True)
        return Future(self._s.get_next_state_dict_into(_key(prefix, "get"), flat.entries,
                                                       int(after), timeout, cast),
                      lambda r: _written_back(state_dict, flat, r[1], r[0]))

    def stage_publish(self, prefix, specs, keep=1, **options):
        """Allocates the next version under `prefix` for the caller to fill in
        place: specs are (name, dtype, shape) or {name: tensor-like}. Answers
        a StagedStateDict: fill its tensors, then commit()."""
        return Future(self._s.stage_publish(_key(prefix, "stage_publish"), _specs(specs),
                                            int(keep), _put_options(None, options)),
                      StagedStateDict)

    def stage_state_dict(self, key, specs, **options):
        """stage_publish for a plain key (commit() stores it under `key`)."""
        return Future(self._s.stage_state_dict(_key(key, "stage_state_dict"), _specs(specs),
                                               _put_options(None, options)),
                      StagedStateDict)


class Publication:
    """A published version (Store.publish). For a direct one, the caller's
    tensors are lent until ``returned()`` completes: write them only after
    ``await pub.reclaim()`` (or the version's retirement by a later
    publish)."""

    def __init__(self, native, returned):
        self._n = native
        self._returned = returned

    @property
    def version(self):
        return self._n.version

    @property
    def mode(self):
        """"direct" or "copy": how it was published."""
        return self._n.mode

    @property
    def lent_bytes(self):
        return self._n.lent_bytes

    def returned(self):
        """A Future that completes once the store no longer reads the
        tensors."""
        return Future(self._returned)

    def reclaim(self):
        """Ends the loan: withdraws the version (or, published with
        retain=True, copies it into the store first), then waits for reads
        in flight up to reclaim_timeout (TimeoutError after it: the tensors
        stay lent, unless published with revoke_on_timeout=True, which then
        revokes the loan)."""
        return Future(self._n.reclaim())


class StagedStateDict:
    """A state dict whose tensors are the store's memory (zero-copy
    publishing): fill ``tensors`` in place, then ``commit()``. ``abort()``
    gives the memory back. The tensors must not be written after commit."""

    def __init__(self, native):
        self._n = native
        self.tensors = dict(native.entries())

    @property
    def key(self):
        return self._n.key

    @property
    def zero_copy(self):
        """True when the tensors are a volume's shared memory."""
        return self._n.zero_copy

    def commit(self):
        """Makes the state dict visible as a whole; answers the version."""
        return Future(self._n.commit())

    def abort(self):
        self._n.abort()


def _check_cast(op, key, cast):
    if not isinstance(cast, bool):
        raise TypeError(f"{op} '{key}': cast wants a bool, got {type(cast).__name__}")


def _written_back(state_dict, flat, values, answer=None):
    sdmod.write_values_back(state_dict, flat, values)
    return state_dict if answer is None else answer


def _dtype_name(d):
    if d is None:
        return None
    s = str(d)
    return s[len("torch."):] if s.startswith("torch.") else s


def _put_options(transfer_dtype, options):
    out = dict(options)
    if transfer_dtype is not None:
        out["transfer_dtype"] = _dtype_name(transfer_dtype)
    return out


def _specs(specs):
    if isinstance(specs, dict):
        out = []
        for name, t in specs.items():
            out.append((name, _dtype_name(t.dtype), list(t.shape)))
        return out
    return [(n, _dtype_name(d), list(s)) for n, d, s in specs]
