"""meshstore.torchstore: torchstore's module-level API and semantics."""

import os
from unittest.mock import patch

import pytest
import pytest_asyncio
import torch

import meshstore
import meshstore.torchstore as ts


@pytest_asyncio.fixture
async def initialized():
    await ts.initialize()
    yield
    await ts.shutdown()


@pytest.mark.asyncio
async def test_put_get_and_inplace(initialized):
    t = torch.randn(4, 6)
    await ts.put("w", t)
    got = await ts.get("w")
    assert isinstance(got, torch.Tensor) and torch.equal(got, t)
    buf = torch.empty(4, 6)
    assert await ts.get("w", inplace_tensor=buf) is buf
    assert torch.equal(buf, t)
    await ts.put("obj", {"a": 1})
    assert await ts.get("obj") == {"a": 1}


@pytest.mark.asyncio
async def test_a_miss_is_a_key_error(initialized):
    with pytest.raises(KeyError):
        await ts.get("missing")
    with pytest.raises(KeyError):
        await ts.delete("missing")


@pytest.mark.asyncio
async def test_keys_match_whole_components(initialized):
    for k in ["model.layers.0.w", "model.layers.1.w", "model.layers_extra.w", "other"]:
        await ts.put(k, torch.ones(1))
    assert await ts.keys("model.layers") == ["model.layers.0.w", "model.layers.1.w"]
    assert len(await ts.keys()) == 4
    await ts.delete("other")
    assert not await ts.exists("other")
    assert await ts.delete_batch(["model.layers.0.w", "nope"]) == 1


@pytest.mark.asyncio
async def test_slices_and_partially_committed_keys(initialized):
    full = torch.arange(24.0).reshape(4, 6)
    top = ts.TensorSlice(offsets=(0, 0), coordinates=(0,), global_shape=(4, 6),
                         local_shape=(2, 6), mesh_shape=(2,))
    bottom = ts.TensorSlice(offsets=(2, 0), coordinates=(1,), global_shape=(4, 6),
                            local_shape=(2, 6), mesh_shape=(2,))
    store = ts._store(ts.DEFAULT_TORCHSTORE_NAME)
    await store.put("sh", full[:2], slice=top._box())
    assert not await ts.exists("sh")  # partially committed
    await store.put("sh", full[2:], slice=bottom._box())
    assert await ts.exists("sh")
    mid = ts.TensorSlice(offsets=(1, 2), coordinates=(), global_shape=(4, 6),
                         local_shape=(2, 3), mesh_shape=())
    assert torch.equal(await ts.get("sh", tensor_slice_spec=mid), full[1:3, 2:5])
    buf = torch.empty(2, 3)
    assert await ts.get("sh", inplace_tensor=buf, tensor_slice_spec=mid) is buf
    assert torch.equal(buf, full[1:3, 2:5])


@pytest.mark.asyncio
async def test_batches(initialized):
    await ts.put_batch({"a": torch.ones(2), "b": torch.zeros(3), "c": "text"})
    got = await ts.get_batch(["a", "b", "c"])
    assert list(got) == ["a", "b", "c"] and got["c"] == "text"
    into = torch.empty(3)
    got = await ts.get_batch({"a": None, "b": into})
    assert got["b"] is into and torch.equal(got["a"], torch.ones(2))


@pytest.mark.asyncio
async def test_state_dicts(initialized):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    await ts.put_state_dict(model.state_dict(), "m")
    whole = await ts.get_state_dict("m")
    assert set(whole) == set(model.state_dict())
    assert all(isinstance(v, torch.Tensor) for v in whole.values())
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    sd = fresh.state_dict()
    assert await ts.get_state_dict("m", user_state_dict=sd) is sd
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters()))
    # strict=False fills the names both have and leaves the rest.
    partial = {"0.weight": torch.zeros(8, 4), "extra": torch.full((1,), 5.0)}
    await ts.get_state_dict("m", user_state_dict=partial, strict=False)
    assert torch.equal(partial["0.weight"], model[0].weight) and partial["extra"].item() == 5.0
    with pytest.raises(ValueError):
        await ts.get_state_dict("m", user_state_dict={"0.weight": torch.zeros(8, 4)})
    await ts.put_state_dict(model.state_dict(), "m16", transfer_dtype=torch.bfloat16)
    assert (await ts.get_state_dict("m16"))["0.weight"].dtype == torch.bfloat16


def _weights(value):
    # 256 KiB: lent (over pack_max_tensor_bytes); the bias is packed, copied.
    return {"weight": torch.full((256, 256), value), "bias": torch.full((4,), value),
            "step": int(value)}


