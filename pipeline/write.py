"""`df.write.format("mqstore")` and `df.writeStream.format("mqstore")`: rows produced into a
running store through the client (ipc.Producer), each Spark task with its own producer, the
rows handed over by Spark as Arrow record batches.

Columns: `body` (binary or string, required); `topic` (string; the `topic` option, when set,
is every row's topic, as Kafka's sink takes its option over the column: a DataFrame read from
one topic is written to another by naming it); `tags` (string), `keys` (string, keys
separated by a space, or an array of strings), `properties` (map<string,string>) and
`queue_id` (int) when present. Other columns are ignored. Consecutive rows of one topic and
queue go as batches of `batchSize` (100) rows and at most 4 MiB of bodies, with `inFlight` (8)
batches unanswered per task; a row without a queue_id lets the producer pick queues round
robin. The store and its address: options `address` or `path`, as for reading.

Delivery is at least once, as with any RocketMQ producer: a task answers only when the store
has acknowledged every message it sent (under SYNC_FLUSH: flushed), and a refused put fails
the task with the store's status and reason. Spark runs a failed task again and a replayed
streaming batch again, and the store keeps what the first attempt had stored (it has no
transactions across batches); each message's UNIQ_KEY lets consumers drop repeats. Saving
needs `.mode("append")`: "overwrite" is refused (a message store is appended to, never
replaced), and Spark refuses the other modes for Python data sources.
"""
from __future__ import annotations

import collections
import dataclasses

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from core.record.message import Message
from pipeline import options as opt

BATCH_BYTES = 4 << 20     # bodies per put_batch at most, as RocketMQ's producer caps a batch (maxMessageSize)


@dataclasses.dataclass
class Produced(WriterCommitMessage):
    """What one task stored: messages, and the bytes of their bodies."""
    messages: int
    body_bytes: int


def _column(batch, name: str) -> list:
    return batch.column(name).to_pylist() if name in batch.schema.names else [None] * batch.num_rows


def _messages(batch, topic: str | None):
    """(topic, queue_id, item) of each row of an Arrow record batch: the item is the body
    when the row has nothing else to send (the producer's fast path), else a Message."""
    if "body" not in batch.schema.names:
        raise ValueError(f"no body column (columns: {sorted(batch.schema.names)})")
    bodies = _column(batch, "body")
    topics = [topic] * batch.num_rows if topic is not None else _column(batch, "topic")
    tags, keys, props, queues = (_column(batch, n) for n in ("tags", "keys", "properties", "queue_id"))
    for body, t, tag, key, prop, queue_id in zip(bodies, topics, tags, keys, props, queues):
        if body is None:
            raise ValueError("a row with a null body: every message needs a body")
        if body.__class__ is str:
            body = body.encode("utf-8")
        if t is None:
            raise ValueError("no topic: give the rows a topic column or set the topic option")
        if tag is None and not key and not prop:
            yield t, queue_id, body
        else:
            yield t, queue_id, Message(topic=t, body=body, tags=tag, keys=key, properties=dict(prop or ()))


def produce_batches(batches, where: tuple, topic: str | None, batch_size: int, in_flight: int,
                    keys: dict | None = None) -> Produced:
    """Send the rows of `batches` (Arrow record batches) in put_batches of one topic and queue
    to the store `where` (options.endpoint); wait for every acknowledgement."""
    from ipc.producer import Producer
    producer = Producer(where[0], store=where[1], **(keys or {}))
    pending: collections.deque = collections.deque()
    count = size = 0

    def settle(fut) -> None:
        result = fut.result()
        if not result.ok:
            why = f": {result.reason}" if result.reason else ""
            raise RuntimeError(f"the store refused a batch of {result.topic!r}: {result.status.name}{why}")

    def send(key, items) -> None:
        pending.append(producer.send_batch_async(key[0], items, queue_id=key[1]))
        if len(pending) >= in_flight:
            settle(pending.popleft())

    try:
        key, items, held = None, [], 0
        for batch in batches:
            for t, queue_id, item in _messages(batch, topic):
                n = len(item.body if item.__class__ is Message else item)
                if (t, queue_id) != key or len(items) >= batch_size or held + n > BATCH_BYTES:
                    if items:
                        send(key, items)
                    key, items, held = (t, queue_id), [], 0
                items.append(item)
                held += n
                count += 1
                size += n
        if items:
            send(key, items)
        while pending:
            settle(pending.popleft())
    finally:
        producer.close()
    return Produced(count, size)


class _Target:
    """The options every writer takes."""

    def __init__(self, options):
        self.where = opt.endpoint(options)
        self.keys = opt.client_keys(options)
        self.topic = opt.one_topic(options) if opt.text(options, "topic") else None
        self.batch_size = opt.integer(options, "batchSize", 100, 1)
        self.in_flight = opt.integer(options, "inFlight", 8, 1)

    def write(self, iterator) -> Produced:
        return produce_batches(iterator, self.where, self.topic, self.batch_size, self.in_flight, self.keys)


class ProducerWriter(_Target, DataSourceArrowWriter):
    def __init__(self, options, overwrite: bool):
        if overwrite:
            raise ValueError('mode "overwrite": a message store is appended to, never replaced; '
                             'use .mode("append")')
        super().__init__(options)


class ProducerStreamWriter(_Target, DataSourceStreamArrowWriter):
    def commit(self, messages, batchId) -> None:
        """Nothing left to do: every task's messages were acknowledged before it answered."""

    def abort(self, messages, batchId) -> None:
        """What the batch's tasks stored stays stored (at least once; see the module doc)."""
