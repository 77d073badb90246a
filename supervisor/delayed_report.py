"""What the supervisor knows of delayed delivery: the scheduler's `stats` events
(services/scheduler.py) kept for `mqstore status` (the `delayed` field of the front door's
status reply) and the Prometheus metrics.

`DelayedReport` is a subscriber of the supervisor's events. It keeps the last `delay_pending`
({level: messages not delivered}) and `timer_pending` (timer messages not delivered) and adds
up `delay_delivered`, `delay_skipped` and `delay_refused`.
"""
from __future__ import annotations

import threading

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class DelayedReport:
    def __init__(self):
        self._lock = threading.Lock()
        self.pending: dict[str, int] | None = None
        self.timers: int | None = None
        self.totals = {"delivered": 0, "skipped": 0, "refused": 0}

    def handle(self, event: dict) -> None:
        if event.get("event") != "stats" or event.get("service") != "scheduler":
            return
        with self._lock:
            levels = event.get("delay_pending")
            if isinstance(levels, dict):
                self.pending = {str(k): _count(v) for k, v in levels.items()}
            if "timer_pending" in event:
                self.timers = _count(event["timer_pending"])
            for key in self.totals:
                self.totals[key] += _count(event.get(f"delay_{key}"))

    def snapshot(self) -> dict:
        """`{"levels": {level: pending}, "timers": pending, "delivered": n, "skipped": n,
        "refused": n}`; empty before the scheduler's first event."""
        with self._lock:
            if self.pending is None and self.timers is None:
                return {}
            return {"levels": dict(self.pending or {}), "timers": self.timers or 0, **self.totals}


def delayed_families(snap: dict):
    """Prometheus families of a `DelayedReport.snapshot()`."""
    if not snap:
        return
    g = GaugeMetricFamily("mqstore_delay_pending", "Delayed messages not delivered yet, by "
                          "delay level", labels=["level"])
    for level, n in sorted(snap["levels"].items(), key=lambda kv: int(kv[0])):
        g.add_metric([level], n)
    yield g
    yield GaugeMetricFamily("mqstore_timer_pending", "Timer messages not delivered yet",
                            value=snap["timers"])
    c = CounterMetricFamily("mqstore_delay_deliveries", "Delayed and timer messages re-put when "
                            "due (delivered), skipped (not readable), refused by the put path",
                            labels=["outcome"])
    for key in ("delivered", "skipped", "refused"):
        c.add_metric([key], snap[key])
    yield c


def render_lines(snap: dict) -> list[str]:
    """The `mqstore status` lines."""
    if not snap:
        return []
    levels = ", ".join(f"{level}: {n}" for level, n in
                       sorted(snap["levels"].items(), key=lambda kv: int(kv[0])) if n)
    return [f"delayed: {sum(snap['levels'].values())} pending"
            + (f" (level {levels})" if levels else "")
            + f"; timers {snap['timers']} pending; {snap['delivered']} delivered"
            + (f", {snap['skipped']} skipped" if snap["skipped"] else "")
            + (f", {snap['refused']} re-puts refused" if snap["refused"] else "")]
