"""meshstore.actor: Python actors on the C++ runtime, with Monarch's names
(docs/python-actors.md): meshes of this process (this_proc,
local_procs), then meshes of worker processes (this_host().spawn_procs)."""

import asyncio
import os
import signal
import subprocess
import threading

import pytest

import meshstore
import meshstore.actor as ma
from conftest import bin_path
from meshstore.actor import (Actor, ActorError, ValueMesh, context, current_rank, current_size,
                             endpoint, local_procs, this_proc)


_arrived = []  # Counter.rendezvous: the ranks in it


class Counter(Actor):
    def __init__(self, start, step=1):
        self.n = start
        self.step = step
        self.made_as = current_rank().rank  # __init__ sees its rank

    @endpoint
    def incr(self, by=None):
        self.n += self.step if by is None else by
        return self.n

    @endpoint
    def value(self):
        return self.n

    @endpoint
    def where(self):
        c = context()
        return {"rank": current_rank().rank, "coords": dict(current_rank().coords),
                "size": current_size(), "message": c.message_rank.rank,
                "message_coords": dict(c.message_rank.coords), "made_as": self.made_as}

    @endpoint
    def fail(self, why):
        raise ValueError(why)

    @endpoint
    async def rendezvous(self, n):
        # Returns once `n` calls are in here at once (each waits for the
        # others, bounded): only calls that run concurrently get through.
        _arrived.append(current_rank().rank)
        for _ in range(1000):
            if len(_arrived) >= n:
                return sorted(_arrived)
            await asyncio.sleep(0.01)
        raise TimeoutError(f"{len(_arrived)} of {n} calls in flight at once")

    @endpoint
    async def nap(self, seconds):
        await asyncio.sleep(seconds)
        return current_rank().rank

    def not_an_endpoint(self):
        return "hidden"


@pytest.fixture
def grid():
    procs = local_procs(hosts=2, gpus=2)
    yield procs
    procs.stop()


def test_call_one_on_this_proc_keeps_the_actors_state():
    counters = this_proc().spawn("counters", Counter, 10, step=5)
    assert counters.incr.call_one().get(timeout=10) == 15
    assert counters.incr.call_one(100).get(timeout=10) == 115
    assert counters.value.call_one().get(timeout=10) == 115


def test_call_answers_a_value_mesh_found_by_coordinates(grid):
    m = grid.spawn("grid", Counter, 0)
    assert m.extent == {"hosts": 2, "gpus": 2}
    vm = m.where.call().get(timeout=10)
    assert isinstance(vm, ValueMesh) and len(vm) == 4
    assert vm.extent == {"hosts": 2, "gpus": 2}
    for point, v in vm.items():
        assert v["rank"] == point.rank == v["made_as"]
        assert v["coords"] == {"hosts": point["hosts"], "gpus": point["gpus"]}
        assert v["size"] == {"hosts": 2, "gpus": 2}
    assert vm.item(hosts=1, gpus=0)["rank"] == 2
    with pytest.raises(ValueError, match="name every dimension"):
        vm.item(hosts=1)
    with pytest.raises(IndexError):
        vm.item(hosts=2, gpus=0)


def test_slices_with_ints_and_python_slices_and_the_messages_rank(grid):
    m = grid.spawn("grid", Counter, 0)
    host1 = m.slice(hosts=1)  # an int drops the dimension
    assert host1.extent == {"gpus": 2}
    got = host1.where.call().get(timeout=10).values()
    assert [v["rank"] for v in got] == [2, 3]
    assert [v["message"] for v in got] == [0, 1]  # its rank in the view called
    assert [v["message_coords"] for v in got] == [{"gpus": 0}, {"gpus": 1}]
    column = m.slice(gpus=slice(1, 2))
    assert column.extent == {"hosts": 2, "gpus": 1}
    assert [v["rank"] for v in column.where.call().get(timeout=10).values()] == [1, 3]
    one = m.slice(hosts=0, gpus=1)
    assert one.where.call_one().get(timeout=10)["rank"] == 1
    with pytest.raises(TypeError):
        m.slice(hosts="0")
    # A process mesh slices the same way: a mesh spawned on it has the view's shape.
    small = grid.slice(hosts=slice(0, 2, 2)).spawn("small", Counter, 0)
    assert small.extent == {"hosts": 1, "gpus": 2}


