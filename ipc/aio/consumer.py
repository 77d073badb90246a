"""`ipc.aio.Consumer`: the asyncio consumer. It *is* the blocking ipc.consumer.Consumer (same
arguments, queue cursors, pull pipeline of ipc/pulls.py, positions, commits' requests, seeks,
group membership state of ipc/group_member.py, and the same steps for everything that waits
for the store: ipc/steps.py) on an AsyncConnection, the steps awaited instead of blocked on:
`open` (discovery or joining the group), `poll`, `commit`, `rebalance`, the seeks, `close`,
`async for`. The pulls themselves are sent by the shared pipeline without waiting
(AsyncConnection.request is callable from sync code) and their replies are taken in as the
blocking consumer takes them.

`async with Consumer(address, group, topic) as c: async for m in c: ...`
"""
from __future__ import annotations

import asyncio
import time

from ipc.aio.connection import AsyncConnection
from ipc.consumer import Consumer as _Blocking
from ipc.keepalive import run_keepalive
from ipc.steps import arun


class Consumer(_Blocking):
    """The asyncio consumer (module docstring); arguments as ipc.Consumer's."""

    def __init__(self, address: str | None = None, group: str | None = None, topic: str | None = None,
                 queues=None, tag_filter: str | None = None, start: str = "earliest", *,
                 store: str | None = None, timeout: float = 10.0, key_file: str | None = None, server_key_file: str | None = None, **kw):
        conn = AsyncConnection(address, store=store, timeout=timeout, key_file=key_file,
                               server_key_file=server_key_file)
        super().__init__(address, group, topic, queues, tag_filter, start, store=store, timeout=timeout,
                         connection=conn, **kw)
        self._own = True

    def _discover(self) -> None:
        """Nothing without waiting: `open` discovers (the blocking constructor calls this)."""

    def _start_keepalive(self) -> None:
        """`open` starts the heartbeats between polls, as a task on the loop."""

    async def open(self) -> "Consumer":
        try:
            await self._conn.open()
            await self._adiscover()
        except BaseException:
            self._conn.close()
            raise
        if self._keepalive is not None:              # heartbeats between polls: a task
            self._keepalive_host = asyncio.ensure_future(run_keepalive(self._keepalive))
        return self

    async def __aenter__(self) -> "Consumer":
        return await self.open()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _adiscover(self) -> None:
        await arun(self._conn, self._discover_steps())

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list:
        """As ipc.Consumer.poll, awaiting instead of blocking."""
        self._check_open()
        self._give_back()
        self.last_poll = time.monotonic()
        try:
            return await arun(self._conn, self._poll_steps(timeout_ms, max_records))
        finally:
            self.last_poll = time.monotonic()

    def __aiter__(self):
        self._check_open()
        return self

    async def __anext__(self):
        """The next message, long polling forever; a message counts as handed out when the
        loop gets it (the rest of its poll is given back when the loop stops and `poll` is
        called, as the blocking iteration does)."""
        while True:
            if self._closed:
                raise StopAsyncIteration
            it = self._iterating
            if it is not None and it[1] < len(it[0]):
                it[1] += 1
                return it[0][it[1] - 1]
            self._iterating = None
            batch = await self.poll(self.long_poll_ms)
            if batch:
                self._iterating = [batch, 0]

    def _give_back(self) -> None:
        it, self._iterating = self._iterating, None
        if it is not None and it[1] < len(it[0]):
            self._pulls.give_back(it[0][it[1]:], {st.queue_id: st for st in self._order})

    # -- offsets and seeks: the blocking consumer's steps, awaited --------------------------
    async def commit(self) -> dict:
        """Store every queue's position for the group now; queue id -> offset (inside an
        `async for`, the offset after the last message the loop got)."""
        self._check_open()
        return await arun(self._conn, self._commit_steps())

    async def rebalance(self) -> list:
        self._check_open()
        if self._group is not None:
            self._next_discover = await arun(self._conn, self._group.beat_steps())
        return self.assignment()

    async def seek_to_timestamp(self, timestamp_ms: int) -> dict:
        self._check_open()
        return await arun(self._conn, self._seek_time_steps(timestamp_ms))

    async def seek_to_beginning(self) -> dict:
        self._check_open()
        return await arun(self._conn, self._seek_bounds_steps("min_offset"))

    async def seek_to_end(self) -> dict:
        self._check_open()
        return await arun(self._conn, self._seek_bounds_steps("max_offset"))

    async def close(self) -> None:
        """Commit positions (with auto commit), leave the group, close the connection."""
        if not self._closed:
            self._closed = True
            if self._keepalive_host is not None:
                self._keepalive_host.cancel()
            await arun(self._conn, self._close_steps())
