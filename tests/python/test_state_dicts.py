"""State dicts from Python: torch's names, the structure that was put, in
place reads, publishing, staged (zero-copy) publishing and transfer dtype."""

import pytest
import torch

import meshstore


def transformer():
    torch.manual_seed(0)
    return torch.nn.Transformer(d_model=32, nhead=2, num_encoder_layers=1,
                                num_decoder_layers=1, dim_feedforward=64)


def test_a_flat_state_dict_stays_flat_with_torchs_names(store):
    sd = transformer().state_dict()
    store.put_state_dict("model", sd).result()
    back = store.get_state_dict("model").result()
    assert list(back) == list(sd)  # same names, same order
    assert all(torch.equal(back[k].torch(), v) for k, v in sd.items())
    # The stored names are torch's: what a C++ reader of the state dict sees.
    raw = [name for name, _ in store._s.get_state_dict("model").result()]
    assert raw == list(sd)


def test_nested_dicts_and_lists_come_back_nested():
    with meshstore.Store.embedded() as store:
        w = torch.randn(3, 3)
        sd = {"model": {"w": w, "b": torch.zeros(3)},
              "optim": {"state": {0: None, "1": [torch.ones(2), torch.full((2,), 2.0)]},
                        "param_groups": [{"lr": 0.01, "betas": (0.9, 0.99), "name": "adam"}]},
              "step": 7, "done": False, "tag": b"\x00x"}
        sd["optim"]["state"] = {"0": {"exp_avg": torch.ones(3)},
                                "1": [torch.ones(2), torch.full((2,), 2.0)]}
        store.put_state_dict("ck", sd).result()
        back = store.get_state_dict("ck").result()
        assert set(back) == {"model", "optim", "step", "done", "tag"}
        assert torch.equal(back["model"]["w"].torch(), w)
        assert isinstance(back["optim"]["state"]["1"], list)
        assert torch.equal(back["optim"]["state"]["1"][1].torch(), torch.full((2,), 2.0))
        assert back["optim"]["param_groups"][0]["lr"] == 0.01
        assert back["optim"]["param_groups"][0]["betas"] == (0.9, 0.99)  # a tuple again
        assert back["step"] == 7 and back["done"] is False and back["tag"] == b"\x00x"
        # Nested names are joined with '.', as torch.distributed.checkpoint does.
        raw = [name for name, _ in store._s.get_state_dict("ck").result()]
        assert "optim.state.1.0" in raw and "optim.param_groups.0.lr" in raw


def test_int_keys_tuples_and_empty_containers_come_back_as_they_were():
    with meshstore.Store.embedded() as store:
        sd = {0: torch.ones(2), "opt": {"state": {}, "groups": [{"betas": (0.9, (1, 2)),
                                                                "params": [], "e": ()}]},
              "last": {3: {"x": torch.zeros(1)}}}
        store.put_state_dict("s", sd).result()
        back = store.get_state_dict("s").result()
        assert list(back) == [0, "opt", "last"]
        assert list(back["opt"]) == ["state", "groups"] and back["opt"]["state"] == {}
        group = back["opt"]["groups"][0]
        assert group["betas"] == (0.9, (1, 2)) and group["params"] == [] and group["e"] == ()
        assert torch.equal(back["last"][3]["x"].torch(), torch.zeros(1))
        with pytest.raises(ValueError, match="same name '0'"):
            store.put_state_dict("bad", {0: torch.ones(1), "0": torch.ones(1)})
        with pytest.raises(TypeError, match="keys must be str or int, got float 1.5"):
            store.put_state_dict("bad", {"a": {1.5: torch.ones(1)}})


def test_get_state_dict_into_fills_the_callers_tensors_and_values(store):
    model = transformer()
    sd = dict(model.state_dict())
    sd["step"] = 5
    store.put_state_dict("m", sd).result()
    other = torch.nn.Transformer(d_model=32, nhead=2, num_encoder_layers=1,
                                 num_decoder_layers=1, dim_feedforward=64)
    dst = dict(other.state_dict())
    dst["step"] = 0
    ptrs = {k: v.data_ptr() for k, v in dst.items() if torch.is_tensor(v)}
    assert store.get_state_dict_into("m", dst).result() is dst
    assert dst["step"] == 5
    for k, v in model.state_dict().items():
        assert torch.equal(dst[k], v) and dst[k].data_ptr() == ptrs[k]
    # The model's own parameters were written in place.
    assert torch.equal(other.state_dict()["encoder.layers.0.linear1.weight"],
                       model.state_dict()["encoder.layers.0.linear1.weight"])


