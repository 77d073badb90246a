"""`ipc.aio.Producer`: the asyncio producer. The requests, their checks, the queue selection,
the auto-batching rules, the sending of batches and the results are the blocking producer's
(ipc/producer.py with its retries as steps, ipc/accumulator.py, ipc/batch_sender.py,
ipc/send_result.py); this module only waits with `await` instead of threads: a linger is a
`loop.call_later`, a full buffer an awaited condition.

- `await p.send_async(topic, body, ...)`: the message joins its queue's batch (as the blocking
  `send_async`); it returns the asyncio Future of its SendResult once the message is taken,
  waiting for buffer room up to `timeout` (TimeoutError, the message not taken). Thousands of
  them may be outstanding from one loop.
- `await p.send(...)`: one `put` at once, retried as the blocking `send` (not lingered; a
  queue's open batch is sent first, so order is kept).
- `await p.send_batch(...)` / `send_batch_async`: one `put_batch`, as the blocking ones.
- `await p.flush()`, `await p.close()`, `async with Producer(...) as p`.

Queue counts come from `topic_info` (cached for 30 s, as the blocking producer); a batch
without a queue of its own sealed while its topic's count is unknown goes with queue nil (the
appender picks), as the blocking producer sends one then.
"""
from __future__ import annotations

import asyncio
import contextlib
import time

from ipc.accumulator import (DEFAULT_BATCH_MAX_BYTES, DEFAULT_BUFFER_MAX_BYTES, DEFAULT_LINGER_MS,
                             Accumulator, Pending)
from ipc.batch_sender import BatchSender, settle_each
from ipc.aio.connection import AsyncConnection
from ipc.client_common import MQError, check_int, check_timeout, check_wait_ms
from ipc.producer import QueueSelector, batched_fields, encode_batch, encode_put, plain_send, send_steps
from ipc.protocol import ErrorCode
from ipc.put_fields import delay_properties
from ipc.steps import arun
from ipc.send_result import parse_send_reply

TOPIC_INFO_TTL_S = 30.0


