"""Tensors in and out through DLPack: every dtype torch 1.13 exports, views,
0-dim and empty tensors, numpy, zero copy, and the refusals."""

import numpy as np
import pytest
import torch

import meshstore

TORCH_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                torch.float16, torch.bfloat16, torch.float32, torch.float64]


def sample(dtype, shape=(3, 5)):
    if dtype == torch.bool:
        return torch.arange(15).reshape(shape) % 3 == 0
    if dtype.is_floating_point:
        return (torch.randn(shape) * 100).to(dtype)
    return torch.arange(15, dtype=torch.int64).reshape(shape).to(dtype)


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_every_torch_dtype_round_trips(store, dtype):
    t = sample(dtype)
    store.put("t", t).result()
    back = store.get("t").result()
    assert back.dtype == str(dtype).replace("torch.", "")
    assert back.shape == (3, 5)
    got = back.torch()
    assert got.dtype == dtype
    assert torch.equal(got, t)
    into = torch.empty_like(t)
    assert store.get_into("t", into).result() is into
    assert torch.equal(into, t)


def test_stored_dtype_is_what_cpp_sees(store):
    store.put("b", torch.tensor([True, False])).result()
    info = store.list("b").result()[0]
    assert info["dtype"] == "bool" and info["shape"] == (2,)


@pytest.mark.parametrize("view", ["transposed", "sliced", "stepped", "expanded"])
def test_strided_views_go_in_and_are_filled_in_place(store, view):
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    t = {"transposed": base.t(), "sliced": base[1:5, 2:7], "stepped": base[::2, ::3],
         "expanded": torch.arange(4.0).expand(3, 4)}[view]
    assert not t.is_contiguous()
    store.put("v", t).result()
    assert torch.equal(store.get("v").result().torch(), t.contiguous())
    # A strided destination is written element by element, the rest untouched.
    dst_base = torch.full((16, 16), -1.0)
    dst = dst_base[::2, ::2][: t.shape[0], : t.shape[1]]
    store.get_into("v", dst).result()
    assert torch.equal(dst, t)
    assert (dst_base[1::2] == -1).all()


def test_zero_dim_and_empty_tensors(store):
    store.put("scalar", torch.tensor(3.5)).result()
    back = store.get("scalar").result()
    assert back.shape == ()
    assert back.torch().item() == 3.5
    store.put("empty", torch.empty(0, 4, dtype=torch.int32)).result()
    e = store.get("empty").result()
    assert e.shape == (0, 4) and e.torch().numel() == 0
    store.get_into("empty", torch.empty(0, 4, dtype=torch.int32)).result()


def test_numpy_in_and_out(store):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    store.put("np", a).result()
    back = np.from_dlpack(store.get("np").result())
    assert np.array_equal(back, a)
    dst = np.zeros((3, 4))
    assert store.get_into("np", dst).result() is dst
    assert np.array_equal(dst, a)
    store.put("npb", np.array([True, False, True])).result()
    assert store.get("npb").result().numpy().tolist() == [True, False, True]
    store.put("np_view", a[:, 1::2]).result()
    assert np.array_equal(store.get("np_view").result().numpy(), a[:, 1::2])


def test_get_into_keeps_the_destinations_memory(store):
    t = torch.randn(256, 256)
    store.put("w", t).result()
    dst = torch.zeros(256, 256)
    ptr = dst.data_ptr()
    out = store.get_into("w", dst).result()
    assert out is dst and dst.data_ptr() == ptr
    assert torch.equal(dst, t)


def test_get_shares_its_bytes_with_torch_and_numpy(store):
    store.put("w", torch.randn(64, 64)).result()
    got = store.get("w").result()
    as_torch = torch.from_dlpack(got)
    as_numpy = np.from_dlpack(got)
    assert as_torch.data_ptr() == got.data_ptr
    assert as_numpy.__array_interface__["data"][0] == got.data_ptr
    as_torch[0, 0] = 42.0  # one memory: numpy sees torch's write
    assert as_numpy[0, 0] == 42.0


