"""torchstore's strategies: where volumes live, which one each rank writes to,
and (optionally) the transport every transfer takes."""

from .transport import TransportType, meshstore_transport


class TorchStoreStrategy:
    """Where volumes live and which one each rank writes to.
    ``default_transport_type`` forces a transport for the whole store
    (meshstore.torchstore.transport lists what each one is)."""

    placement = "singleton"

    def __init__(self, default_transport_type=TransportType.Unset):
        self.default_transport_type = default_transport_type
        self.transport = meshstore_transport(default_transport_type)

    def __repr__(self):
        if self.default_transport_type is TransportType.Unset:
            return f"{type(self).__name__}()"
        return f"{type(self).__name__}({self.default_transport_type})"

    def options(self):
        """The store options this strategy sets."""
        out = {"strategy": self.placement}
        if self.transport:
            out["transport"] = self.transport
        return out


class ControllerStorageVolumes(TorchStoreStrategy):
    """Volumes next to the controller (the process that initialized)."""

    placement = "controller_colocated"


class SingletonStrategy(TorchStoreStrategy):
    """One volume, in the process that initialized."""

    placement = "singleton"


class LocalRankStrategy(TorchStoreStrategy):
    """One volume per rank; each rank writes to its own."""

    placement = "per_local_rank"


class HostStrategy(TorchStoreStrategy):
    """One volume per host; the ranks of a host share it."""

    placement = "per_host"


__all__ = ["ControllerStorageVolumes", "HostStrategy", "LocalRankStrategy", "SingletonStrategy",
           "TorchStoreStrategy"]
