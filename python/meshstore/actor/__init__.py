"""Actor meshes from Python, with Monarch's names (``monarch.actor``), on
meshstore's C++ runtime (docs/python-actors.md).

    from meshstore.actor import Actor, endpoint, this_proc

    class Counter(Actor):
        def __init__(self, start):
            self.n = start

        @endpoint
        def incr(self, by=1):
            self.n += by
            return self.n

    counters = this_proc().spawn("counters", Counter, 0)
    counters.incr.call_one(5).get()          # 5

Worker processes on this host: ``this_host().spawn_procs(per_host={"gpus":
2})``; on several hosts through ``meshstore agent``: ``hosts([...])``; every
member in this process: ``this_proc()``, ``local_procs(...)``. A mesh's
failures go to the actor that spawned it (``__supervise__``, run on the
actor loop), else to ``unhandled_fault_hook``.
"""

import os
import sys

from ._mesh import (Actor, ActorMesh, Endpoint, Future, ValueMesh, context, current_rank,
                    current_size, endpoint, send)
from ._ports import Channel, Port, PortReceiver
from ._procs import (HostMesh, MeshFailure, ProcMesh, from_env, get_or_spawn_controller, hosts,
                     local_procs, this_host, this_proc)
from ._runtime import ActorError, Context, Point
from ._supervision import Supervision

__all__ = [
    "Actor", "ActorError", "ActorMesh", "Channel", "Context", "Endpoint", "Future", "HostMesh",
    "MeshFailure", "Point", "Port", "PortReceiver", "ProcMesh", "Supervision", "ValueMesh",
    "context", "current_rank", "current_size", "endpoint", "from_env", "get_or_spawn_controller",
    "hosts", "local_procs", "send", "this_host", "this_proc", "unhandled_fault_hook",
]


def unhandled_fault_hook(failure):
    """Called with a failure no supervisor handled (a dict: mesh, rank,
    why). The default prints it and ends this process, as Monarch's does;
    replace ``meshstore.actor.unhandled_fault_hook`` to do otherwise (a
    truthy answer means handled)."""
    print(f"meshstore.actor: unhandled failure of rank {failure['rank']} of mesh "
          f"'{failure['mesh']}': {failure['why']}", file=sys.stderr, flush=True)
    os._exit(1)
