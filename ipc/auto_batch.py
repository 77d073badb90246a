"""The blocking Producer's driver of auto-batching (ipc/accumulator.py holds the rules): a lock
around the accumulator, a linger thread that sends batches whose linger expired, and the wait
for buffer room; ipc/batch_sender.py sends the sealed batches and completes each message's
future from its batch's reply, as it does for the asyncio producer.

Cost per message. A message is one `Pending` and one future appended to its batch under one
lock (`add_plain`, the path of `send_async(topic, body)`); everything else is done once per
batch: its UNIQ_KEYs made as one block and its request encoded when it is sealed
(accumulator.request), its reply parsed once, and its messages' futures completed in one pass
under one hold of their shared condition, each with a MessageResult that reads its offsets and
key from the batch's only when asked. (Before: 19 us of producer CPU per message and 0.26-0.37x
of explicit batches of 100 in `benchmarks/pipeline.py --quick`; see docs/CLIENTS.md.)

Threads. `_lock` guards the accumulator and the queue of sealed batches (`_ready`), and is
held only for their calls (never while talking to the store). Sealed batches are queued in the
order they were sealed and sent by whoever holds `_send_lock`, which empties the queue in that
order, so that batches of one key reach the appender in the order they were sealed (the
appender serves a socket's requests in order) and a message that seals nothing takes no second
lock. Reply callbacks take only `_lock` (to release bytes): they may run in whatever thread
reads the reply, including one that holds `_send_lock` while it waits for room in the
connection's window. The linger thread sleeps until the first open batch's deadline; it is
woken only when a batch opens while it sleeps with nothing open.

Timeouts. A `send_async` that finds the buffer full first sends every open batch, then waits
for room up to its `timeout` (TimeoutError: the message is not taken). A batch's request has
the connection's timeout (a failed one fails its messages: ipc/batch_sender.py). send_async
does not retry, as before.
"""
from __future__ import annotations

import collections
import logging
import threading
import time

from ipc.accumulator import Accumulator, Batch, Pending
from ipc.batch_sender import BatchSender
from ipc.client_common import MessageFuture, ReplyFuture, settle_all

log = logging.getLogger("mqstore.producer")


class AutoBatcher:
    """Accumulates `add`ed messages into batches and sends them on `conn` (module docstring).
    `select(topic)` picks a queue for a batch without one."""

    def __init__(self, conn, linger_ms: float, batch_max_bytes: int, buffer_max_bytes: int, select):
        self._conn = conn
        self._select = select
        self.acc = Accumulator(linger_ms / 1000.0, batch_max_bytes, buffer_max_bytes)
        self.acc.store_limits(conn.info.get("max_message_size"), conn.info.get("mapped_file_size_commitlog"))
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._send_lock = threading.Lock()
        self._ready: collections.deque = collections.deque()   # sealed, not yet handed on
        self._sender = BatchSender(conn, self.acc, select, settle_all, self._lock)
        self._wake_at = float("inf")           # when the linger thread wakes next
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="mqstore-linger", daemon=True)
        self._thread.start()

    # -- taking messages -------------------------------------------------------------------
    def add(self, topic: str, queue_id, wait: bool, meta, frame: bytes, uniq, timeout: float) -> ReplyFuture:
        """Take one message (`meta` and `uniq` None: a plain one, accumulator.Pending); the
        future of its SendResult."""
        acc = self.acc
        if acc.held and acc.held + len(frame) > acc.buffer_max_bytes:
            self._wait_room(len(frame), timeout)
        fut = MessageFuture(self._conn)
        p = Pending(meta, frame, uniq, fut)
        with self._lock:
            if p.plain:
                ready = acc.add_plain((topic, queue_id, wait), p, time.monotonic())
            else:
                ready = acc.add(topic, queue_id, wait, p, time.monotonic())
            if ready:
                self._ready.extend(ready)
            if acc.opened is not None and self._wake_at == float("inf"):
                self._wake_at = acc.opened             # the linger thread sleeps: wake it
                self._cv.notify()
        if ready:
            self._send_ready()
        return fut

    def _wait_room(self, size: int, timeout: float) -> None:
        acc = self.acc
        self.send_open()
        if not self._conn.wait(lambda: acc.has_room(size), timeout):
            raise TimeoutError(f"send_async: the producer's buffer (buffer_max_bytes "
                               f"{acc.buffer_max_bytes}) stayed full for {timeout}s; "
                               f"the message was not taken")

    def _seal(self, take) -> None:
        """Queue the batches `take(acc)` seals and send the queue."""
        with self._lock:
            self._ready.extend(take(self.acc))
        self._send_ready()

    def send_open(self) -> None:
        """Seal and send every open batch (flush, close, a full buffer)."""
        self._seal(Accumulator.drain)

    def send_ahead(self, topic: str, queue_id) -> None:
        """Send the open batches of `topic`'s queue `queue_id` now: a `send` or batch send to
        that queue, which goes out at once, then comes after them, as the caller sent them."""
        if self.acc.held or self._ready:
            self._seal(lambda acc: acc.take(topic, queue_id))

    def idle(self) -> bool:
        """Nothing held: every message taken has its result."""
        return self.acc.held == 0

    # -- sending ---------------------------------------------------------------------------
    def _send_ready(self) -> None:
        """Send the sealed batches in the order they were sealed (module docstring)."""
        ready = self._ready
        with self._send_lock:
            while True:
                with self._lock:
                    if not ready:
                        return
                    batch = ready.popleft()
                self._send(batch)

    def _send(self, batch: Batch) -> None:
        self._sender.send(batch)

    # -- the linger thread -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stopped:
                    wait = self._wake_at - time.monotonic()
                    if wait <= 0:
                        break
                    self._cv.wait(None if wait == float("inf") else wait)
                if self._stopped:
                    return
                self._ready.extend(self.acc.due(time.monotonic()))
                deadline = self.acc.next_deadline()
                self._wake_at = float("inf") if deadline is None else deadline
            try:
                self._send_ready()
            except Exception:                          # never let the thread die silently
                log.exception("linger thread error")

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._cv.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)