@pytest.mark.asyncio
async def test_direct_rdma_state_dicts_are_read_out_of_the_writers_tensors(initialized):
    sd = _weights(1.0)
    await ts.put_state_dict(sd, "policy", direct_rdma=True)
    # The weight is lent, not copied: a write after the put shows in every
    # read (which is why a trainer must not write while readers pull), while
    # the packed bias was copied at the put.
    sd["weight"][7, 7] = 42.0
    sd["bias"][0] = 42.0
    dst = _weights(0.0)
    assert await ts.get_state_dict("policy", user_state_dict=dst, direct_rdma=True) is dst
    assert dst["weight"][7, 7].item() == 42.0 and dst["weight"][0, 0].item() == 1.0
    assert dst["bias"][0].item() == 1.0 and dst["step"] == 1
    # Without the flag, into, whole and non-strict reads find it too.
    dst = _weights(0.0)
    await ts.get_state_dict("policy", user_state_dict=dst)
    assert dst["weight"][7, 7].item() == 42.0
    whole = await ts.get_state_dict("policy")
    assert torch.equal(whole["weight"], sd["weight"]) and whole["step"] == 1
    partial = {"weight": torch.zeros(256, 256), "extra": 5}
    await ts.get_state_dict("policy", user_state_dict=partial, strict=False, direct_rdma=True)
    assert partial["weight"][7, 7].item() == 42.0 and partial["extra"] == 5

    # The trainer's loop: step, put again. The next put ends the loan
    # before it returns; readers get the new step.
    for step in (2.0, 3.0):
        with torch.no_grad():
            sd["weight"].fill_(step)
            sd["bias"].fill_(step)
        sd["step"] = int(step)
        await ts.put_state_dict(sd, "policy", direct_rdma=True)
        dst = _weights(0.0)
        await ts.get_state_dict("policy", user_state_dict=dst, direct_rdma=True)
        assert torch.equal(dst["weight"], sd["weight"]) and torch.equal(dst["bias"], sd["bias"])
        assert dst["step"] == int(step)

    # A put by copy replaces it (and ends the loan); a direct put replaces
    # that in turn; a direct read of a key put by copy reads it.
    await ts.put_state_dict(_weights(4.0), "policy")
    dst = _weights(0.0)
    await ts.get_state_dict("policy", user_state_dict=dst, direct_rdma=True)
    assert dst["weight"][0, 0].item() == 4.0 and dst["step"] == 4
    await ts.put_state_dict(_weights(5.0), "policy", direct_rdma=True)
    assert (await ts.get_state_dict("policy"))["step"] == 5
    # delete takes the versions along; the loan ends.
    pub = ts._sessions.session(ts.DEFAULT_TORCHSTORE_NAME).lent["policy"]
    await ts.delete("policy")
    assert await ts.keys("policy") == []
    await pub.returned()
    with pytest.raises(KeyError):
        await ts.get_state_dict("policy", direct_rdma=True)
    with pytest.raises(KeyError):
        await ts.get_state_dict("nothing", direct_rdma=True)
    with pytest.raises(KeyError):
        await ts.get_state_dict("nothing", user_state_dict=_weights(0.0), direct_rdma=True)


@pytest.mark.asyncio
async def test_direct_rdma_casts_on_the_way(initialized):
    sd = {"w": torch.randn(128, 256)}  # 128 KiB in float32: lent unless cast
    await ts.put_state_dict(sd, "half", direct_rdma=True, transfer_dtype=torch.bfloat16)
    got = await ts.get_state_dict("half", direct_rdma=True)
    assert got["w"].dtype == torch.bfloat16
    assert torch.equal(got["w"], sd["w"].to(torch.bfloat16))


@pytest.mark.asyncio
async def test_setup_errors():
    with pytest.raises(RuntimeError, match="not initialized"):
        await ts.get("x")
    with pytest.raises(RuntimeError, match="Must specify controller strategy"):
        await ts.initialize(num_storage_volumes=2)
    await ts.initialize(num_storage_volumes=3, strategy=ts.ControllerStorageVolumes())
    try:
        with pytest.raises(RuntimeError, match="already initialized"):
            await ts.initialize()
        assert len(await ts._store(ts.DEFAULT_TORCHSTORE_NAME).stats()) == 3
    finally:
        await ts.shutdown()
    await ts.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="not initialized"):
        await ts.put_state_dict({}, "k", store_name="other", direct_rdma=True)


