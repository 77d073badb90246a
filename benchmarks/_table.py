"""The benchmarks' result table: a row per workload with its rate, its limit and the ratio
to it, number formats, and the JSON dump."""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, dataclass, field


@dataclass
class Row:
    """One workload: our rate, the limit beside it and the target, if any."""
    workload: str
    ops_per_s: float
    mb_per_s: float
    limit_name: str = ""
    limit_mb_per_s: float = 0.0
    floor_ops_per_s: float = 0.0          # the CPU floor (records/s of a bare Python loop)
    target: str = ""                      # e.g. ">= 0.5x write limit"
    target_ratio: float | None = None     # ours / the target's reference
    met: bool | None = None
    notes: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        return self.mb_per_s / self.limit_mb_per_s if self.limit_mb_per_s else None

    @property
    def floor_ratio(self) -> float | None:
        return self.ops_per_s / self.floor_ops_per_s if self.floor_ops_per_s else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ratio"], d["floor_ratio"] = self.ratio, self.floor_ratio
        return d


def fmt_rate(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 10_000_000:
        return f"{x / 1e6:.0f}M"
    if x >= 1_000_000:
        return f"{x / 1e6:.2f}M"
    if x >= 10_000:
        return f"{x / 1e3:.0f}k"
    if x >= 1_000:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def fmt_mb(x: float | None) -> str:
    if x is None or x == 0:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def fmt_ratio(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 0.1 else f"{x:.2f}"


def print_table(rows: list[Row], file=sys.stdout) -> None:
    """workload | msgs/s | MB/s | limit | limit MB/s | ratio | vs CPU floor | target | status."""
    header = ("workload", "msgs/s", "MB/s", "limit", "limit MB/s", "ratio", "vs floor",
              "target (ratio)", "status")
    body = []
    for r in rows:
        if r.met is None:
            status = ""
        else:
            status = "met" if r.met else "not met"
        target = r.target + (f" ({fmt_ratio(r.target_ratio)})" if r.target_ratio is not None else "")
        body.append((r.workload, fmt_rate(r.ops_per_s), fmt_mb(r.mb_per_s), r.limit_name,
                     fmt_mb(r.limit_mb_per_s), fmt_ratio(r.ratio), fmt_ratio(r.floor_ratio),
                     target, status))
    print_aligned(header, body, {1, 2, 4, 5, 6}, file)


def print_aligned(header, body, right: set, file=sys.stdout) -> None:
    """A plain-text table: columns as wide as their widest cell, `right` ones right-aligned."""
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(header)]

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    print(line(header), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for b in body:
        print(line(b), file=file)


def spread(values: list[float]) -> str:
    """'median [min-max]' of a list of rates."""
    if not values:
        return "-"
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def write_json(path: str, payload: dict) -> None:
    def default(o):
        if hasattr(o, "ops_per_s"):                  # a _limits.Measure
            return {"ops": o.ops, "bytes": o.nbytes, "seconds": o.seconds,
                    "ops_per_s": o.ops_per_s, "mb_per_s": o.mb_per_s}
        if isinstance(o, Row):
            return o.to_dict()
        raise TypeError(type(o).__name__)
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, default=default)
        f.write("\n")
