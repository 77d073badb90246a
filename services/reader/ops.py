"""The reader's operations, one handler per op of docs/PROTOCOL.md's reader table, over the
read-only views (core.read.views) and the read logic of core.read.store_reader.

`ReadOps.register(handlers)` puts them into a `ipc.protocol.Handlers` table. A `pull` that
finds nothing and asks for long polling is handed to the `hold` callback (the reader's
hold table) and answered later; every other op answers at once. Bad input raises
`ProtocolError` inside a handler, which the table turns into an error reply.

Decisions the protocol leaves open:
- A queue is known when topics.json lists its topic with more queues than its id, or when
  its consume-queue directory exists. A pull on a known queue with no data yet answers
  NO_MESSAGE_IN_QUEUE (RocketMQ creates the queue on demand); on an unknown one
  NO_MATCHED_LOGIC_QUEUE, which is not held. Queries on unknown topics answer NOT_FOUND, and
  so does an offset commit for an unknown topic or queue (nothing is saved).
- `consumer_lag` counts from the queue's min offset when the group never committed one.
"""
from __future__ import annotations

import struct
import time

from core.record.message import decode_message_id
from core.read.check import record_problem
from core.status import GetMessageResult, GetMessageStatus
from core.meta.topics import topic_name_problem
from ipc.control_block import Word
from ipc.protocol import OK, ErrorCode, ProtocolError, field, pack, reply
from services.reader.longpoll import PullRequest
from services.reader.meta import MetaEncoder
from services.reader.pull import BatchStoreReader

S = GetMessageStatus
MAX_PULL_MSGS = 1024
MAX_POLL_MS = 600_000
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1


def _name(env: dict, key: str, code: ErrorCode = ErrorCode.BAD_TOPIC) -> str:
    value = field(env, key, str)
    problem = topic_name_problem(value, key)         # "group 'a b' has characters outside ..."
    if problem:
        raise ProtocolError(code, problem)
    return value


name_field = _name                   # the same check for the group ops (services.reader.groups)


def _queue_id(env: dict, default=...) -> int:
    return field(env, "queue_id", int, default, minimum=0, maximum=INT32_MAX)


_valid_names: set = set()         # group and topic names that passed topic_name_problem
_VALID_NAMES_LIMIT = 65536


def parse_pull(env: dict) -> PullRequest:
    """The validated pull. The common request (names seen before, every field of the right
    type and in range) is checked inline; anything else goes through `_parse_pull_fields`,
    which names the field in its error."""
    group, topic = env.get("group"), env.get("topic")
    queue_id, offset = env.get("queue_id"), env.get("offset")
    max_msgs, poll_ms = env.get("max_msgs", 32), env.get("poll_ms", 0)
    fmt, tag_filter = env.get("format", "fields"), env.get("tag_filter")
    repeat = env.get("repeat", 1)
    if (type(group) is str and group in _valid_names and type(topic) is str and topic in _valid_names
            and type(queue_id) is int and 0 <= queue_id <= INT32_MAX
            and type(offset) is int and 0 <= offset <= INT64_MAX
            and type(max_msgs) is int and 1 <= max_msgs <= MAX_PULL_MSGS
            and type(poll_ms) is int and 0 <= poll_ms <= MAX_POLL_MS
            and (fmt == "raw" or fmt == "fields") and (tag_filter is None or type(tag_filter) is str)
            and type(repeat) is int and 1 <= repeat <= MAX_PULL_MSGS):
        return PullRequest(group, topic, queue_id, offset, max_msgs, tag_filter, poll_ms, fmt == "raw",
                           repeat)
    req = _parse_pull_fields(env)
    if len(_valid_names) >= _VALID_NAMES_LIMIT:
        _valid_names.clear()
    _valid_names.update((req.group, req.topic))
    return req


