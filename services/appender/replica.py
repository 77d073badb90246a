"""SYNC_MASTER in the appender (DESIGN.md sections 5 and 10; RocketMQ's GroupTransferService):
put replies parked until a slave acknowledged past their last byte.

`park(p, wrote)` answers at once when it can: SLAVE_NOT_AVAILABLE when no slave is connected
(HA_SLAVES) or the best one is `ha_max_gap_not_in_sync` bytes or more behind the log's end
(RocketMQ's isSlaveOK), PUT_OK when a slave has it already; otherwise the reply is parked with
a deadline `slave_timeout` ms away. `answers(ready)` takes the ha process's `{"acked": offset}`
publications (ipc `ha.pub`; the HA_ACKED word is read as well, in case one was missed): one
acknowledgement answers every reply parked below it (group commit, as for flushes), PUT_OK;
replies past their deadline get FLUSH_SLAVE_TIMEOUT. The time from parking to the answer goes
into a histogram, emitted as `replica_latency` in the appender's `stats` events (metrics).
"""
from __future__ import annotations

import time

import zmq

from core.status import PutMessageStatus
from ipc.control_block import Word
from ipc.protocol import unpack
from services.appender.waiters import FlushWaiters, Parked
from services.histogram import Histogram

PUT_OK = PutMessageStatus.PUT_OK.value
FLUSH_SLAVE_TIMEOUT = PutMessageStatus.FLUSH_SLAVE_TIMEOUT.value
SLAVE_NOT_AVAILABLE = PutMessageStatus.SLAVE_NOT_AVAILABLE.value


class ReplicaWait:
    def __init__(self, config, cb):
        self.cb = cb
        self.timeout_s = config.slave_timeout / 1000
        self.max_gap = config.ha_max_gap_not_in_sync
        self.waiters = FlushWaiters()
        self.acked = cb.get(Word.HA_ACKED)
        self.latency = Histogram()
        self.sub = None

    def subscribe(self, sub: zmq.Socket, poller: zmq.Poller) -> None:
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub = sub
        poller.register(sub, zmq.POLLIN)

    def park(self, p: Parked, wrote: int) -> str | None:
        """The status to answer `p` with now, or None when it is parked."""
        w = self.cb.words
        acked = self.acked = max(self.acked, w[Word.HA_ACKED])
        if not w[Word.HA_SLAVES] or wrote - acked >= self.max_gap:
            return SLAVE_NOT_AVAILABLE
        if p.end <= acked:
            return PUT_OK
        now = time.monotonic()
        p.deadline = now + self.timeout_s
        p.parked_at = now
        self.waiters.park(p)
        return None

    def answers(self, ready: dict) -> list[tuple[Parked, str]]:
        if self.sub is not None and ready.get(self.sub):
            while True:
                try:
                    note = unpack(self.sub.recv(zmq.NOBLOCK))
                except zmq.Again:
                    break
                if isinstance(note, dict) and isinstance(note.get("acked"), int):
                    self.acked = max(self.acked, note["acked"])
        if not self.waiters:
            return []
        self.acked = max(self.acked, self.cb.get(Word.HA_ACKED))
        now = time.monotonic()
        out = [(p, PUT_OK) for p in self.waiters.release(self.acked)]
        out += [(p, FLUSH_SLAVE_TIMEOUT) for p in self.waiters.expire(now)]
        for p, _ in out:
            self.latency.observe(now - p.parked_at)
        return out

    def take_stats(self) -> dict:
        return {"replica_latency": self.latency.take()} if self.latency.total else {}

    def close(self) -> None:
        if self.sub is not None:
            self.sub.close(0)
