"""torchstore's transport types, and the meshstore transport each one is.

A strategy built with a transport type (``LocalRankStrategy(
TransportType.SharedMemory)``) forces that transport for every
client-volume pair of the store, as torchstore does; ``Unset`` lets the
store pick the best one for each pair (shm, else cma, on one host; rdma,
else tcp, across hosts).

| torchstore | meshstore | why |
| --- | --- | --- |
| Unset | picked per pair | |
| SharedMemory | shm | the same: volume memory mapped by same-host clients |
| MonarchRPC | rpc | bytes inside actor messages |
| Gloo | tcp | bulk bytes over sockets between the two processes |
| MonarchRDMA | rdma | one-sided reads and writes of registered memory |
| TorchComms | rdma | torchcomms' RDMA; NVLink has no meshstore transport |

A transport that cannot run here (rdma without an RDMA device) fails
``initialize`` with meshstore.UnsupportedError naming it, as torchstore
fails when its transport is unavailable.
"""

from enum import Enum, auto


class TransportType(Enum):
    """How a store moves bytes (torchstore.transport.TransportType)."""

    Unset = auto()
    MonarchRPC = auto()
    MonarchRDMA = auto()
    TorchComms = auto()
    TorchCommsRDMA = TorchComms  # torchstore's older name
    Gloo = auto()
    SharedMemory = auto()


_MESHSTORE = {
    TransportType.Unset: "",
    TransportType.SharedMemory: "shm",
    TransportType.MonarchRPC: "rpc",
    TransportType.Gloo: "tcp",
    TransportType.MonarchRDMA: "rdma",
    TransportType.TorchComms: "rdma",
}


def meshstore_transport(transport_type):
    """The meshstore transport name for a TransportType ("" lets the store
    pick); TypeError for anything else."""
    if not isinstance(transport_type, TransportType):
        raise TypeError("a strategy's transport is a torchstore TransportType, got "
                        f"{type(transport_type).__name__}")
    return _MESHSTORE[transport_type]


__all__ = ["TransportType", "meshstore_transport"]
