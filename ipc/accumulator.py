"""The auto-batching of `send_async`, with no sockets and no threads (the blocking Producer
and `ipc.aio.Producer` drive it): RocketMQ 5's producer `autoBatch` and Kafka's record
accumulator.

Messages are kept per *batch key* (topic, queue id or None, wait) in an open batch. A batch is
sealed (taken out to be sent) when one more message would take its bodies over
`batch_max_bytes`, when it holds `batch_max_bytes` or more, when its linger (`linger_s`
after its first message) expires, and on flush. A batch of messages with no queue of their own
(no `queue_id`, no `sharding_key`) gets its queue when it is sealed, round robin per batch
(Kafka's sticky partitioner: one queue per batch instead of one batch per queue). Batches of
one key are sealed, and must be sent, in the order of their messages, so that a queue's order
is kept.

Batches are also kept within what the store takes as one unit (`store_limits`, from the
`hello` reply): bodies up to its max_message_size, records that fit in one CommitLog segment.

A message the store would refuse on its own (core.put_refusal.message_problem: separators in
tags, keys or properties, properties over 32,767 bytes, a delay level, which a batch may not
carry) and a message whose body alone exceeds `batch_max_bytes` are *sent alone*: the key's
open batch is sealed before it (order kept) and it goes as a `put` of its own, so that the
store's own status and reason come back for it and no other message shares its fate.

`request(batch)` gives the request of a sealed batch (`put` for one message, else
`put_batch`: bodies only as `uniq_key_block`, else a map per message); `results(batch, env)`
gives one SendResult per message from the reply (message i of a stored batch has queue offset
`queue_offset + i` and the i-th physical offset), or None when a batch of several messages was
refused as a whole (a rule the client does not check, such as a store whose max_message_size
is below batch_max_bytes): the driver then sends each of its messages alone. Those may land
after later batches of their queue; nothing else reorders a queue.

Bytes are counted from the moment a message is added until its batch is answered
(`release`): `buffer_max_bytes` bounds them (Kafka's buffer.memory); the driver makes
`send_async` wait for room.
"""
from __future__ import annotations

from core.record.message import Message, has_delay_level
from core.put_refusal import message_problem
from core.status import PutMessageStatus
from core.record.key_block import key_list
from ipc.send_result import MessageResult, SendResult, parse_send_reply
from ipc.uniq_keys import UNIQ_KEY, UNIQ_KEYS

# Defaults of RocketMQ 5's producer autoBatch (DefaultMQProducer batchMaxDelayMs 10,
# batchMaxBytes 32 KiB, totalBatchMaxBytes 32 MiB; Kafka's buffer.memory is 32 MiB too).
DEFAULT_LINGER_MS = 10
DEFAULT_BATCH_MAX_BYTES = 32 * 1024
DEFAULT_BUFFER_MAX_BYTES = 32 * 1024 * 1024
_NO_BATCH_LIMIT = 1 << 62          # a rule the store checks only for a single message
_TIMER_PROPERTIES = ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")
PLAIN_RECORD = 160 + 32          # record_estimate's bytes of a record besides its topic and body
_REFUSALS = (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)


class Pending:
    """One message waiting for its result: its per-message fields (ipc.producer.message_fields),
    body frame, UNIQ_KEY and the future its SendResult goes to. A plain message (a body and
    nothing else: `send_async(topic, body)`) has no fields of its own and no key yet (`meta` and
    `uniq` None): its key comes with its batch's, in one block when the batch is sealed
    (`request`)."""
    __slots__ = ("meta", "frame", "uniq", "future", "plain")

    def __init__(self, meta, frame: bytes, uniq, future):
        self.meta = meta
        self.frame = frame
        self.uniq = uniq
        self.future = future
        # only a body and its UNIQ_KEY (no tags, keys, other properties or flag)
        self.plain = meta is None or (len(meta) == 1 and len(meta["properties"]) == 1)


class Batch:
    """Messages of one batch key, in the order they were sent. `keys`: the UNIQ_KEYs `request`
    gave it (a KeyBlock for a batch of plain messages, else a list)."""
    __slots__ = ("topic", "queue_id", "wait", "items", "size", "records", "deadline", "keys")

    def __init__(self, topic: str, queue_id, wait: bool, deadline: float):
        self.topic = topic
        self.queue_id = queue_id
        self.wait = wait
        self.items: list = []
        self.size = 0                     # bytes of bodies
        self.records = 0                  # bytes of its records, estimated (record_estimate)
        self.deadline = deadline
        self.keys = None