@pytest.mark.asyncio
async def test_dtensor_shards_go_in_and_reshard_out(initialized):
    if ts._dtensor_type() is None:
        pytest.skip(f"torch {torch.__version__} has no DTensor (torch.distributed.tensor): "
                    "Debian 12's python3-torch 1.13 predates it")
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    full = torch.arange(16.0).reshape(4, 4)
    await ts.put("dt", distribute_tensor(full, mesh, [Shard(0)]))
    into = distribute_tensor(torch.zeros(4, 4), mesh, [Shard(1)])
    await ts.get("dt", inplace_tensor=into)
    assert torch.equal(into.full_tensor(), full)


@pytest.mark.asyncio
async def test_any_str_is_a_key_and_keys_match_torchstores_components(initialized):
    # torchstore's test_keys_basic, and the keys meshstore.Store refuses or
    # reserves: "" and keys starting with the module's escape characters.
    names = ["", ".x", "v0.x", "v0.y", "v0.x.z", "v1.x", "v1.y", "v1/z", "\x01a", "\x02b"]
    for i, k in enumerate(names):
        await ts.put(k, torch.tensor([i]))
    assert await ts.keys() == sorted(names)
    assert await ts.keys("") == ["", ".x"]
    assert await ts.keys("v0") == ["v0.x", "v0.x.z", "v0.y"]
    assert await ts.keys("v0.x") == ["v0.x", "v0.x.z"]
    assert await ts.keys("v1") == ["v1.x", "v1.y"]  # '/' does not split, as in torchstore
    assert await ts.keys("\x01a") == ["\x01a"]
    for i, k in enumerate(names):
        assert torch.equal(await ts.get(k), torch.tensor([i])), repr(k)
        assert await ts.exists(k)
    assert (await ts.get_batch(["", "\x02b"]))[""].item() == 0
    await ts.delete("")
    assert not await ts.exists("") and await ts.exists(".x")
    assert await ts.delete_batch(["\x01a", "\x01a", "missing"]) == 1
    assert await ts.keys("") == [".x"]
    # A state dict under "" and objects under escaped keys work too.
    await ts.put_state_dict({"w": torch.ones(2)}, "")
    assert torch.equal((await ts.get_state_dict(""))["w"], torch.ones(2))
    await ts.put("\x01", {"obj": 1})
    assert await ts.get("\x01") == {"obj": 1}
    with pytest.raises(TypeError, match="a key is a str"):
        await ts.put(3, torch.ones(1))
    await ts.delete("")  # the whole state dict
    with pytest.raises(KeyError):
        await ts.get_state_dict("")
    assert await ts.keys("") == [".x"]
    # meshstore.Store keeps its own rule.
    store = await ts.client()
    assert isinstance(store, meshstore.Store)
    with pytest.raises(meshstore.InvalidArgumentError, match="empty"):
        await store.put("", torch.ones(1))


def _train(opt_class, steps, **kwargs):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = opt_class(model.parameters(), **kwargs)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 4)).sum().backward()
        opt.step()
    return model, opt


def _assert_same(a, b, where="sd"):
    if isinstance(a, dict):  # an OrderedDict comes back a dict, as from torchstore
        assert isinstance(b, dict), f"{where}: {type(b).__name__} is no dict"
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            _assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
        assert len(a) == len(b), f"{where}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), f"{where}: {type(b).__name__} is no tensor"
        assert a.dtype == b.dtype and torch.equal(a, b), where
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.asyncio
@pytest.mark.parametrize("opt_class,kwargs,steps", [
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, 3),
    (torch.optim.Adam, {"lr": 1e-3, "betas": (0.8, 0.95)}, 3),
    (torch.optim.AdamW, {"lr": 1e-3}, 0),  # no step yet: "state" is empty
])
async def test_optimizer_state_dicts_round_trip(initialized, opt_class, kwargs, steps):
    model, opt = _train(opt_class, steps, **kwargs)
    sd = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    await ts.put_state_dict(sd, "ckpt")
    back = await ts.get_state_dict("ckpt")
    # int keys under "state", lists of ints in "params", tuples (betas),
    # None values, floats and bools all come back as they went in.
    _assert_same(sd, back)
    if steps:
        assert isinstance(next(iter(back["optimizer"]["state"])), int)

    # Into a fresh model's and optimizer's own state dicts, then loaded.
    fresh_model, fresh_opt = _train(opt_class, steps, **kwargs)
    with torch.no_grad():
        for p in fresh_model.parameters():
            p.zero_()
    for state in fresh_opt.state.values():
        for v in state.values():
            if torch.is_tensor(v):
                v.zero_()
    into = {"model": fresh_model.state_dict(), "optimizer": fresh_opt.state_dict()}
    assert await ts.get_state_dict("ckpt", user_state_dict=into) is into
    fresh_opt.load_state_dict(into["optimizer"])
    _assert_same(opt.state_dict(), fresh_opt.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh_model.parameters()))


