"""meshstore: a distributed tensor store, from Python.

    import asyncio, torch, meshstore

    async def main():
        with meshstore.Store.embedded() as store:
            w = torch.randn(1024, 1024)
            await store.put("w", w)
            out = torch.empty_like(w)
            await store.get_into("w", out)       # in place: out is returned
            assert torch.equal(out, w)

    asyncio.run(main())

Every call returns a meshstore.Future: await it, or call .result().
Tensors go in through DLPack (torch, numpy, any __dlpack__ producer) and come
out as meshstore.Tensor, which torch.from_dlpack and numpy.from_dlpack share
without a copy. docs/python.md has the whole story; meshstore.torchstore is a
drop-in for torchstore's module-level API.
"""

from . import _native
from ._errors import (
    CancelledError,
    ClosedError,
    ConflictError,
    ConnectionError,
    Error,
    InvalidArgumentError,
    MismatchError,
    NotFoundError,
    OutOfCapacityError,
    PartiallyCommittedError,
    TimeoutError,
    UnauthenticatedError,
    UnsupportedError,
    WaitTimeoutError,
    WrongKindError,
    from_status as _from_status,
)
from ._placement import Replicate, Shard
from ._store import Future, Publication, StagedStateDict, Store, TensorSlice
from ._tensors import Tensor

_native._set_error_factory(_from_status)

__version__ = _native.__version__
available_transports = _native.available_transports
transport_status = _native.transport_status

__all__ = [
    "CancelledError", "ClosedError", "ConflictError", "ConnectionError", "Error", "Future",
    "InvalidArgumentError", "MismatchError", "NotFoundError", "OutOfCapacityError",
    "PartiallyCommittedError", "Publication", "Replicate", "Shard", "StagedStateDict", "Store",
    "Tensor", "TensorSlice",
    "TimeoutError", "UnauthenticatedError", "UnsupportedError", "WaitTimeoutError", "WrongKindError", "available_transports",
    "transport_status",
]