def record_estimate(topic: str, p: Pending) -> int:
    """At least the bytes of `p`'s stored record (docs/FORMAT.md: 91 fixed bytes with IPv4
    hosts, 24 more with IPv6 ones, the topic, the body and the property string)."""
    n = PLAIN_RECORD + len(topic) + len(p.frame)
    if not p.plain:                          # up to 3 UTF-8 bytes per character, 2 separators
        meta = p.meta
        n += sum(3 * (len(k) + len(str(v)) + 2) for k, v in meta["properties"].items())
        n += 3 * (len(meta.get("tags") or "") + len(str(meta.get("keys") or "")) + 10)
    return n


def alone_reason(topic: str, p: Pending) -> str | None:
    """Why message `p` must not share a batch (None: it may)."""
    if p.plain:
        return None
    props = p.meta["properties"]
    if has_delay_level(props) or any(k in props for k in _TIMER_PROPERTIES):
        return "delayed"
    msg = Message(topic, p.frame, tags=p.meta.get("tags"), keys=p.meta.get("keys"), properties=props)
    return message_problem(msg, p.frame, None, _NO_BATCH_LIMIT, True)


class Accumulator:
    """Open batches per key and the bytes held (module docstring). Not thread-safe: the
    driver holds its lock around every call. A batch sealed with queue id None gets its queue
    from the driver (`Batch.queue_id`, before `request`), outside that lock: picking one may
    ask the store for the topic's queue count."""

    def __init__(self, linger_s: float, batch_max_bytes: int, buffer_max_bytes: int):
        self.linger_s = linger_s
        self.batch_max_bytes = batch_max_bytes
        self.buffer_max_bytes = buffer_max_bytes
        self._body_limit = batch_max_bytes     # bodies per batch
        self._record_limit = 1 << 62           # estimated record bytes per batch
        self._open: dict = {}                  # (topic, queue_id, wait) -> Batch
        self.held = 0                          # bytes added and not yet released
        self.opened = None                     # the deadline of a batch the last add opened

    def store_limits(self, max_message_size, segment_bytes) -> None:
        """Keep batches within what the store takes as one unit (`hello`'s max_message_size:
        a batch's bodies; mapped_file_size_commitlog: its records, which must fit in one
        segment). None: not known (a store that does not say)."""
        if isinstance(max_message_size, int) and max_message_size > 0:
            self._body_limit = min(self.batch_max_bytes, max_message_size)
        if isinstance(segment_bytes, int) and segment_bytes > 0:
            self._record_limit = segment_bytes - 64

    def has_room(self, size: int) -> bool:
        """Whether `size` more bytes fit (an empty buffer takes any message)."""
        return self.held == 0 or self.held + size <= self.buffer_max_bytes

    def add(self, topic: str, queue_id, wait: bool, p: Pending, now: float) -> list:
        """Take message `p`; the batches to send now, in order (often none). `opened` is then
        the deadline of the batch it opened (None: it joined one, or went alone)."""
        size = len(p.frame)
        record = record_estimate(topic, p)
        self.held += size
        key = (topic, queue_id, wait)
        out = []
        batch = self._open.get(key)
        limit = self._body_limit
        alone = size > limit or record > self._record_limit or (
            not p.plain and alone_reason(topic, p) is not None)
        if batch is not None and (alone or batch.size + size > limit
                                  or batch.records + record > self._record_limit):
            out.append(self._seal(key))
            batch = None
        if alone:
            self.opened = None
            single = Batch(topic, queue_id, wait, now)
            single.items.append(p)
            single.size = size
            out.append(single)
            return out
        self.opened = None
        if batch is None:
            batch = self._open[key] = Batch(topic, queue_id, wait, now + self.linger_s)
            self.opened = batch.deadline
        batch.items.append(p)
        batch.size += size
        batch.records += record
        if batch.size >= limit:
            out.append(self._seal(key))
        return out

    def add_plain(self, key: tuple, p: Pending, now: float):
        """`add` of a plain message (`p.plain`) to key (topic, queue id, wait): the same rules,
        with the common case (it joins an open batch with room) on a short path."""
        size = len(p.frame)
        batch = self._open.get(key)
        if batch is None:
            return self.add(key[0], key[1], key[2], p, now)
        record = PLAIN_RECORD + len(key[0]) + size
        if batch.size + size > self._body_limit or batch.records + record > self._record_limit:
            return self.add(key[0], key[1], key[2], p, now)
        self.held += size
        self.opened = None
        batch.items.append(p)
        batch.size += size
        batch.records += record
        if batch.size >= self._body_limit:
            return [self._open.pop(key)]
        return ()

    def _seal(self, key) -> Batch:
        return self._open.pop(key)

    def due(self, now: float) -> list:
        """The batches whose linger expired, sealed, oldest first."""
        keys = [k for k, b in self._open.items() if b.deadline <= now]
        return [self._seal(k) for k in keys]

    def next_deadline(self) -> float | None:
        return min((b.deadline for b in self._open.values()), default=None)

    def take(self, topic: str, queue_id) -> list:
        """The open batches of one topic and queue, sealed (a direct send to that queue goes
        after them)."""
        keys = [k for k in ((topic, queue_id, True), (topic, queue_id, False)) if k in self._open]
        return [self._seal(k) for k in keys]

    def drain(self) -> list:
        """Every open batch, sealed (flush and close)."""
        return [self._seal(k) for k in list(self._open)]

    @property
    def open_messages(self) -> int:
        return sum(len(b.items) for b in self._open.values())

    def release(self, batch: Batch) -> None:
        """The batch was answered (or failed): its bytes no longer count."""
        self.held -= batch.size


