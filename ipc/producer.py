"""`Producer`: puts messages into a running store (docs/PROTOCOL.md, appender ops `put` and
`put_batch`).

Every message gets a `UNIQ_KEY` property, as RocketMQ's MessageClientIDSetter does
(ipc/uniq_keys.py).

Auto-batching (on by default, `auto_batch=False` turns it off): `send_async` messages are
gathered per topic and queue into `put_batch` requests, as RocketMQ 5's producer `autoBatch`
and Kafka's accumulator do (ipc/accumulator.py has the rules, ipc/auto_batch.py the threads);
`linger_ms` (10), `batch_max_bytes` (32 KiB) and `buffer_max_bytes` (32 MiB) are RocketMQ 5's
defaults (docs/CLIENTS.md). Each message still gets its own SendResult. `send` and the batch
sends go out at once, as before.

Queue selection, in order: an explicit `queue_id`; a `sharding_key`, hashed as RocketMQ's
SelectMessageQueueByHash (`abs(String.hashCode) % queues`) so that one key always lands on
one queue (an unknown topic is created first, with `default_topic_queues` queues or, by
default, the store's `default_topic_queue_nums`); otherwise
round robin over the topic's queues, or `queue_id` nil (the appender picks) while the
topic's queue count is not yet known. Queue counts come from `topic_info` and are refreshed
every 30 s.

The batch path does the least Python per message: bodies joined into one frame, `sizes`
from one call, and for a batch of bodies the UNIQ_KEYs as one block of bytes
(`uniq_key_block`, made by `next_key_block` without a string per key); a batch of Messages
gets a small map of metadata per message. Batch replies carry the records' offsets
(`id_format` "offsets"): SendResult makes the message ids only when they are read.

Sync sends retry `retries` times on SERVICE_NOT_AVAILABLE, OS_PAGECACHE_BUSY, timeouts and
lost connections, with the same UNIQ_KEYs (so a retried message can be told apart from a new
one: at-least-once delivery); each attempt has the send's `timeout`, and one that timed out is
sent again after a new hello, so that a store restarted on other ports is followed. While the
appender is unreachable a send waits for it (up to its timeout) and nothing stays queued in
the client, so a send that failed that way is never stored later; it is tried again only when
a new hello is answered, so that a send to a stopped store fails after one timeout and one
hello (PeerUnreachable, a TimeoutError). A send whose reply was lost (the store died after
storing it, or answered too late) may be stored and then sent again, so delivery is at least
once: consumers that must not see a message twice deduplicate by UNIQ_KEY, as with RocketMQ.

Arguments are checked before anything is sent (or a topic created for a sharding key): a
timeout must be a finite number of seconds above 0 (one that left no time for a reply made
every attempt time out after it had gone out, and be stored); tags a str, keys a str or an
iterable of str, properties a dict of str names (values are sent as `str(value)`), queue_id
an int >= 0, each or None. A wrong type raises TypeError and a wrong value ValueError, naming
the argument. A batch of bodies is checked once per call, not per message.
"""
from __future__ import annotations

import random
import time

from core.record.hashing import java_hash
from core.record.key_block import KeyBlock
from core.record.message import Message
from core.status import PutMessageStatus
from ipc.accumulator import DEFAULT_BATCH_MAX_BYTES, DEFAULT_BUFFER_MAX_BYTES, DEFAULT_LINGER_MS
from ipc.auto_batch import AutoBatcher
from ipc.client_common import check_int, check_timeout, check_wait_ms
from ipc.connection import Connection, MQError, PeerUnreachable
from ipc.put_fields import (EMPTY_BODY, as_body, check_send_topic, check_tags, delay_properties, keys_field,
                            properties_field)
from ipc.protocol import ErrorCode
from ipc.steps import Wait, run
from ipc.send_result import SendResult, parse_send_reply
from ipc.uniq_keys import UNIQ_KEY, UNIQ_KEYS, UniqKeyGenerator  # noqa: F401  (re-exported)

TOPIC_INFO_TTL_S = 30.0
UNKNOWN_TOPIC_TTL_S = 1.0
GOOD_TOPICS_MAX = 10_000        # topic names remembered as checked
RETRY_STATUSES = (PutMessageStatus.SERVICE_NOT_AVAILABLE, PutMessageStatus.OS_PAGECACHE_BUSY)


def shard_queue(sharding_key, queue_count: int) -> int:
    """RocketMQ's SelectMessageQueueByHash: `abs(key.hashCode()) % queue_count`."""
    if queue_count <= 0:
        raise ValueError("a topic has at least one queue")
    return abs(java_hash(str(sharding_key))) % queue_count


