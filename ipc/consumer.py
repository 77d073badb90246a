"""`Consumer`: reads a topic's queues from a running store (docs/PROTOCOL.md, reader ops).

Each assigned queue has a next offset to pull and a *position*: the offset after the last
message `poll` handed out, which is what `commit` stores for the group (RocketMQ's consumer
offset is likewise the next offset to consume). At start a queue's position is the group's
committed offset, else its min offset (`start="earliest"`) or max offset (`"latest"`); an
offset the store no longer has is corrected with the `next_begin_offset` of the reply, as
RocketMQ's pull consumer does.

Pulls use the "raw" format and return `ipc.received.ReceivedMessage` views decoded on
demand. Up to `max_in_flight` queues have a pull outstanding at a time, chosen round robin,
each held by the reader (long polling, `long_poll_ms`) until messages arrive; with more
queues than that, pulls are held only briefly so that every queue gets its turn. At most
`max_buffered` received messages wait in the client before pulling pauses. With a
`tag_filter` the reader filters by tag hash code and the client re-checks the tag string
(hash codes can collide). Offsets are committed every `auto_commit_interval_ms` by `poll`
(positions of messages returned by earlier polls), by `commit()`, and at `close()`.
Queues are assigned explicitly (`queues=`) or all of the topic's; there is no rebalancing
between the members of a group. A Consumer is meant for one thread.
"""
from __future__ import annotations

import collections
import logging
import time

from ipc.connection import Connection, ConnectionClosed, MQError, raise_for_error
from ipc.protocol import ERROR, ErrorCode
from ipc.received import split_records

log = logging.getLogger("mqstore.consumer")

ROTATE_POLL_MS = 100          # hold time of pulls when queues outnumber max_in_flight
DISCOVER_INTERVAL_S = 30.0    # how often the topic's queue count is checked again
RETRY_S = 1.0                 # back-off after an error or a missing queue
QUICK_EMPTY_S = 0.02          # an empty answer faster than this is not a held pull: back off
EMPTY_STATUSES = ("NO_MESSAGE_IN_QUEUE", "OFFSET_OVERFLOW_ONE", "NO_MATCHED_LOGIC_QUEUE")


class _Queue:
    __slots__ = ("queue_id", "next_offset", "position", "committed", "in_flight", "gen",
                 "caught_up", "retry_at", "sent_at")

    def __init__(self, queue_id: int, offset: int, committed: int):
        self.queue_id = queue_id
        self.next_offset = offset
        self.position = offset
        self.committed = committed
        self.in_flight = False
        self.gen = 0
        self.caught_up = False
        self.retry_at = 0.0
        self.sent_at = 0.0


def parse_tag_filter(expression: str | None) -> frozenset | None:
    """The tags a subscription expression accepts; None for everything (`*` or no filter)."""
    if expression is None:
        return None
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    return None if not tags or "*" in tags else tags