def shm_mapping_of(address):
    """The /dev/shm file mapped at `address` in this process, or None."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi and len(fields) > 5 and fields[5].startswith("/dev/shm/"):
                return fields[5]
    return None


def test_get_view_is_the_stores_shared_memory_read_only(store):
    w = torch.randn(512, 512)  # large enough to live in its own shm segment
    store.put("big", w).result()
    view = store.get_view("big").result()
    copy = store.get("big").result()
    if not view.read_only:
        pytest.skip("this store's volumes are not mapped into this process (no shm)")
    # The view is the volume's segment itself; get() made a private copy.
    assert shm_mapping_of(view.data_ptr) is not None
    assert shm_mapping_of(copy.data_ptr) is None
    arr = np.asarray(view)
    assert not arr.flags.writeable
    assert arr.__array_interface__["data"][0] == view.data_ptr
    assert np.array_equal(arr, w.numpy())
    with pytest.raises(BufferError, match="read-only"):
        torch.from_dlpack(view)
    with pytest.raises(ValueError, match="read-only"):
        store.get_into("big", view).result()


def test_mismatches_are_value_errors_and_leave_the_destination(store):
    store.put("w", torch.ones(2, 3)).result()
    dst = torch.full((3, 2), 7.0)
    with pytest.raises(ValueError, match="shape") as e:
        store.get_into("w", dst).result()
    assert isinstance(e.value, meshstore.MismatchError) and e.value.code_name == "shape_mismatch"
    assert (dst == 7).all()
    with pytest.raises(meshstore.MismatchError, match="dtype"):
        store.get_into("w", torch.empty(2, 3, dtype=torch.float64)).result()


def test_a_missing_key_is_a_key_error_naming_it(store):
    with pytest.raises(KeyError) as e:
        store.get("nope").result()
    assert isinstance(e.value, meshstore.NotFoundError)
    assert e.value.code == 2 and "nope" in str(e.value)
    with pytest.raises(KeyError):
        store.get_into("nope", torch.empty(1)).result()
    with pytest.raises(KeyError):
        store.delete("nope").result()


def test_what_dlpack_cannot_carry_is_refused_clearly(store):
    # requires_grad: a put only reads (detached); writing in place is refused.
    p = torch.nn.Parameter(torch.ones(3))
    store.put("p", p).result()
    assert torch.equal(store.get("p").result().torch(), torch.ones(3))
    with pytest.raises(ValueError, match="requires grad"):
        store.get_into("p", p)
    store.get_into("p", p.detach()).result()
    store.put("p2", torch.full((3,), 2.0)).result()
    with torch.no_grad():  # as torch allows p.copy_(...) there
        assert store.get_into("p2", p).result() is p
    assert torch.equal(p.detach(), torch.full((3,), 2.0)) and p.requires_grad
    # numpy refuses to export read-only arrays.
    ro = np.ones(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        store.put("ro", ro)
    with pytest.raises(ValueError, match="complex"):
        store.put("c", torch.ones(2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="negative strides"):
        store.put("flip", np.arange(4.0)[::-1])
    with pytest.raises(TypeError, match="expected a tensor"):
        store.get_into("p", [1.0, 2.0, 3.0])


def test_bad_keys_and_slices_are_refused(store):
    with pytest.raises(TypeError, match="key is a str"):
        store.put(3, torch.ones(1))
    with pytest.raises(ValueError):
        store.put("", torch.ones(1)).result()
    with pytest.raises(ValueError, match="out_of_range|outside|leaves"):
        store.put("s", torch.ones(2), slice=meshstore.TensorSlice((4,), (3,), (2,)))


def test_sharded_puts_and_slice_reads(store):
    full = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    assert not store.exists("sh").result()
    store.put("sh", full[:2], slice=meshstore.TensorSlice((4, 8), (0, 0), (2, 8))).result()
    assert not store.exists("sh").result()  # partially committed
    with pytest.raises(meshstore.PartiallyCommittedError):
        store.get("sh").result()
    store.put("sh", full[2:], slice=meshstore.TensorSlice((4, 8), (2, 0), (2, 8))).result()
    assert store.exists("sh").result()
    box = meshstore.TensorSlice((4, 8), (1, 2), (2, 4))
    assert torch.equal(store.get("sh", slice=box).result().torch(), full[1:3, 2:6])
    dst = torch.empty(2, 4)
    store.get_into("sh", dst, slice=box).result()
    assert torch.equal(dst, full[1:3, 2:6])


def test_batches(store):
    ts = {f"b.{i}": torch.full((i + 1,), float(i)) for i in range(20)}
    store.put_batch(ts).result()
    got = store.get_batch(list(ts)).result()
    assert all(torch.equal(g.torch(), t) for g, t in zip(got, ts.values()))
    dsts = {k: torch.empty_like(t) for k, t in ts.items()}
    out = store.get_into_batch(dsts).result()
    assert all(o is d for o, d in zip(out, dsts.values()))
    assert all(torch.equal(dsts[k], ts[k]) for k in ts)
    assert store.delete_batch(["b.0", "b.1", "absent"]).result() == 2
    assert store.keys("b").result() == sorted(f"b.{i}" for i in range(2, 20))


def test_encrypted_tcp_moves_tensors_whole():
    # A volume that seals its tcp bytes (encrypt_tcp), read back over tcp.
    with meshstore.Store.embedded(transport="tcp", encrypt_tcp=True) as store:
        t = torch.randn(256, 1024)
        store.put("sealed", t).result()
        into = torch.empty_like(t)
        store.get_into("sealed", into).result()
        assert torch.equal(into, t)


def test_replicas_keep_each_key_on_two_volumes():
    # replicas=2: the put commits with a copy on the other volume.
    with meshstore.Store.embedded(
        strategy="controller_colocated", num_volumes=2, replicas=2
    ) as store:
        t = torch.randn(512, 512)
        store.put("kept", t).result()
        info = store.list("kept").result()[0]
        assert (info["copies"], info["shards"]) == (2, 1)
        assert torch.equal(store.get("kept").result().torch(), t)
        store.put("once", t, replicas=1).result()
        assert store.list("once").result()[0]["copies"] == 1
        with pytest.raises(meshstore.InvalidArgumentError, match="replicas must be in"):
            store.put("bad", t, replicas=0)
        with pytest.raises(TypeError, match="replicas need a tensor"):
            store.put("bad", b"bytes", replicas=2)
    with pytest.raises(meshstore.InvalidArgumentError, match="placement.replicas"):
        meshstore.Store.embedded(replicas=0)


def test_encrypt_tcp_wants_a_bool():
    with pytest.raises(TypeError):
        meshstore.Store.embedded(encrypt_tcp="yes")


def test_a_bf16_key_is_read_into_float32_with_cast(store):
    t = (torch.randn(64, 33) * 100).to(torch.bfloat16)
    store.put("bf", t).result()
    into = torch.empty(64, 33, dtype=torch.float32)
    with pytest.raises(meshstore.MismatchError):
        store.get_into("bf", into).result()
    assert store.get_into("bf", into, cast=True).result() is into
    assert torch.equal(into, t.to(torch.float32))  # widening is exact
    narrow = torch.empty(64, 33, dtype=torch.bfloat16)
    store.put("f32", into).result()
    store.get_into("f32", narrow, cast=True).result()
    assert torch.equal(narrow, into.to(torch.bfloat16))  # torch's rounding, bit for bit