def test_every_adverb(grid):
    m = grid.spawn("grid", Counter, 0)
    m.incr.broadcast(3)  # fire and forget; the members stay up
    assert m.value.call().get(timeout=10).values() == [3, 3, 3, 3]
    assert m.incr.choose(1).get(timeout=10) == 4
    seen = sorted(v["rank"] for v in m.where.stream())
    assert seen == [0, 1, 2, 3]
    with pytest.raises(meshstore.InvalidArgumentError, match="not 1"):
        m.value.call_one().get(timeout=10)


def test_futures_are_awaitable_and_async_endpoints_run_concurrently(grid):
    m = grid.spawn("grid", Counter, 0)

    async def main():
        assert await m.slice(hosts=0, gpus=0).incr.call_one(7) == 7
        _arrived.clear()
        vm = await m.rendezvous.call(4)  # each returns only once all four are in
        streamed = sorted([r async for r in m.nap.stream(0.01)])
        return vm.values(), streamed

    values, streamed = asyncio.run(main())
    assert values == [[0, 1, 2, 3]] * 4
    assert streamed == [0, 1, 2, 3]


def test_an_endpoint_that_raises_reaches_the_caller_with_its_rank_and_traceback(grid):
    m = grid.spawn("grid", Counter, 0)
    with pytest.raises(ActorError) as err:
        m.slice(hosts=1, gpus=0).fail.call_one("out of tokens").get(timeout=10)
    e = err.value
    assert e.rank == 2
    assert e.exception_type == "ValueError" and e.message == "out of tokens"
    assert "raise ValueError(why)" in e.remote_traceback
    with pytest.raises(ActorError, match="rank 0: ValueError: boom"):
        m.fail.call("boom").get(timeout=10)
    with pytest.raises(ActorError) as chosen:  # the member that raised names itself
        m.slice(hosts=1).fail.choose("picked").get(timeout=10)
    assert chosen.value.rank in (2, 3)
    # The member is still up.
    assert m.incr.call().get(timeout=10).values() == [1, 1, 1, 1]


def test_bad_calls_are_refused_with_the_reason(grid):
    m = grid.spawn("grid", Counter, 0)
    with pytest.raises(AttributeError, match="no endpoint 'not_an_endpoint'"):
        m.not_an_endpoint.call()
    with pytest.raises(TypeError, match="must pickle"):
        m.incr.call(threading.Lock())
    with pytest.raises(TypeError, match="not a subclass of meshstore.actor.Actor"):
        grid.spawn("plain", dict)
    with pytest.raises(meshstore.InvalidArgumentError, match="already spawned"):
        grid.spawn("grid", Counter, 0)
    with pytest.raises(ValueError, match="at least one dimension"):
        local_procs()


def test_stop_ends_every_call(grid):
    m = grid.spawn("grid", Counter, 0)
    assert m.incr.call().get(timeout=10).values() == [1, 1, 1, 1]
    grid.stop()
    with pytest.raises(meshstore.ClosedError):
        m.incr.call().get(timeout=10)
    with pytest.raises(meshstore.ClosedError):
        grid.spawn("late", Counter, 0)


class Tidy(Actor):
    """Writes what its __cleanup__ was given into `directory`/rank-R."""

    def __init__(self, directory):
        self.directory = directory

    @endpoint
    def pid(self):
        return os.getpid()

    def __cleanup__(self, exc):
        with open(os.path.join(self.directory, f"rank-{current_rank().rank}"), "w") as f:
            f.write(f"{os.getpid()} {exc!r}")


class AsyncTidy(Tidy):
    async def __cleanup__(self, exc):
        await asyncio.sleep(0.01)  # stop() waits for the awaits too
        super().__cleanup__(exc)


class UntidyAtRankOne(Tidy):
    def __cleanup__(self, exc):
        if current_rank().rank == 1:
            raise OSError("the device would not let go")
        super().__cleanup__(exc)


def _cleaned(directory):
    return {name: open(os.path.join(directory, name)).read()
            for name in sorted(os.listdir(directory))}


