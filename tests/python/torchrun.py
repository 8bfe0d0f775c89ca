"""Runs a script under torchrun on this host, on a free port.

    python3 tests/python/torchrun.py NPROC SCRIPT [ARGS...]

torchrun --standalone rendezvouses on the fixed port 29400, so two runs at
once (ctest -j) collide; this uses the static rendezvous on a free port
instead. Debian 12's torchrun (torch 1.13 on Python 3.11) also cannot parse
its own default "--redirects 0 --tee 0" (docs/python.md): stdout is named.
"""

import os
import socket
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(nproc, script, *args):
    return [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
            "--nnodes", "1", "--node_rank", "0", f"--nproc_per_node={nproc}",
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()), script, *args]


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd = command(sys.argv[1], *sys.argv[2:])
    os.execv(cmd[0], cmd)
