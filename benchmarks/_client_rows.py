"""The rows of benchmarks/pipeline.py for the clients of issue 29, run in the pool's processes:
the asyncio producer (`ipc.aio.Producer.send_async` one message at a time, auto-batched, from
one event loop) and the consumers: one group member of a 4-member group (each reads its
share of BenchTopic's queues), and the asyncio consumer (one, reading every queue).

A group worker joins, then beats (`Consumer.rebalance`) for 5 s and until the group gave it
its share (one queue of four), reading nothing, so that the run times reading, not the
handover (a member that read a queue before it moved would make the next owner read it again).
"""
from __future__ import annotations

import asyncio
import collections
import os
import time

TOPIC = "BenchTopic"
AUTO_WINDOW = 4096              # messages awaiting their result per producer (auto-batching)


def aio_produce(address: str, body_size: int, start_at: float, seconds: float) -> dict:
    """send_async of one message at a time through ipc.aio.Producer for `seconds`."""
    return asyncio.run(_aio_produce(address, body_size, start_at, seconds))


async def _aio_produce(address: str, body_size: int, start_at: float, seconds: float) -> dict:
    from ipc import aio
    bodies = [os.urandom(body_size) for _ in range(64)]
    lat: list = []
    errors = collections.Counter()
    sent = 0
    async with aio.Producer(address, timeout=30.0, window=1024) as p:
        await p.queue_count(TOPIC)
        pending: collections.deque = collections.deque()

        def done(fut, t0):
            if fut.exception() is not None:
                errors[type(fut.exception()).__name__] += 1
            elif fut.result().ok:
                lat.append(time.monotonic() - t0)
            else:
                errors[fut.result().status.name] += 1
        late = time.monotonic() - start_at
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        end, i = start_at + seconds, 0
        while time.monotonic() < end:
            t0 = time.monotonic()
            fut = await p.send_async(TOPIC, bodies[i & 63])
            fut.add_done_callback(lambda f, t0=t0: done(f, t0))
            pending.append(fut)
            sent += 1
            if len(pending) >= AUTO_WINDOW:
                await pending.popleft()
            i += 1
        await asyncio.gather(*pending, return_exceptions=True)
        last = time.monotonic()
    return {"acked": len(lat), "sent": sent, "bytes": len(lat) * body_size, "last": last,
            "latencies": lat, "errors": dict(errors), "late_s": max(0.0, late)}


def group_consume(address: str, members: int, queues: int, start_at: float, seconds: float) -> dict:
    """One member of group `bench-group-N`: wait for its share, then read it from the start
    until caught up (or `seconds`)."""
    from ipc import Consumer
    n = nbytes = 0
    # auto commit: a member that is done commits at close before it leaves, so that the member
    # that takes its queue over does not read them again
    with Consumer(address, f"bench-group-{int(start_at)}", TOPIC, max_msgs=1024, long_poll_ms=200,
                  heartbeat_interval_ms=200) as c:
        share = max(1, queues // members)
        settle = start_at + 5.0              # every member beats until then: all handovers done
        while time.monotonic() < settle or (len(c.assignment()) != share
                                            and time.monotonic() < settle + 25):
            c.rebalance()
            time.sleep(0.05)
        t0 = time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:
            msgs = c.poll(200)
            for m in msgs:
                nbytes += len(m.body)
            n += len(msgs)
            if c.caught_up:
                break
        last = time.monotonic()
    return {"messages": n, "bytes": nbytes, "t0": t0, "last": last}


def aio_consume(address: str, seconds: float) -> dict:
    return asyncio.run(_aio_consume(address, seconds))


async def _aio_consume(address: str, seconds: float) -> dict:
    from ipc import aio
    n = nbytes = 0
    async with aio.Consumer(address, "bench-aio", TOPIC, queues=range(4), max_msgs=1024,
                            long_poll_ms=200, auto_commit=False) as c:
        t0 = time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:
            msgs = await c.poll(200)
            for m in msgs:
                nbytes += len(m.body)
            n += len(msgs)
            if c.caught_up:
                break
        elapsed = time.monotonic() - t0
    return {"messages": n, "bytes": nbytes, "seconds": elapsed}
