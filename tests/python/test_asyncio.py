"""Futures in asyncio: gather, cancellation, timeouts, callbacks, threads."""

import asyncio
import threading

import pytest
import torch

import meshstore


@pytest.mark.asyncio
async def test_gather_of_many_puts_and_gets(store):
    tensors = [torch.full((257,), float(i)) for i in range(300)]
    await asyncio.gather(*(store.put(f"g.{i}", t) for i, t in enumerate(tensors)))
    got = await asyncio.gather(*(store.get(f"g.{i}") for i in range(300)))
    assert all(torch.equal(g.torch(), t) for g, t in zip(got, tensors))
    assert len(await store.keys("g")) == 300


@pytest.mark.asyncio
async def test_errors_are_raised_at_the_await(store):
    with pytest.raises(KeyError):
        await store.get("missing")
    results = await asyncio.gather(store.get("missing"), store.put("ok", torch.ones(1)),
                                   return_exceptions=True)
    assert isinstance(results[0], meshstore.NotFoundError) and results[1] is None


@pytest.mark.asyncio
async def test_a_cancelled_task_leaves_the_store_working(store):
    reader = {"w": torch.zeros(1024)}
    waiting = asyncio.ensure_future(store.get_next_state_dict_into("p", reader, 0, timeout=30))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    # The call itself runs on: it still holds `reader`'s tensor alive, fills
    # it when the version comes, and the store serves every other call.
    assert await store.publish_state_dict("p", {"w": torch.ones(1024)}) == 1
    fresh = {"w": torch.zeros(1024)}
    assert await store.get_latest_state_dict_into("p", fresh) == 1
    assert (fresh["w"] == 1).all()


@pytest.mark.asyncio
async def test_a_store_deadline_is_a_timeout_error(store):
    with pytest.raises(meshstore.TimeoutError) as e:
        await store.get_next_state_dict_into("never", {"w": torch.zeros(1)}, 0, timeout=0.2)
    assert isinstance(e.value, TimeoutError) and e.value.code_name == "timeout"
    # asyncio.wait_for gives up on the wait; the store is unharmed.
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(
            asyncio.ensure_future(store.get_next_state_dict_into("never", {"w": torch.zeros(1)},
                                                                 0, timeout=5)), 0.1)
    await store.put("after", torch.ones(1))


def test_result_timeout_gives_up_waiting_not_the_call(store):
    fut = store.get_next_state_dict_into("later", {"w": torch.zeros(4)}, 0, timeout=10)
    with pytest.raises(TimeoutError) as e:
        fut.result(timeout=0.05)
    assert not isinstance(e.value, meshstore.Error)  # a wait that gave up, not the store's
    assert not fut.done()
    store.publish_state_dict("later", {"w": torch.ones(4)}).result()
    assert fut.result(timeout=10) == 1
    with pytest.raises(ValueError, match="timeout"):
        fut.result(timeout=-1)


def test_done_callbacks_run_once_the_call_completes(store):
    seen = threading.Event()
    calls = []
    fut = store.put("cb", torch.ones(16))
    fut.add_done_callback(lambda f: (calls.append(f.exception()), seen.set()))
    assert seen.wait(10)
    assert calls == [None]
    # On a completed future the callback runs at once, on this thread.
    here = []
    fut.add_done_callback(lambda f: here.append(threading.current_thread()))
    assert here == [threading.current_thread()]
    failed = store.get("nope")
    assert isinstance(failed.exception(timeout=10), KeyError)


def test_many_threads_share_one_store(store):
    errors = []

    def worker(n):
        try:
            for i in range(50):
                t = torch.full((64,), float(n * 100 + i))
                store.put(f"th.{n}.{i}", t).result()
                assert torch.equal(store.get(f"th.{n}.{i}").result().torch(), t)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(store.keys("th").result()) == 200


def test_calls_after_close_fail_with_closed_error():
    store = meshstore.Store.embedded()
    store.close()
    store.close()  # idempotent
    assert store.closed
    with pytest.raises(meshstore.ClosedError):
        store.put("x", torch.ones(1)).result()


