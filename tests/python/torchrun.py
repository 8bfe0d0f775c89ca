"""Runs a script under torchrun on this host, on a free port.

    python3 tests/python/torchrun.py NPROC SCRIPT [ARGS...]
    python3 tests/python/torchrun.py NPROC --no_python PROGRAM [ARGS...]

torchrun --standalone rendezvouses on the fixed port 29400, so two runs at
once (ctest -j) collide; this uses the static rendezvous on a free port
instead. Debian 12's torchrun (torch 1.13 on Python 3.11) also cannot parse
its own default "--redirects 0 --tee 0" (docs/python.md): stdout is named.
"""

import os
import socket
import sys


def free_ports(n):
    """n distinct ports the kernel had free just now (bound together, so
    they differ)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def command(nproc, script, *args):
    """The torchrun command line, and the environment it adds: the store
    listens on MESHSTORE_PORT, else MASTER_PORT + 1, and rank 0's mesh
    registry on MESHSTORE_MESH_PORT, else MASTER_PORT + 2, either of which
    may be any process's port (under ctest -j, another test's connection),
    so each gets a free port of its own. With "--no_python" first, the
    script is a program."""
    master, store, mesh = free_ports(3)
    flags = []
    if script == "--no_python":  # a program, not a Python script
        flags, script, args = ["--no_python"], args[0], args[1:]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
           "--nnodes", "1", "--node_rank", "0", f"--nproc_per_node={nproc}",
           "--master_addr", "127.0.0.1", "--master_port", str(master), *flags, script, *args]
    return cmd, {"MESHSTORE_PORT": str(store), "MESHSTORE_MESH_PORT": str(mesh)}


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd, env = command(sys.argv[1], *sys.argv[2:])
    os.execve(cmd[0], cmd, {**os.environ, **env})