def test_cleanup_runs_once_as_this_process_members_stop(grid, tmp_path, capfd):
    tidy, untidy = tmp_path / "tidy", tmp_path / "untidy"
    tidy.mkdir()
    untidy.mkdir()
    m = grid.spawn("tidy", AsyncTidy, str(tidy))
    assert len(m.pid.call().get(timeout=10).values()) == 4
    grid.spawn("untidy", UntidyAtRankOne, str(untidy))
    assert os.listdir(tidy) == []  # not before the stop
    grid.stop()  # returns once every __cleanup__ ran, the async ones too
    me = os.getpid()
    assert _cleaned(str(tidy)) == {f"rank-{r}": f"{me} None" for r in range(4)}
    # Rank 1's raised: reported, and the others ran all the same.
    assert sorted(os.listdir(untidy)) == ["rank-0", "rank-2", "rank-3"]
    assert "rank 1: UntidyAtRankOne.__cleanup__ raised" in capfd.readouterr().err


def test_cleanup_runs_in_each_worker_before_it_exits(tmp_path):
    procs = ma.this_host().spawn_procs(per_host={"procs": 2})
    try:
        m = procs.spawn("tidy", Tidy, str(tmp_path))
        pids = m.pid.call().get(timeout=30).values()
        assert os.listdir(tmp_path) == []  # not before the stop
    finally:
        procs.stop()
    # The workers ran it before they exited; stop() waited for them.
    assert _cleaned(str(tmp_path)) == {f"rank-{r}": f"{pids[r]} None" for r in range(2)}


def test_a_get_that_gives_up_raises_the_builtin_timeout(grid):
    m = grid.spawn("grid", Counter, 0)
    with pytest.raises(TimeoutError):
        m.slice(hosts=0, gpus=0).nap.call_one(2).get(timeout=0.05)
    assert grid.initialized.get() is None