class Consumer:
    """Consumes `topic` for consumer `group`. Iterate it (`for msg in consumer:`, long
    polling forever) or call `poll(timeout_ms)`."""

    def __init__(self, address: str | None = None, group: str | None = None, topic: str | None = None,
                 queues=None, tag_filter: str | None = None, start: str = "earliest", *,
                 store: str | None = None, auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 max_msgs: int = 256, max_in_flight: int = 16, long_poll_ms: int = 2000,
                 max_buffered: int = 8192, timeout: float = 10.0, connection: Connection | None = None):
        if not group or not topic:
            raise ValueError("a Consumer needs a group and a topic")
        if start not in ("earliest", "latest"):
            raise ValueError(f"start must be 'earliest' or 'latest', not {start!r}")
        if not 1 <= max_msgs <= 1024:
            raise ValueError("max_msgs must be within 1..1024")
        self.group = group
        self.topic = topic
        self.start = start
        self.tag_filter = tag_filter
        self._tags = parse_tag_filter(tag_filter)
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval_ms / 1000.0
        self.max_msgs = max_msgs
        self.max_in_flight = max(1, max_in_flight)
        self.long_poll_ms = long_poll_ms
        self.max_buffered = max_buffered
        self.timeout = timeout
        self._wanted = sorted(set(int(q) for q in queues)) if queues is not None else None
        self._states: dict = {}
        self._order: list = []
        self._ready = collections.deque()      # [queue, messages, index, position after]
        self._arrivals = collections.deque()   # (queue, generation, future) from callbacks
        self._buffered = 0
        self._in_flight = 0
        self._rr = 0
        self._next_discover = 0.0
        self._last_commit = time.monotonic()
        self._closed = False
        self.last_error: str | None = None
        self._conn = connection or Connection(address, store=store, timeout=timeout)
        self._own = connection is None
        try:
            self._discover()
        except BaseException:
            self.close()
            raise

    # -- assignment ----------------------------------------------------------------------
    def _discover(self) -> None:
        try:
            count = self._conn.call("reader", "topic_info", topic=self.topic)["queues"]
        except MQError as e:
            if e.code != ErrorCode.NOT_FOUND:
                raise
            count = 0
        wanted = self._wanted if self._wanted is not None else range(count)
        new = [q for q in wanted if q not in self._states]
        if new:
            self._add_queues(new)
        self._next_discover = time.monotonic() + (DISCOVER_INTERVAL_S if count else RETRY_S)

    def _add_queues(self, qids: list) -> None:
        conn, g, t = self._conn, self.group, self.topic
        fetches = [conn.request("reader", "fetch_offset", {"group": g, "topic": t, "queue_id": q})
                   for q in qids]
        env, _ = conn.request("reader", "queue_offsets", {"topic": t}).result()
        bounds = {}
        if env.get("status") != ERROR:
            bounds = {e["queue_id"]: (e["min_offset"], e["max_offset"]) for e in env.get("queues", ())}
        for q, fut in zip(qids, fetches):
            committed = raise_for_error(fut.result()[0], "fetch_offset").get("offset", -1)
            lo, hi = bounds.get(q, (0, 0))
            offset = committed if committed >= 0 else (lo if self.start == "earliest" else hi)
            st = _Queue(q, offset, committed)
            self._states[q] = st
            self._order.append(st)

    def assignment(self) -> list:
        """The queue ids this consumer reads."""
        return [st.queue_id for st in self._order]

    def positions(self) -> dict:
        """queue id -> the next offset `poll` will hand out (what `commit` stores)."""
        return {st.queue_id: st.position for st in self._order}

    def committed(self) -> dict:
        """queue id -> the offset last committed for the group (-1: never)."""
        return {st.queue_id: st.committed for st in self._order}

    @property
    def caught_up(self) -> bool:
        """True when every queue's last answer said nothing more is stored and nothing is
        buffered: a reader that should stop at the end of the topic stops here."""
        return not self._ready and not self._arrivals and all(st.caught_up for st in self._order)

    # -- polling -------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list:
        """Messages that arrived, waiting up to `timeout_ms` for the first; [] at timeout."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        while not self._closed:
            self._process_arrivals()
            if self._ready:
                out = self._take(max_records)
                if out:
                    return out
                continue
            now = time.monotonic()
            if now >= self._next_discover:
                self._discover()
            if self.auto_commit and now - self._last_commit >= self.auto_commit_interval:
                self._commit_async()
            self._issue_pulls(now)
            remaining = deadline - now
            if remaining <= 0:
                return []
            retry = min((st.retry_at for st in self._order if st.retry_at > now), default=None)
            if retry is not None:
                remaining = min(remaining, retry - now)
            self._conn.wait(self._has_arrivals, min(remaining, self._next_discover - now))
            if time.monotonic() >= deadline and not self._arrivals:
                return []
        return []

    def __iter__(self):
        while not self._closed:
            yield from self.poll(self.long_poll_ms)

    def _has_arrivals(self) -> bool:
        return bool(self._arrivals)

    def _issue_pulls(self, now: float) -> None:
        n = len(self._order)
        if not n or self._buffered >= self.max_buffered:
            return
        poll_ms = self.long_poll_ms if n <= self.max_in_flight else min(self.long_poll_ms, ROTATE_POLL_MS)
        for i in range(n):
            if self._in_flight >= self.max_in_flight:
                break
            st = self._order[(self._rr + i) % n]
            if st.in_flight or st.retry_at > now:
                continue
            fields = {"group": self.group, "topic": self.topic, "queue_id": st.queue_id,
                      "offset": st.next_offset, "max_msgs": self.max_msgs, "poll_ms": poll_ms,
                      "format": "raw"}
            if self.tag_filter is not None:
                fields["tag_filter"] = self.tag_filter
            try:
                fut = self._conn.request("reader", "pull", fields, timeout=poll_ms / 1000.0 + self.timeout)
            except (TimeoutError, ConnectionError) as e:
                if isinstance(e, ConnectionClosed) and self._conn.closed:
                    return
                st.retry_at = now + RETRY_S
                continue
            st.in_flight = True
            st.sent_at = now
            self._in_flight += 1
            gen = st.gen
            fut.add_done_callback(lambda f, st=st, gen=gen: self._arrivals.append((st, gen, f)))
        self._rr = (self._rr + 1) % n

    def _process_arrivals(self) -> None:
        while self._arrivals:
            st, gen, fut = self._arrivals.popleft()
            self._in_flight -= 1
            if gen != st.gen:
                continue                               # answered a pull from before a seek
            st.in_flight = False
            try:
                env, frames = fut.result(0)
            except Exception as e:                     # timeout or connection closed
                self.last_error = f"pull of queue {st.queue_id}: {e}"
                st.retry_at = time.monotonic() + RETRY_S
                continue
            try:
                self._on_pull(st, env, frames)
            except ValueError as e:                    # a frame that is not what PROTOCOL.md says
                self.last_error = f"pull of queue {st.queue_id}: {e}"
                log.error("%s", self.last_error)
                st.retry_at = time.monotonic() + RETRY_S

    def _on_pull(self, st: _Queue, env: dict, frames: list) -> None:
        status = env.get("status")
        nxt = env.get("next_begin_offset")
        if status == "FOUND":
            msgs = split_records(frames[0]) if frames else []
            if self._tags is not None:
                msgs = [m for m in msgs if m.tags in self._tags]
            if not isinstance(nxt, int):
                nxt = msgs[-1].queue_offset + 1 if msgs else st.next_offset
            self._ready.append([st, msgs, 0, nxt])
            self._buffered += len(msgs)
            st.next_offset = nxt
            st.caught_up = nxt >= env.get("max_offset", nxt)
            return
        now = time.monotonic()
        if status == ERROR:
            self.last_error = f"pull of queue {st.queue_id}: {env.get('code')} {env.get('reason')}"
            if env.get("code") != ErrorCode.NOT_FOUND:
                log.warning("%s", self.last_error)
            st.caught_up = True
            st.retry_at = now + RETRY_S
            return
        if isinstance(nxt, int) and nxt != st.next_offset:
            if status not in EMPTY_STATUSES and status != "NO_MATCHED_MESSAGE":
                log.info("queue %s of %s: %s at offset %s, continuing at %s",
                         st.queue_id, self.topic, status, st.next_offset, nxt)
            st.next_offset = nxt
            self._ready.append([st, [], 0, nxt])       # moves the position in order
        else:
            if now - st.sent_at < QUICK_EMPTY_S:
                st.retry_at = now + 0.05
        st.caught_up = status in EMPTY_STATUSES or st.next_offset >= env.get("max_offset", 0)
        if status == "NO_MATCHED_LOGIC_QUEUE":
            st.retry_at = now + RETRY_S

    def _take(self, max_records: int | None) -> list:
        out = []
        limit = max_records if max_records and max_records > 0 else 1 << 62
        ready = self._ready
        while ready and len(out) < limit:
            entry = ready[0]
            st, msgs, i, nxt = entry
            room = limit - len(out)
            if len(msgs) - i <= room:
                out.extend(msgs[i:] if i else msgs)
                ready.popleft()
                st.position = nxt
            else:
                chunk = msgs[i:i + room]
                out.extend(chunk)
                entry[2] = i + room
                st.position = chunk[-1].queue_offset + 1
        self._buffered -= len(out)
        return out

    # -- offsets -------------------------------------------------------------------------
    def _commit_requests(self) -> list:
        sent = []
        for st in self._order:
            pos = st.position
            if pos >= 0 and pos != st.committed:
                fut = self._conn.request("reader", "commit_offset", {
                    "group": self.group, "topic": self.topic, "queue_id": st.queue_id, "offset": pos})
                sent.append((st, pos, fut))
        self._last_commit = time.monotonic()
        return sent

    def _commit_async(self) -> None:
        try:
            sent = self._commit_requests()
        except (TimeoutError, ConnectionError) as e:
            self.last_error = f"commit: {e}"
            return
        for st, pos, fut in sent:
            fut.add_done_callback(lambda f, st=st, pos=pos: self._committed(st, pos, f))

    def _committed(self, st: _Queue, pos: int, fut) -> None:
        try:
            raise_for_error(fut.result(0)[0], "commit_offset")
            st.committed = pos
        except Exception as e:
            self.last_error = f"commit of queue {st.queue_id}: {e}"
            log.warning("%s", self.last_error)

    def commit(self) -> dict:
        """Store every queue's position for the group now and wait; queue id -> offset."""
        for st, pos, fut in self._commit_requests():
            raise_for_error(fut.result()[0], "commit_offset")
            st.committed = pos
        return self.committed()

    def seek(self, queue_id: int, offset: int) -> None:
        """Continue queue `queue_id` at `offset` (buffered messages of that queue are dropped)."""
        st = self._states.get(queue_id)
        if st is None:
            raise ValueError(f"queue {queue_id} of {self.topic!r} is not assigned to this consumer")
        st.gen += 1
        st.in_flight = False
        st.next_offset = st.position = int(offset)
        st.caught_up = False
        st.retry_at = 0.0
        kept = collections.deque(e for e in self._ready if e[0] is not st)
        self._buffered = sum(len(e[1]) - e[2] for e in kept)
        self._ready = kept

    def seek_to_timestamp(self, timestamp_ms: int) -> dict:
        """Every queue to its first message stored at or after `timestamp_ms`; queue id -> offset."""
        futs = [(st, self._conn.request("reader", "offset_by_time", {
            "topic": self.topic, "queue_id": st.queue_id, "timestamp": int(timestamp_ms)}))
            for st in self._order]
        for st, fut in futs:
            self.seek(st.queue_id, raise_for_error(fut.result()[0], "offset_by_time")["offset"])
        return self.positions()

    def seek_to_beginning(self) -> dict:
        return self._seek_bounds("min_offset")

    def seek_to_end(self) -> dict:
        return self._seek_bounds("max_offset")

    def _seek_bounds(self, key: str) -> dict:
        env = self._conn.call("reader", "queue_offsets", topic=self.topic)
        bounds = {e["queue_id"]: e[key] for e in env.get("queues", ())}
        for st in self._order:
            self.seek(st.queue_id, bounds.get(st.queue_id, 0))
        return self.positions()

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Commit positions (with auto commit) and close the connection if it is ours."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.auto_commit and self._order and not self._conn.closed:
                self._process_arrivals()
                self.commit()
        except Exception as e:
            log.warning("final commit of %s/%s failed: %s", self.group, self.topic, e)
        finally:
            if self._own:
                self._conn.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
