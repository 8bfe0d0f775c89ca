"""Garbage sent to every port a store or an agent listens on leaves it
serving: random bytes, a truncated handshake, a flood of short connections.
Only loopback traffic, in bounded loops."""

import os
import random
import re
import selectors
import signal
import socket
import subprocess
import time

import pytest
import torch

import meshstore

from conftest import bin_path


def listening_ports(pid):
    """The TCP ports process `pid` listens on (from /proc: its sockets'
    inodes against the kernel's table of listening sockets)."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except FileNotFoundError:
            pass
    return sorted(ports)


def wait_for_ports(pid, at_least, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ports = listening_ports(pid)
        if len(ports) >= at_least:
            return ports
        time.sleep(0.05)
    raise AssertionError(f"process {pid} listens on {listening_ports(pid)}, wanted {at_least}")


def send_garbage(port, rng):
    """What a port scanner, a confused client or an attacker might send."""
    payloads = [
        rng.randbytes(1),
        rng.randbytes(64),
        rng.randbytes(64 * 1024),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x00" * 4096,
        b"\xff" * 4096,
        # A length prefix promising far more than follows.
        (2**31 - 1).to_bytes(4, "big") + rng.randbytes(16),
        (2**32 - 1).to_bytes(4, "little") + rng.randbytes(16),
    ]
    for payload in payloads:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            try:
                s.sendall(payload)
                s.settimeout(0.2)
                s.recv(4096)
            except OSError:
                pass  # the peer closed on us: that is the point
    for _ in range(50):  # a flood of connections that say nothing
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass


def serving_port(proc, timeout=60):
    """The control port `meshstore serve` names in its first line, which it
    prints once it serves (not merely listens)."""
    ready = selectors.DefaultSelector()
    ready.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        if not ready.select(deadline - time.monotonic()):
            break
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        line += chunk
    match = re.search(rb"serving on [^ ]+:(\d+) ", line)
    assert match, f"meshstore serve did not say it serves: {line!r}"
    return int(match.group(1))


@pytest.fixture
def served():
    proc = subprocess.Popen([bin_path("meshstore"), "serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        control = serving_port(proc)
        yield proc, control
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def test_garbage_to_every_port_of_a_store_leaves_it_serving(served):
    proc, control = served
    # The control port, as the server named it: a probe with a short
    # timeout on every port could not tell a slow store from no store.
    store = meshstore.Store.connect(f"127.0.0.1:{control}", host_volumes=False)
    with store:
        store.put("before", torch.arange(1000)).result()
        # tcp transport servers start with the volumes: force a tcp client
        # once so every listener exists, then list them all.
        with meshstore.Store.connect(f"127.0.0.1:{control}", transport="tcp",
                                     host_volumes=False) as tcp_client:
            assert torch.equal(tcp_client.get("before").result().torch(), torch.arange(1000))
        rng = random.Random(22)
        every = listening_ports(proc.pid)
        assert control in every
        for port in every:
            send_garbage(port, rng)
        assert proc.poll() is None, "the store died of garbage"
        # The connected client, and new ones over every transport, still work.
        assert torch.equal(store.get("before").result().torch(), torch.arange(1000))
        store.put("after", torch.ones(3)).result()
        for transport in ("tcp", "rpc", ""):
            opts = {"transport": transport} if transport else {}
            with meshstore.Store.connect(f"127.0.0.1:{control}", host_volumes=False,
                                         **opts) as fresh:
                assert torch.equal(fresh.get("after").result().torch(), torch.ones(3))
                big = torch.randn(1 << 20)
                fresh.put("big", big).result()
                assert torch.equal(fresh.get("big").result().torch(), big)


def test_garbage_to_a_host_agent_leaves_it_serving():
    proc = subprocess.Popen([bin_path("meshstore"), "agent", "--listen", "127.0.0.1:0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        ports = wait_for_ports(proc.pid, 1)
        rng = random.Random(7)
        for port in ports:
            send_garbage(port, rng)
        assert proc.poll() is None, "the agent died of garbage"
        # Still listening, and still answering a CAF handshake: a store
        # client dialing it gets a clear refusal (it is not a store), not a hang.
        assert listening_ports(proc.pid) == ports
        with pytest.raises(meshstore.Error):
            meshstore.Store.connect(f"127.0.0.1:{ports[0]}", connect_timeout=2)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