def _parse_pull_fields(env: dict) -> PullRequest:
    fmt = field(env, "format", str, "fields")
    if fmt not in ("fields", "raw"):
        raise ProtocolError(ErrorCode.BAD_FIELD, f"field 'format' must be 'fields' or 'raw', got {fmt!r}")
    return PullRequest(
        group=_name(env, "group", ErrorCode.BAD_FIELD), topic=_name(env, "topic"),
        queue_id=_queue_id(env), offset=field(env, "offset", int, minimum=0, maximum=INT64_MAX),
        max_msgs=field(env, "max_msgs", int, 32, minimum=1, maximum=MAX_PULL_MSGS),
        tag_filter=field(env, "tag_filter", str, None),
        poll_ms=field(env, "poll_ms", int, 0, minimum=0, maximum=MAX_POLL_MS), raw=fmt == "raw",
        repeat=field(env, "repeat", int, 1, minimum=1, maximum=MAX_PULL_MSGS))


def wait_cursor(result, offset: int) -> int | None:
    """Where a held pull resumes, or None when `result` is an answer to send now."""
    status = result.status
    if status is S.NO_MESSAGE_IN_QUEUE or status is S.OFFSET_OVERFLOW_ONE:
        return offset
    if status is S.NO_MATCHED_MESSAGE and result.next_begin_offset >= result.max_offset:
        return result.next_begin_offset                  # scanned to the end, nothing matched
    return None