def test_an_unreachable_store_is_a_connection_error():
    with pytest.raises(ConnectionError) as e:
        meshstore.Store.connect("127.0.0.1:1", connect_timeout=0.3)
    assert isinstance(e.value, meshstore.ConnectionError) and "127.0.0.1:1" in str(e.value)


def test_bad_options_are_refused_by_name():
    with pytest.raises(TypeError, match="unknown store option 'num_volume'"):
        meshstore.Store.embedded(num_volume=2)
    with pytest.raises(ValueError, match="num_volumes"):
        meshstore.Store.embedded(num_volumes=0)
    with pytest.raises(ValueError, match="request_timeout"):
        meshstore.Store.embedded(request_timeout=-1)
    with pytest.raises(ValueError, match="fast_path_spin"):
        meshstore.Store.embedded(fast_path_spin_us=-1)
    with pytest.raises(ValueError, match="reconnect_timeout"):
        meshstore.Store.embedded(reconnect_timeout=-1)
    meshstore.Store.embedded(reconnect_timeout=0).close()  # 0: never reconnect
    with pytest.raises(TypeError, match="'strategy' has the wrong type"):
        meshstore.Store.embedded(strategy=3)
    with pytest.raises(ValueError, match="rebuild_timeout"):
        meshstore.Store.embedded(rebuild_timeout=0)
    with pytest.raises(ValueError, match="state_dir '/nonexistent/dir' needs listen"):
        meshstore.Store.embedded(state_dir="/nonexistent/dir")


def test_a_servers_state_dir_is_held_while_it_serves(tmp_path):
    first = meshstore.Store.embedded(listen="127.0.0.1:0", state_dir=str(tmp_path))
    with pytest.raises(ConnectionError, match="another live server holds it"):
        meshstore.Store.embedded(listen="127.0.0.1:0", state_dir=str(tmp_path))
    first.close()
    meshstore.Store.embedded(listen="127.0.0.1:0", state_dir=str(tmp_path)).close()


def slow_store():
    """A store whose transfers go in 1 MiB round trips, one at a time: a
    64 MiB call lasts long enough to be cancelled in the middle."""
    return meshstore.Store.embedded(transport="rpc", rpc_chunk_bytes=1 << 20,
                                    rpc_chunks_in_flight=1, shared_memory_volumes=False)


def test_cancel_stops_a_get_into_and_never_writes_the_tensor_again():
    with slow_store() as s:
        s.put("w", torch.full((16 << 20,), 7, dtype=torch.int32)).result()
        dst = torch.zeros(16 << 20, dtype=torch.int32)
        # The first call connects to the volume inside the call, which
        # leaves little of its transfer to cancel on a fast host; the
        # calls after it return at once.
        s.get_into("w", dst).result()
        assert (dst == 7).all()
        for _ in range(10):  # a call may still finish before cancel(): again
            dst.zero_()
            fut = s.get_into("w", dst)
            if fut.cancel():
                break
            fut.result()  # it finished whole
            assert (dst == 7).all()
        else:
            pytest.fail("every get_into finished before cancel() could stop it")
        dst.fill_(-1)  # the caller's memory again
        with pytest.raises(meshstore.CancelledError) as e:
            fut.result()
        assert e.value.code_name == "cancelled"
        assert fut.cancelled()
        assert not s.exists("nothing").cancel()  # other calls cannot be cancelled
    assert (dst == -1).all()  # the store is closed: nothing can write any more


async def _wait(fut):
    return await fut


@pytest.mark.asyncio
async def test_cancelling_a_task_cancels_the_put_it_awaits():
    s = slow_store()
    try:
        await s.put("w", torch.full((16 << 20,), 1, dtype=torch.int32))
        fut = s.put("w", torch.full((16 << 20,), 2, dtype=torch.int32))
        task = asyncio.ensure_future(_wait(fut))
        await asyncio.sleep(0)  # one turn of the loop: the task is awaiting the put
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert fut.cancelled()
        assert ((await s.get("w")).torch() == 1).all()  # the old version, whole
    finally:
        s.close()