class QueueSelector:
    """Picks a topic's queue: explicit id, sharding key hash, or round robin. `lookup(topic,
    create)` gives the queue count (None: unknown topic; with `create`, never None)."""

    def __init__(self, lookup):
        self._lookup = lookup
        self._rr: dict = {}

    def select(self, topic: str, queue_id=None, sharding_key=None):
        """The queue to send to (None: let the appender pick)."""
        if queue_id is not None:
            return queue_id
        if sharding_key is not None:
            count = self._lookup(topic, True)
            return shard_queue(sharding_key, count) if count else None
        count = self._lookup(topic, False)
        if not count:
            return None
        c = self._rr.get(topic)
        if c is None:
            c = random.randrange(count)
        self._rr[topic] = c + 1
        return c % count


def message_fields(body, tags=None, keys=None, properties=None, flag=0,
                   uniq_key: str | None = None) -> tuple[dict, bytes, str]:
    """(meta, frame, uniq_key) of one message: `meta` the per-message fields as a `put` and
    each map of a `put_batch`'s `messages` carry them (properties with the message's UNIQ_KEY,
    flag, tags, keys), the body frame, the key. The one place a send's properties are built.
    TypeError or ValueError for tags, keys, properties or a body of the wrong type or value."""
    check_tags(tags)
    props = properties_field(properties)
    uniq = props.get(UNIQ_KEY) or uniq_key or UNIQ_KEYS.next_key()
    props[UNIQ_KEY] = uniq
    meta = {"properties": props}
    if flag:
        meta["flag"] = flag
    if tags is not None:
        meta["tags"] = tags
    if keys is not None:
        meta["keys"] = keys_field(keys)
    frame = as_body(body)
    if not frame:
        raise ValueError(EMPTY_BODY)
    return meta, frame, uniq


def encode_put(topic: str, body, tags=None, keys=None, properties=None, queue_id=None, flag=0,
               wait=True, uniq_key: str | None = None) -> tuple[dict, list, str]:
    """(fields, frames, uniq_key) of a `put` request; ValueError for an empty body or a topic
    no client may send to (core.meta.topics.send_topic_problem); TypeError or ValueError for tags,
    keys, properties or queue_id of the wrong type or value (module docstring)."""
    check_send_topic(topic)
    meta, frame, uniq = message_fields(body, tags, keys, properties, flag, uniq_key)
    return put_request(topic, meta, queue_id, wait), [frame], uniq


def put_request(topic: str, meta: dict, queue_id=None, wait=True) -> dict:
    """The fields of a `put` of one message made by `message_fields`."""
    fields = {"topic": topic, **meta, "coalesce": True}              # combined replies welcome
    if queue_id is not None:
        fields["queue_id"] = check_int(queue_id, "queue_id")
    if not wait:
        fields["wait"] = False
    return fields


def _message_meta(m: Message, uniq: str) -> dict:
    props = properties_field(m.properties)
    props.setdefault(UNIQ_KEY, uniq)
    meta = {"properties": props}
    if m.tags is not None:
        check_tags(m.tags)
        meta["tags"] = m.tags
    if m.keys:
        meta["keys"] = keys_field(m.keys)
    if m.flag:
        meta["flag"] = m.flag
    if m.born_timestamp:
        meta["born_timestamp"] = m.born_timestamp
    return meta


