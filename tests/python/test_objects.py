"""Objects that are not tensors: bytes and str as themselves, the rest pickled."""

import os
import time

import pytest
import torch

import meshstore


def test_bytes_str_and_pickled_objects_come_back_as_put(store):
    store.put("raw", b"\x00\x01binary").result()
    store.put("text", "h\u00e9llo").result()
    store.put("obj", {"lr": 0.1, "steps": [1, 2, 3], "name": None}).result()
    assert store.get("raw").result() == b"\x00\x01binary"
    assert store.get("text").result() == "h\u00e9llo"
    assert store.get("obj").result() == {"lr": 0.1, "steps": [1, 2, 3], "name": None}
    infos = {i["key"]: i for i in store.list("").result()}
    assert infos["raw"]["format"] == "bytes"
    assert infos["text"]["format"] == "utf8"
    assert infos["obj"]["format"] == "pickle"
    assert infos["text"]["nbytes"] == len("h\u00e9llo".encode())  # stored as its UTF-8


def test_large_objects_travel_through_a_transport(store):
    blob = bytes(range(256)) * 4096  # 1 MiB: more than fits in a control message
    store.put("blob", blob).result()
    assert store.get("blob").result() == blob


def test_objects_and_tensors_mix_in_batches(store):
    store.put_batch({"t": torch.ones(2), "o": [1, 2], "s": "x"}).result()
    t, o, s = store.get_batch(["t", "o", "s"]).result()
    assert torch.equal(t.torch(), torch.ones(2)) and o == [1, 2] and s == "x"


def test_an_object_is_not_a_tensor(store):
    store.put("o", "text").result()
    with pytest.raises(meshstore.WrongKindError, match="holds an object"):
        store.get_into("o", torch.empty(4, dtype=torch.uint8)).result()
    with pytest.raises(TypeError, match="slice needs a tensor"):
        store.put("o", "text", slice=meshstore.TensorSlice((1,), (0,), (1,)))


def test_replacing_a_key_changes_its_kind(store):
    store.put("k", torch.ones(3)).result()
    store.put("k", "now text").result()
    assert store.get("k").result() == "now text"
    store.put("k", torch.zeros(2)).result()
    assert torch.equal(store.get("k").result().torch(), torch.zeros(2))


def test_a_cache_style_store_evicts_instead_of_refusing():
    with meshstore.Store.embedded(volume_capacity_bytes=1 << 20, eviction="lru") as store:
        for i in range(8):  # 2 MiB through a 1 MiB volume
            store.put(f"c{i}", torch.full((64 * 1024,), float(i))).result()
        assert not store.exists("c0").result()
        assert torch.equal(store.get("c7").result().torch(), torch.full((64 * 1024,), 7.0))
    with meshstore.Store.embedded(volume_capacity_bytes=1 << 20) as store:
        for i in range(4):
            store.put(f"c{i}", torch.zeros(64 * 1024)).result()
        with pytest.raises(meshstore.OutOfCapacityError, match="is full"):
            store.put("c4", torch.zeros(64 * 1024)).result()


def _have_pidfd():
    """Lease-free reads need pidfd (Linux 5.3) to watch a volume's process."""
    try:
        os.close(os.pidfd_open(os.getpid()))
        return True
    except (AttributeError, OSError):
        return False


def test_the_fast_path_spin_is_an_option():
    # 0: the rings' waiting ends sleep at once; the results are the same.
    with meshstore.Store.embedded(fast_path_spin_us=0) as s:
        for i in range(20):
            s.put("step", {"step": i}).result()
            assert s.get("step").result() == {"step": i}


@pytest.mark.parametrize("transport", [None, "tcp"])
def test_small_values_go_over_the_channel(transport):
    # transport "tcp": the client's channel is a tcp connection of its own,
    # as to a volume on another host.
    kwargs = {"transport": transport} if transport else {}
    s = meshstore.Store.embedded(**kwargs)
    try:
        for i in range(20):  # the first reads may come before the ring is open
            s.put("step", {"step": i}).result()
            s.put("w", torch.full((4, 4), float(i))).result()
            assert s.get("step").result() == {"step": i}
            out = torch.empty(4, 4)
            s.get_into("w", out).result()
            assert torch.equal(out, torch.full((4, 4), float(i)))
        # The ring opens in the background; once it is there, a small put
        # and get take it.
        deadline = time.monotonic() + 10
        while s.fast_path_stats()["rings"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        before = s.fast_path_stats()
        assert before["rings"] >= 1
        s.put("w", torch.full((4, 4), 99.0)).result()
        out = torch.empty(4, 4)
        s.get_into("w", out).result()
        assert torch.equal(out, torch.full((4, 4), 99.0))
        after = s.fast_path_stats()
        assert after["puts"] == before["puts"] + 1
        assert after["hits"] == before["hits"] + 1
        # Larger than the ring serves: read back without a lease over shm
        # (the chosen transport here); over tcp, leased.
        big = torch.arange(1 << 18, dtype=torch.float32)
        s.put("big", big).result()
        into = torch.empty(1 << 18)
        s.get_into("big", into).result()
        assert torch.equal(into, big)
        lease_free = 0 if transport == "tcp" or not _have_pidfd() else 1
        assert s.fast_path_stats()["lease_free_reads"] == after["lease_free_reads"] + lease_free
    finally:
        s.close()
    with pytest.raises(TypeError, match="'encrypt_tcp' has the wrong type"):
        meshstore.Store.embedded(encrypt_tcp="yes")
    # The option that sent every call through the actors is gone: one route.
    with pytest.raises(TypeError, match="unknown store option 'fast_path'"):
        meshstore.Store.embedded(fast_path=False)


def test_a_store_with_metrics_serves_its_calls_to_prometheus():
    import re
    import urllib.request

    with meshstore.Store.embedded(metrics="127.0.0.1:0") as s:
        at = s.metrics_address()
        assert re.fullmatch(r"127\.0\.0\.1:[1-9][0-9]*", at), at
        s.put("w", torch.ones(256)).result()
        s.get("w").result()
        # A call is counted by its future's callback, which may run just
        # after result() returned: ask again, within a bound.
        deadline = time.monotonic() + 30
        while True:
            body = urllib.request.urlopen(f"http://{at}/metrics", timeout=10).read().decode()
            counted = re.search(
                r'^meshstore_operation_duration_seconds_count\{op="get"\} [1-9]', body, re.M)
            if counted or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert counted, body
        assert re.search(r'^meshstore_keys\{volume="[^"]+"\} 1$', body, re.M), body
        ready = urllib.request.urlopen(f"http://{at}/readyz", timeout=10)
        assert ready.status == 200
    with meshstore.Store.embedded() as s:
        assert s.metrics_address() == ""
