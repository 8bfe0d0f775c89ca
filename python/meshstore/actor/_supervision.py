"""How an actor mesh is supervised: ``Supervision``, the C++
``meshstore::Supervision`` (runtime/meshstore/supervision.hpp)."""

from ._checks import count, seconds

_POLICIES = ("propagate", "stop", "restart")


class Supervision:
    """What happens when a member of a mesh dies (its process killed, or
    its actor failed), given as ``ProcMesh.spawn``'s first argument:

    - ``"propagate"`` (the default): the failure goes to the actor that
      spawned the mesh (``__supervise__``), else to
      ``unhandled_fault_hook``;
    - ``"stop"``: the mesh stops; its calls raise ``ConnectionError``
      naming the failure;
    - ``"restart"``: the member is made again with the same class and
      arguments (its ``__init__`` runs again, with no state of the old
      one), at most ``max_restarts`` times within ``window`` seconds;
      then the mesh stops. On worker processes this needs the process:
      a killed worker comes back when ``spawn_procs(max_relaunches=N)``
      started it, and its members with it.

        workers = procs.spawn(Supervision("restart", max_restarts=3), "workers", Worker)
    """

    __slots__ = ("policy", "max_restarts", "window")

    def __init__(self, policy="propagate", *, max_restarts=3, window=60.0):
        if policy not in _POLICIES:
            raise ValueError(f"Supervision(): policy must be one of {', '.join(_POLICIES)}, "
                             f"not {policy!r}")
        self.policy = policy
        self.max_restarts = count("Supervision(): max_restarts", max_restarts, 0)
        self.window = seconds("Supervision(): window", window)

    def _native(self):
        # What the native calls take: (policy, max_restarts, window in ms).
        return (self.policy, self.max_restarts, int(round(self.window * 1000)))

    def __repr__(self):
        return (f"Supervision({self.policy!r}, max_restarts={self.max_restarts}, "
                f"window={self.window})")
