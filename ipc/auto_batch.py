"""The blocking Producer's driver of auto-batching (ipc/accumulator.py holds the rules): a lock
around the accumulator, a linger thread that sends batches whose linger expired, the wait for
buffer room, and the completion of each message's future from its batch's reply.

Threads. `_lock` guards the accumulator and is held only for its calls (never while talking
to the store). `_send_lock` is held from sealing a batch until it is handed to the connection,
so that batches of one key reach the appender in the order they were sealed (the appender
serves a socket's requests in order). Reply callbacks take only `_lock` (to release bytes):
they may run in whatever thread reads the reply, including one that holds `_send_lock` while
it waits for room in the connection's window.

Timeouts. A `send_async` that finds the buffer full first sends every open batch, then waits
for room up to its `timeout` (TimeoutError: the message is not taken). A batch's request has
the connection's timeout; a batch that fails (timeout, lost connection, store unreachable)
fails every message's future with that exception. send_async does not retry, as before.
"""
from __future__ import annotations

import logging
import threading
import time

from ipc.accumulator import Accumulator, Batch, Pending, request, results, singles
from ipc.client_common import MessageFuture, ReplyFuture

log = logging.getLogger("mqstore.producer")


class _BatchTicket:
    """Completes one batch's request (Connection.request's `future=`)."""
    __slots__ = ("driver", "batch", "counted")

    def __init__(self, driver: "AutoBatcher", batch: Batch, counted: bool):
        self.driver = driver
        self.batch = batch
        self.counted = counted

    def set_result(self, value) -> None:
        self.driver._answered(self, value[0])

    def set_exception(self, exc) -> None:
        self.driver._failed(self, exc)


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
        self._wake_at = float("inf")           # when the linger thread wakes next
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="mqstore-linger", daemon=True)
        self._thread.start()

    # -- taking messages -------------------------------------------------------------------
    def add(self, topic: str, queue_id, wait: bool, meta: dict, frame: bytes, uniq: str,
            timeout: float) -> ReplyFuture:
        """Take one message; the future of its SendResult."""
        acc = self.acc
        size = len(frame)
        if not acc.has_room(size):
            self.send_open()
            if not self._conn.wait(lambda: acc.has_room(size), timeout):
                raise TimeoutError(f"send_async: the producer's buffer (buffer_max_bytes "
                                   f"{acc.buffer_max_bytes}) stayed full for {timeout}s; "
                                   f"the message was not taken")
        fut = MessageFuture(self._conn)
        p = Pending(meta, frame, uniq, fut)
        with self._send_lock:
            with self._lock:
                ready = acc.add(topic, queue_id, wait, p, time.monotonic())
                deadline = acc.opened                 # a new batch: its linger may end first
                if deadline is not None and deadline < self._wake_at:
                    self._wake_at = deadline
                    self._cv.notify()
            for batch in ready:
                self._send(batch)
        return fut

    def send_open(self) -> None:
        """Seal and send every open batch (flush, close, a full buffer)."""
        with self._send_lock:
            with self._lock:
                ready = self.acc.drain()
            for batch in ready:
                self._send(batch)

    def send_ahead(self, topic: str, queue_id) -> None:
        """Send the open batches of `topic`'s queue `queue_id` now: a `send` or batch send to
        that queue, which goes out at once, then comes after them, as the caller sent them."""
        with self._send_lock:
            with self._lock:
                ready = self.acc.take(topic, queue_id) if self.acc.held else ()
            for batch in ready:
                self._send(batch)

    def idle(self) -> bool:
        """Nothing held: every message taken has its result."""
        return self.acc.held == 0

    # -- sending ---------------------------------------------------------------------------
    def _send(self, batch: Batch, counted: bool = True) -> None:
        if batch.queue_id is None:
            try:
                batch.queue_id = self._select(batch.topic)
            except Exception as e:                    # the store did not answer topic_info
                log.debug("queue selection for %s failed: %s", batch.topic, e)
        op, fields, frames = request(batch)
        ticket = _BatchTicket(self, batch, counted)
        try:
            self._conn.request("appender", op, fields, frames, future=ticket)
        except Exception as e:                        # unreachable, closed, window timeout
            self._failed(ticket, e)

    def _answered(self, ticket: _BatchTicket, env: dict) -> None:
        batch = ticket.batch
        self._release(ticket)
        out = results(batch, env)
        if out is None:                               # refused as a whole: each on its own
            for single in singles(batch):
                self._send(single, counted=False)
            return
        for p, r in zip(batch.items, out):
            _settle(p.future.set_result, r)

    def _failed(self, ticket: _BatchTicket, exc: BaseException) -> None:
        self._release(ticket)
        for p in ticket.batch.items:
            _settle(p.future.set_exception, exc)

    def _release(self, ticket: _BatchTicket) -> None:
        if ticket.counted:
            ticket.counted = False
            with self._lock:
                self.acc.release(ticket.batch)

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
            try:
                with self._send_lock:
                    with self._lock:
                        ready = self.acc.due(time.monotonic())
                        deadline = self.acc.next_deadline()
                        self._wake_at = float("inf") if deadline is None else deadline
                    for batch in ready:
                        self._send(batch)
            except Exception:                          # never let the thread die silently
                log.exception("linger thread error")

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._cv.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)


def _settle(setter, value) -> None:
    try:
        setter(value)
    except Exception:                                  # InvalidStateError: cancelled by its owner
        pass
