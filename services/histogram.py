"""Latency histograms and put statistics, as the services emit them in their `stats` events
for the supervisor's metrics (supervisor/metrics.py): `Histogram` (the flusher's fdatasync,
the committer's commit, the appender's slave acknowledgements) and `PutStats` (the
appender's puts, bytes and reply latency per status), in the buckets of BUCKETS_MS.
"""
from __future__ import annotations

import bisect
import math

BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, math.inf)
_BOUNDS_S = [b / 1000 for b in BUCKETS_MS[:-1]]
SUM_KEY = "sum_ms"          # a latency map's key for the sum of its observations, in ms


class Histogram:
    """Latency counts in the buckets of BUCKETS_MS since the last `take()`: a bucket counts the
    observations slower than the previous bound and at most as slow as its own (not
    cumulative); its key is its upper bound in ms (inf last), and the key SUM_KEY holds the
    sum of the observations in ms (present whenever a bucket is). The flusher and committer
    emit theirs as `flush_latency` and `commit_latency` in their `stats` events."""

    def __init__(self):
        self.counts = [0] * len(BUCKETS_MS)
        self.total = 0
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(_BOUNDS_S, seconds)] += 1
        self.total += 1
        self.sum_s += seconds

    def take(self) -> dict:
        out = {b: n for b, n in zip(BUCKETS_MS, self.counts) if n}
        if out:
            out[SUM_KEY] = self.sum_s * 1000.0
        self.counts = [0] * len(BUCKETS_MS)
        self.total = 0
        self.sum_s = 0.0
        return out


class PutStats:
    """Counts since the last `take()`: messages and body bytes stored per topic, and reply
    latency (reply time - receive time, one observation per request) per reply status in the
    buckets of BUCKETS_MS. A bucket counts the requests slower than the previous bound and at
    most as slow as its own (not cumulative); its key is its upper bound in ms (inf last). The
    sum of each status's latencies, in ms, goes in its own field, `latency_sum_ms`."""

    def __init__(self):
        self.puts: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self.latency: dict[str, Histogram] = {}

    def stored(self, topic: str, count: int, nbytes: int) -> None:
        self.puts[topic] = self.puts.get(topic, 0) + count
        self.bytes[topic] = self.bytes.get(topic, 0) + nbytes

    def replied(self, status: str, seconds: float) -> None:
        hist = self.latency.get(status)
        if hist is None:
            hist = self.latency[status] = Histogram()
        hist.observe(seconds)

    def empty(self) -> bool:
        return not self.puts and not self.latency

    def take(self) -> dict:
        """The event fields `puts`, `bytes`, `latency` ({status: {bucket_ms: count}}) and, when
        there were replies, `latency_sum_ms` ({status: ms}); and a reset."""
        latency = {status: hist.take() for status, hist in self.latency.items()}
        out = {"puts": self.puts, "bytes": self.bytes, "latency": latency}
        if latency:
            out["latency_sum_ms"] = {status: counts.pop(SUM_KEY, 0.0) for status, counts in latency.items()}
        self.puts, self.bytes, self.latency = {}, {}, {}
        return out