def singles(batch: Batch) -> list:
    """Each message of a batch refused as a whole as a batch of its own, in order, with the key
    it was sent with (module docstring)."""
    out = []
    keys = key_list(batch.keys)
    for i, p in enumerate(batch.items):
        if p.uniq is None and keys is not None:
            p.uniq = keys[i]
        single = Batch(batch.topic, batch.queue_id, batch.wait, 0.0)
        single.items.append(p)
        single.size = len(p.frame)
        out.append(single)
    return out


def _fields_of(p: Pending) -> dict:
    """The per-message fields of `p` (a plain message's are its key alone)."""
    return p.meta if p.meta is not None else {"properties": {UNIQ_KEY: p.uniq}}


def _give_keys(items: list) -> None:
    """A key for each message that has none yet (one block of keys for all of them)."""
    missing = [p for p in items if p.uniq is None]
    if missing:
        for p, k in zip(missing, UNIQ_KEYS.next_keys(len(missing))):
            p.uniq = k


def request(batch: Batch) -> tuple[str, dict, list]:
    """(op, fields, frames) of a sealed batch; the messages without a key get theirs here
    (`batch.keys`)."""
    items = batch.items
    if len(items) == 1:
        p = items[0]
        _give_keys(items)
        batch.keys = [p.uniq]
        fields = {"topic": batch.topic, **_fields_of(p), "coalesce": True}
        op = "put"
        frame = p.frame
    else:
        op = "put_batch"
        frames = [p.frame for p in items]
        sizes = list(map(len, frames))
        frame = b"".join(frames)
        fields = None
        if all(p.plain for p in items):
            if all(p.uniq is None for p in items):          # the usual case: keys made as one block
                batch.keys = UNIQ_KEYS.next_key_block(len(items))
                fields = {"topic": batch.topic, "sizes": sizes, "uniq_key_block": batch.keys.data}
            else:
                _give_keys(items)
                block = "".join([p.uniq for p in items])
                if len(block) == 32 * len(items) and block.isascii():
                    fields = {"topic": batch.topic, "sizes": sizes, "uniq_key_block": block.encode()}
        if fields is None:
            _give_keys(items)
            fields = {"topic": batch.topic, "sizes": sizes, "messages": [_fields_of(p) for p in items]}
        if batch.keys is None:
            batch.keys = [p.uniq for p in items]
        fields["coalesce"] = True
        fields["id_format"] = "offsets"
    if batch.queue_id is not None:
        fields["queue_id"] = batch.queue_id
    if not batch.wait:
        fields["wait"] = False
    return op, fields, [frame]


def results(batch: Batch, env: dict) -> list | None:
    """One SendResult per message of `batch` (sent: `request` gave its keys) from the reply
    `env`; None when a batch of several messages was refused as a whole (send them alone).
    Message i of a stored batch is a MessageResult over the batch's: it makes its ids, offsets
    and key only when they are read."""
    items = batch.items
    keys = batch.keys
    if len(items) == 1:
        return [parse_send_reply(env, batch.topic, key_list(keys))]
    whole = parse_send_reply(env, batch.topic, keys)
    if whole.status in _REFUSALS:
        return None
    if whole.queue_offset < 0:                       # nothing stored: every message says so
        listed = key_list(keys)
        return [SendResult(whole.status, batch.topic, (), uniq_keys=listed[i:i + 1], error_code=whole.error_code,
                           reason=whole.reason) for i in range(len(items))]
    return [MessageResult(whole, i, keys) for i in range(len(items))]
