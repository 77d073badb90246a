"""The asyncio clients (ipc.aio) against a real `mqstore start` store, all through one event
loop: thousands of concurrent auto-batched sends with their own results in queue order, an
oversized message refused alone, flush and close sending what lingers, a full buffer that
times out (the appender stopped with SIGSTOP), two group members in one loop splitting the
queues with a stale commit refused, broadcasting, and `async for`."""
from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from core.status import PutMessageStatus
from ipc import aio
from ipc.connection import MQError
from ipc.protocol import ErrorCode
from tests.integration.supervised import SupervisedStore

MAX = 128 * 1024


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("aio"), mapped_file_size_commitlog=4 * 1024 * 1024,
                        max_message_size=MAX).start()
    yield s
    s.ensure_stopped()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def read(address: str, group: str, topic: str, n: int, **kw) -> list:
    out = []
    async with aio.Consumer(address, group, topic, **kw) as c:
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            out += await c.poll(200)
    return out


def test_concurrent_auto_batched_sends(store):
    async def main():
        async with aio.Admin(store.address) as admin:
            await admin.create_topic("aio-many", 4)
        async with aio.Producer(store.address) as p:
            futs = [await p.send_async("aio-many", b"m%d" % i, queue_id=i % 4) for i in range(5000)]
            big = await p.send_async("aio-many", b"B" * (MAX + 1), queue_id=0)
            results = await asyncio.gather(*futs)
            refused = await big
        assert all(r.ok and r.count == 1 for r in results)
        assert refused.status is PutMessageStatus.MESSAGE_ILLEGAL
        for q in range(4):
            assert [r.queue_offset for r in results[q::4]] == list(range(1250))
        got = await read(store.address, "g-aio-many", "aio-many", 5000)
        assert sorted(m.uniq_key for m in got) == sorted(r.uniq_key for r in results)
        by_key = {r.uniq_key: r for r in results}
        assert all(by_key[m.uniq_key].queue_offset == m.queue_offset for m in got)
    run(main())


def test_thousands_of_concurrent_coroutines(store):
    async def main():
        async with aio.Producer(store.address) as p:
            async def batched(i):
                return await (await p.send_async("aio-conc", b"c%d" % i, queue_id=i % 2))

            async def direct(i):
                return await p.send("aio-conc", b"d%d" % i, queue_id=2 + i % 2)
            results = await asyncio.gather(*(batched(i) for i in range(3000)),
                                           *(direct(i) for i in range(1000)))
        assert all(r.ok for r in results)
        for q in range(2):
            assert [r.queue_offset for r in results[q:3000:2]] == list(range(1500))
        assert sorted(r.queue_offset for r in results[3000:] if r.queue_id == 2) == list(range(500))
    run(main())


def test_flush_close_and_direct_send(store):
    async def main():
        p = await aio.Producer(store.address, linger_ms=60_000).open()
        futs = [await p.send_async("aio-linger", b"l%d" % i, queue_id=0) for i in range(5)]
        assert not any(f.done() for f in futs)
        direct = await p.send("aio-linger", b"direct", queue_id=0)     # not held by the linger
        assert direct.ok and direct.queue_offset == 5                  # after what it follows
        assert [f.result().queue_offset for f in futs] == list(range(5))
        later = [await p.send_async("aio-linger", b"c%d" % i, queue_id=0) for i in range(5)]
        await p.close()
        assert [f.result().queue_offset for f in later] == list(range(6, 11))
    run(main())


def test_a_full_buffer_times_out(store):
    async def main():
        async with aio.Producer(store.address, linger_ms=0, batch_max_bytes=16 * 1024,
                                buffer_max_bytes=64 * 1024, timeout=30) as p:
            assert (await p.send("aio-full", b"warm", queue_id=0)).ok
            appender = store.service("appender")["pid"]
            os.kill(appender, signal.SIGSTOP)
            taken = []
            try:
                with pytest.raises(TimeoutError, match="buffer"):
                    for _ in range(100):
                        taken.append(await p.send_async("aio-full", b"y" * 4096, queue_id=0, timeout=1.0))
            finally:
                os.kill(appender, signal.SIGCONT)
            assert len(taken) == 16
            assert all(r.ok for r in await asyncio.gather(*taken))
    run(main())


