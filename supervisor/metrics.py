"""Prometheus metrics of a running store (`mqstore start --metrics-port M`).

`Metrics` is a subscriber of the supervisor's events and a prometheus-client collector served
by prometheus-client's HTTP server on its own thread. It keeps:
- from the appender's `stats` events (`{"event": "stats", "puts": {topic: n}, "bytes":
  {topic: n}, "latency": {status: {bucket_ms: count}}, "latency_sum_ms": {status: ms}}`,
  counts since its previous event): puts and bytes per topic (counters) and the put latency
  histogram by status;
- from the reader's `stats` events, `damaged_reads`: records reads refused as damaged
  (counter mqstore_damaged_reads), and `rederived_entries`: damaged consume-queue entries
  whose records a pull found intact in the CommitLog and served (counter
  mqstore_rederived_entries);
- from any service's `stats` event, every other map named `<what>_latency` (the flusher's
  `flush_latency`, the committer's `commit_latency`, ...) as a histogram by service;
- from the supervisor once a second (`update`): the control block's positions and lags and
  flags, each service's state, RSS, CPU and restarts (psutil), replication (epoch, slaves,
  lag, bytes sent or received; supervisor/replication.py), the delayed messages pending and
  delivered (supervisor.delayed_report), and every 10 s the disk use. The SYNC_MASTER wait is
  the appender's `replica_latency` (operation "replica").

A latency map's keys are bucket upper bounds in milliseconds (a key that is not a number,
such as "inf", is the overflow bucket) and its values counts in that bucket alone; its key
"sum_ms" (services/histogram.SUM_KEY), or for puts the status's entry in
`latency_sum_ms`, is the sum of the latencies in ms. Every histogram series exposes every
bound of services/histogram.BUCKETS_MS (and any other bound an event named), cumulative
and in seconds, with `_count` (the +Inf bucket) and `_sum` in seconds.

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
from services.histogram import BUCKETS_MS, SUM_KEY
from supervisor import status_report
from supervisor.delayed_report import delayed_families

log = logging.getLogger("mqstore.supervisor.metrics")
DISK_INTERVAL_S = 10.0


def _bucket_ms(key) -> float:
    try:
        value = float(key)
    except (TypeError, ValueError):
        return math.inf
    return value if value >= 0 else math.inf


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class Series:
    """One histogram series: counts per bucket upper bound in ms (not cumulative) and the sum
    of the observations in ms, added up over the events."""

    def __init__(self):
        self.counts: dict[float, float] = {}
        self.sum_ms = 0.0

    def add(self, buckets, sum_ms=None) -> None:
        """Add a latency map's counts, and its sum (`sum_ms`, else the map's SUM_KEY)."""
        if not isinstance(buckets, dict):
            return
        for key, count in buckets.items():
            if key == SUM_KEY:
                continue
            if _number(count) and count > 0:
                le = _bucket_ms(key)
                self.counts[le] = self.counts.get(le, 0) + count
        total = buckets.get(SUM_KEY) if sum_ms is None else sum_ms
        if _number(total) and total > 0:
            self.sum_ms += total

    def copy(self) -> "Series":
        other = Series()
        other.counts, other.sum_ms = dict(self.counts), self.sum_ms
        return other

    def buckets(self) -> list:
        """[(le in seconds as text, cumulative count)] over every bound of BUCKETS_MS and any
        other this series saw, ending with +Inf (the count)."""
        bounds = sorted(set(BUCKETS_MS[:-1]) | {le for le in self.counts if le != math.inf})
        out, total = [], 0
        for le in bounds:
            total += self.counts.get(le, 0)
            out.append((repr(le / 1000.0), total))
        out.append(("+Inf", total + self.counts.get(math.inf, 0)))
        return out

    def add_to(self, family: HistogramMetricFamily, labels: list) -> None:
        family.add_metric(labels, self.buckets(), self.sum_ms / 1000.0)


class Metrics:
    def __init__(self, port: int, host: str = "127.0.0.1"):
        self.port, self.host = port, host
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._lock = threading.Lock()
        self._puts: dict[str, float] = {}
        self._damaged = 0              # records reads refused as damaged (the reader's events)
        self._rederived = 0            # damaged entries whose records reads served (the same)
        self._bytes: dict[str, float] = {}
        self._put_latency: dict[str, Series] = {}
        self._latency: dict[tuple[str, str], Series] = {}
        self._snapshot: dict = {}
        self._disk: dict = {}
        self._disk_at = 0.0
        self._server = None

    # -- serving -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the HTTP server (port 0: a free port, kept in `port`); OSError (port in use)
        goes to the caller."""
        if self._server is None:
            self._server, _thread = start_http_server(self.port, addr=self.host, registry=self.registry)
            self.port = self._server.server_port
            log.info("metrics at %s", self.url)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

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
                        if _number(n) and n > 0:
                            into[str(topic)] = into.get(str(topic), 0) + n
            damaged = event.get("damaged_reads")
            if _number(damaged) and damaged > 0:
                self._damaged += damaged
            rederived = event.get("rederived_entries")
            if _number(rederived) and rederived > 0:
                self._rederived += rederived
            by_status = event.get("latency")
            sums = event.get("latency_sum_ms")
            sums = sums if isinstance(sums, dict) else {}
            if isinstance(by_status, dict):
                for status, buckets in by_status.items():
                    series = self._put_latency.setdefault(str(status), Series())
                    series.add(buckets, sums.get(status))
            for key, buckets in event.items():
                if key.endswith("_latency") and isinstance(buckets, dict):
                    self._latency.setdefault((key[:-len("_latency")], service), Series()).add(buckets)

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
                              "flags": set(status_report.flags(cb)), "services": services,
                              "delayed": sup.delayed.snapshot(),
                              "replication": sup.replication.report()}
            if disk is not None:
                self._disk = disk

    # -- the collector -------------------------------------------------------------------
    def collect(self):
        with self._lock:
            puts, nbytes, damaged = dict(self._puts), dict(self._bytes), self._damaged
            rederived = self._rederived
            put_latency = {k: v.copy() for k, v in self._put_latency.items()}
            latency = {k: v.copy() for k, v in self._latency.items()}
            snap, disk = dict(self._snapshot), dict(self._disk)
        c = CounterMetricFamily("mqstore_puts", "Messages stored, by topic", labels=["topic"])
        for topic, n in sorted(puts.items()):
            c.add_metric([topic], n)
        yield c
        c = CounterMetricFamily("mqstore_put_bytes", "Body bytes stored, by topic", labels=["topic"])
        for topic, n in sorted(nbytes.items()):
            c.add_metric([topic], n)
        yield c
        c = CounterMetricFamily("mqstore_damaged_reads", "Records a pull, query or lookup found "
                                "damaged and did not serve")
        c.add_metric([], damaged)
        yield c
        c = CounterMetricFamily("mqstore_rederived_entries", "Damaged consume-queue entries whose "
                                "records a pull found intact in the CommitLog and served")
        c.add_metric([], rederived)
        yield c
        h = HistogramMetricFamily("mqstore_put_latency_seconds", "Put latency, by put status",
                                  labels=["status"])
        for status, series in sorted(put_latency.items()):
            series.add_to(h, [status])
        yield h
        h = HistogramMetricFamily("mqstore_service_latency_seconds",
                                  "Latency of service operations (flush, commit, ...)",
                                  labels=["operation", "service"])
        for (op, service), series in sorted(latency.items()):
            series.add_to(h, [op, service])
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
            yield from delayed_families(snap["delayed"])
            yield from _replication_metrics(snap.get("replication") or {})
        if disk:
            g = GaugeMetricFamily("mqstore_disk_bytes", "Disk use of the store and its file "
                                  "system", labels=["what"])
            for key, value in disk.items():
                if key != "fs_used_ratio":
                    g.add_metric([key[:-len("_bytes")] if key.endswith("_bytes") else key], value)
            yield g
            yield GaugeMetricFamily("mqstore_disk_used_ratio", "Used share of the store's file "
                                    "system", value=disk["fs_used_ratio"])


