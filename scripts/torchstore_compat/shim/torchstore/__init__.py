"""`import torchstore` is meshstore.torchstore (the conformance run's shim).

torchstore's public submodules are meshstore.torchstore's. The internals a
test module imports at its top (to parametrize, or for a test of internals
that is not run) are placeholders: calling one fails, naming it.
"""

import sys
import types

import meshstore.torchstore as _ts

from monarch.actor import spawn_actors as _spawn_actors


def _placeholder_module(name, **attrs):
    module = types.ModuleType(name)

    def missing(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def internal(*args, **kwargs):
            raise NotImplementedError(f"{name}.{attr} is torchstore's internal, which "
                                      "meshstore.torchstore does not have")
        return internal

    module.__getattr__ = missing
    for k, v in attrs.items():
        setattr(module, k, v)
    sys.modules[name] = module
    return module


for _name in ("spmd", "strategy", "transport", "logging"):
    sys.modules[f"torchstore.{_name}"] = getattr(_ts, _name)

# What tests/utils.py imports to pick the transports it parametrizes over.
_placeholder_module("torchstore.transport.torchcomms")
_placeholder_module("torchstore.transport.torchcomms.cache",
                    torchcomms_rdma_available=lambda: False,
                    torchcomms_uniflow_available=lambda: False)
_placeholder_module("torchstore.transport.types", TensorSlice=_ts.TensorSlice)
_placeholder_module("torchstore.transport.shared_memory")
_placeholder_module("torchstore.utils", spawn_actors=_spawn_actors)

sys.modules[__name__] = _ts
