"""The pulls of a `ipc.consumer.Consumer`, pipelined (docs/PROTOCOL.md, "Pipelining pulls"):
per queue a next offset and the pulls in flight, replies taken in offset order, speculative
pulls abandoned when a reply ends elsewhere, and the received messages buffered until `poll`
takes them. The Consumer module docstring describes the behaviour as a client sees it.

A reply's records are found and checked when it comes (`find_records`) but their message
objects are made only when `take` hands them out, with the garbage collector paused meanwhile
(`hand_out`). Made as replies came, thousands of buffered messages were young objects for
the collector to walk in every collection (and promoted, to be walked again in the older
generations): about a quarter of a consumer's time. Made in one go as a poll returns them,
they count as one batch of young objects, mostly dropped by the application before the next
collection looks at them.
"""
from __future__ import annotations

import collections
import gc
import logging
import threading
import time

from ipc.connection import Connection, ConnectionClosed
from ipc.protocol import ERROR, ErrorCode
from ipc.received import RecordSpans, find_records

log = logging.getLogger("mqstore.consumer")

ROTATE_POLL_MS = 100          # hold time of pulls when queues outnumber max_in_flight
RETRY_S = 1.0                 # back-off after an error or a missing queue
QUICK_EMPTY_S = 0.02          # an empty answer faster than this is not a held pull: back off
EMPTY_STATUSES = ("NO_MESSAGE_IN_QUEUE", "OFFSET_OVERFLOW_ONE", "NO_MATCHED_LOGIC_QUEUE")


class QueueCursor:
    __slots__ = ("queue_id", "next_offset", "position", "committed", "gen", "caught_up",
                 "retry_at", "sent_at", "pending", "last_sent", "step", "known_max", "stash",
                 "missing")

    def __init__(self, queue_id: int, offset: int, committed: int, missing: bool = False):
        self.queue_id = queue_id
        self.next_offset = offset       # where the next reply taken in must start
        self.position = offset
        self.committed = committed
        self.gen = 0                    # bumped to abandon every outstanding pull
        self.caught_up = False
        self.retry_at = 0.0
        self.sent_at = 0.0              # when the pull at next_offset was sent
        self.pending: dict = {}         # offset -> outstanding pull of this generation
        self.last_sent = offset         # offset of the newest outstanding pull
        self.step = 0                   # speculation stride; 0: do not speculate
        self.known_max = 0              # max_offset of the last reply
        self.stash: dict = {}           # offset -> (env, frames) that came before its turn
        self.missing = missing          # the store has no such queue (yet): nothing to commit

    def abandon(self) -> None:
        """Forget every outstanding pull (their replies will be dropped) and early replies."""
        self.gen += 1
        self.pending.clear()
        self.stash.clear()
        self.step = 0


class _PullTicket:
    """Completes one pull for `Connection.request(future=...)`: the reply (or the failure)
    is queued for the consumer's thread; no Future, lock or condition per pull."""
    __slots__ = ("arrivals", "st", "gen", "offset")

    def __init__(self, arrivals, st: QueueCursor, offset: int):
        self.arrivals = arrivals
        self.st = st
        self.gen = st.gen
        self.offset = offset

    def set_result(self, value) -> None:
        self.arrivals.append((self, value, None))

    def set_exception(self, exc) -> None:
        self.arrivals.append((self, None, exc))


