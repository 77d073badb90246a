"""Sending sealed batches of auto-batched messages (ipc/accumulator.py) and completing each
message's future from its batch's reply, written once for the blocking producer's driver
(ipc/auto_batch.py) and the asyncio producer (ipc/aio/producer.py); they differ only in the
futures (`settle`: ipc.client_common.settle_all for the blocking MessageFutures, `settle_each`
for asyncio's) and in the lock around the accumulator's byte count (none on an event loop).

A batch goes out as one request with a ticket as its future (both connections take any object
with `set_result`/`set_exception`). Its reply gives one result per message
(accumulator.results); a batch refused as a whole is sent again as one `put` per message, whose
bytes are not counted twice. A batch that fails (timeout, lost connection, store unreachable)
fails every message's future with that exception. A batch with no queue of its own gets one
from `select(topic)` (None: the appender picks) when it is sent.
"""
from __future__ import annotations

import logging

from ipc.accumulator import Batch, request, results, singles

log = logging.getLogger("mqstore.producer")


class BatchSender:
    def __init__(self, conn, acc, select, settle, lock):
        self._conn = conn
        self._acc = acc
        self._select = select
        self._settle = settle
        self._lock = lock

    def send(self, batch: Batch, counted: bool = True) -> None:
        """Send one sealed batch (`counted`: its bytes are held in the accumulator until its
        reply)."""
        if batch.queue_id is None:
            try:
                batch.queue_id = self._select(batch.topic)
            except Exception as e:                    # the store did not answer topic_info
                log.debug("queue selection for %s failed: %s", batch.topic, e)
        op, fields, frames = request(batch)
        ticket = _Ticket(self, batch, counted)
        try:
            self._conn.request("appender", op, fields, frames, future=ticket)
        except Exception as e:                        # unreachable, closed, window timeout
            self.failed(ticket, e)

    def answered(self, ticket: "_Ticket", env: dict) -> None:
        batch = ticket.batch
        self._release(ticket)
        out = results(batch, env)
        if out is None:                               # refused as a whole: each on its own
            for single in singles(batch):
                self.send(single, counted=False)
            return
        self._settle([p.future for p in batch.items], out, None)

    def failed(self, ticket: "_Ticket", exc: BaseException) -> None:
        self._release(ticket)
        self._settle([p.future for p in ticket.batch.items], None, exc)

    def _release(self, ticket: "_Ticket") -> None:
        if ticket.counted:
            ticket.counted = False
            with self._lock:
                self._acc.release(ticket.batch)


class _Ticket:
    """Completes one batch's request (the connection's `future=`)."""
    __slots__ = ("sender", "batch", "counted")

    def __init__(self, sender: BatchSender, batch: Batch, counted: bool):
        self.sender = sender
        self.batch = batch
        self.counted = counted

    def set_result(self, value) -> None:
        self.sender.answered(self, value[0])

    def set_exception(self, exc) -> None:
        self.sender.failed(self, exc)


def settle_each(futures: list, values, exc) -> None:
    """Complete asyncio futures with `values` (one each) or all with `exc`; a cancelled one is
    left as it is."""
    for i, fut in enumerate(futures):
        if not fut.done():
            if exc is None:
                fut.set_result(values[i])
            else:
                fut.set_exception(exc)
