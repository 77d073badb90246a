"""`ipc.aio.Consumer`: the asyncio consumer. It *is* the blocking ipc.consumer.Consumer (same
arguments, queue cursors, pull pipeline of ipc/pulls.py, positions, commits' requests, seeks,
group membership state of ipc/group_member.py) on an AsyncConnection, with the steps that wait
for the store made coroutines: `open` (discovery or joining the group), `poll`, `commit`,
`close`, `async for`. The pulls themselves are sent by the shared pipeline without waiting
(AsyncConnection.request is callable from sync code) and their replies are taken in as the
blocking consumer takes them.

`async with Consumer(address, group, topic) as c: async for m in c: ...`
"""
from __future__ import annotations

import logging
import time

from ipc.aio.connection import AsyncConnection
from ipc.client_common import ConnectionClosed, MQError, check_int, check_wait_ms, raise_for_error
from ipc.consumer import DISCOVER_INTERVAL_S, Consumer as _Blocking
from ipc.protocol import ERROR, ErrorCode
from ipc.pulls import RETRY_S, QueueCursor
from ipc.rebalance import LEAVE_TIMEOUT_S, Rebalancer

log = logging.getLogger("mqstore.consumer")


class _AsyncRebalancer(Rebalancer):
    """ipc.rebalance.Rebalancer's steps, awaiting the store."""

    async def abeat(self) -> float:
        c, m = self.consumer, self.member
        for _ in range(3):
            held = [st.queue_id for st in c._order]
            try:
                if m.joined:
                    env = await c._conn.call("reader", "heartbeat", **m.heartbeat_fields(held))
                else:
                    env = await c._conn.call("reader", "join_group", **m.join_fields())
            except MQError as e:
                if e.code == ErrorCode.UNKNOWN_MEMBER:
                    m.forget()
                    continue
                if e.code == ErrorCode.UNKNOWN_OP:
                    c._group = None
                    await c._adiscover()
                    return c._next_discover
                c.last_error = f"group {m.group}: {e}"
                return time.monotonic() + RETRY_S
            except (TimeoutError, ConnectionError) as e:
                c.last_error = f"group {m.group}: {e}"
                return time.monotonic() + RETRY_S
            gained, lost = m.take(env, held, time.monotonic())
            if gained:
                await c._aadd_queues(gained)
            c._discovered = True
            if not lost:
                break
            cursors = [c._states[q] for q in lost if q in c._states]
            for st in cursors:
                c._pulls.drop(st)
            if c.auto_commit:
                try:
                    await c._acommit(cursors)
                except (MQError, TimeoutError, ConnectionError) as e:
                    c.last_error = f"commit of released queues {lost}: {e}"
            for st in cursors:
                del c._states[st.queue_id]
                c._order.remove(st)
        return m.next_beat

    async def aleave(self) -> None:
        m = self.member
        if m.joined:
            try:
                await self.consumer._conn.call("reader", "leave_group", timeout=LEAVE_TIMEOUT_S,
                                               **m.leave_fields())
            except (MQError, TimeoutError, ConnectionError) as e:
                log.info("leave_group of %s failed: %s", m.member_id, e)
            m.forget()


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
        if self._group is not None:
            self._group = _AsyncRebalancer(self, self._group.member)

    def _discover(self) -> None:
        """Nothing without waiting: `open` discovers (the blocking constructor calls this)."""

    async def open(self) -> "Consumer":
        try:
            await self._conn.open()
            await self._adiscover()
        except BaseException:
            self._conn.close()
            raise
        return self

    async def __aenter__(self) -> "Consumer":
        return await self.open()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- assignment ------------------------------------------------------------------------
    async def _adiscover(self) -> None:
        if self._group is not None:
            self._next_discover = await self._group.abeat()
            return
        try:
            count = (await self._conn.call("reader", "topic_info", topic=self.topic))["queues"]
        except MQError as e:
            if e.code != ErrorCode.NOT_FOUND:
                raise
            count = 0
        wanted = self._wanted if self._wanted is not None else range(count)
        beyond = [q for q in wanted if q >= count]
        if count and beyond and not self._discovered:
            raise ValueError(f"queues={beyond}: topic {self.topic!r} has {count} queues (0..{count - 1})")
        new = [q for q in wanted if q not in self._states]
        if new:
            await self._aadd_queues(new)
        self._discovered = True
        self._next_discover = time.monotonic() + (DISCOVER_INTERVAL_S if count else RETRY_S)

    async def _aadd_queues(self, qids: list) -> None:
        conn, g, t = self._conn, self.group, self.topic
        fetches = [conn.request("reader", "fetch_offset", {"group": g, "topic": t, "queue_id": q})
                   for q in qids] if not self.broadcasting else []
        env, _ = await conn.request("reader", "queue_offsets", {"topic": t})
        bounds = {}
        if env.get("status") != ERROR:
            bounds = {e["queue_id"]: (e["min_offset"], e["max_offset"]) for e in env.get("queues", ())}
        for i, q in enumerate(qids):
            committed = raise_for_error((await fetches[i])[0], "fetch_offset").get("offset", -1) \
                if fetches else self._local.get(q, -1)
            lo, hi = bounds.get(q, (0, 0))
            newer = self.start == "earliest" or self._discovered
            offset = committed if committed >= 0 else (lo if newer else hi)
            st = QueueCursor(q, offset, committed, missing=q not in bounds)
            self._states[q] = st
            self._order.append(st)

    # -- polling -----------------------------------------------------------------------------
    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list:
        """As ipc.Consumer.poll, awaiting instead of blocking."""
        self._check_open()
        self._give_back()
        timeout_ms = check_wait_ms(timeout_ms)
        if max_records is not None:
            max_records = check_int(max_records, "max_records", 1)
        deadline = time.monotonic() + timeout_ms / 1000.0
        pulls = self._pulls
        while not self._closed:
            if pulls.arrivals:
                pulls.process()
            now = time.monotonic()
            if now >= self._next_discover:
                await self._adiscover()
            if self.auto_commit and now - self._last_commit >= self.auto_commit_interval:
                self._commit_async()
            pulls.issue(self._order, now)
            if pulls.ready:
                out = pulls.take(max_records)
                if out:
                    return out
                continue
            remaining = deadline - now
            if remaining <= 0:
                return []
            retry = min((st.retry_at for st in self._order if st.retry_at > now), default=None)
            if retry is not None:
                remaining = min(remaining, retry - now)
            await self._conn.wait(pulls.has_arrivals, max(0.0, min(remaining, self._next_discover - now)))
            if time.monotonic() >= deadline and not pulls.arrivals:
                return []
        return []

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

    # -- offsets -----------------------------------------------------------------------------
    def _commit_async(self) -> None:
        try:
            sent = self._commit_requests()
        except (TimeoutError, ConnectionError) as e:
            self.last_error = f"commit: {e}"
            return
        for st, pos, fut in sent:
            fut.add_done_callback(lambda f, st=st, pos=pos: self._acommitted(st, pos, f))

    def _acommitted(self, st, pos: int, fut) -> None:
        try:
            raise_for_error(fut.result()[0], "commit_offset")
            st.committed = pos
        except Exception as e:
            self.last_error = f"commit of queue {st.queue_id}: {e}"

    async def _acommit(self, cursors=None) -> dict:
        for st, pos, fut in self._commit_requests(cursors):
            raise_for_error((await fut)[0], "commit_offset")
            st.committed = pos
        return self.committed()

    async def commit(self) -> dict:
        """Store every queue's position for the group now; queue id -> offset (inside an
        `async for`, the offset after the last message the loop got)."""
        self._check_open()
        return await self._acommit()

    async def close(self) -> None:
        """Commit positions (with auto commit), leave the group, close the connection."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.auto_commit and self._order and not self._conn.closed:
                self._pulls.process()
                await self._acommit()
        except Exception as e:
            log.warning("final commit of %s/%s failed: %s", self.group, self.topic, e)
        finally:
            if self._group is not None and not self._conn.closed:
                await self._group.aleave()
            self._conn.close()

    def _check_open(self) -> None:
        if self._closed or self._conn.closed:
            raise ConnectionClosed("connection closed")
