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


sessions = {}


def session(store_name):
    """The session of `store_name`; RuntimeError when it is not initialized."""
    try:
        return sessions[store_name]
    except KeyError:
        raise RuntimeError(f"torchstore '{store_name}' is not initialized: call "
                           "initialize() or initialize_spmd() first") from None


def store(store_name):
    """The meshstore.Store of `store_name`."""
    return session(store_name).store


def claim(store_name):
    """RuntimeError when `store_name` is initialized already."""
    if store_name in sessions:
        raise RuntimeError(f"torchstore '{store_name}' is already initialized")
