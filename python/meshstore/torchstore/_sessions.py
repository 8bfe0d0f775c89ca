"""The stores this process has initialized, by torchstore store name."""

from dataclasses import dataclass, field

DEFAULT_TORCHSTORE_NAME = "TorchStore"


@dataclass
class Session:
    """One initialized store: the meshstore.Store, and for an SPMD one this
    rank's place in the job."""

    store: object
    rank: int = 0
    spmd: bool = False
    # (key) -> the Publication of this process's direct_rdma put of `key`.
    lent: dict = field(default_factory=dict)
    # The store this process joined as a worker of a mesh: its process
    # closes it, not shutdown().
    worker: bool = False


sessions = {}


def session(store_name):
    """The session of `store_name`; RuntimeError when it is not initialized.
    In a process of a mesh the store was spawned on (initialize(mesh=...)),
    every name is the store that process joined."""
    try:
        return sessions[store_name]
    except KeyError:
        pass
    joined = _joined_store()
    if joined is not None:
        sessions[store_name] = Session(joined, worker=True)
        return sessions[store_name]
    raise RuntimeError(f"torchstore '{store_name}' is not initialized: call "
                       "initialize() or initialize_spmd() first")


def _joined_store():
    # Imported here: _store imports the native module, which this module
    # must not need at import.
    from .._errors import NotFoundError
    from .._store import Store
    try:
        return Store._of_this_worker()
    except NotFoundError:
        return None


def store(store_name):
    """The meshstore.Store of `store_name`."""
    return session(store_name).store


def claim(store_name):
    """RuntimeError when `store_name` is initialized already."""
    if store_name in sessions:
        raise RuntimeError(f"torchstore '{store_name}' is already initialized")
