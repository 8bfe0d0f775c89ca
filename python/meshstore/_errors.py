"""meshstore's exceptions: every store error carries the store's code.

Each class also derives from the built-in exception a Python program would
catch for it: a missing key is a ``KeyError`` (as torchstore raises), a dtype,
shape or slice mismatch a ``ValueError``, a deadline a ``TimeoutError``, a
peer that is gone a ``ConnectionError``.
"""

import builtins


class Error(Exception):
    """A store call failed. ``code`` is the store's error code (an int),
    ``code_name`` its name ("not_found", ...), ``message`` what went wrong,
    naming the key."""

    def __init__(self, message, code=18, code_name="internal"):
        super().__init__(message)
        self.message = message
        self.code = code
        self.code_name = code_name

    def __str__(self):
        return f"[{self.code_name}] {self.message}"


class InvalidArgumentError(Error, ValueError):
    """A call got bad input (an empty key, a bad option, ...)."""


class NotFoundError(Error, KeyError):
    """The key does not exist."""


class MismatchError(Error, ValueError):
    """The stored dtype or shape differs from the destination's, or a slice
    lies outside the tensor."""


class WrongKindError(Error, TypeError):
    """The key holds an object where a tensor was expected, or the reverse."""


class OutOfCapacityError(Error, MemoryError):
    """A volume (or this process) cannot hold the bytes."""


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 (shadows on purpose)
    """The operation did not finish within its deadline (the store's
    request_timeout, or the timeout given to the call). A wait that gives up
    (``Future.result(timeout=...)``) raises the built-in TimeoutError instead:
    the operation itself is still running then."""


class ClosedError(Error):
    """The store was closed before or while the call ran."""


class ConnectionError(Error, builtins.ConnectionError):  # noqa: A001
    """A peer (the store's controller, a volume, a transport) is gone."""


class PartiallyCommittedError(Error, KeyError):
    """A sharded key is not fully written yet: some regions are missing."""


class UnsupportedError(Error, NotImplementedError):
    """The feature or transport is not available here."""


class ConflictError(Error):
    """The operation lost a race with concurrent writers (a publish that
    another writer's beat, a read that kept losing to writers)."""


class WaitTimeoutError(Error, builtins.TimeoutError):
    """A wait on a future gave up; the operation itself is still running."""


class UnauthenticatedError(Error, builtins.PermissionError):
    """A peer refused this process's TLS credentials, or this process refused
    the peer's (TLS on one side only, a certificate another CA signed). The
    message names the reason."""


class CancelledError(Error):
    """The call was cancelled (Future.cancel) before it committed: nothing of
    it is visible, and the store no longer touches its tensors."""


_BY_CODE = {
    1: InvalidArgumentError,
    2: NotFoundError,
    3: MismatchError,
    4: MismatchError,
    5: MismatchError,
    6: OutOfCapacityError,
    7: TimeoutError,
    8: ClosedError,
    10: ConnectionError,
    11: PartiallyCommittedError,
    12: ConnectionError,
    15: WrongKindError,
    16: UnsupportedError,
    17: ConflictError,
    19: WaitTimeoutError,
    20: UnauthenticatedError,
    21: CancelledError,
}


def from_status(code, code_name, message):
    """The exception for a store Status (called by the native module)."""
    return _BY_CODE.get(code, Error)(message, code, code_name)
