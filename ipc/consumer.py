"""`Consumer`: reads a topic's queues from a running store (docs/PROTOCOL.md, reader ops).

Each assigned queue has a next offset to pull and a *position*: the offset after the last
message `poll` handed out (or iteration yielded), which is what `commit` stores for the group (RocketMQ's consumer
offset is likewise the next offset to consume). At start a queue's position is the group's
committed offset, else its min offset (`start="earliest"`) or max offset (`"latest"`: what was
stored before the consumer started is skipped; a queue that appears later, such as the queues
of a topic created after the start, holds only newer messages and starts at its min offset); an
offset the store no longer has is corrected with the `next_begin_offset` of the reply, as
RocketMQ's pull consumer does.

Pulls use the "raw" format and return `ipc.received.ReceivedMessage` views decoded on demand.
A reply's records are checked when it arrives; their message objects are made when `poll`
hands them out, with Python's garbage collector paused while it makes them (ipc/pulls.py
says why; an application that disabled the collector finds it still disabled).
Each asks the reader to repeat it (`repeat`, docs/PROTOCOL.md) up to `max_msgs` messages in
all, so that one round trip brings what many pulls under the store's transfer limits (32
messages each by default) would. They are pipelined (docs/PROTOCOL.md, "Pipelining pulls"): up
to `max_in_flight` are outstanding, a queue's next pull goes out as soon as the reply before
it is taken in (before `poll` returns, so the reader works while the application does), and a
queue with a backlog has up to `pipeline_depth` pulls outstanding: the first at its next
offset, the others speculative, each one stride further (the count of the last full reply) and
below the queue's last known max offset. A queue's replies are taken in offset order (one that
comes early waits for its predecessor); when a reply ends elsewhere than where the next
outstanding pull starts (a short batch, a tag filter, an error), the queue's other pulls are
abandoned (their replies are dropped) and pulling goes on from `next_begin_offset`. Every
queue gets its first pull before any gets a speculative one, round robin, so none starves.
Pulls are held by the reader (long polling, `long_poll_ms`); with more queues than
`max_in_flight` they are held only briefly and not pipelined, so that every queue gets its
turn. At most `max_buffered` received messages wait in the client before pulling pauses. A
seek abandons the queue's outstanding pulls and drops its buffered messages. With a
`tag_filter` the reader filters by tag hash code and the client re-checks the tag string (hash
codes can collide). Offsets are committed every `auto_commit_interval_ms` by `poll` (positions
of messages returned by earlier polls), by `commit()`, and at `close()`. Queues are assigned
explicitly (`queues=`: no membership, as before), or by the group (`mode="clustering"`, the
default, as RocketMQ's clustering consumption: the consumer joins the group at the reader and
reads the queues the reader gives it, ipc/rebalance.py), or all of the topic's
(`mode="broadcasting"`, as RocketMQ's BROADCASTING: every consumer reads every queue and keeps
its offsets itself: nothing is committed to the store, `committed()` and `positions()` say
where it is, and with `offset_file=PATH` commits go to that JSON file, from which the next
consumer started with it continues, as RocketMQ's LocalFileOffsetStore). A member's heartbeats go out every `heartbeat_interval_ms`
from `poll`, and from a timer between polls (ipc/keepalive.py), so that a member busy with a
long batch keeps its session and its queues; one that has not polled for
`max_poll_interval_ms` (5 minutes, Kafka's max.poll.interval.ms) is taken to be stuck and
dropped after its session. A Consumer is meant for one thread (the timer only renews the
session; what its answer changes is applied by the next poll).

Arguments are checked before anything is sent (TypeError for a wrong type, ValueError for a
wrong value, naming the argument): `timeout` is a finite number of seconds above 0,
`tag_filter` a str or None, `poll`'s `timeout_ms` a number of milliseconds >= 0 and its
`max_records` an int >= 1 or None, offsets of seeks ints >= 0 and timestamps numbers >= 0.
`queues` naming a queue that an existing topic does not have is a ValueError at construction
(a topic that does not exist yet is not checked); no offset is committed for a queue the store
does not have.
Once closed (or once a connection it shares is closed), `poll`, the seeks, `commit` and
iteration raise ConnectionClosed (a close inside a `for` loop over the consumer ends that loop instead);
`close` may be called again.
"""
from __future__ import annotations

