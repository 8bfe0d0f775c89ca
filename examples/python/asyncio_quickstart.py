"""meshstore from asyncio in ten lines (docs/python.md)."""
import asyncio, torch, meshstore

async def main():
    with meshstore.Store.embedded() as store:
        w = torch.randn(1024, 1024)
        await asyncio.gather(*(store.put(f"layer.{i}", w) for i in range(8)))
        out = await store.get_into("layer.3", torch.empty_like(w))   # in place, no copy out
        print("asyncio_quickstart:", await store.keys("layer"), torch.equal(out, w))

asyncio.run(main())