@pytest.mark.asyncio
async def test_objects_of_classes_defined_in_a_function(initialized):
    class Local:
        def __init__(self, val):
            self.val = val

        def __eq__(self, other):
            return self.val == other.val

    await ts.put("obj", Local(7))
    assert await ts.get("obj") == Local(7)
    await ts.put_batch({"a": Local(1), "b": torch.ones(1)})
    assert (await ts.get_batch(["a"]))["a"] == Local(1)
    await ts.put_state_dict({"w": torch.ones(1), "meta": Local(2), "fn": lambda x: x + 1}, "sd")
    back = await ts.get_state_dict("sd")
    assert back["meta"] == Local(2) and back["fn"](1) == 2
    with pytest.raises(TypeError):
        await ts.put("lock", __import__("threading").Lock())


def test_spmd_env_reads_the_launchers_variables():
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    with patch.dict(os.environ, env, clear=True):
        got = ts.spmd.SPMDEnv.from_env()
    assert got == ts.SPMDEnv(rank=3, local_rank=1, world_size=8, local_world_size=2,
                             master_addr="127.0.0.1", master_port=29500)
    assert got.num_hosts == 4 and got.group_rank == 1
    bare = {k: v for k, v in env.items() if not k.startswith("MASTER")}
    with patch.dict(os.environ, bare, clear=True):
        got = ts.spmd.SPMDEnv.from_env(master_addr="localhost", master_port=29600)
    assert (got.master_addr, got.master_port, got.rank) == ("localhost", 29600, 3)
    with patch.dict(os.environ, {**env, "WORLD_SIZE": "3"}, clear=True):
        with pytest.raises(ValueError, match=r"world_size \(3\) must be divisible by "
                                             r"local_world_size \(2\)"):
            ts.spmd.SPMDEnv.from_env()
    with patch.dict(os.environ, bare, clear=True):
        with pytest.raises(RuntimeError, match="requires the MASTER_ADDR env var"):
            ts.spmd.SPMDEnv.from_env()
    with patch.dict(os.environ, {**env, "RANK": "x"}, clear=True):
        with pytest.raises(ValueError, match="RANK='x' is not an integer"):
            ts.spmd.SPMDEnv.from_env()


@pytest.mark.asyncio
async def test_a_strategys_transport_type_is_the_stores_transport():
    assert ts.LocalRankStrategy().transport == ""
    assert ts.LocalRankStrategy(ts.TransportType.SharedMemory).transport == "shm"
    assert ts.HostStrategy(ts.TransportType.Gloo).transport == "tcp"
    from meshstore.torchstore.transport import TransportType
    assert TransportType is ts.TransportType
    assert TransportType.TorchCommsRDMA is TransportType.TorchComms
    with pytest.raises(TypeError, match="TransportType"):
        ts.LocalRankStrategy("shm")
    for t in (ts.TransportType.SharedMemory, ts.TransportType.MonarchRPC,
              ts.TransportType.Gloo):
        await ts.initialize(strategy=ts.SingletonStrategy(t))
        try:
            x = torch.arange(1000.0)
            await ts.put("x", x)
            assert torch.equal(await ts.get("x"), x)
        finally:
            await ts.shutdown()
    # A transport that cannot run here is refused at initialize, naming it.
    if meshstore.transport_status().get("rdma", "absent") is not None:
        with pytest.raises(meshstore.Error, match="rdma"):
            await ts.initialize(strategy=ts.SingletonStrategy(ts.TransportType.MonarchRDMA))
        await ts.shutdown()
        with pytest.raises(RuntimeError, match="not initialized"):
            await ts.get("x")


@pytest.mark.asyncio
async def test_torchstores_other_module_level_names():
    ts.init_logging()
    ts.init_logging()  # once: no second handler
    import logging
    import sys
    assert sum(getattr(h, "stream", None) is sys.stdout for h in logging.root.handlers) == 1
    with pytest.raises(RuntimeError, match="not initialized"):
        await ts.client("nowhere")
    with pytest.raises(RuntimeError, match="explicit HostStrategy or LocalRankStrategy"):
        await ts.initialize_spmd(strategy=ts.ControllerStorageVolumes())