class Producer:
    """The asyncio producer (module docstring); arguments as ipc.Producer's."""

    def __init__(self, address: str | None = None, *, store: str | None = None, timeout: float = 10.0,
                 window: int = 256, retries: int = 2, default_topic_queues: int | None = None,
                 auto_batch: bool = True, linger_ms: float = DEFAULT_LINGER_MS,
                 batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES,
                 buffer_max_bytes: int = DEFAULT_BUFFER_MAX_BYTES, key_file: str | None = None, server_key_file: str | None = None):
        self.timeout = check_timeout(timeout)
        linger_ms = check_wait_ms(linger_ms, "linger_ms")
        self._conn = AsyncConnection(address, store=store, timeout=timeout, window=window,
                                     key_file=key_file, server_key_file=server_key_file)
        self.retries = retries
        self.default_topic_queues = default_topic_queues
        self.auto_batch = auto_batch
        self._acc = Accumulator(linger_ms / 1000.0, check_int(batch_max_bytes, "batch_max_bytes", 1),
                                check_int(buffer_max_bytes, "buffer_max_bytes", 1))
        self._counts: dict = {}             # topic -> (queue count or None, expires at)
        self._selector = QueueSelector(self._cached_count)
        self._sender = BatchSender(self._conn, self._acc, self._selector.select, settle_each, contextlib.nullcontext())
        self._timer = None
        self._timer_at = float("inf")
        self._good_topics: set = set()      # names check_send_topic passed (send_async's fast path)

    async def open(self) -> "Producer":
        await self._conn.open()
        self._acc.store_limits(self._conn.info.get("max_message_size"),
                               self._conn.info.get("mapped_file_size_commitlog"))
        return self

    async def __aenter__(self) -> "Producer":
        return await self.open()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def connection(self) -> AsyncConnection:
        return self._conn

    # -- queue counts ------------------------------------------------------------------------
    def _cached_count(self, topic: str, create: bool = False):
        count, expires = self._counts.get(topic, (None, 0.0))
        if expires <= time.monotonic():
            self._counts[topic] = (count, time.monotonic() + TOPIC_INFO_TTL_S)
            asyncio.ensure_future(self.queue_count(topic))
        return count

    async def queue_count(self, topic: str, create: bool = False) -> int | None:
        """The topic's queue count from the store (None: unknown; with `create` an unknown
        topic is created first, with `default_topic_queues`)."""
        try:
            try:
                count = (await self._conn.call("appender", "topic_info", topic=topic))["queues"]
            except MQError as e:
                if e.code != ErrorCode.NOT_FOUND or not create:
                    raise
                count = (await self._conn.call("appender", "create_topic", topic=topic,
                                               queues=self.default_topic_queues))["queues"]
        except (MQError, TimeoutError, ConnectionError):
            return None
        self._counts[topic] = (count, time.monotonic() + TOPIC_INFO_TTL_S)
        return count

    async def _queue_for(self, topic: str, queue_id, sharding_key):
        if queue_id is not None or sharding_key is None:
            return queue_id
        if self._counts.get(topic, (None,))[0] is None:
            await self.queue_count(topic, create=True)
        return self._selector.select(topic, None, sharding_key)

    # -- auto-batched sends ------------------------------------------------------------------
    async def send_async(self, topic: str, body, tags=None, keys=None, properties=None, queue_id=None, *,
                         sharding_key=None, flag: int = 0, wait: bool = True, timeout: float | None = None,
                         delay_level: int | None = None, deliver_at=None,
                         delay_ms: int | None = None) -> asyncio.Future:
        """Take one message; the Future of its SendResult (module docstring). `delay_level`,
        `deliver_at`, `delay_ms`: deliver it later, as the blocking `send_async`."""
        acc = self._acc
        if self.auto_batch and plain_send(self._good_topics, topic, body, queue_id, tags, keys, properties, flag,
                                          sharding_key, timeout, delay_level is not None or deliver_at is not None
                                          or delay_ms is not None) \
                and not (acc.held and acc.held + len(body) > acc.buffer_max_bytes):
            # a plain message, with room: nothing of its own to check or wait for
            fut = asyncio.get_running_loop().create_future()
            ready = acc.add_plain((topic, queue_id, wait), Pending(None, body, None, fut), time.monotonic())
            if ready:
                self._send_batches(ready)
            if acc.opened is not None and acc.opened < self._timer_at:
                self._arm()
            return fut
        timeout = self.timeout if timeout is None else check_timeout(timeout)
        properties = delay_properties(properties, delay_level, deliver_at, delay_ms)
        if not self.auto_batch:
            return asyncio.ensure_future(self.send(topic, body, tags, keys, properties, queue_id,
                                                   sharding_key=sharding_key, flag=flag, wait=wait,
                                                   timeout=timeout))
        meta, frame, uniq, queue_id = batched_fields(self._good_topics, topic, body, tags, keys, properties,
                                                     flag, queue_id)
        queue_id = await self._queue_for(topic, queue_id, sharding_key)
        if not acc.has_room(len(frame)):
            self._send_batches(acc.drain())
            if not await self._conn.wait(lambda: acc.has_room(len(frame)), timeout):
                raise TimeoutError(f"send_async: the producer's buffer (buffer_max_bytes "
                                   f"{acc.buffer_max_bytes}) stayed full for {timeout}s; the message was not taken")
        fut = asyncio.get_running_loop().create_future()
        self._send_batches(acc.add(topic, queue_id, wait, Pending(meta, frame, uniq, fut), time.monotonic()))
        if acc.opened is not None and acc.opened < self._timer_at:    # a new batch's linger
            self._arm()
        return fut

    def _arm(self) -> None:
        deadline = self._acc.next_deadline()
        if deadline is not None and deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            loop = asyncio.get_running_loop()
            self._timer_at = deadline
            self._timer = loop.call_later(max(0.0, deadline - time.monotonic()), self._linger_due)

    def _linger_due(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        if not self._conn.closed:
            self._send_batches(self._acc.due(time.monotonic()))
            self._arm()

    def _send_batches(self, batches) -> None:
        for batch in batches:
            self._sender.send(batch)

    # -- direct sends ------------------------------------------------------------------------
    async def send(self, topic: str, body, tags=None, keys=None, properties=None, queue_id=None, *,
                   sharding_key=None, flag: int = 0, wait: bool = True, timeout: float | None = None,
                   delay_level: int | None = None, deliver_at=None, delay_ms: int | None = None):
        """One message, sent at once; its SendResult (retries as the blocking `send`)."""
        timeout = None if timeout is None else check_timeout(timeout)
        properties = delay_properties(properties, delay_level, deliver_at, delay_ms)
        fields, frames, uniq = encode_put(topic, body, tags, keys, properties, queue_id, flag, wait)
        await self._route(fields, topic, queue_id, sharding_key)
        return await self._with_retries("put", fields, frames, timeout,
                                        lambda env, _f: parse_send_reply(env, topic, [uniq]))

    async def send_batch(self, topic: str, bodies_or_messages, queue_id=None, *, sharding_key=None,
                         wait: bool = True, timeout: float | None = None):
        """Messages of one topic to one queue as one unit (all stored or none)."""
        timeout = None if timeout is None else check_timeout(timeout)
        fields, frames, uniq = encode_batch(topic, bodies_or_messages, queue_id, wait)
        await self._route(fields, topic, queue_id, sharding_key)
        return await self._with_retries("put_batch", fields, frames, timeout,
                                        lambda env, _f: parse_send_reply(env, topic, uniq))

    async def send_batch_async(self, topic: str, bodies_or_messages, queue_id=None, **kw) -> asyncio.Future:
        return asyncio.ensure_future(self.send_batch(topic, bodies_or_messages, queue_id, **kw))

    async def _route(self, fields: dict, topic: str, queue_id, sharding_key) -> None:
        if queue_id is None:
            qid = await self._queue_for(topic, None, sharding_key) if sharding_key is not None \
                else self._selector.select(topic)
            if qid is not None:
                fields["queue_id"] = qid
        if "queue_id" in fields and self._acc.held:
            self._send_batches(self._acc.take(topic, fields["queue_id"]))

    async def _with_retries(self, op, fields, frames, timeout, transform):
        return await arun(self._conn, send_steps(self._conn, self.retries, op, fields, frames, timeout, transform))

    # -- lifecycle ---------------------------------------------------------------------------
    async def flush(self, timeout: float | None = None) -> bool:
        """Send every open batch and wait until everything sent is answered."""
        self._send_batches(self._acc.drain())
        return await self._conn.wait(lambda: self._acc.held == 0 and self._conn.in_flight == 0, timeout)

    async def close(self, timeout: float | None = None) -> None:
        if self._conn.closed:
            return
        await self.flush(self.timeout if timeout is None else timeout)
        if self._timer is not None:
            self._timer.cancel()
        self._conn.close()


__all__ = ["Producer"]