def encode_batch(topic: str, items, queue_id=None, wait=True) -> tuple[dict, list, list | KeyBlock]:
    """(fields, frames, uniq_keys) of a `put_batch` request, the keys a list or (for bodies)
    a core.record.key_block.KeyBlock. `items` are bodies (bytes or str)
    or core.Message objects (their tags, keys, properties and flag are kept). One body given
    where the list belongs raises TypeError (a str would be sent one message per character); a
    Message of another topic raises ValueError, as RocketMQ's MessageBatch refuses a batch of
    mixed topics (an empty topic stands for the batch's); so do an empty body and a topic no
    client may send to. Arguments of the wrong type or value raise as `encode_put` says, the
    fields of a Message with its place in the batch."""
    if isinstance(items, (str, bytes, bytearray, memoryview)):
        raise TypeError("a batch is a list of bodies or Messages, not one body")
    check_send_topic(topic)
    if queue_id is not None:
        queue_id = check_int(queue_id, "queue_id")
    n = len(items)
    if n == 0:
        raise ValueError("a batch needs at least one message")
    try:
        frame = b"".join(items)                       # the fast path: all bodies are bytes
    except TypeError:
        keys = UNIQ_KEYS.next_keys(n)
        bodies, metas = [], []
        for i, (item, k) in enumerate(zip(items, keys)):
            if isinstance(item, Message):
                if item.topic and item.topic != topic:
                    raise ValueError(f"a batch is of one topic: a message of topic {item.topic!r} "
                                     f"in a batch sent to {topic!r}")
                bodies.append(as_body(item.body))
                try:
                    meta = _message_meta(item, k)
                except TypeError as e:
                    raise TypeError(f"message {i} of the batch: {e}") from None
                metas.append(meta)
            else:
                bodies.append(as_body(item))
                metas.append({"properties": {UNIQ_KEY: k}})
        keys = [m["properties"][UNIQ_KEY] for m in metas]
        fields = {"topic": topic, "sizes": [len(b) for b in bodies], "messages": metas}
        frame = b"".join(bodies)
        if 0 in fields["sizes"]:
            raise ValueError(EMPTY_BODY)
    else:
        # Bodies only: the UNIQ_KEYs in one block instead of a map per message (the store
        # encodes the batch once and varies only the key).
        keys = UNIQ_KEYS.next_key_block(n)
        fields = {"topic": topic, "sizes": list(map(len, items)), "uniq_key_block": keys.data}
        if 0 in fields["sizes"]:
            raise ValueError(EMPTY_BODY)
    fields["coalesce"] = True                         # combined replies welcome
    fields["id_format"] = "offsets"                   # SendResult makes the ids when asked
    if queue_id is not None:
        fields["queue_id"] = queue_id
    if not wait:
        fields["wait"] = False
    return fields, [frame], keys


def send_steps(conn, retries: int, op: str, fields: dict, frames, timeout, transform):
    """One `put` or `put_batch` sent and retried as `send` and `send_batch` do (module
    docstring), as steps (ipc/steps.py) that the blocking and the asyncio producer both run;
    the SendResult."""
    attempt = 0
    wait = conn.timeout if timeout is None else timeout
    while True:
        try:
            if conn.in_flight >= conn.window and not (
                    yield Wait(lambda: conn.in_flight < conn.window, wait)):
                raise TimeoutError(f"{op}: {conn.window} requests still in flight after {wait}s")
            result = yield conn.request("appender", op, fields, frames, timeout, transform)
        except PeerUnreachable:
            # Nothing was sent: try again only if the front door answers a new hello (the
            # store may have moved to other ports), not once more per retry against a
            # store that is down.
            if attempt >= retries or conn.closed or not conn.reconnect():
                raise
        except (TimeoutError, ConnectionError):
            if attempt >= retries or conn.closed:
                raise
        else:
            if result.status not in RETRY_STATUSES or attempt >= retries:
                return result
            yield Wait(lambda: False, 0.05 * (2 ** attempt))     # back off
        attempt += 1


def plain_send(good_topics: set, topic, body, queue_id, tags, keys, properties, flag, sharding_key,
               timeout, delayed) -> bool:
    """Whether an auto-batched `send_async` is of a plain message (accumulator.Pending): a
    non-empty bytes body to a topic already checked (`good_topics`), a queue id or none, and
    nothing else; such a message has nothing of its own to check or build."""
    return bool(body.__class__ is bytes and body and timeout is None and tags is None and keys is None
            and properties is None and not flag and sharding_key is None and not delayed
            and topic.__class__ is str and topic in good_topics
            and (queue_id is None or queue_id.__class__ is int and queue_id >= 0))


def batched_fields(good_topics: set, topic: str, body, tags, keys, properties, flag, queue_id):
    """(meta, frame, uniq, queue_id) of an auto-batched message that is not plain, checked as
    `send` checks them; its topic is then remembered in `good_topics`."""
    check_send_topic(topic)
    if len(good_topics) < GOOD_TOPICS_MAX:
        good_topics.add(topic)
    meta, frame, uniq = message_fields(body, tags, keys, properties, flag)
    if queue_id is not None:
        queue_id = check_int(queue_id, "queue_id")
    return meta, frame, uniq, queue_id


def _send_timeout(timeout):
    return None if timeout is None else check_timeout(timeout)


