"""Prometheus metrics of a running store (`mqstore start --metrics-port M`).

`Metrics` is a subscriber of the supervisor's events and a prometheus-client collector served
by prometheus-client's HTTP server on its own thread. It keeps:
- from the appender's `stats` events (`{"event": "stats", "puts": {topic: n}, "bytes":
  {topic: n}, "latency": {status: {bucket_ms: count}}}`, counts since its previous event):
  puts and bytes per topic (counters) and the put latency histogram by status;
- from any service's `stats` event, every other map named `<what>_latency` (the flusher's
  `flush_latency`, the committer's `commit_latency`, ...) as a histogram by service;
- from the supervisor once a second (`update`): the control block's positions and lags and
  flags, each service's state, RSS, CPU and restarts (psutil), and every 10 s the disk use.

A latency map's keys are bucket upper bounds in milliseconds (a key that is not a number,
such as "inf", is the overflow bucket); its values are counts in that bucket alone. They are
summed here into cumulative Prometheus buckets in seconds. The maps carry no sum of the
latencies, so the histograms have no `_sum`.

The HTTP thread only reads a snapshot taken under a lock; the supervisor's loop writes it.
"""
from __future__ import annotations

import logging
import math
import threading
import time

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from ipc.control_block import ServiceState
from supervisor import status_report

log = logging.getLogger("mqstore.supervisor.metrics")
DISK_INTERVAL_S = 10.0


def _bucket_ms(key) -> float:
    try:
        value = float(key)
    except (TypeError, ValueError):
        return math.inf
    return value if value >= 0 else math.inf


def _add_counts(into: dict, buckets) -> None:
    if not isinstance(buckets, dict):
        return
    for key, count in buckets.items():
        if isinstance(count, (int, float)) and not isinstance(count, bool) and count > 0:
            le = _bucket_ms(key)
            into[le] = into.get(le, 0) + count


def _cumulative(counts: dict) -> list:
    """[(le seconds as text, cumulative count)], ending with +Inf, from per-bucket counts."""
    out, total = [], 0
    for le in sorted(counts):
        total += counts[le]
        if le != math.inf:
            out.append((repr(le / 1000.0), total))
    out.append(("+Inf", total))
    return out