def test_get_or_spawn_makes_one_named_actor_for_every_caller():
    # Four threads ask at once: one is made, with the first arguments that
    # got there; the others' go unused.
    got = []

    def ask(start):
        mesh = ma.get_or_spawn_controller("tally", Counter, start, 100).get(timeout=10)
        got.append(mesh.incr.call_one().get(timeout=10))

    threads = [threading.Thread(target=ask, args=(s,)) for s in (1000, 2000, 3000, 4000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    first = min(got) - 100
    assert first in (1000, 2000, 3000, 4000)
    assert sorted(got) == [first + 100 * i for i in (1, 2, 3, 4)]
    same = this_proc().get_or_spawn("tally", Counter, 0)
    assert same.size == 1 and same.extent == {}
    assert same.value.call_one().get(timeout=10) == first + 400
    assert same.where.call_one().get(timeout=10)["rank"] == 0


def test_get_or_spawn_refuses_another_class_a_spawned_name_and_reports_a_failed_init(grid):
    this_proc().get_or_spawn("solo", Counter, 0)
    with pytest.raises(ValueError, match=r"get_or_spawn\('solo'\): it is a singleton of "
                                         r".*\.Counter, not .*\.Where"):
        this_proc().get_or_spawn("solo", Where, "w")
    grid.spawn("spawned", Counter, 0)
    with pytest.raises(ValueError, match="spawn\\(\\) made a mesh of that name"):
        grid.get_or_spawn("spawned", Counter, 0)
    for _ in range(2):  # the name stays taken by the member whose __init__ raised
        with pytest.raises(ActorError, match="no device for rank 0"):
            this_proc().get_or_spawn("broken", FailsToStartAtZero)
    with pytest.raises(TypeError, match="not a subclass of meshstore.actor.Actor"):
        this_proc().get_or_spawn("x", dict)
    with pytest.raises(TypeError, match="must pickle"):
        this_proc().get_or_spawn("x", Counter, lambda: 0)
    with pytest.raises(TypeError, match="non-empty str"):
        ma.get_or_spawn_controller("", Counter, 0)


# -- worker processes ---------------------------------------------------------


class Where(Actor):
    def __init__(self, tag):
        self.tag = tag

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def hello(self, who):
        print(f"hello {who} from rank {current_rank().rank}", flush=True)
        return f"{self.tag}:{current_rank().rank}:{who}"

    @endpoint
    def fail(self):
        raise KeyError("missing")

    @endpoint
    async def rendezvous_file(self, directory, n):
        # Each worker writes its rank, then waits until all n have: only
        # calls that run at once, in n processes, get through (bounded).
        open(os.path.join(directory, str(current_rank().rank)), "w").close()
        for _ in range(1000):
            if len(os.listdir(directory)) >= n:
                return current_rank().rank
            await asyncio.sleep(0.01)
        raise TimeoutError("the other workers never came")


class FailsToStart(Actor):
    def __init__(self):
        if current_rank().rank == 1:
            raise RuntimeError("no device for rank 1")

    @endpoint
    def ok(self):
        return True


class FailsToStartAtZero(Actor):
    def __init__(self):
        raise RuntimeError(f"no device for rank {current_rank().rank}")


class AsksForAController(Actor):
    @endpoint
    def ask(self):
        try:
            ma.get_or_spawn_controller("from_a_worker", Counter, 0)
        except RuntimeError as e:
            return str(e)
        return "made"


def test_a_singleton_of_worker_processes_lives_in_the_first_and_workers_ask_their_controller(
        workers):
    # Made in the view's first process; every view of these processes
    # gets that one.
    one = workers.get_or_spawn("one", Where, "single")
    assert one.pid.call_one().get(timeout=30) == workers.pid(0)
    again = workers.slice(gpus=1).get_or_spawn("one", Where, "unused")
    assert again.hello.call_one("x").get(timeout=30) == "single:0:x"
    other = workers.slice(gpus=1).get_or_spawn("two", Where, "second")
    assert other.pid.call_one().get(timeout=30) == workers.pid(1)
    # A worker cannot reach its controller's singletons yet: said, not faked.
    askers = workers.spawn("askers", AsksForAController)
    said = askers.slice(gpus=0).ask.call_one().get(timeout=30)
    assert "in a worker process" in said and "cannot be sent to a worker yet" in said, said


def _bootstrap():  # runs first in every worker (spawn_procs(bootstrap=...))
    os.environ["MESHSTORE_TEST_BOOTSTRAPPED"] = f"pid {os.getpid()}"


class Env(Actor):
    @endpoint
    def get(self, name):
        return os.environ.get(name)


def test_bootstrap_runs_first_in_every_worker():
    procs = ma.this_host().spawn_procs(per_host={"procs": 2}, bootstrap=_bootstrap)
    try:
        m = procs.spawn("env", Env)
        got = m.get.call("MESHSTORE_TEST_BOOTSTRAPPED").get(timeout=30).values()
        assert got == [f"pid {procs.pid(0)}", f"pid {procs.pid(1)}"]
    finally:
        procs.stop()
    with pytest.raises(ValueError, match="positive int"):
        ma.this_host().spawn_procs(per_host={"gpus": 0})


@pytest.fixture
def workers():
    procs = ma.this_host().spawn_procs(per_host={"gpus": 2})
    yield procs
    procs.stop()


def test_worker_processes_run_the_actors_each_in_its_own_process(workers, tmp_path):
    assert workers.extent == {"gpus": 2}
    assert workers.initialized.get() is None
    m = workers.spawn("where", Where, "w")
    pids = m.pid.call().get(timeout=30).values()
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert pids == [workers.pid(0), workers.pid(1)]
    assert m.hello.call("you").get(timeout=30).values() == ["w:0:you", "w:1:you"]
    assert m.slice(gpus=1).hello.call_one("one").get(timeout=30) == "w:1:one"
    assert sorted(m.pid.stream()) == sorted(pids)
    with pytest.raises(ActorError) as err:
        m.slice(gpus=0).fail.call_one().get(timeout=30)
    assert err.value.rank == 0 and err.value.exception_type == "KeyError"
    assert "raise KeyError" in err.value.remote_traceback
    assert m.rendezvous_file.call(str(tmp_path), 2).get(timeout=30).values() == [0, 1]


class Tensors(Actor):
    @endpoint
    def describe(self, t, scale=1.0):
        # What arrived, and proof the receiver may write to it (its copy).
        t.mul_(scale)
        return float(t.double().sum()), tuple(t.shape), str(t.dtype)

    @endpoint
    def keep(self, t, scale=1.0):
        self.kept = self.describe(t, scale)  # a broadcast's: no answer

    @endpoint
    def last_kept(self):
        return self.kept

    @endpoint
    def shm_stats(self):
        return dict(_runtime_stats())


def _runtime_stats():
    from meshstore.actor import _runtime
    return _runtime.stats


def _arg_segments():
    prefix = meshstore._native.shm_prefix()
    return [n for n in os.listdir("/dev/shm") if n.startswith(prefix + "arg")]


def test_tensors_as_arguments_go_through_shared_memory_not_the_pickle(workers):
    import torch

    m = workers.spawn("tensors", Tensors)
    big = torch.arange(1 << 20, dtype=torch.float32)  # 4 MiB
    before = dict(_runtime_stats())
    got = m.describe.call(big, scale=2.0).get(timeout=60).values()
    want = (float(big.double().sum()) * 2, (1 << 20,), "torch.float32")
    assert got == [want, want]
    after = _runtime_stats()
    assert after["tensors_in_shm"] == before["tensors_in_shm"] + 1  # one segment for both
    assert after["bytes_in_shm"] == before["bytes_in_shm"] + big.numel() * 4
    assert torch.equal(big, torch.arange(1 << 20, dtype=torch.float32))  # not written back
    assert _arg_segments() == []  # gone once both answered
    # A small tensor, a bfloat16 one, a view, and call_one, choose, stream.
    small = torch.ones(4)
    assert m.slice(gpus=0).describe.call_one(small).get(timeout=60) == (4.0, (4,), "torch.float32")
    odd = torch.ones(512, 256, dtype=torch.bfloat16)[::2]  # strided: sent contiguous
    assert m.describe.choose(odd).get(timeout=60) == (256.0 * 256, (256, 256), "torch.bfloat16")
    assert [r[0] for r in m.describe.stream(big)] == [want[0] / 2] * 2
    assert _runtime_stats()["tensors_in_shm"] == before["tensors_in_shm"] + 3
    assert _arg_segments() == []
    # Workers pickle nothing of their own here: the tensors came mapped.
    assert m.shm_stats.call().get(timeout=60).values()[0]["tensors_in_shm"] == 0


def test_a_broadcasts_tensors_go_through_shared_memory_and_its_last_receiver_unlinks(workers):
    import torch

    m = workers.spawn("kept", Tensors)
    big = torch.arange(1 << 20, dtype=torch.float32)  # 4 MiB
    before = dict(_runtime_stats())
    m.keep.broadcast(big, scale=3.0)
    # A call made after the broadcast reaches each member after it.
    want = (float(big.double().sum()) * 3, (1 << 20,), "torch.float32")
    assert m.last_kept.call().get(timeout=60).values() == [want, want]
    assert _runtime_stats()["tensors_in_shm"] == before["tensors_in_shm"] + 1
    assert _arg_segments() == []  # the second member to map it unlinked it
    assert torch.equal(big, torch.arange(1 << 20, dtype=torch.float32))  # not written back
    # To a slice of one member: that one unlinks it.
    one = m.slice(gpus=1)
    one.keep.broadcast(big)
    assert one.last_kept.call_one().get(timeout=60) == (want[0] / 3, (1 << 20,), "torch.float32")
    assert _arg_segments() == []
    assert _runtime_stats()["tensors_in_shm"] == before["tensors_in_shm"] + 2


def test_workers_that_ran_torch_on_their_actor_loop_exit_cleanly(capfd):
    # Their actor loop is stopped before the interpreter finalizes: ended
    # by finalization instead, it aborted the worker ("terminate called
    # without an active exception") after a 64 MiB sum.
    import torch

    procs = ma.this_host().spawn_procs(per_host={"procs": 2})
    m = procs.spawn("tensors", Tensors)
    assert len(m.describe.call(torch.ones(16 << 20)).get(timeout=60)) == 2
    procs.stop()
    err = capfd.readouterr().err
    assert "terminate called" not in err and "Fatal Python error" not in err, err


def test_an_init_that_raises_fails_the_spawn_naming_the_rank(workers):
    with pytest.raises(ActorError) as err:
        workers.spawn("fails", FailsToStart)
    assert err.value.rank == 1 and "no device for rank 1" in err.value.message


def test_a_killed_worker_reaches_the_fault_hook_and_stop_leaves_no_process(monkeypatch):
    seen = []
    got = threading.Event()

    def hook(failure):
        seen.append(failure)
        got.set()
        return True  # handled: this process goes on

    monkeypatch.setattr(ma, "unhandled_fault_hook", hook)
    procs = ma.this_host().spawn_procs(per_host={"procs": 2})
    m = procs.spawn("where", Where, "k")
    pids = m.pid.call().get(timeout=30).values()
    os.kill(pids[1], signal.SIGKILL)
    assert got.wait(30), "the killed worker's failure never reached the hook"
    assert seen[0]["mesh"] == "where" and seen[0]["rank"] == 1
    with pytest.raises(meshstore.Error):
        m.slice(procs=1).pid.call_one().get(timeout=30)
    assert m.slice(procs=0).pid.call_one().get(timeout=30) == pids[0]
    procs.stop()
    for pid in pids:  # reaped by the controller: neither is left
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_worker_processes_over_mutual_tls(tmp_path):
    make_certs = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tls",
                              "make_certs.sh")
    subprocess.run([make_certs, str(tmp_path / "job"), "node"], check=True, capture_output=True)
    files = {"tls_certificate": str(tmp_path / "job" / "node.pem"),
             "tls_key": str(tmp_path / "job" / "node.key"),
             "tls_ca_file": str(tmp_path / "job" / "ca.pem")}
    procs = ma.this_host().spawn_procs(per_host={"procs": 2}, **files)
    try:
        m = procs.spawn("env", Env)
        # Each worker got the job's files, and answers over TLS.
        assert m.get.call("MESHSTORE_TLS_CERT").get(timeout=30).values() == [
            files["tls_certificate"]] * 2
    finally:
        procs.stop()
    with pytest.raises(ValueError, match="together"):
        ma.this_host().spawn_procs(per_host={"procs": 1}, tls_certificate=files["tls_certificate"])


_supervised = []  # (handled, failure) as Supervisor.__supervise__ saw them
_supervised_event = threading.Event()


class Supervisor(Actor):
    """Spawns a mesh of its own (on worker processes it starts) and
    supervises it."""

    def __init__(self, handles):
        self.handles = handles

    def __supervise__(self, failure):
        # On the actor loop, as its endpoints run: never on a runtime thread.
        _supervised.append((self.handles, dict(failure), threading.current_thread().name))
        _supervised_event.set()
        return self.handles

    @endpoint
    def start(self):
        self.procs = ma.this_host().spawn_procs(per_host={"procs": 2})
        self.children = self.procs.spawn("children", Where, "c")
        return self.children.pid.call().get(timeout=30).values()

    @endpoint
    def finish(self):
        self.procs.stop()


def test_the_actor_that_spawned_a_mesh_supervises_it(monkeypatch):
    hooked = []
    hook_called = threading.Event()

    def hook(failure):
        hooked.append(dict(failure))
        hook_called.set()
        return True

    monkeypatch.setattr(ma, "unhandled_fault_hook", hook)
    here = local_procs(ranks=2)
    try:
        sups = here.spawn("supervisors", Supervisor, True)
        handling = sups.slice(ranks=0)
        # Handled by __supervise__: the hook hears nothing.
        _supervised.clear()
        _supervised_event.clear()
        pids = handling.start.call_one().get(timeout=60)
        os.kill(pids[1], signal.SIGKILL)
        assert _supervised_event.wait(30), "__supervise__ was never called"
        assert _supervised == [(True, {"mesh": "children", "rank": 1,
                                       "why": _supervised[0][1]["why"]}, "meshstore-actors")]
        assert "went down" in _supervised[0][1]["why"]
        assert hooked == []
        handling.finish.call_one().get(timeout=60)
    finally:
        here.stop()
    # Not handled (__supervise__ answers falsy): the hook gets it.
    here = local_procs(ranks=1)
    try:
        passing = here.spawn("passing", Supervisor, False)
        _supervised_event.clear()
        pids = passing.start.call_one().get(timeout=60)
        os.kill(pids[0], signal.SIGKILL)
        assert _supervised_event.wait(30) and hook_called.wait(30)
        assert _supervised[-1][0] is False
        assert [(f["mesh"], f["rank"]) for f in hooked] == [("children", 0)]
        passing.finish.call_one().get(timeout=60)
    finally:
        here.stop()


def _start_agent():
    proc = subprocess.Popen([bin_path("meshstore"), "agent", "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()  # "meshstore 0.2.0 agent listening on HOST:PORT; ..."
    address = line.split("listening on ")[1].split(";")[0]
    return proc, address


def test_worker_processes_through_host_agents():
    agents = [_start_agent() for _ in range(2)]
    try:
        procs = ma.hosts([a for _, a in agents]).spawn_procs(per_host={"gpus": 2})
        try:
            assert procs.extent == {"hosts": 2, "gpus": 2}
            m = procs.spawn("where", Where, "a")
            pids = m.pid.call().get(timeout=30).values()
            assert len(set(pids)) == 4
            assert m.slice(hosts=1).hello.call("h1").get(timeout=30).values() == [
                "a:2:h1", "a:3:h1"]
            # Each agent started its host's ranks: they are its children.
            def parent(pid):
                with open(f"/proc/{pid}/stat") as f:
                    return int(f.read().rsplit(")", 1)[1].split()[1])
            assert [parent(p) for p in pids] == [agents[0][0].pid] * 2 + [agents[1][0].pid] * 2
        finally:
            procs.stop()
    finally:
        for proc, _ in agents:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    with pytest.raises(ValueError, match="HOST:PORT"):
        ma.hosts(["nowhere"])


# -- torchstore on a process mesh --------------------------------------------


class Trainer(Actor):
    @endpoint
    async def publish(self, step):
        import torch

        import meshstore.torchstore as ts
        sd = {"w": torch.full((4, 4), float(step)), "b": torch.arange(4) + step}
        await ts.put_state_dict(sd, "weights")
        return os.getpid()


class Generator(Actor):
    @endpoint
    async def pull(self):
        import torch

        import meshstore.torchstore as ts
        mine = {"w": torch.zeros(4, 4), "b": torch.zeros(4, dtype=torch.int64)}
        got = await ts.get_state_dict("weights", user_state_dict=mine)
        assert got["w"].data_ptr() == mine["w"].data_ptr()  # pulled in place
        await ts.put(f"seen.{current_rank().rank}", got["w"][0, 0].item())
        return got["w"][0, 0].item(), got["b"].tolist()


def test_torchstore_initialized_on_a_process_mesh_serves_its_actors():
    import meshstore.torchstore as ts
    from meshstore.torchstore.strategy import LocalRankStrategy

    procs = ma.this_host().spawn_procs(per_host={"procs": 3})
    try:
        asyncio.run(ts.initialize(mesh=procs, strategy=LocalRankStrategy()))
        trainer = procs.slice(procs=0).spawn("trainer", Trainer)
        generators = procs.slice(procs=slice(1, 3)).spawn("generators", Generator)
        writer = trainer.publish.call_one(7).get(timeout=60)
        assert writer == procs.pid(0)
        pulled = generators.pull.call().get(timeout=60).values()
        assert pulled == [(7.0, [7, 8, 9, 10])] * 2

        async def read_back():
            return [await ts.get(f"seen.{r}") for r in (0, 1)], await ts.keys("seen")

        seen, keys = asyncio.run(read_back())
        assert seen == [7.0, 7.0] and sorted(keys) == ["seen.0", "seen.1"]
        # A volume in each process (LocalRankStrategy), none in this one.
        store = asyncio.run(ts.client())
        assert len(store.stats().result(timeout=60)) == 3
    finally:
        asyncio.run(ts.shutdown())
        procs.stop()
    with pytest.raises(TypeError, match="meshstore.actor ProcMesh"):
        asyncio.run(ts.initialize(mesh=object(), strategy=LocalRankStrategy()))
    asyncio.run(ts.shutdown())


def test_the_store_controller_runs_in_the_worker_asked_for():
    import meshstore.torchstore as ts
    from meshstore.torchstore.strategy import LocalRankStrategy

    procs = ma.this_host().spawn_procs(per_host={"procs": 2})
    try:
        with pytest.raises(meshstore.Error, match="controller_process 2 is not a member"):
            asyncio.run(ts.initialize(mesh=procs, strategy=LocalRankStrategy(),
                                      controller_process=2))
        asyncio.run(ts.shutdown())
        # The controller (and the store's index) in worker 1: the
        # ProcMesh restarts it with its process (docs/failover.md).
        asyncio.run(ts.initialize(mesh=procs, strategy=LocalRankStrategy(),
                                  controller_process=1))
        writer = procs.slice(procs=0).spawn("trainer", Trainer)
        assert writer.publish.call_one(3).get(timeout=60) == procs.pid(0)

        async def read_back():
            import torch
            got = await ts.get_state_dict("weights")
            return got["w"], got["b"]

        w, b = asyncio.run(read_back())
        assert w[0, 0].item() == 3.0 and b.tolist() == [3, 4, 5, 6]
    finally:
        asyncio.run(ts.shutdown())
        procs.stop()


def test_from_env_outside_a_launched_job_names_what_is_missing(monkeypatch):
    # Under a launcher: examples/python/actor_spmd.py (ctest, torchrun).
    for var in ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(meshstore.InvalidArgumentError) as err:
        ma.from_env()
    assert "RANK is not set" in str(err.value) and "torchrun" in str(err.value)
    with pytest.raises(ValueError, match=r"from_env\(\): give tls_certificate"):
        ma.from_env(tls_certificate="cert.pem")