class PullPipeline:
    """The pipelined pulls of one Consumer (module docstring): sends them, takes their replies
    in offset order per queue, and keeps what they brought in `ready` (entries [queue,
    messages, index, position after]) until `take` hands it out."""

    def __init__(self, conn: Connection, fields: dict, tags, max_in_flight: int, depth: int,
                 long_poll_ms: int, max_buffered: int, timeout: float, report):
        self.conn = conn
        self.fields = fields                   # group, topic, max_msgs, format, tag_filter
        self.tags = tags                       # re-checked here (tag hash codes can collide)
        self.max_in_flight = max_in_flight
        self.depth = depth
        self.long_poll_ms = long_poll_ms
        self.max_buffered = max_buffered
        self.timeout = timeout
        self.report = report                   # report(text): the consumer's last_error
        self.ready = collections.deque()
        self.arrivals = collections.deque()    # (ticket, reply, exception) from the connection
        self.buffered = 0
        self.in_flight = 0
        self.rr = 0

    def has_arrivals(self) -> bool:
        return bool(self.arrivals)

    # -- sending ---------------------------------------------------------------------------
    def issue(self, queues: list, now: float) -> None:
        """Every queue without an outstanding pull gets one at its next offset, round robin;
        then, while the window allows, queues with a backlog get speculative ones."""
        n = len(queues)
        if not n or self.buffered >= self.max_buffered or self.in_flight >= self.max_in_flight:
            return
        rotate = n > self.max_in_flight
        poll_ms = min(self.long_poll_ms, ROTATE_POLL_MS) if rotate else self.long_poll_ms
        order = queues[self.rr:] + queues[:self.rr]
        self.rr = (self.rr + 1) % n
        for st in order:
            if not st.pending and st.retry_at <= now:
                if self.in_flight >= self.max_in_flight or not self._send(st, st.next_offset, poll_ms, now):
                    return
                st.sent_at = now
        if rotate:
            return
        for _ in range(self.depth - 1):
            sent = False
            for st in order:
                if self.in_flight >= self.max_in_flight:
                    return
                if st.pending and st.step and len(st.pending) < self.depth:
                    offset = st.last_sent + st.step
                    if offset < st.known_max:
                        if not self._send(st, offset, poll_ms, now):
                            return
                        sent = True
            if not sent:
                return

    def _send(self, st: QueueCursor, offset: int, poll_ms: int, now: float) -> bool:
        """Send one pull; False when sending failed (the queue retries later)."""
        fields = dict(self.fields, queue_id=st.queue_id, offset=offset, poll_ms=poll_ms)
        ticket = _PullTicket(self.arrivals, st, offset)
        try:
            self.conn.request("reader", "pull", fields, timeout=poll_ms / 1000.0 + self.timeout,
                              future=ticket)
        except (TimeoutError, ConnectionError) as e:
            if not (isinstance(e, ConnectionClosed) and self.conn.closed):
                st.retry_at = now + RETRY_S
                self.report(f"pull of queue {st.queue_id}: {e}")
            return False
        st.pending[offset] = ticket
        st.last_sent = offset
        self.in_flight += 1
        return True

    # -- replies ---------------------------------------------------------------------------
    def process(self) -> None:
        """Take in every reply that came, in offset order per queue."""
        arrivals = self.arrivals
        while arrivals:
            ticket, reply, exc = arrivals.popleft()
            self.in_flight -= 1
            st = ticket.st
            if ticket.gen != st.gen or st.pending.get(ticket.offset) is not ticket:
                continue                               # abandoned: a seek, or a broken chain
            del st.pending[ticket.offset]
            if exc is not None:                        # timeout or connection closed
                self.report(f"pull of queue {st.queue_id}: {exc}")
                st.abandon()
                st.retry_at = time.monotonic() + RETRY_S
                continue
            if ticket.offset != st.next_offset:
                if ticket.offset > st.next_offset and st.next_offset in st.pending:
                    st.stash[ticket.offset] = reply    # its predecessor is still on its way
                continue
            self._take_in(st, *reply)
            while st.next_offset in st.stash:
                self._take_in(st, *st.stash.pop(st.next_offset))
            if st.pending or st.stash:
                self._prune(st)

    @staticmethod
    def _prune(st: QueueCursor) -> None:
        """After replies were taken in: keep the outstanding pulls only while the one at the
        queue's next offset is among them (the chain goes on), else abandon them all."""
        nxt = st.next_offset
        if nxt not in st.pending:
            st.abandon()                               # not where the queue goes on
            return
        for offset in [o for o in st.pending if o < nxt]:
            del st.pending[offset]                     # skipped over: dropped when they come
        for offset in [o for o in st.stash if o < nxt]:
            del st.stash[offset]

    def _take_in(self, st: QueueCursor, env: dict, frames: list) -> None:
        try:
            self._on_reply(st, env, frames)
        except ValueError as e:                        # a frame that is not what PROTOCOL.md says
            self.report(f"pull of queue {st.queue_id}: {e}")
            log.error("pull of queue %s: %s", st.queue_id, e)
            st.abandon()
            st.retry_at = time.monotonic() + RETRY_S

    def _on_reply(self, st: QueueCursor, env: dict, frames: list) -> None:
        status = env.get("status")
        nxt = env.get("next_begin_offset")
        max_offset = env.get("max_offset")
        if isinstance(max_offset, int):
            st.known_max = max_offset
        st.missing = status == "NO_MATCHED_LOGIC_QUEUE" or (
            status == ERROR and env.get("code") == ErrorCode.NOT_FOUND)
        if status == "FOUND":
            msgs = find_records(frames[0]) if frames else []
            if self.tags is not None or not isinstance(nxt, int):
                msgs = hand_out(msgs)
            if self.tags is not None:
                msgs = [m for m in msgs if m.tags in self.tags]
            if not isinstance(nxt, int):
                nxt = msgs[-1].queue_offset + 1 if msgs else st.next_offset
            count = env.get("count")
            full = count and nxt - st.next_offset == count and nxt < st.known_max
            st.step = count if full else 0             # the stride of speculative pulls
            self.ready.append([st, msgs, 0, nxt])
            self.buffered += len(msgs)
            st.next_offset = nxt
            st.caught_up = nxt >= st.known_max
            return
        st.step = 0
        now = time.monotonic()
        if status == ERROR:
            text = f"pull of queue {st.queue_id}: {env.get('code')} {env.get('reason')}"
            self.report(text)
            if env.get("code") != ErrorCode.NOT_FOUND:
                log.warning("%s", text)
            st.caught_up = True
            st.retry_at = now + RETRY_S
            return
        if isinstance(nxt, int) and nxt != st.next_offset:
            if status == "MESSAGE_DAMAGED":            # not served: the store says why
                text = f"queue {st.queue_id} of {self.fields['topic']}: {env.get('reason')}"
                self.report(text)
                log.warning("%s; continuing at %s", text, nxt)
            elif status not in EMPTY_STATUSES and status != "NO_MATCHED_MESSAGE":
                log.info("queue %s of %s: %s at offset %s, continuing at %s",
                         st.queue_id, self.fields["topic"], status, st.next_offset, nxt)
            st.next_offset = nxt
            self.ready.append([st, [], 0, nxt])        # moves the position in order
        elif now - st.sent_at < QUICK_EMPTY_S:
            st.retry_at = now + 0.05
        st.caught_up = status in EMPTY_STATUSES or st.next_offset >= env.get("max_offset", 0)
        if status == "NO_MATCHED_LOGIC_QUEUE":
            st.retry_at = now + RETRY_S

    # -- handing out -----------------------------------------------------------------------
    def take(self, max_records: int | None) -> list:
        out = []
        limit = max_records if max_records and max_records > 0 else 1 << 62
        ready = self.ready
        while ready and len(out) < limit:
            entry = ready[0]
            st, msgs, i, nxt = entry
            if msgs.__class__ is RecordSpans:
                entry[1] = msgs = hand_out(msgs)
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
        self.buffered -= len(out)
        return out

    def give_back(self, msgs: list, cursors: dict) -> None:
        """Put messages `take` handed out but the application never got (it stopped iterating)
        back in front of the buffer, in their order, and move each queue's position back to
        the first of its messages given back. `cursors`: queue id -> QueueCursor."""
        by_queue: dict = {}
        for m in msgs:
            by_queue.setdefault(m.queue_id, []).append(m)
        for qid in reversed(list(by_queue)):           # appendleft: the first queue ends first
            st, back = cursors.get(qid), by_queue[qid]
            if st is None:
                continue
            self.ready.appendleft([st, back, 0, st.position])
            st.position = back[0].queue_offset
            self.buffered += len(back)

    def drop(self, st: QueueCursor) -> None:
        """Abandon the queue's outstanding pulls and drop what they brought (a seek)."""
        st.abandon()
        kept = collections.deque(e for e in self.ready if e[0] is not st)
        self.buffered = sum(len(e[1]) - e[2] for e in kept)
        self.ready = kept


class _CollectorPause:
    """Pauses the garbage collector while any thread makes messages, and enables it again
    when the last one is done, if it was enabled when the first began. Counted under a lock:
    two consumers in two threads, each reading "enabled" and then disabling, could otherwise
    leave the collector disabled for good.

    `begin` allocates nothing the collector tracks before it disables it: the messages the
    last call made are usually still alive then, and one allocation (a `with` statement makes
    bound methods) set off a collection that walked them all, once per reply."""

    def __init__(self):
        self._lock = threading.Lock()
        self._active = 0
        self._resume = False

    def begin(self) -> None:
        self._lock.acquire()
        if not self._active:
            self._resume = gc.isenabled()
            gc.disable()
        self._active += 1
        self._lock.release()

    def end(self) -> None:
        self._lock.acquire()
        self._active -= 1
        if not self._active and self._resume:
            gc.enable()
        self._lock.release()


_PAUSE = _CollectorPause()


def hand_out(spans) -> list:
    """The ReceivedMessages of `spans` (a RecordSpans, or [] for an empty answer), made with
    the garbage collector paused (module docstring)."""
    if not spans:
        return []
    _PAUSE.begin()
    try:
        return spans.views()
    finally:
        _PAUSE.end()