def _replication_metrics(repl: dict):
    """Replication gauges from supervisor/replication.py's report: the epoch, connected slaves
    (a master), the lag in bytes of each slave (a master) or of this slave, bytes sent or
    received by the ha process since it started."""
    yield GaugeMetricFamily("mqstore_replication_epoch", "This store's epoch (a slave: its "
                            "master's)", value=repl.get("epoch", 0))
    slave = repl.get("role") == "SLAVE"
    yield GaugeMetricFamily("mqstore_replication_slaves", "Slaves connected to this master",
                            value=0 if slave else repl.get("slaves_connected", 0))
    g = GaugeMetricFamily("mqstore_replication_lag_bytes", "Bytes of the master's log a slave "
                          "has not acknowledged (on a slave: not received)", labels=["slave"])
    if slave:
        g.add_metric(["self"], repl.get("lag_bytes", 0))
    for sl in repl.get("slaves", []):
        g.add_metric([str(sl.get("store_id"))], sl.get("lag_bytes", 0))
    yield g
    c = CounterMetricFamily("mqstore_replication_bytes", "CommitLog bytes the ha process sent "
                            "(master) or received (slave) since it started", labels=["direction"])
    c.add_metric(["received" if slave else "sent"],
                 repl.get("bytes_received" if slave else "bytes_sent", 0))
    yield c