def test_a_destination_that_does_not_match_is_refused_untouched(store):
    store.put_state_dict("m", {"a": torch.ones(2), "b": torch.ones(3)}).result()
    dst = {"a": torch.zeros(2), "b": torch.zeros(4), "c": torch.zeros(1)}
    with pytest.raises(ValueError) as e:
        store.get_state_dict_into("m", dst).result()
    assert "extra 'c'" in str(e.value) and "mismatched 'b" in str(e.value)
    assert (dst["a"] == 0).all()


def test_two_names_that_flatten_alike_are_refused(store):
    with pytest.raises(ValueError, match="same name 'a.b'"):
        store.put_state_dict("x", {"a": {"b": torch.ones(1)}, "a.b": torch.ones(1)})


def test_transfer_dtype_stores_float32_as_bfloat16(store):
    sd = {"w": torch.randn(4, 4), "ids": torch.arange(3)}
    store.put_state_dict("t", sd, transfer_dtype=torch.bfloat16).result()
    back = store.get_state_dict("t").result()
    assert back["w"].dtype == "bfloat16" and back["ids"].dtype == "int64"
    assert torch.equal(back["w"].torch(), sd["w"].to(torch.bfloat16))
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        store.put_state_dict("t", sd, transfer_dtype="float64")


def test_publish_and_follow_versions(store):
    sd = {"w": torch.zeros(8), "step": 0}
    reader = {"w": torch.empty(8), "step": -1}
    v = 0
    for step in range(1, 4):
        sd["w"].fill_(step)
        sd["step"] = step
        assert store.publish_state_dict("weights", sd).result() == step
        v = store.get_next_state_dict_into("weights", reader, v, timeout=10).result()
        assert v == step and reader["step"] == step and (reader["w"] == step).all()
    assert store.latest_version("weights").result() == 3
    assert store.get_latest_state_dict_into("weights", reader).result() == 3


def test_direct_publish_lends_the_tensors_until_reclaimed(store):
    w = torch.arange(200_000, dtype=torch.float32)  # 800 KB: stored alone, so lent
    sd = {"w": w, "b": torch.ones(4), "step": 1}
    pub = store.publish("direct", sd).result()
    assert (pub.version, pub.mode, pub.lent_bytes) == (1, "direct", w.numel() * 4)
    assert not pub.returned().done()
    reader = {"w": torch.empty_like(w), "b": torch.empty(4), "step": -1}
    assert store.get_next_state_dict_into("direct", reader, 0, timeout=10).result() == 1
    assert torch.equal(reader["w"], w) and reader["step"] == 1
    # The version is the tensor itself: a write to it (which a publisher
    # must not do while it is lent) shows in the next read.
    w[7] = -1.0
    assert store.get("direct/v1/w").result().torch()[7].item() == -1.0
    pub.reclaim().result(timeout=30)
    pub.returned().result(timeout=30)  # the loan is over
    with pytest.raises(meshstore.NotFoundError, match="withdrawn"):
        store.get_latest_state_dict_into("direct", reader).result()


def test_publish_revoke_on_timeout_never_returns_bytes_written_after(store):
    # A read of the version in flight when reclaim() revokes the loan either
    # finished before (the published bytes) or finds the version gone.
    w = torch.full((16 << 20,), 3.0)  # 64 MiB: lent, and long to copy
    pub = store.publish("revoked", {"w": w}, reclaim_timeout=0.001,
                        revoke_on_timeout=True).result()
    assert pub.mode == "direct"
    out = torch.empty_like(w)
    read = store.get_into("revoked/v1/w", out)
    pub.reclaim().result(timeout=30)
    assert pub.returned().done()
    w.fill_(-1.0)  # the trainer steps at once
    try:
        read.result(timeout=30)
        assert (out == 3.0).all()
    except meshstore.NotFoundError:
        pass