def test_members_in_one_loop_split_the_queues(store):
    async def main():
        async with aio.Admin(store.address) as admin, aio.Producer(store.address) as p:
            await admin.create_topic("aio-group", 4)
            futs = [await p.send_async("aio-group", b"g%d" % i, queue_id=i % 4) for i in range(400)]
            await asyncio.gather(*futs)
            kw = dict(session_timeout_ms=2000, heartbeat_interval_ms=100)
            a = await aio.Consumer(store.address, "g-aio", "aio-group", auto_commit=False, **kw).open()
            b = await aio.Consumer(store.address, "g-aio", "aio-group", **kw).open()
            got = []
            deadline = time.monotonic() + 20
            while sorted(a.assignment() + b.assignment()) != [0, 1, 2, 3] or not a.assignment() \
                    or not b.assignment():
                assert time.monotonic() < deadline
                got += await a.poll(50) + await b.poll(50)
            assert len(a.assignment()) == len(b.assignment()) == 2
            lost = [q for q in range(4) if q not in a.assignment()][0]
            with pytest.raises(MQError) as e:                      # a's stale commit
                await a._conn.call("reader", "commit_offset", group="g-aio", topic="aio-group",
                                   queue_id=lost, offset=0, **a._group.fields())
            assert e.value.code is ErrorCode.NOT_QUEUE_OWNER
            lag = await admin.consumer_lag("g-aio", "aio-group")
            assert len(lag["members"]) == 2
            await a.close()
            await b.close()
    run(main())


def test_broadcasting_and_async_for(store):
    async def main():
        async with aio.Producer(store.address) as p:
            futs = [await p.send_async("aio-b", b"b%d" % i) for i in range(100)]
            await asyncio.gather(*futs)
        for _ in range(2):
            seen = []
            async with aio.Consumer(store.address, "g-aio-b", "aio-b", mode="broadcasting") as c:
                async for m in c:
                    seen.append(bytes(m.body))
                    if len(seen) == 100:
                        break
                assert sorted(seen) == sorted(b"b%d" % i for i in range(100))
                assert sum((await c.commit()).values()) == 100           # kept by the client
        async with aio.Admin(store.address) as admin:
            assert await admin.fetch_offset("g-aio-b", "aio-b", 0) == -1
    run(main())


def test_seeks_and_rebalance_are_awaited(store):
    """The asyncio consumer's seeks run the blocking consumer's steps awaited (they called the
    blocking connection's `call` on an AsyncConnection before, and failed)."""
    async def main():
        async with aio.Admin(store.address) as admin:
            await admin.create_topic("aio-seek", 2)
        async with aio.Producer(store.address) as p:
            for i in range(10):
                assert (await p.send("aio-seek", b"s%d" % i, queue_id=i % 2)).ok
        async with aio.Consumer(store.address, "g-aio-seek", "aio-seek", queues=[0, 1]) as c:
            assert len(await read_from(c, 10)) == 10          # all 10 dispatched now
            assert await c.seek_to_beginning() == {0: 0, 1: 0}
            assert len(await read_from(c, 10)) == 10
            assert await c.seek_to_end() == {0: 5, 1: 5}
            assert await c.poll(100) == []
            assert await c.seek_to_timestamp(0) == {0: 0, 1: 0}
            assert await c.seek_to_end() == {0: 5, 1: 5}
            assert await c.rebalance() == [0, 1]
            assert await c.commit() == {0: 5, 1: 5}

    async def read_from(c, n):
        out, deadline = [], time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            out += await c.poll(200)
        return out
    run(main())
