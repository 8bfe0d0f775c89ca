"""Tensors in and out of the store, through DLPack, without copying."""

import sys

from . import _native

Tensor = _native.Tensor


def is_tensor(x):
    """True for what the store takes as a tensor: anything with __dlpack__
    (torch, numpy, ...) and meshstore.Tensor."""
    return isinstance(x, Tensor) or hasattr(x, "__dlpack__")


def export(x, what, for_write=False, name=None):
    """(source, as_bool) for the native store: a DLPack capsule of `x` (the
    capsule keeps its memory alive) or a meshstore.Tensor as it is. bool goes
    as its uint8 bytes, flagged, since neither torch 1.13 nor DLPack 0.6 can
    export bool. `for_write`: the store writes into `x` (get_into). Errors
    name `what` (and the state dict entry `name`)."""
    if isinstance(x, Tensor):
        return x, False
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        # The common case first, with torch's own exporter (Tensor.__dlpack__
        # adds Python-level checks done here once).
        if not x.requires_grad and x.dtype is not torch.bool and not x.is_conj() \
                and not x.is_neg() and x.device.type in _DLPACK_DEVICES:
            return _to_dlpack(x), False
        return _export_torch_slow(torch, x, _what(what, name), for_write)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        as_bool = x.dtype == np.bool_
        if as_bool:
            x = x.view(np.uint8)
        if not x.flags.writeable:
            raise ValueError(
                f"{_what(what, name)}: numpy cannot export a read-only array through DLPack "
                "(DLPack 0.6 has no read-only flag); pass a writeable array, e.g. arr.copy()")
        if x.dtype.byteorder == ">":
            raise ValueError(f"{_what(what, name)}: big-endian arrays are not supported; pass "
                             "arr.astype(arr.dtype.newbyteorder('='))")
        return x.__dlpack__(), as_bool
    if hasattr(x, "__dlpack__"):
        try:
            return x.__dlpack__(), False
        except BufferError as e:
            raise ValueError(f"{_what(what, name)}: the tensor cannot be exported through "
                             f"DLPack: {e}") from e
    raise TypeError(f"{_what(what, name)}: expected a tensor (an object with __dlpack__: torch, "
                    f"numpy, ...), got {type(x).__name__}")


_DLPACK_DEVICES = ("cpu", "cuda")


def _to_dlpack(t):
    from torch.utils.dlpack import to_dlpack
    global _to_dlpack
    _to_dlpack = to_dlpack
    return to_dlpack(t)


def _what(what, name):
    return f"{what}: entry '{name}'" if name is not None else what


def _export_torch_slow(torch, x, what, for_write):
    if x.requires_grad:
        if for_write and torch.is_grad_enabled():
            raise ValueError(
                f"{what}: the destination requires grad, and autograd must not see an "
                "in-place write it did not record; pass t.detach() (the same memory) "
                "or call under torch.no_grad()")
        # A put only reads the bytes; under no_grad, writing a parameter in
        # place is what torch itself allows (p.copy_ in torch.no_grad()).
        x = x.detach()
    if x.is_conj() or x.is_neg():
        raise ValueError(f"{what}: a lazily conjugated or negated view has no plain "
                         "bytes to move; call resolve_conj() / resolve_neg() first")
    if x.dtype == torch.bool:
        return x.view(torch.uint8).__dlpack__(), True
    try:
        return x.__dlpack__(), False
    except (BufferError, RuntimeError) as e:
        raise ValueError(f"{what}: the tensor cannot be exported through DLPack: {e}") from e


def _to_torch(self):
    """This tensor as a torch.Tensor over the same bytes (bool stays bool)."""
    import torch
    if self.device != "cpu":
        return torch.from_dlpack(self)
    t = torch.from_dlpack(self)
    if self.dtype == "bool":
        t = t.view(torch.bool)
    return t


def _to_numpy(self):
    """This tensor as a numpy array over the same bytes (read-only for a
    get_view of shared memory; bfloat16 and float8, which numpy lacks, are
    refused)."""
    import numpy
    return numpy.asarray(self)


Tensor.torch = _to_torch
Tensor.numpy = _to_numpy
