"""The rows of benchmarks/pipeline.py's table: one `Row` per measured workload (ours, a floor
or a limit), its Redis peer and target, and the table they print as."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import _limits as L

FLUSH_SHORT = {"ASYNC_FLUSH": "ASYNC", "SYNC_FLUSH": "SYNC"}


def say(msg: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Row:
    workload: str
    msgs_per_s: float
    mb_per_s: float
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    peer: str = ""
    peer_msgs_per_s: float | None = None
    target: str = ""
    met: bool | None = None
    notes: dict = field(default_factory=dict)
    kind: str = ""                 # produce, consume, probe, floor, fsync, concurrent, floor-c
    size: int = 0
    flush: str = ""
    batched: bool = False
    producers: int = 0
    mode: str = ""                 # single, batch, auto, aio (produce rows)

    @property
    def ratio(self) -> float | None:
        return self.msgs_per_s / self.peer_msgs_per_s if self.peer_msgs_per_s else None


def fmt_ms(x: float) -> str:
    return "-" if x != x else (f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 100 else f"{x:.0f}")


def print_table(rows: list[Row], file=sys.stdout) -> None:
    header = ("workload", "msgs/s", "MB/s", "p50 ms", "p99 ms", "Redis peer", "Redis msgs/s",
              "ratio", "target", "status")
    body = []
    for r in rows:
        status = "" if r.met is None and not r.target else ("met" if r.met else
                                                              "not met" if r.met is False else "no peer")
        body.append((r.workload, L.fmt_rate(r.msgs_per_s), L.fmt_mb(r.mb_per_s), fmt_ms(r.p50_ms),
                     fmt_ms(r.p99_ms), r.peer, L.fmt_rate(r.peer_msgs_per_s), L.fmt_ratio(r.ratio),
                     r.target, status))
    L.print_aligned(header, body, {1, 2, 3, 4, 6, 7}, file)
