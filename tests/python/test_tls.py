"""Mutual TLS from the outside (docs/security.md): `meshstore serve --tls-*`,
the command-line tools, Python's tls_* store options, and meshrun handing
credentials to every rank of a Store.from_env program."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

import meshstore

from conftest import bin_path
from test_processes import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_CERTS = os.path.join(HERE, "..", "..", "examples", "tls", "make_certs.sh")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A job CA with server, client and tool certificates, and another CA
    with a rogue certificate."""
    root = tmp_path_factory.mktemp("certs")
    subprocess.run([MAKE_CERTS, str(root / "job"), "server", "client", "tool"], check=True,
                   capture_output=True)
    subprocess.run([MAKE_CERTS, str(root / "other"), "rogue"], check=True, capture_output=True)

    def creds(ca, name):
        return {"cert": str(root / ca / f"{name}.pem"), "key": str(root / ca / f"{name}.key"),
                "ca": str(root / ca / "ca.pem")}
    return {"server": creds("job", "server"), "client": creds("job", "client"),
            "tool": creds("job", "tool"), "rogue": creds("other", "rogue")}


def tls_flags(c):
    return ["--tls-cert", c["cert"], "--tls-key", c["key"], "--tls-ca", c["ca"]]


def tls_options(c):
    return {"tls_certificate": c["cert"], "tls_key": c["key"], "tls_ca_file": c["ca"]}


@pytest.fixture
def served_tls(certs):
    """`meshstore serve` with TLS, and its address."""
    port = free_port()
    proc = subprocess.Popen([bin_path("meshstore"), "serve", "--port", str(port),
                             *tls_flags(certs["server"])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert "mutual TLS" in line, line + proc.stderr.read()
    yield proc, f"127.0.0.1:{port}"
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_python_and_the_tools_reach_a_tls_store_with_the_job_certificates(certs, served_tls):
    _, address = served_tls
    with meshstore.Store.connect(address, connect_timeout=20,
                                 **tls_options(certs["client"])) as store:
        store.put("tls.weights", torch.arange(8, dtype=torch.float32)).result()
        ls = subprocess.run([bin_path("meshstore"), "ls", "--store", address,
                             *tls_flags(certs["tool"])], capture_output=True, text=True,
                            timeout=30)
        assert ls.returncode == 0, ls.stderr
        assert "tls.weights" in ls.stdout
        # The same credentials from the environment.
        env = {**os.environ, "MESHSTORE_TLS_CERT": certs["tool"]["cert"],
               "MESHSTORE_TLS_KEY": certs["tool"]["key"], "MESHSTORE_TLS_CA": certs["tool"]["ca"]}
        stat = subprocess.run([bin_path("meshstore"), "stat", "--store", address],
                              capture_output=True, text=True, timeout=30, env=env)
        assert stat.returncode == 0, stat.stderr


def test_peers_without_the_job_certificate_are_refused_with_the_reason(certs, served_tls):
    proc, address = served_tls
    with pytest.raises(meshstore.ConnectionError) as plain:
        meshstore.Store.connect(address, connect_timeout=5)
    assert "requires TLS" in plain.value.message
    with pytest.raises(meshstore.UnauthenticatedError) as rogue:
        meshstore.Store.connect(address, connect_timeout=5, **tls_options(certs["rogue"]))
    assert isinstance(rogue.value, PermissionError)
    assert "does not verify under our CA file" in rogue.value.message
    ls = subprocess.run([bin_path("meshstore"), "ls", "--store", address], capture_output=True,
                        text=True, timeout=30)
    assert ls.returncode == 1 and "requires TLS" in ls.stderr, ls.stderr
    # Bad options are refused before any connection, naming the file.
    with pytest.raises(meshstore.InvalidArgumentError, match="does not belong to certificate"):
        meshstore.Store.connect(address, tls_certificate=certs["client"]["cert"],
                                tls_key=certs["server"]["key"], tls_ca_file=certs["client"]["ca"])
    # The server says why on its side, and keeps serving.
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "refused a connection from 127.0.0.1:" in err, err
    assert "does not speak TLS" in err and "refused our certificate" in err, err


def test_meshrun_hands_the_credentials_to_every_rank(certs, tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent("""
        import os, time, torch, meshstore
        rank = int(os.environ["RANK"])
        with meshstore.Store.from_env(connect_timeout=30) as s:
            if rank == 1:
                s.put("from.rank1", torch.full((4,), 7.0)).result()
                print("rank", rank, "sees", s.get("from.rank1").result().torch().tolist())
                s.put("done", "yes").result()  # rank 0 (the server) may close now
            else:
                deadline = time.monotonic() + 120
                while not s.exists("done").result():  # each poll is a round trip
                    assert time.monotonic() < deadline, "rank 1 never finished"
                print("rank", rank, "sees", s.get("from.rank1").result().torch().tolist())
    """))
    out = subprocess.run([bin_path("meshrun"), "-n", "2", *tls_flags(certs["server"]), "--",
                          sys.executable, str(script)], capture_output=True, text=True,
                         timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("sees [7.0, 7.0, 7.0, 7.0]") == 2, out.stdout + out.stderr