class ReadOps:
    def __init__(self, config, cb, commitlog, cq_store, index, offsets, topics, hold=None):
        self.config = config
        self.cb = cb
        self.commitlog = commitlog
        self.cqs = cq_store
        self.offsets = offsets
        self.topics = topics                         # core.meta.topics.TopicTable
        self.hold = hold                             # callable(peer, rid, request, result, cursor)
        self.store_reader = BatchStoreReader(config, commitlog, cq_store, index)
        self.encoder = MetaEncoder()
        self.groups = None                           # services.reader.groups.GroupOps, or None

    def register(self, handlers) -> None:
        for name in ("pull", "query_by_key", "view_by_id", "look_by_offset", "offset_by_time",
                     "queue_offsets", "commit_offset", "fetch_offset", "consumer_lag", "topics",
                     "topic_info"):
            handlers.op(name)(getattr(self, "op_" + name))

    # -- queues --------------------------------------------------------------------------
    def queue_count(self, topic: str) -> int:
        on_disk = self.cqs.topic_queue_ids(topic)
        return max(self.topics.get(topic) or 0, on_disk[-1] + 1 if on_disk else 0)

    def queue_ids(self, topic: str) -> list[int]:
        return list(range(self.queue_count(topic)))

    def has_queue(self, topic: str, queue_id: int) -> bool:
        return queue_id < self.queue_count(topic)

    def find_fresh(self, topic: str, queue_id: int):
        """The queue's view with its max offset brought up to DISPATCHED."""
        cq = self.cqs.find(topic, queue_id)
        if cq is not None:
            dispatched = self.cb.get(Word.DISPATCHED)
            if dispatched != cq.checked_dispatched:
                cq.refresh_max(dispatched)
        return cq

    def _known_queue_ids(self, topic: str) -> list[int]:
        ids = self.queue_ids(topic)
        if not ids:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"unknown topic {topic!r}")
        return ids

    # -- pull ----------------------------------------------------------------------------
    def run_pull(self, req: PullRequest, offset: int):
        cq = self.cqs.find(req.topic, req.queue_id)
        if cq is None:
            if self.has_queue(req.topic, req.queue_id):
                return GetMessageResult(S.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
            return GetMessageResult(S.NO_MATCHED_LOGIC_QUEUE, 0)
        if offset >= cq.max_entries:                # nothing known past it: look again
            dispatched = self.cb.get(Word.DISPATCHED)
            if dispatched != cq.checked_dispatched:
                cq.refresh_max(dispatched)
        return self.store_reader.pull(cq, offset, req.max_msgs, req.tag_filter, views=req.raw,
                                      repeat=req.repeat)

    def pull_reply(self, rid: int, req: PullRequest, result) -> list:
        env = {"rid": rid, "status": result.status.value,
               "next_begin_offset": result.next_begin_offset, "min_offset": result.min_offset,
               "max_offset": result.max_offset, "count": result.message_count}
        if result.reason:
            env["reason"] = result.reason
        chunks = getattr(result, "chunks", None)
        if req.raw:
            frame = result.raw() if chunks else b""
        else:
            env["messages"], frame = self.encoder.encode(chunks or ())
        return [pack(env), frame]

    def op_pull(self, env, frames, peer):
        req = parse_pull(env)
        result = self.run_pull(req, req.offset)
        if req.poll_ms > 0 and self.hold is not None:
            cursor = wait_cursor(result, req.offset)
            if cursor is not None:
                self.hold(peer, env.get("rid", 0), req, result, cursor)
                return None
        return self.pull_reply(env.get("rid", 0), req, result)

    # -- lookups -------------------------------------------------------------------------
    def _messages_reply(self, rid: int, records: list) -> list:
        metas, bodies = self.encoder.encode(records)
        return reply(rid, OK, {"messages": metas}, [bodies])

    def _record_at(self, phys: int):
        """(record, metadata) of the whole record that starts at `phys` below CONFIRM, or None."""
        rec = self.commitlog.look_record(phys)
        if rec is None:
            return None
        why = record_problem(rec, 0, len(rec), phys, check_crc=self.store_reader.check_crc)
        if why is not None:
            self.store_reader.damage.note("lookup", phys, why)
            return None
        try:
            metas, _ = self.encoder.encode([rec])
        except (ValueError, IndexError, struct.error):           # not a record
            return None
        return (rec, metas[0]) if metas[0]["phys_offset"] == phys else None

    def op_look_by_offset(self, env, frames, peer):
        phys = field(env, "phys_offset", int, minimum=0, maximum=INT64_MAX)
        found = self._record_at(phys)
        if found is None:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"no message at physical offset {phys}")
        return self._messages_reply(env.get("rid", 0), [found[0]])

    def op_view_by_id(self, env, frames, peer):
        msg_id = field(env, "msg_id", str)
        try:
            _, phys = decode_message_id(msg_id)
        except ValueError:
            raise ProtocolError(ErrorCode.BAD_FIELD, f"field 'msg_id' is not an offset message id: "
                                                     f"{msg_id!r}") from None
        found = self._record_at(phys) if phys >= 0 else None
        if found is None or found[1]["msg_id"] != msg_id.upper():
            raise ProtocolError(ErrorCode.NOT_FOUND, f"no message with id {msg_id}")
        return self._messages_reply(env.get("rid", 0), [found[0]])

    def op_query_by_key(self, env, frames, peer):
        topic = _name(env, "topic")
        key = field(env, "key", str)
        if not key:
            raise ProtocolError(ErrorCode.BAD_FIELD, "field 'key' is empty")
        max_num = field(env, "max_num", int, self.config.default_query_max_num, minimum=1,
                        maximum=INT32_MAX)
        begin = field(env, "begin_ts", int, 0, minimum=0, maximum=INT64_MAX)
        end = field(env, "end_ts", int, time.time_ns() // 1_000_000, minimum=0, maximum=INT64_MAX)
        self._known_queue_ids(topic)
        found = self.store_reader.query_message(topic, key, max_num, begin, end)
        records = [hit[0] for hit in (self._record_at(m.commit_log_offset) for m in found.messages)
                   if hit is not None]
        return self._messages_reply(env.get("rid", 0), records)

    def op_offset_by_time(self, env, frames, peer):
        topic, queue_id = _name(env, "topic"), _queue_id(env)
        timestamp = field(env, "timestamp", int, minimum=0, maximum=INT64_MAX)
        cq = self.find_fresh(topic, queue_id)
        if cq is None:
            if not self.has_queue(topic, queue_id):
                raise ProtocolError(ErrorCode.NOT_FOUND, f"unknown queue {topic}:{queue_id}")
            return reply(env.get("rid", 0), OK, {"offset": 0})
        offset = self.store_reader.get_offset_in_queue_by_time(topic, queue_id, timestamp)
        return reply(env.get("rid", 0), OK, {"offset": offset})

    def _bounds(self, topic: str, queue_id: int) -> tuple[int, int]:
        cq = self.find_fresh(topic, queue_id)
        if cq is None:
            return 0, 0
        return cq.get_min_offset_in_queue(), cq.max_entries

    def op_queue_offsets(self, env, frames, peer):
        topic = _name(env, "topic")
        queue_id = _queue_id(env, None)
        ids = self._known_queue_ids(topic)
        if queue_id is not None:
            if queue_id not in ids:
                raise ProtocolError(ErrorCode.NOT_FOUND, f"unknown queue {topic}:{queue_id}")
            ids = [queue_id]
        queues = []
        for qid in ids:
            lo, hi = self._bounds(topic, qid)
            queues.append({"queue_id": qid, "min_offset": lo, "max_offset": hi})
        return reply(env.get("rid", 0), OK, {"queues": queues})

    # -- consumer offsets ----------------------------------------------------------------
    def op_commit_offset(self, env, frames, peer):
        group, topic = _name(env, "group", ErrorCode.BAD_FIELD), _name(env, "topic")
        queue_id = _queue_id(env)
        offset = field(env, "offset", int, minimum=0, maximum=INT64_MAX)
        if queue_id >= len(self._known_queue_ids(topic)):   # as RocketMQ's broker: no offsets
            raise ProtocolError(ErrorCode.NOT_FOUND,          # of a queue it does not have
                                f"unknown queue {topic}:{queue_id}")
        if self.groups is not None:                  # a member's commit: only the owner's
            self.groups.check_commit(env, group, topic, queue_id)
        self.offsets.commit(group, topic, queue_id, offset)
        return reply(env.get("rid", 0), OK)

    def op_fetch_offset(self, env, frames, peer):
        group, topic = _name(env, "group", ErrorCode.BAD_FIELD), _name(env, "topic")
        queue_id = _queue_id(env)
        return reply(env.get("rid", 0), OK, {"offset": self.offsets.fetch(group, topic, queue_id)})

    def op_consumer_lag(self, env, frames, peer):
        group, topic = _name(env, "group", ErrorCode.BAD_FIELD), _name(env, "topic")
        committed = self.offsets.group_offsets(group, topic)
        queues, total = [], 0
        members = self.groups.describe(group, topic) if self.groups is not None else None
        owners = {q: m["member_id"] for m in (members or {}).get("members", ()) for q in m["queues"]}
        for qid in self._known_queue_ids(topic):
            lo, hi = self._bounds(topic, qid)
            mine = committed.get(qid, -1)
            lag = max(0, hi - (mine if mine >= 0 else lo))
            total += lag
            entry = {"queue_id": qid, "consumer_offset": mine, "max_offset": hi, "lag": lag}
            if members:
                entry["owner"] = owners.get(qid)
            queues.append(entry)
        extra = {"members": members["members"], "generation": members["generation"]} if members else {}
        return reply(env.get("rid", 0), OK, {"queues": queues, "total_lag": total, **extra})

    # -- topics --------------------------------------------------------------------------
    def op_topics(self, env, frames, peer):
        names = set(self.topics.topics) | set(self.cqs.topic_names())
        topics = [{"topic": t, "queues": self.queue_count(t)} for t in sorted(names)]
        return reply(env.get("rid", 0), OK, {"topics": topics})

    def op_topic_info(self, env, frames, peer):
        """`queues`: the queues a consumer reads (RocketMQ's read queue count: every queue of
        the topic's table and every queue that holds messages); `write_queues`: the queues
        puts go to (the table's count, RocketMQ's write queue count). They differ after a
        topic's queue count was lowered: the higher queues keep their messages."""
        topic = _name(env, "topic")
        queues = len(self._known_queue_ids(topic))
        return reply(env.get("rid", 0), OK, {"topic": topic, "queues": queues,
                                             "write_queues": self.topics.get(topic) or queues})
