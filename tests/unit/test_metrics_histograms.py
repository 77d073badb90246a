"""The latency histograms of `supervisor.metrics.Metrics`, fed the `stats` events that
`services.histogram.PutStats` and `Histogram` build: every series has every bucket bound,
cumulative, and `_count` and `_sum`, however sparse the events' buckets are."""
from __future__ import annotations

import math

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from services.histogram import BUCKETS_MS, SUM_KEY, Histogram, PutStats
from supervisor.metrics import Metrics


def samples(metrics: Metrics, name: str) -> dict:
    """{(sample name, labels without le): [(le, value)] or value} of histogram `name`."""
    out: dict = {}
    text = generate_latest(metrics.registry).decode()
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            if s.name.endswith("_bucket"):
                out.setdefault(("bucket", labels), []).append((float(s.labels["le"]), s.value))
            else:
                out[(s.name.rpartition("_")[2], labels)] = s.value
    return out


def test_put_latency_has_every_bound_count_and_sum():
    stats = PutStats()
    for seconds in (0.0004, 0.008, 2.0):          # sparse: 0.5 ms, 10 ms and +Inf buckets
        stats.replied("PUT_OK", seconds)
    stats.replied("FLUSH_DISK_TIMEOUT", 5.0)
    event = {"event": "stats", "service": "appender", **stats.take()}
    assert math.isclose(event["latency_sum_ms"]["PUT_OK"], 2008.4)
    assert SUM_KEY not in event["latency"]["PUT_OK"]
    m = Metrics(0)
    m.handle(event)
    m.handle(event)                                # events add up
    got = samples(m, "mqstore_put_latency_seconds")
    ok = (("status", "PUT_OK"),)
    assert [le for le, _ in got[("bucket", ok)]] == [b / 1000 for b in BUCKETS_MS]
    cumulative = dict(got[("bucket", ok)])
    assert cumulative[0.00025] == 0 and cumulative[0.0005] == 2 and cumulative[0.005] == 2
    assert cumulative[0.01] == 4 and cumulative[1.0] == 4 and cumulative[math.inf] == 6
    assert got[("count", ok)] == 6 and math.isclose(got[("sum", ok)], 2 * 2.0084)
    timeout = (("status", "FLUSH_DISK_TIMEOUT"),)
    assert len(got[("bucket", timeout)]) == len(BUCKETS_MS) and got[("count", timeout)] == 2
    assert math.isclose(got[("sum", timeout)], 10.0)


def test_flush_latency_carries_its_sum_in_the_map():
    hist = Histogram()
    hist.observe(0.003)
    hist.observe(0.0001)
    taken = hist.take()
    assert {k: v for k, v in taken.items() if k != SUM_KEY} == {0.1: 1, 5: 1}
    assert math.isclose(taken[SUM_KEY], 3.1) and hist.take() == {}
    m = Metrics(0)
    m.handle({"event": "stats", "service": "flusher", "flush_latency": taken})
    got = samples(m, "mqstore_service_latency_seconds")
    labels = (("operation", "flush"), ("service", "flusher"))
    assert [n for _, n in got[("bucket", labels)]] == [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2]
    assert got[("count", labels)] == 2 and math.isclose(got[("sum", labels)], 0.0031)


def test_damaged_reads_are_counted():
    m = Metrics(0)
    for n in (2, 3, "x", -1):
        m.handle({"event": "stats", "service": "reader", "damaged_reads": n})
    text = generate_latest(m.registry).decode()
    assert "mqstore_damaged_reads_total 5.0" in text


def test_rederived_entries_are_counted():
    m = Metrics(0)
    for n in (1, 0, "x", 4):
        m.handle({"event": "stats", "service": "reader", "damaged_reads": 0, "rederived_entries": n})
    text = generate_latest(m.registry).decode()
    assert "mqstore_rederived_entries_total 5.0" in text and "mqstore_damaged_reads_total 0.0" in text
