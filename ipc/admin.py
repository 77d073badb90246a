"""`Admin`: the operator's view of a running store through docs/PROTOCOL.md: topics, queue
offsets, consumer lag, group offsets and members, messages by key, id or physical offset, status and stop.

Every method is one synchronous request (one per topic for `consumer_lag` without a topic)
and raises `ipc.MQError` for an error reply, except the lookups that answer "not there" with
None.
"""
from __future__ import annotations

import time

from ipc.connection import Connection, MQError
from ipc.protocol import ErrorCode
from ipc.received import messages_from_reply


class Admin:
    """Administration of a running store at `address` (or `store=DIR`: `DIR/run/address`)."""

    def __init__(self, address: str | None = None, *, store: str | None = None, timeout: float = 10.0,
                 connection: Connection | None = None, key_file: str | None = None, server_key_file: str | None = None):
        self._conn = connection or Connection(address, store=store, timeout=timeout, background=False,
                                              key_file=key_file, server_key_file=server_key_file)
        self._own = connection is None

    @property
    def connection(self) -> Connection:
        return self._conn

    # -- store ---------------------------------------------------------------------------
    def hello(self) -> dict:
        """The front door's hello: version, appender and reader endpoints, store root."""
        return self._conn.call("front", "hello")

    def status(self) -> dict:
        """Services (name, pid, state, uptime_s, restarts, rss, cpu), positions and flags."""
        return self._strip(self._conn.call("front", "status"))

    def stop(self) -> None:
        """Ask the supervisor to stop the store cleanly (it answers before it stops)."""
        self._conn.call("front", "stop")

    # -- topics --------------------------------------------------------------------------
    def topics(self) -> dict:
        """{topic name: queue count}, sorted by name (`"T" in admin.topics()`, as RocketMQ's
        topic list is one of names)."""
        env = self._conn.call("front", "topics")
        listed = sorted(env.get("topics", []), key=lambda t: t.get("topic", ""))
        return {t["topic"]: t["queues"] for t in listed}

    def create_topic(self, topic: str, queues: int | None = None) -> dict:
        """Create `topic` with `queues` queues (1..1024), or change an existing topic's count;
        without `queues`, an existing topic is kept as it is and a new one gets the store's
        default_topic_queue_nums. {"topic", "queues"}."""
        return self._strip(self._conn.call("appender", "create_topic", topic=topic, queues=queues))

    def topic_info(self, topic: str) -> dict | None:
        """{"topic", "queues", "write_queues"} (the queues consumers read, the queues puts go
        to: fewer after the topic's queue count was lowered), or None when it does not exist."""
        try:
            return self._strip(self._conn.call("reader", "topic_info", topic=topic))
        except MQError as e:
            if e.code == ErrorCode.NOT_FOUND:
                return None
            raise

    def queue_offsets(self, topic: str, queue_id: int | None = None) -> list:
        """[{"queue_id", "min_offset", "max_offset"}, ...] of one queue or all."""
        fields = {"topic": topic}
        if queue_id is not None:
            fields["queue_id"] = queue_id
        return self._conn.call("reader", "queue_offsets", **fields).get("queues", [])

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The offset of the first message of the queue stored at or after `timestamp_ms`."""
        return self._conn.call("reader", "offset_by_time", topic=topic, queue_id=queue_id,
                               timestamp=int(timestamp_ms))["offset"]

    # -- consumer groups -----------------------------------------------------------------
    def fetch_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset of the queue, -1 when never committed."""
        return self._conn.call("reader", "fetch_offset", group=group, topic=topic,
                               queue_id=queue_id)["offset"]

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set the group's offset of the queue (to replay or skip messages)."""
        self._conn.call("reader", "commit_offset", group=group, topic=topic, queue_id=queue_id,
                        offset=int(offset))

    def groups(self) -> list:
        """Every consumer group with members: [{"group", "topic", "generation", "members":
        [{"member_id", "client", "queues", "expires_in_ms"}]}] (docs/PROTOCOL.md, `groups`)."""
        return self._conn.call("reader", "groups").get("groups", [])

    def consumer_lag(self, group: str, topic: str | None = None) -> dict:
        """The group's lag on `topic`: {"queues": [{"queue_id", "consumer_offset", "max_offset",
        "lag", "owner"}], "total_lag"}, and while the group has members on the topic its
        "generation" and "members" ([{"member_id", "client", "queues", "expires_in_ms"}]; a
        queue's "owner" is the member reading it). Without `topic`, on every topic the group
        committed an offset of (RocketMQ's consumer progress): {"topics": {topic: that map},
        "total_lag"}."""
        if topic is not None:
            return self._strip(self._conn.call("reader", "consumer_lag", group=group, topic=topic))
        topics = {}
        for name in self.topics():
            lag = self._strip(self._conn.call("reader", "consumer_lag", group=group, topic=name))
            if any(q["consumer_offset"] >= 0 for q in lag.get("queues", ())):
                topics[name] = lag
        return {"topics": topics, "total_lag": sum(t["total_lag"] for t in topics.values())}

    # -- messages ------------------------------------------------------------------------
    def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0,
                     end_ts: int | None = None) -> list:
        """Messages of `topic` whose KEYS or UNIQ_KEY include `key`, newest first (MessageExt)."""
        fields = {"topic": topic, "key": key, "max_num": max_num, "begin_ts": begin_ts,
                  "end_ts": int(time.time() * 1000) + 1000 if end_ts is None else end_ts}
        env, frames = self._conn.call_with_frames("reader", "query_by_key", **fields)
        return messages_from_reply(env, frames)

    def view_by_id(self, msg_id: str):
        """The message with this offset message id (MessageExt), or None."""
        return self._one("view_by_id", msg_id=msg_id)

    def look_by_offset(self, phys_offset: int):
        """The message stored at this CommitLog offset (MessageExt), or None."""
        return self._one("look_by_offset", phys_offset=int(phys_offset))

    def _one(self, op: str, **fields):
        try:
            env, frames = self._conn.call_with_frames("reader", op, **fields)
        except MQError as e:
            if e.code == ErrorCode.NOT_FOUND:
                return None
            raise
        msgs = messages_from_reply(env, frames)
        return msgs[0] if msgs else None

    @staticmethod
    def _strip(env: dict) -> dict:
        return {k: v for k, v in env.items() if k not in ("rid", "status")}

    def close(self) -> None:
        if self._own:
            self._conn.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