def test_publish_with_retain_and_by_copy(store):
    w = torch.full((300_000,), 2.0)
    pub = store.publish("kept", {"w": w}, retain=True).result()
    assert pub.mode == "direct"
    pub.reclaim().result(timeout=30)
    w.fill_(0.0)  # the trainer steps; the retained copy does not change
    assert (store.get("kept/v1/w").result().torch() == 2.0).all()
    copied = store.publish("kept", {"w": w}, mode="copy").result()
    assert (copied.version, copied.mode, copied.lent_bytes) == (2, "copy", 0)
    assert copied.returned().done()  # nothing was lent
    with pytest.raises(ValueError, match="mode must be"):
        store.publish("kept", {"w": w}, mode="lend")
    with pytest.raises(ValueError, match="reclaim_timeout"):
        store.publish("kept", {"w": w}, reclaim_timeout=0)
    with pytest.raises(meshstore.InvalidArgumentError, match="transfer_dtype"):
        store.publish("kept", {"w": w}, mode="direct", transfer_dtype="bfloat16").result()


@pytest.mark.asyncio
async def test_direct_publish_from_asyncio(store):
    w = torch.randn(100_000)
    pub = await store.publish("aio", {"w": w})
    got = await store.get("aio/v1/w")
    assert torch.equal(got.torch(), w)
    await pub.reclaim()
    await pub.returned()


def test_a_bf16_version_reads_into_float32_tensors_with_cast(store):
    torch.manual_seed(1)
    sd = {"big": torch.randn(300_000), "small": torch.randn(10), "step": 3}
    store.publish_state_dict("cast", sd, transfer_dtype=torch.bfloat16).result()
    reader = {"big": torch.empty(300_000), "small": torch.empty(10), "step": 0}
    with pytest.raises(meshstore.MismatchError, match="ReadOptions::cast"):
        store.get_latest_state_dict_into("cast", reader).result()
    assert store.get_latest_state_dict_into("cast", reader, cast=True).result() == 1
    for name in ("big", "small"):
        assert torch.equal(reader[name], sd[name].to(torch.bfloat16).to(torch.float32))
    assert reader["step"] == 3
    reader["small"].zero_()
    store.get_state_dict_into("cast/v1", reader, cast=True).result()
    assert torch.equal(reader["small"], sd["small"].to(torch.bfloat16).to(torch.float32))
    nxt = store.get_next_state_dict_into("cast", reader, 1, timeout=10, cast=True)
    store.publish_state_dict("cast", sd, transfer_dtype=torch.bfloat16).result()
    assert nxt.result() == 2
    with pytest.raises(TypeError, match="cast wants a bool"):
        store.get_state_dict_into("cast/v2", reader, cast=1)


def test_stage_publish_fills_the_stores_memory_in_place(store):
    staged = store.stage_publish("w", [("a", "float32", [64, 64]), ("b", "int64", [3])]).result()
    a = staged.tensors["a"].torch()
    a.fill_(1.5)
    staged.tensors["b"].torch().copy_(torch.tensor([1, 2, 3]))
    assert staged.commit().result() == 1
    back = store.get_state_dict("w/v1").result()
    assert torch.equal(back["a"].torch(), torch.full((64, 64), 1.5))
    assert back["b"].torch().tolist() == [1, 2, 3]
    # Specs from tensors: the next version reuses the shapes.
    nxt = store.stage_publish("w", {"a": a, "b": torch.zeros(3, dtype=torch.int64)}).result()
    nxt.abort()
    assert store.latest_version("w").result() == 1


def test_racing_publishers_get_a_conflict_never_a_lost_version(store):
    import threading
    won, lost = [], []

    def writer(n):
        for r in range(15):
            sd = {"w": torch.full((1000,), float(n * 100 + r)), "who": n}
            try:
                v = store.publish_state_dict("race", sd, keep=1000).result()
                won.append((v, n, r))
            except meshstore.ConflictError as e:
                assert "another writer published under 'race'" in str(e)
                lost.append((n, r))

    threads = [threading.Thread(target=writer, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(won) + len(lost) == 30
    assert len({v for v, _, _ in won}) == len(won)  # no version won twice
    for v, n, r in won:  # each version holds its winner's bytes
        got = store.get_state_dict(f"race/v{v}").result()
        assert got["who"] == n and got["w"].torch()[0].item() == n * 100 + r
    assert store.latest_version("race").result() == max(v for v, _, _ in won)
