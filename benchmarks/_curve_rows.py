"""pipeline.py's CURVE rows (issue 32): the batched x1 run and the one-at-a-time probe again on
a store started `--secure`, each beside its row without CURVE from the same run, then the floor
of CURVE itself (benchmarks/_curve_floor.py)."""
from __future__ import annotations

import shutil

import _limits as L
from _curve_floor import floor as curve_floor
from _limits import size_name
from _pipeline_rows import FLUSH_SHORT, Row, say
from _pipeline_side import BATCH


def curve_rows(bench, size: int, flush: str) -> None:
    """CURVE on (a `--secure` store, an admin key) beside the rows without it of this run:
    batched x1 and one put at a time (issue 32: batched with CURVE >= 0.7x without)."""
    off = {r.workload: r for r in bench.rows}
    store = bench.fresh_store(flush, secure=True)
    try:
        for mode, one, label in (("batch", False, f"produce {size_name(size)} {FLUSH_SHORT[flush]} batch{BATCH} x1"),
                                 ("single", True, f"put {size_name(size)} {FLUSH_SHORT[flush]} 1 in flight")):
            _, r = bench.produce(store, size, mode, 1, bench.plan.produce_s if not one else bench.plan.probe_s,
                                one_at_a_time=one)
            row = Row(f"{label} CURVE", r["acked"] / r["seconds"], r["bytes"] / r["seconds"] / L.MB,
                      r["p50_ms"], r["p99_ms"], peer=f"{label} (no CURVE)", kind="curve", size=size,
                      flush=flush, producers=1, notes=r, mode=mode)
            if label in off:
                row.peer_msgs_per_s = off[label].msgs_per_s
            if mode == "batch":
                row.target = ">= 0.7x"
                row.met = row.ratio >= 0.7 if row.ratio is not None else None
            bench.rows.append(row)
            say(f"  {row.workload}: {L.fmt_rate(row.msgs_per_s)} msgs/s, p50 {row.p50_ms:.3f} ms, "
                f"p99 {row.p99_ms:.3f} ms, {L.fmt_ratio(row.ratio)} of the row without CURVE")
        f = curve_floor(BATCH * size, bench.plan.probe_s)       # what encryption alone leaves
        bench.rows.append(Row(f"raw pyzmq {BATCH}x{size_name(size)} requests CURVE (floor)", f["curve_rps"] * BATCH,
                             f["curve_rps"] * BATCH * size / L.MB, peer="the same without CURVE",
                             peer_msgs_per_s=f["off_rps"] * BATCH, kind="floor", size=size, flush=flush, notes=f))
    finally:
        store.stop()
        shutil.rmtree(store.root, ignore_errors=True)