class Producer:
    """Sends messages to a running store. `address` is the front door (`tcp://host:port`);
    or pass `store=DIR` to read `DIR/run/address`. Thread-safe."""

    def __init__(self, address: str | None = None, *, store: str | None = None, timeout: float = 10.0,
                 window: int = 256, retries: int = 2, default_topic_queues: int | None = None,
                 connection: Connection | None = None, auto_batch: bool = True,
                 linger_ms: float = DEFAULT_LINGER_MS, batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES,
                 buffer_max_bytes: int = DEFAULT_BUFFER_MAX_BYTES, key_file: str | None = None, server_key_file: str | None = None):
        timeout = check_timeout(timeout)
        linger_ms = check_wait_ms(linger_ms, "linger_ms")
        batch_max_bytes = check_int(batch_max_bytes, "batch_max_bytes", 1)
        buffer_max_bytes = check_int(buffer_max_bytes, "buffer_max_bytes", 1)
        self._conn = connection or Connection(address, store=store, timeout=timeout, window=window,
                                              key_file=key_file, server_key_file=server_key_file)
        self._own = connection is None
        self.retries = retries
        self.default_topic_queues = default_topic_queues
        self._queues: dict = {}         # topic -> (queue count or None, expires at)
        self._selector = QueueSelector(self.queue_count)
        self._good_topics: set = set()  # names check_send_topic passed (send_async's fast path)
        self._batcher = AutoBatcher(self._conn, linger_ms, batch_max_bytes, buffer_max_bytes,
                                    self.select_queue) if auto_batch else None

    @property
    def connection(self) -> Connection:
        return self._conn

    # -- queue selection -----------------------------------------------------------------
    def queue_count(self, topic: str, create: bool = False) -> int | None:
        """The topic's queue count (cached for 30 s); None when the topic does not exist (with
        `create`, it is created with `default_topic_queues` queues, by default the store's
        `default_topic_queue_nums`) or cannot (illegal name)."""
        now = time.monotonic()
        cached = self._queues.get(topic)
        if cached is not None:
            count, expires = cached
            if count:
                if expires <= now:
                    self._refresh_async(topic)      # stale: use it, refresh in the background
                return count
            if expires > now and not create:
                return None
        try:
            try:
                count = self._conn.call("appender", "topic_info", topic=topic)["queues"]
            except MQError as e:
                if e.code != ErrorCode.NOT_FOUND or not create:
                    raise
                count = self._conn.call("appender", "create_topic", topic=topic,   # None:
                                        queues=self.default_topic_queues)["queues"]   # the store's
        except MQError:                             # unknown or illegal: the put answers why
            self._queues[topic] = (None, now + UNKNOWN_TOPIC_TTL_S)
            return None
        self._queues[topic] = (count, now + TOPIC_INFO_TTL_S)
        return count

    def _refresh_async(self, topic: str) -> None:
        self._queues[topic] = (self._queues[topic][0], time.monotonic() + TOPIC_INFO_TTL_S)

        def done(env, _frames):
            if isinstance(env.get("queues"), int) and env["queues"] > 0:
                self._queues[topic] = (env["queues"], time.monotonic() + TOPIC_INFO_TTL_S)
        self._conn.request("appender", "topic_info", {"topic": topic}, transform=done)

    def select_queue(self, topic: str, queue_id=None, sharding_key=None):
        """The queue to send to (None: let the appender pick)."""
        return self._selector.select(topic, queue_id, sharding_key)

    # -- sending -------------------------------------------------------------------------
    def send_async(self, topic: str, body, tags=None, keys=None, properties=None, queue_id=None, *,
                   sharding_key=None, flag: int = 0, wait: bool = True, timeout: float | None = None,
                   delay_level: int | None = None, deliver_at=None, delay_ms: int | None = None):
        """Send one message; a Future of its SendResult. With auto-batching (the default) the
        message joins its topic's and queue's open batch (ipc/accumulator.py), which goes out
        when full, when its linger expires, on flush() and on close(); a full buffer makes
        this wait for room up to `timeout` (TimeoutError, the message not taken). Without it,
        one `put` per message: with `window` requests in flight this waits for a reply first,
        and while the store's appender is unreachable it waits for it (TimeoutError after
        `timeout`, the message not sent). `delay_level`, `deliver_at`, `delay_ms`: deliver it
        later (ipc.put_fields.delay_properties; such a message is sent alone, as a batch may
        not carry one)."""
        batcher = self._batcher
        if batcher is not None and plain_send(self._good_topics, topic, body, queue_id, tags, keys, properties,
                                              flag, sharding_key, timeout,
                                              delay_level is not None or deliver_at is not None or delay_ms is not None):
            return batcher.add(topic, queue_id, wait, None, body, None, self._conn.timeout)
        timeout = _send_timeout(timeout)
        properties = delay_properties(properties, delay_level, deliver_at, delay_ms)
        if batcher is not None:
            meta, frame, uniq, queue_id = batched_fields(self._good_topics, topic, body, tags, keys,
                                                         properties, flag, queue_id)
            if queue_id is None and sharding_key is not None:
                queue_id = self.select_queue(topic, None, sharding_key)
            return self._batcher.add(topic, queue_id, wait, meta, frame, uniq,
                                     self._conn.timeout if timeout is None else timeout)
        fields, frames, uniq = encode_put(topic, body, tags, keys, properties, queue_id, flag, wait)
        self._route(fields, topic, queue_id, sharding_key)
        return self._conn.request("appender", "put", fields, frames, timeout,
                                  lambda env, _f: parse_send_reply(env, topic, [uniq]))

    def send(self, topic: str, body, tags=None, keys=None, properties=None, queue_id=None, *,
             sharding_key=None, flag: int = 0, wait: bool = True, timeout: float | None = None,
             delay_level: int | None = None, deliver_at=None, delay_ms: int | None = None) -> SendResult:
        """Send one message and wait for its SendResult. `delay_level`, `deliver_at`,
        `delay_ms`: deliver it later (ipc.put_fields.delay_properties)."""
        timeout = _send_timeout(timeout)
        properties = delay_properties(properties, delay_level, deliver_at, delay_ms)
        fields, frames, uniq = encode_put(topic, body, tags, keys, properties, queue_id, flag, wait)
        self._route(fields, topic, queue_id, sharding_key)
        return self._send_with_retries("put", fields, frames, timeout,
                                       lambda env, _f: parse_send_reply(env, topic, [uniq]))

    def send_batch_async(self, topic: str, bodies_or_messages, queue_id=None, *, sharding_key=None,
                         wait: bool = True, timeout: float | None = None):
        """Send messages of one topic to one queue as one unit; a Future of the SendResult
        (waits for room in the window as `send_async` does)."""
        timeout = _send_timeout(timeout)
        fields, frames, uniq = encode_batch(topic, bodies_or_messages, queue_id, wait)
        self._route(fields, topic, queue_id, sharding_key)
        return self._conn.request("appender", "put_batch", fields, frames, timeout,
                                  lambda env, _f: parse_send_reply(env, topic, uniq))

    def send_batch(self, topic: str, bodies_or_messages, queue_id=None, *, sharding_key=None,
                   wait: bool = True, timeout: float | None = None) -> SendResult:
        """Send messages of one topic to one queue as one unit (all stored or none)."""
        timeout = _send_timeout(timeout)
        fields, frames, uniq = encode_batch(topic, bodies_or_messages, queue_id, wait)
        self._route(fields, topic, queue_id, sharding_key)
        return self._send_with_retries("put_batch", fields, frames, timeout,
                                       lambda env, _f: parse_send_reply(env, topic, uniq))

    def _route(self, fields: dict, topic: str, queue_id, sharding_key) -> None:
        """Put the selected queue into a request's fields (encoded and checked first, so that
        nothing is asked of the store, a topic created, for arguments that are refused). The
        queue's lingering `send_async` messages are sent first: they were sent before."""
        if queue_id is None:
            queue_id = self.select_queue(topic, None, sharding_key)
            if queue_id is not None:
                fields["queue_id"] = queue_id
        if self._batcher is not None and "queue_id" in fields:
            self._batcher.send_ahead(topic, fields["queue_id"])

    def _send_with_retries(self, op, fields, frames, timeout, transform) -> SendResult:
        return run(self._conn, send_steps(self._conn, self.retries, op, fields, frames, timeout, transform))

    def flush(self, timeout: float | None = None) -> bool:
        """Send every open batch and wait until every message and request sent so far is
        answered (or timed out); False when `timeout` passed first."""
        batcher = self._batcher
        if batcher is None:
            return self._conn.wait(lambda: self._conn.in_flight == 0, timeout)
        batcher.send_open()
        return self._conn.wait(lambda: batcher.idle() and self._conn.in_flight == 0, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Send the open batches and wait for the replies of requests already sent (up to
        `timeout`, default the request timeout), then close the connection if this producer
        opened it."""
        if self._conn.closed:
            return
        if self._batcher is not None:
            self.flush(self._conn.timeout if timeout is None else timeout)
            self._batcher.stop()
        if self._own:
            self.flush(self._conn.timeout if timeout is None else timeout)
            self._conn.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
