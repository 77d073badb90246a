"""`spark.readStream.format("mqstore")`: one topic of a running store, followed queue by queue.

The offsets Spark keeps in its checkpoint are the next queue offset of every queue,
`{"topic": "T", "queues": {"0": 120, "1": 98}}`, so a query restarted from its checkpoint goes
on where it stopped: a micro-batch is the queue-offset range [start, end) of each queue, and
reading it again (Spark replays a batch that was planned but not committed) gives the same
messages. The end of each queue is its max offset as the store's reader answers it: messages
dispatched to the consume queue, whole and (under SYNC_FLUSH) flushed.

Options: `address` (tcp://host:port) or `path` (the store root: its run/address), `topic`
(required), `startingOffsets` ("earliest", the default: every queue from its first message;
"latest": only what arrives after the query first starts; or JSON such as {"0": 10, "3": 0},
other queues from their first message), `maxMessagesPerTrigger` (a cap on queue offsets per
micro-batch, spread over the queues), `tagFilter` (RocketMQ's `TagA || TagB`), and `group`: a
consumer group whose offsets in the store follow the query's committed batches (so that
`mqstore status` and Admin.consumer_lag show its lag; nothing is read from them).

A queue that appears later (the topic got more queues) is read from its offset 0. Messages
deleted by retention before a batch read them are skipped (the pull answers OFFSET_TOO_SMALL
and points past them), as a RocketMQ consumer skips them.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from core.status import GetMessageStatus
from pipeline import options as opt
from pipeline.rows import Columns, Stop, check_schema, full_batches

log = logging.getLogger(__name__)
PULL_MAX = 1024                  # messages asked per pull (the reader repeats pulls up to this)
COMMIT_TIMEOUT_S = 2.0          # a group's offsets only show progress: not worth holding a batch for
MISSING_WAIT_S = 10.0            # how long a read waits for messages its plan said were there
_SKIP = {GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.OFFSET_FOUND_NULL,
         GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.MESSAGE_WAS_REMOVING}


@dataclasses.dataclass
class QueueRange(InputPartition):
    """Queue offsets [start, end) of one queue of a topic, and the store (options.endpoint)."""
    address: str | None
    store: str | None
    topic: str
    queue_id: int
    start: int
    end: int
    tag_filter: str | None
    key_file: str | None = None              # a secure store: options.client_keys
    server_key_file: str | None = None


def plan_queue_ranges(where: tuple, topic: str, begin: dict, end: dict, tag_filter,
                      keys: dict | None = None) -> list:
    """The partitions between two sets of queue offsets (queue id -> next offset): one per
    queue that moved."""
    ranges = []
    for q, e in sorted(end.items(), key=lambda kv: int(kv[0])):
        s = begin.get(q, 0)
        if e > s:
            ranges.append(QueueRange(*where, topic, int(q), s, e, tag_filter, **(keys or {})))
    return ranges


def read_queue_range(part: QueueRange, group: str = "spark"):
    """Yield Arrow record batches of the messages with queue offsets in [start, end)
    (tag-filtered)."""
    from ipc.connection import Connection
    conn = Connection(part.address, store=part.store, background=False, key_file=part.key_file,
                      server_key_file=part.server_key_file)
    out = Columns()
    try:
        offset, waited_since = part.start, None
        while offset < part.end:
            fields = {"group": group, "topic": part.topic, "queue_id": part.queue_id, "offset": offset,
                      "max_msgs": min(PULL_MAX, part.end - offset), "format": "raw", "repeat": PULL_MAX}
            if part.tag_filter is not None:
                fields["tag_filter"] = part.tag_filter
            env, frames = conn.call_with_frames("reader", "pull", **fields)
            status = GetMessageStatus(env["status"])
            nxt = env.get("next_begin_offset", offset)
            if status is GetMessageStatus.FOUND and nxt > offset:
                frame = bytes(frames[0]) if frames else b""
                why, pos = yield from full_batches(frame, 0, len(frame), out, queue_end=part.end)
                if why is not Stop.DONE and why is not Stop.LIMIT:
                    raise ValueError(f"{part.topic} queue {part.queue_id}: the pull at {offset} "
                                     f"answered a frame that is not whole records ({why} at byte {pos})")
                if why is Stop.LIMIT:
                    break
            elif status not in _SKIP or nxt <= offset:
                waited_since = waited_since or time.monotonic()
                if time.monotonic() - waited_since > MISSING_WAIT_S:
                    raise ValueError(
                        f"{part.topic} queue {part.queue_id}: offsets up to {part.end} were planned "
                        f"but a pull at {offset} answers {status.value} (max offset "
                        f"{env.get('max_offset')}); was the store replaced or recovered to less?")
                time.sleep(0.05)
                continue
            waited_since = None
            offset = nxt
        if len(out):
            yield out.batch()
    finally:
        conn.close()


def spread(available: dict, budget: int) -> dict:
    """How many offsets to take of each queue (`available`: queue -> offsets waiting) so that
    the total is at most `budget`, shared as evenly as the queues allow."""
    take = dict.fromkeys(available, 0)
    left = {q: n for q, n in available.items() if n > 0}
    while budget > 0 and left:
        share = max(1, budget // len(left))
        for q in sorted(left, key=int):
            n = min(share, left[q], budget)
            take[q] += n
            left[q] -= n
            budget -= n
            if budget == 0:
                break
        left = {q: n for q, n in left.items() if n > 0}
    return take


class QueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One instance on the driver plans (offsets, partitions, commit); the executors' copies
    only read, from what their partition holds."""

    def __init__(self, options, schema=None):
        check_schema(schema)
        self.topic = opt.one_topic(options)
        self.where = opt.endpoint(options)
        self.keys = opt.client_keys(options)
        self.tag_filter = opt.text(options, "tagFilter")
        self.group = opt.text(options, "group")
        self.starting = opt.text(options, "startingOffsets", "earliest")
        self.max_per_trigger = opt.integer(options, "maxMessagesPerTrigger", 0, 0)
        self._starting_queues()                      # refuse a bad value before the query runs
        self.target: dict | None = None               # availableNow: the end to stop at

    def _starting_queues(self) -> dict | None:
        """The queues of a JSON startingOffsets, or None for earliest/latest."""
        if self.starting in ("earliest", "latest"):
            return None
        try:
            given = json.loads(self.starting)
            if not isinstance(given, dict):
                raise ValueError
            queues = {str(int(q)): int(o) for q, o in given.items()}
            if min(queues.values(), default=0) < 0:
                raise ValueError
            return queues
        except (ValueError, TypeError):
            raise ValueError(f"option startingOffsets={self.starting!r}: earliest, latest or a JSON "
                             'object of queue id to queue offset such as {"0": 10}') from None

    def _admin(self, timeout: float = 10.0):
        from ipc.admin import Admin
        return Admin(self.where[0], store=self.where[1], timeout=timeout, **self.keys)

    def _bounds(self) -> dict:
        """queue id (str) -> (min offset, max offset) of the topic's queues now."""
        from ipc.connection import MQError
        from ipc.protocol import ErrorCode
        admin = self._admin()
        try:
            listed = admin.queue_offsets(self.topic)
        except MQError as e:
            if e.code != ErrorCode.NOT_FOUND:          # a topic not created yet has no queues
                raise
            listed = []
        finally:
            admin.close()
        return {str(e["queue_id"]): (e["min_offset"], e["max_offset"]) for e in listed}

    def initialOffset(self) -> dict:
        bounds = self._bounds()
        given = self._starting_queues()
        if given is not None:
            queues = {q: lo for q, (lo, _hi) in bounds.items()}
            queues.update(given)
        else:
            pick = 0 if self.starting == "earliest" else 1
            queues = {q: b[pick] for q, b in bounds.items()}
        return {"topic": self.topic, "queues": queues}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {q: hi for q, (_lo, hi) in self._bounds().items()}

    def _of_this_topic(self, offsets: dict) -> dict:
        """The queues of an offset Spark kept; a checkpoint of another topic's query is refused."""
        if offsets.get("topic", self.topic) != self.topic:
            raise ValueError(f"the checkpoint holds offsets of topic {offsets['topic']!r}, and this "
                             f"query reads {self.topic!r}: give it a checkpointLocation of its own")
        return offsets.get("queues", {})

    def latestOffset(self, start: dict, limit) -> dict:
        begin = self._of_this_topic(start)
        ends = self.target if self.target is not None else {q: hi for q, (_lo, hi) in self._bounds().items()}
        queues = dict(begin)
        for q, hi in ends.items():
            queues[q] = max(hi, begin.get(q, 0))
        if isinstance(limit, ReadMaxRows):
            waiting = {q: queues[q] - begin.get(q, 0) for q in queues}
            taken = spread(waiting, limit.max_rows)
            queues = {q: begin.get(q, 0) + taken[q] for q in queues}
        return {"topic": self.topic, "queues": queues}

    def partitions(self, start: dict, end: dict) -> list:
        return plan_queue_ranges(self.where, self.topic, self._of_this_topic(start), self._of_this_topic(end),
                                 self.tag_filter, self.keys)

    def read(self, partition: QueueRange):
        return read_queue_range(partition, self.group or "spark")

    def commit(self, end: dict) -> None:
        """With `group`: the store's offsets of that group follow the query. They only show its
        progress (the query resumes from its checkpoint), so a store that cannot take them now
        is logged, not a failure of the query."""
        if not self.group:
            return
        from ipc.connection import MQError
        try:
            admin = self._admin(timeout=COMMIT_TIMEOUT_S)
            try:
                for q, offset in self._of_this_topic(end).items():
                    admin.commit_offset(self.group, self.topic, int(q), offset)
            finally:
                admin.close()
        except (MQError, ConnectionError, TimeoutError) as e:
            log.warning("group %s: offsets of %s not committed to the store (%s)", self.group, self.topic, e)