class Metrics:
    def __init__(self, port: int, host: str = "127.0.0.1"):
        self.port, self.host = port, host
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._lock = threading.Lock()
        self._puts: dict[str, float] = {}
        self._bytes: dict[str, float] = {}
        self._put_latency: dict[str, dict] = {}
        self._latency: dict[tuple[str, str], dict] = {}
        self._snapshot: dict = {}
        self._disk: dict = {}
        self._disk_at = 0.0
        self._server = None

    # -- serving -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the HTTP server; OSError (port in use) goes to the caller."""
        if self._server is None:
            self._server, _thread = start_http_server(self.port, addr=self.host, registry=self.registry)
            log.info("metrics at http://%s:%d/metrics", self.host, self.port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- inputs --------------------------------------------------------------------------
    def handle(self, event: dict) -> None:
        """The subscriber: take the counts of `stats` events."""
        if event.get("event") != "stats":
            return
        service = event.get("service") if isinstance(event.get("service"), str) else "unknown"
        with self._lock:
            for name, into in (("puts", self._puts), ("bytes", self._bytes)):
                counts = event.get(name)
                if isinstance(counts, dict):
                    for topic, n in counts.items():
                        if isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0:
                            into[str(topic)] = into.get(str(topic), 0) + n
            by_status = event.get("latency")
            if isinstance(by_status, dict):
                for status, buckets in by_status.items():
                    _add_counts(self._put_latency.setdefault(str(status), {}), buckets)
            for key, buckets in event.items():
                if key.endswith("_latency") and isinstance(buckets, dict):
                    _add_counts(self._latency.setdefault((key[:-len("_latency")], service), {}), buckets)

    def update(self, sup) -> None:
        """Take the supervisor's view: positions, flags, services; the disk every 10 s."""
        cb = sup.run_ctx.cb
        pos = status_report.positions(cb)
        services = [(svc.name, svc.state, svc.rss if svc.alive else 0,
                     svc.cpu if svc.alive else 0.0, svc.restarts) for svc in sup.services.values()]
        now = time.monotonic()
        disk = None
        if now - self._disk_at >= DISK_INTERVAL_S:
            self._disk_at = now
            disk = status_report.disk_usage(sup.config)
        with self._lock:
            self._snapshot = {"positions": pos, "lags": status_report.lags(pos),
                              "flags": set(status_report.flags(cb)), "services": services}
            if disk is not None:
                self._disk = disk

    # -- the collector -------------------------------------------------------------------
    def collect(self):
        with self._lock:
            puts, nbytes = dict(self._puts), dict(self._bytes)
            put_latency = {k: dict(v) for k, v in self._put_latency.items()}
            latency = {k: dict(v) for k, v in self._latency.items()}
            snap, disk = dict(self._snapshot), dict(self._disk)
        c = CounterMetricFamily("mqstore_puts", "Messages stored, by topic", labels=["topic"])
        for topic, n in sorted(puts.items()):
            c.add_metric([topic], n)
        yield c
        c = CounterMetricFamily("mqstore_put_bytes", "Body bytes stored, by topic", labels=["topic"])
        for topic, n in sorted(nbytes.items()):
            c.add_metric([topic], n)
        yield c
        h = HistogramMetricFamily("mqstore_put_latency_seconds", "Put latency, by put status",
                                  labels=["status"])
        for status, counts in sorted(put_latency.items()):
            h.add_metric([status], _cumulative(counts), None)
        yield h
        h = HistogramMetricFamily("mqstore_service_latency_seconds",
                                  "Latency of service operations (flush, commit, ...)",
                                  labels=["operation", "service"])
        for (op, service), counts in sorted(latency.items()):
            h.add_metric([op, service], _cumulative(counts), None)
        yield h
        yield from self._collect_snapshot(snap, disk)

    def _collect_snapshot(self, snap: dict, disk: dict):
        if snap:
            g = GaugeMetricFamily("mqstore_position_bytes", "CommitLog positions from the control "
                                  "block", labels=["position"])
            for name, value in snap["positions"].items():
                g.add_metric([name], value)
            yield g
            g = GaugeMetricFamily("mqstore_lag_bytes", "Distance between two positions",
                                  labels=["lag"])
            for name, value in snap["lags"].items():
                g.add_metric([name], value)
            yield g
            g = GaugeMetricFamily("mqstore_flag", "Store health flags (1 = set)", labels=["flag"])
            for name in status_report.FLAG_WORDS:
                g.add_metric([name], 1 if name in snap["flags"] else 0)
            yield g
            state = GaugeMetricFamily("mqstore_service_state", "1 for the state each service is "
                                      "in", labels=["service", "state"])
            rss = GaugeMetricFamily("mqstore_service_rss_bytes", "Resident memory", labels=["service"])
            cpu = GaugeMetricFamily("mqstore_service_cpu_percent", "CPU use (percent of one core)",
                                    labels=["service"])
            restarts = CounterMetricFamily("mqstore_service_restarts", "Restarts by the supervisor",
                                           labels=["service"])
            for name, st, r, c, n in snap["services"]:
                for s in ServiceState:
                    state.add_metric([name, s.name], 1 if s == st else 0)
                rss.add_metric([name], r)
                cpu.add_metric([name], c)
                restarts.add_metric([name], n)
            yield from (state, rss, cpu, restarts)
        if disk:
            g = GaugeMetricFamily("mqstore_disk_bytes", "Disk use of the store and its file "
                                  "system", labels=["what"])
            for key, value in disk.items():
                if key != "fs_used_ratio":
                    g.add_metric([key[:-len("_bytes")] if key.endswith("_bytes") else key], value)
            yield g
            yield GaugeMetricFamily("mqstore_disk_used_ratio", "Used share of the store's file "
                                    "system", value=disk["fs_used_ratio"])
