"""Lets torchstore's test modules import on Debian 12's torch 1.13.

torch 1.13 has no DTensor, device meshes, fully_shard or
torch.distributed.checkpoint, and torchstore's test modules import them at
their top. Each such name here skips the test that uses it, saying why, so
the module's other tests still run. One helper is real: DCP's
flatten_state_dict, which test_state_dict compares state dicts with, is
re-stated below from torch's documented rules (nested dicts and lists of
tensors flatten to dotted names; tuples and other lists are values).
"""

import importlib
import importlib.util
import sys
import types
from collections.abc import Mapping

import pytest
import torch

_WHY = ("needs {name}, which Debian 12's torch {version} lacks (DTensor and "
        "torch.distributed.checkpoint came later)")


def _skipper(name):
    def skip(*args, **kwargs):
        pytest.skip(_WHY.format(name=name, version=torch.__version__))
    return skip


def _lacking(module, attr):
    if attr.startswith("__"):
        raise AttributeError(attr)  # import machinery asks for __path__ etc.
    return _skipper(f"{module}.{attr}")


class _Absent(type):
    """A stand-in class: nothing is an instance of it; building one skips."""

    def __call__(cls, *args, **kwargs):
        pytest.skip(_WHY.format(name=cls.__qualname__, version=torch.__version__))


def _module(name, **attrs):
    """`name` as torch has it, with every name it lacks skipping; a module
    of such names where torch has none."""
    try:
        module = importlib.import_module(name)
    except Exception:  # noqa: BLE001 (torch 1.13's fsdp fails on Python 3.11 with ValueError)
        module = types.ModuleType(name)
        sys.modules[name] = module
    if getattr(module, "__getattr__", None) is None:
        module.__getattr__ = lambda attr: _lacking(name, attr)
    for k, v in attrs.items():
        if k not in vars(module):
            setattr(module, k, v)


def _holds_tensors(value):
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, Mapping):
        return True
    if isinstance(value, list):
        return any(_holds_tensors(v) for v in value)
    return False


def flatten_state_dict(state_dict):
    """torch.distributed.checkpoint._nested_dict.flatten_state_dict: every
    leaf under a dotted name, and each name's path."""
    flat, mapping = {}, {}

    def visit(path, value):
        if isinstance(value, Mapping):
            for k, v in value.items():
                visit(path + (k,), v)
            return
        if isinstance(value, list) and any(_holds_tensors(v) for v in value):
            for i, v in enumerate(value):
                visit(path + (i,), v)
            return
        name = ".".join(str(p) for p in path)
        flat[name] = value
        mapping[name] = path

    for key, value in state_dict.items():
        visit((str(key),), value)
    return flat, mapping


if importlib.util.find_spec("torch.distributed._tensor") is None:
    _placements = {name: _Absent(name, (), {}) for name in ("DTensor", "Shard", "Replicate")}
    _module("torch.distributed._tensor", **_placements)
    _module("torch.distributed.tensor", **_placements)
    _module("torch.distributed.tensor._utils")
    _module("torch.distributed.device_mesh")
    _module("torch.distributed.fsdp")
    _module("torch.distributed.checkpoint")
    _module("torch.distributed.checkpoint.state_dict")
    _module("torch.distributed.checkpoint._nested_dict", flatten_state_dict=flatten_state_dict)


_PROCESSES = "one process per rank: torch.distributed process groups (Monarch's actors)"
_DTENSOR = f"DTensor, which Debian 12's torch {torch.__version__} lacks"
# Tests that cannot run under the in-process stand-in for Monarch's actors,
# or that read torchstore's internals; each is skipped with its reason.
NOT_HERE = {
    "tests/test_state_dict.py::test_dcp_sharding_parity":
        f"needs {_PROCESSES}, {_DTENSOR}, fully_shard and torch.distributed.checkpoint",
    "tests/test_tensor_slice.py::test_put_dtensor_get_full_tensor": f"needs {_PROCESSES}, {_DTENSOR}",
    "tests/test_tensor_slice.py::test_put_dtensor_get_full_tensor_inplace":
        f"needs {_PROCESSES}, {_DTENSOR}",
    "tests/test_tensor_slice.py::test_dtensor_fetch_slice": f"needs {_PROCESSES}, {_DTENSOR}",
    "tests/test_tensor_slice.py::test_partial_put": f"needs {_PROCESSES}, {_DTENSOR}",
    "tests/test_tensor_slice.py::test_fully_local_dtensor_put_get": f"needs {_DTENSOR}",
    "tests/test_store.py::test_shm_cache_reuse_on_same_key_puts":
        "reads torchstore's client internals (strategy.transport_context)",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for prefix, why in NOT_HERE.items():
            if item.nodeid.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=why))
