"""The heartbeats of a group member between its polls, as RocketMQ's client sends them on a
timer: a member that takes longer than its session to process a batch stays in the group
and keeps its queues.

`KeepAlive.tick()` is the whole rule, with no sockets of its own and no thread: when the
member has sent no heartbeat for `heartbeat_interval_ms` (its polls send them as before,
ipc/rebalance.py) it sends one through the consumer's connection without waiting for the
answer (`conn.request` with this object as the future: both the blocking and the asyncio
connection take one). That heartbeat carries no `holding` list (docs/PROTOCOL.md: the queues
held stay as they are), so it only renews the session and never races the handover that a
poll's heartbeats do: the reader gives and takes queues only on those. An answer that moves
the assignment (other queues, another generation) or says the member is unknown makes the
next poll beat at once and apply it there, in the consumer's own thread.

A member that has not polled for `max_poll_interval_ms` (Kafka's max.poll.interval.ms, 5
minutes by default) is taken to be stuck: the timer stops beating, its session ends and the
others take its queues; its next poll joins again.

The hosts are one line each: the blocking Consumer calls `tick` from a daemon thread
(`KeepAliveThread`), the asyncio one from a task on its loop (`run_keepalive`).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time

from ipc.client_common import MQError

log = logging.getLogger("mqstore.consumer")

DEFAULT_MAX_POLL_INTERVAL_MS = 300_000


class KeepAlive:
    """The timer's rule for one consumer (module docstring). `consumer.last_poll` is when it
    last polled; its `_next_discover` is set to 0 to make the next poll beat."""

    def __init__(self, consumer, member, max_poll_interval_s: float):
        self.consumer = consumer
        self.member = member
        self.max_poll_interval_s = max_poll_interval_s
        self.next_at = 0.0
        self.sent = 0

    def wait_s(self, now: float) -> float:
        """How long the host may sleep before the next `tick`."""
        due = max(self.member.next_beat, self.next_at)
        return min(max(due - now, 0.005), self.member.interval_s)

    def over(self) -> bool:
        """The consumer or its connection is closed: no more heartbeats."""
        return self.consumer._closed or self.consumer._conn.closed

    def tick(self) -> None:
        c, m = self.consumer, self.member
        now = time.monotonic()
        if self.over() or not m.joined or now < max(m.next_beat, self.next_at):
            return
        if now - c.last_poll > self.max_poll_interval_s:
            return                                    # stuck: let the session end
        self.next_at = now + m.interval_s
        fields = m.heartbeat_fields(())
        del fields["holding"]                         # renew the session, hand nothing over
        try:
            c._conn.request("reader", "heartbeat", fields, future=_Answer(self))
            self.sent += 1
        except Exception as e:                        # closed meanwhile, or unreachable
            log.debug("keep-alive heartbeat of %s not sent: %s", m.member_id, e)

    def answered(self, env: dict) -> None:
        m, c = self.member, self.consumer
        if env.get("status") == "ERROR" or env.get("generation") != m.generation \
                or set(env.get("queues") or ()) != m.queues:
            c._next_discover = 0.0                    # the next poll beats and applies it


class _Answer:
    __slots__ = ("keepalive",)

    def __init__(self, keepalive: KeepAlive):
        self.keepalive = keepalive

    def set_result(self, value) -> None:
        self.keepalive.answered(value[0])

    def set_exception(self, exc) -> None:
        if not isinstance(exc, (MQError, TimeoutError, ConnectionError)):
            log.warning("keep-alive heartbeat failed: %r", exc)


class KeepAliveThread:
    """The blocking Consumer's host of a KeepAlive: a daemon thread that ticks until `stop`."""

    def __init__(self, keepalive: KeepAlive):
        self.keepalive = keepalive
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mqstore-keepalive", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        ka = self.keepalive
        while not self._stop.wait(ka.wait_s(time.monotonic())) and not ka.over():
            try:
                ka.tick()
            except Exception:                          # never let the thread die silently
                log.exception("keep-alive error")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)


async def run_keepalive(keepalive: KeepAlive) -> None:
    """The asyncio Consumer's host of a KeepAlive: tick until the consumer closes."""
    while not keepalive.over():
        await asyncio.sleep(keepalive.wait_s(time.monotonic()))
        keepalive.tick()
