"""Python across processes: a store served by `meshstore serve`, a peer that
dies, interpreter exit with work in flight, and whole programs under torchrun
and meshrun (a torch.nn.Transformer state dict, a torchstore SPMD script)."""

import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

import meshstore

from conftest import bin_path
from torchrun import command as torchrun_command

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_python(code, timeout=60, env=None):
    """Runs `code` in a fresh interpreter; its CompletedProcess."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture
def served():
    """A `meshstore serve` process and its address."""
    port = free_port()
    proc = subprocess.Popen([bin_path("meshstore"), "serve", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    yield proc, f"127.0.0.1:{port}"
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_a_served_store_is_shared_with_cpp_tools(served):
    proc, address = served
    with meshstore.Store.connect(address, connect_timeout=20) as store:
        store.put("from.python", torch.arange(6, dtype=torch.int32).reshape(2, 3)).result()
        ls = subprocess.run([bin_path("meshstore"), "ls", "--store", address],
                            capture_output=True, text=True, timeout=30)
        assert ls.returncode == 0, ls.stderr
        assert "from.python" in ls.stdout and "int32" in ls.stdout
        # Another interpreter reads it back.
        out = run_python(f"""
            import meshstore
            s = meshstore.Store.connect("{address}", connect_timeout=20)
            print(s.get("from.python").result().torch().tolist())
            s.close()
        """)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[[0, 1, 2], [3, 4, 5]]"


def test_a_dead_store_turns_calls_into_connection_errors(served):
    proc, address = served
    store = meshstore.Store.connect(address, connect_timeout=20, request_timeout=10)
    store.put("k", torch.ones(4)).result()
    proc.kill()
    proc.wait(10)
    with pytest.raises(ConnectionError) as e:
        store.get("k").result(timeout=20)
    assert isinstance(e.value, meshstore.Error)
    store.close()


EXIT_CASES = {
    "open store, pending call and callback": """
        import meshstore, torch
        s = meshstore.Store.embedded()
        f = s.get_next_state_dict_into("p", {"w": torch.zeros(8)}, 0, timeout=60)
        f.add_done_callback(lambda fut: print("callback", type(fut.exception()).__name__))
        print("leaving")
    """,
    "cancelled asyncio task": """
        import asyncio, meshstore, torch
        async def main():
            s = meshstore.Store.embedded()
            t = asyncio.ensure_future(s.get_next_state_dict_into("p", {"w": torch.zeros(8)}, 0,
                                                                 timeout=60))
            await asyncio.sleep(0.05)
            t.cancel()
            print("leaving")
        asyncio.run(main())
    """,
    "thread blocked in result()": """
        import threading, meshstore, torch
        s = meshstore.Store.embedded()
        f = s.get_next_state_dict_into("p", {"w": torch.zeros(8)}, 0, timeout=60)
        threading.Thread(target=lambda: f.exception(), daemon=True).start()
        print("leaving")
    """,
    "uncaught exception": """
        import meshstore, torch
        s = meshstore.Store.embedded()
        s.put("x", torch.ones(2)).result()
        print("leaving")
        raise SystemExit(3)
    """,
}


@pytest.mark.parametrize("case", list(EXIT_CASES))
def test_interpreter_exit_never_hangs(case):
    out = run_python(EXIT_CASES[case], timeout=60)
    assert "leaving" in out.stdout, out.stderr
    assert out.returncode == (3 if case == "uncaught exception" else 0), out.stderr
    assert "Fatal" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    if "callback" in case:
        assert "callback ClosedError" in out.stdout  # closed at exit, the callback told


def torchrun(nproc, script, *args, timeout=240):
    cmd, ports = torchrun_command(nproc, script, *args)  # free ports; see torchrun.py
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **ports, "OMP_NUM_THREADS": "1"})


def meshrun(nproc, script, *args, timeout=240):
    cmd = [bin_path("meshrun"), "-n", str(nproc), "--", sys.executable, script, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize("launcher", [torchrun, meshrun], ids=["torchrun", "meshrun"])
def test_a_transformer_state_dict_between_processes(launcher):
    out = launcher(2, os.path.join(EXAMPLES, "transformer_sync.py"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("transformer_sync: ok") == 2, out.stdout + out.stderr


def test_a_torchstore_spmd_script_under_torchrun():
    out = torchrun(2, os.path.join(EXAMPLES, "torchstore_spmd.py"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("torchstore_spmd: ok") == 2, out.stdout + out.stderr


def test_every_rank_sees_every_other_straight_after_initialize_spmd():
    # Four cycles (LocalRankStrategy and HostStrategy, twice each): every
    # volume is there when initialize_spmd returns, a key put straight
    # after is read by the peer, and each collective shutdown lets the next
    # initialize_spmd on the same port find the new store.
    out = torchrun(2, os.path.join(os.path.dirname(__file__), "spmd_join.py"), "4")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("spmd_join: ok") == 2, out.stdout + out.stderr