import logging
import math
import time

from core.read.subscription import subscription_tags
from ipc.client_common import check_int, check_timeout, check_wait_ms
from ipc.connection import Connection, ConnectionClosed, MQError, raise_for_error
from ipc.group_member import (BROADCASTING, CLUSTERING, DEFAULT_HEARTBEAT_INTERVAL_MS,
                              DEFAULT_SESSION_TIMEOUT_MS, GroupMembership)
from ipc.keepalive import DEFAULT_MAX_POLL_INTERVAL_MS, KeepAlive, KeepAliveThread
from ipc.local_offsets import load_offsets, save_offsets
from ipc.rebalance import Rebalancer
from ipc.protocol import ERROR, ErrorCode
from ipc.pulls import RETRY_S, PullPipeline, QueueCursor
from ipc.steps import Call, Wait, run

log = logging.getLogger("mqstore.consumer")

DISCOVER_INTERVAL_S = 30.0    # how often the topic's queue count is checked again


class Consumer:
    """Consumes `topic` for consumer `group`. Iterate it (`for msg in consumer:`, long
    polling forever) or call `poll(timeout_ms)`."""

    def __init__(self, address: str | None = None, group: str | None = None, topic: str | None = None,
                 queues=None, tag_filter: str | None = None, start: str = "earliest", *,
                 store: str | None = None, auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 max_msgs: int = 256, max_in_flight: int = 16, long_poll_ms: int = 2000,
                 max_buffered: int = 8192, timeout: float = 10.0, connection: Connection | None = None,
                 pipeline_depth: int = 4, mode: str = CLUSTERING,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
                 max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS,
                 offset_file: str | None = None, key_file: str | None = None, server_key_file: str | None = None):
        if not group or not topic:
            raise ValueError("a Consumer needs a group and a topic")
        if mode not in (CLUSTERING, BROADCASTING):
            raise ValueError(f"mode must be {CLUSTERING!r} or {BROADCASTING!r}, not {mode!r}")
        if start not in ("earliest", "latest"):
            raise ValueError(f"start must be 'earliest' or 'latest', not {start!r}")
        if not 1 <= max_msgs <= 1024:
            raise ValueError("max_msgs must be within 1..1024")
        if tag_filter is not None and not isinstance(tag_filter, str):
            raise TypeError(f"tag_filter must be a str (such as 'TagA || TagB') or None, "
                            f"not {type(tag_filter).__name__}")
        timeout = check_timeout(timeout)
        self.group = group
        self.topic = topic
        self.start = start
        self.tag_filter = tag_filter
        self._tags = subscription_tags(tag_filter)        # the store's rule, re-checked here
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval_ms / 1000.0
        self.max_msgs = max_msgs
        self.max_in_flight = max(1, max_in_flight)
        self.pipeline_depth = max(1, pipeline_depth)
        self.long_poll_ms = long_poll_ms
        self.max_buffered = max_buffered
        self.timeout = timeout
        self._wanted = sorted(set(int(q) for q in queues)) if queues is not None else None
        self.mode = mode
        self.broadcasting = mode == BROADCASTING          # offsets kept here, not committed
        if offset_file is not None and not self.broadcasting:
            raise ValueError("offset_file is for mode='broadcasting': a group's offsets are the store's")
        self.offset_file = offset_file
        self._local = load_offsets(offset_file, group, topic) if offset_file else {}
        member = GroupMembership(group, topic, session_timeout_ms, heartbeat_interval_ms) \
            if queues is None and mode == CLUSTERING else None
        self._group = Rebalancer(self, member) if member is not None else None
        max_poll_interval_ms = check_wait_ms(max_poll_interval_ms, "max_poll_interval_ms")
        self._keepalive = KeepAlive(self, member, max_poll_interval_ms / 1000.0) if member is not None else None
        self._keepalive_host = None
        self.last_poll = time.monotonic()
        self._states: dict = {}
        self._order: list = []
        self._next_discover = 0.0
        self._discovered = False     # the queues there were at the start are known
        self._last_commit = time.monotonic()
        self._closed = False
        self._iterating = None       # [batch, handed]: the batch a `for` loop is going through
        self.last_error: str | None = None
        self._conn = connection or Connection(address, store=store, timeout=timeout,
                                              key_file=key_file, server_key_file=server_key_file)
        self._own = connection is None
        # repeat: the reader answers a pull with as many pulls in a row as max_msgs allows
        fields = {"group": group, "topic": topic, "max_msgs": max_msgs, "format": "raw", "repeat": max_msgs}
        if tag_filter is not None:
            fields["tag_filter"] = tag_filter
        self._pulls = PullPipeline(self._conn, fields, self._tags, self.max_in_flight, self.pipeline_depth,
                             long_poll_ms, max_buffered, timeout, self._report)
        try:
            self._discover()
        except BaseException:
            self.close()
            raise
        self._start_keepalive()

    def _start_keepalive(self) -> None:
        """Heartbeats between polls (ipc/keepalive.py): a daemon thread."""
        if self._keepalive is not None:
            self._keepalive_host = KeepAliveThread(self._keepalive)

    # -- assignment ----------------------------------------------------------------------
    def _discover(self) -> None:
        run(self._conn, self._discover_steps())

    def _discover_steps(self):
        """Learn the queues to read (steps, ipc/steps.py): a member's heartbeat, or the topic's
        queue count, and the offsets of queues new to this consumer."""
        if self._group is not None:                  # a member: the reader assigns the queues
            self._next_discover = yield from self._group.beat_steps()
            return
        try:
            count = (yield Call("reader", "topic_info", {"topic": self.topic}))["queues"]
        except MQError as e:
            if e.code != ErrorCode.NOT_FOUND:
                raise
            count = 0
        wanted = self._wanted if self._wanted is not None else range(count)
        beyond = [q for q in wanted if q >= count]
        if count and beyond and not self._discovered:
            raise ValueError(f"queues={beyond}: topic {self.topic!r} has {count} queues "
                             f"(0..{count - 1})")
        new = [q for q in wanted if q not in self._states]
        if new:
            yield from self._add_queue_steps(new)
        self._discovered = True
        self._next_discover = time.monotonic() + (DISCOVER_INTERVAL_S if count else RETRY_S)

    def _add_queue_steps(self, qids: list):
        conn, g, t = self._conn, self.group, self.topic
        fetches = [] if self.broadcasting else [       # broadcasting: its own offsets
            conn.request("reader", "fetch_offset", {"group": g, "topic": t, "queue_id": q}) for q in qids]
        env, _ = yield conn.request("reader", "queue_offsets", {"topic": t})
        bounds = {}
        if env.get("status") != ERROR:
            bounds = {e["queue_id"]: (e["min_offset"], e["max_offset"]) for e in env.get("queues", ())}
        for i, q in enumerate(qids):
            committed = raise_for_error((yield fetches[i])[0], "fetch_offset").get("offset", -1) \
                if fetches else self._local.get(q, -1)
            lo, hi = bounds.get(q, (0, 0))
            newer = self.start == "earliest" or self._discovered    # appeared after the start
            offset = committed if committed >= 0 else (lo if newer else hi)
            st = QueueCursor(q, offset, committed, missing=q not in bounds)
            self._states[q] = st
            self._order.append(st)

    def rebalance(self) -> list:
        """A group member: send its heartbeat now and apply the answer (queues gained, queues
        let go after their commit) instead of at the next interval; the assignment."""
        self._check_open()
        if self._group is not None:
            self._next_discover = run(self._conn, self._group.beat_steps())
        return self.assignment()

    def assignment(self) -> list:
        """The queue ids this consumer reads, in order (a queue gained later is not last)."""
        return sorted(st.queue_id for st in self._order)

    def positions(self) -> dict:
        """queue id -> the next offset `poll` will hand out (what `commit` stores); inside a
        `for` loop, the offset after the last message the loop got."""
        held = self._not_yet_yielded()
        return {st.queue_id: held.get(st.queue_id, st.position) for st in self._order}

    def _not_yet_yielded(self) -> dict:
        """queue id -> offset of its first message of the batch a `for` loop is going through
        that the loop has not got yet: `take` moved the positions past the whole batch."""
        if self._iterating is None:
            return {}
        batch, handed = self._iterating
        first: dict = {}
        for m in batch[handed:]:
            first.setdefault(m.queue_id, m.queue_offset)
        return first

    def committed(self) -> dict:
        """queue id -> the offset last committed for the group (-1: never)."""
        return {st.queue_id: st.committed for st in self._order}

    @property
    def caught_up(self) -> bool:
        """True when every queue's last answer said nothing more is stored and nothing is
        buffered: a reader that should stop at the end of the topic stops here."""
        pulls = self._pulls
        return not pulls.ready and not pulls.arrivals and all(st.caught_up for st in self._order)

    # -- polling -------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list:
        """Messages that arrived, waiting up to `timeout_ms` (>= 0; 0: only what is here
        already) for the first; [] at timeout. At most `max_records` (>= 1; None: no limit)."""
        self._check_open()
        self.last_poll = time.monotonic()
        try:
            return run(self._conn, self._poll_steps(timeout_ms, max_records))
        finally:
            self.last_poll = time.monotonic()

    def _poll_steps(self, timeout_ms, max_records):
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
                yield from self._discover_steps()
            if self.auto_commit and now - self._last_commit >= self.auto_commit_interval:
                self._commit_async()
            pulls.issue(self._order, now)      # before returning: the reader works meanwhile
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
            yield Wait(pulls.has_arrivals, max(0.0, min(remaining, self._next_discover - now)))
            if time.monotonic() >= deadline and not pulls.arrivals:
                return []
        return []

    def _report(self, text: str) -> None:
        self.last_error = text

    def _check_open(self) -> None:
        if self._closed or self._conn.closed:
            raise ConnectionClosed("connection closed")

    def __iter__(self):
        """Every message, long polling forever. A message counts as handed out when the loop
        gets it: stopping the loop (`break`) gives the rest of the poll back, so that the
        position, and what a commit stores, stays right after the last message the loop got.
        Iterating a closed consumer raises ConnectionClosed; closing it inside the loop ends
        the loop there (no message after the close)."""
        self._check_open()
        return self._messages()

    def _messages(self):
        while not self._closed:
            batch = self.poll(self.long_poll_ms)
            state = self._iterating = [batch, 0]    # commits and close() store what was got
            try:
                for m in batch:
                    if self._closed:               # closed by the loop's body: stop here
                        return
                    state[1] += 1
                    yield m
            finally:
                if self._iterating is state:
                    self._iterating = None
                if state[1] < len(batch) and not self._closed:
                    self._pulls.give_back(batch[state[1]:], {st.queue_id: st for st in self._order})

    # -- offsets -------------------------------------------------------------------------
    def _commit_requests(self, cursors=None) -> list:
        """Commit requests of the positions of `cursors` (default every queue). A member's
        commits name it (the reader takes them only from the queue's owner); broadcasting
        keeps them here."""
        sent = []
        held = self._not_yet_yielded()
        member = self._group.fields() if self._group is not None else {}
        for st in self._order if cursors is None else cursors:
            pos = held.get(st.queue_id, st.position)
            if pos >= 0 and pos != st.committed and not st.missing:
                if self.broadcasting:
                    st.committed = self._local[st.queue_id] = pos
                    continue
                fut = self._conn.request("reader", "commit_offset", {
                    "group": self.group, "topic": self.topic, "queue_id": st.queue_id, "offset": pos,
                    **member})
                sent.append((st, pos, fut))
        self._last_commit = time.monotonic()
        if self.offset_file and self._local:
            save_offsets(self.offset_file, self.group, self.topic, self._local)
        return sent

    def _commit_async(self) -> None:
        try:
            sent = self._commit_requests()
        except (TimeoutError, ConnectionError) as e:
            self.last_error = f"commit: {e}"
            return
        for st, pos, fut in sent:
            fut.add_done_callback(lambda f, st=st, pos=pos: self._committed(st, pos, f))

    def _committed(self, st: QueueCursor, pos: int, fut) -> None:
        try:
            raise_for_error(fut.result()[0], "commit_offset")
            st.committed = pos
        except Exception as e:
            self.last_error = f"commit of queue {st.queue_id}: {e}"
            log.warning("%s", self.last_error)

    def commit(self) -> dict:
        """Store every queue's position for the group now and wait; queue id -> offset."""
        self._check_open()
        return run(self._conn, self._commit_steps())

    def _commit_steps(self, cursors=None):
        for st, pos, fut in self._commit_requests(cursors):
            raise_for_error((yield fut)[0], "commit_offset")
            st.committed = pos
        return self.committed()

    def seek(self, queue_id: int, offset: int) -> None:
        """Continue queue `queue_id` at `offset` (buffered messages of that queue are dropped).
        `offset` is an int; a negative one is refused (ValueError): no queue has one."""
        self._check_open()
        st = self._states.get(queue_id)
        if st is None:
            raise ValueError(f"queue {queue_id} of {self.topic!r} is not assigned to this consumer")
        try:
            offset = check_int(offset, "offset")
        except ValueError:
            raise ValueError(f"cannot seek queue {queue_id} of {self.topic!r} to offset {offset}: "
                             f"offsets are >= 0") from None
        self._pulls.drop(st)
        st.next_offset = st.position = offset
        st.caught_up = False
        st.retry_at = 0.0

    def seek_to_timestamp(self, timestamp_ms: int) -> dict:
        """Every queue to its first message stored at or after `timestamp_ms` (milliseconds since
        the epoch, >= 0; a float such as time.time() * 1000 is taken as its int part); queue id
        -> offset."""
        self._check_open()
        return run(self._conn, self._seek_time_steps(timestamp_ms))

    def _seek_time_steps(self, timestamp_ms):
        if timestamp_ms.__class__ is float and math.isfinite(timestamp_ms):
            timestamp_ms = int(timestamp_ms)           # time.time() * 1000, as callers write it
        timestamp_ms = check_int(timestamp_ms, "timestamp_ms")
        futs = [(st, self._conn.request("reader", "offset_by_time", {
            "topic": self.topic, "queue_id": st.queue_id, "timestamp": timestamp_ms}))
            for st in self._order]
        for st, fut in futs:
            self.seek(st.queue_id, raise_for_error((yield fut)[0], "offset_by_time")["offset"])
        return self.positions()

    def seek_to_beginning(self) -> dict:
        self._check_open()
        return run(self._conn, self._seek_bounds_steps("min_offset"))

    def seek_to_end(self) -> dict:
        self._check_open()
        return run(self._conn, self._seek_bounds_steps("max_offset"))

    def _seek_bounds_steps(self, key: str):
        env = yield Call("reader", "queue_offsets", {"topic": self.topic})
        bounds = {e["queue_id"]: e[key] for e in env.get("queues", ())}
        for st in self._order:
            self.seek(st.queue_id, bounds.get(st.queue_id, 0))
        return self.positions()

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Commit positions (with auto commit) and close the connection if it is ours."""
        if not self._closed:
            self._closed = True
            if self._keepalive_host is not None:
                self._keepalive_host.stop()
            run(self._conn, self._close_steps())

    def _close_steps(self):
        try:
            if self.auto_commit and self._order and not self._conn.closed:
                self._pulls.process()
                yield from self._commit_steps()
        except Exception as e:
            log.warning("final commit of %s/%s failed: %s", self.group, self.topic, e)
        finally:
            if self._group is not None and not self._conn.closed:
                yield from self._group.leave_steps()     # the others take its queues at once
            if self._own:
                self._conn.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
