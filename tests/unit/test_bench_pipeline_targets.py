"""Issue 31's targets in the pipeline benchmark: the SYNC probe's p50 against one fdatasync p50
plus two echo p50s of the same run, and the unbatched c50 row against the echo at that
concurrency and Redis XADD -c 50 -P 1; and the fdatasync limit times each fdatasync."""
from tests.bench_module import load

bench = load("pipeline")
Row, L = bench.Row, bench.L


def rows_for(probe_p50: float, c50_rate: float) -> list:
    return [
        Row("fdatasync", 10_000, 1.0, 0.10, 0.2, kind="fsync", size=1024, flush="SYNC_FLUSH"),
        Row("put SYNC 1 in flight", 1_000, 1.0, probe_p50, 2.0, kind="probe", size=1024, flush="SYNC_FLUSH"),
        Row("echo", 10_000, 1.0, 0.08, 0.2, kind="floor", size=1024, flush="SYNC_FLUSH"),
        Row("c50", c50_rate, 1.0, kind="concurrent", size=1024, flush="ASYNC_FLUSH"),
        Row("echo c50", 40_000, 1.0, kind="floor-c", size=1024, flush="ASYNC_FLUSH"),
    ]


def attach(rows, redis):
    b = bench.PipelineBench("/nonexistent", bench.QUICK, None, None, "")
    b.rows = rows
    b.attach_peers(redis)
    return {r.kind: r for r in rows}


def test_the_sync_probe_is_held_to_one_fdatasync_plus_two_echo_round_trips():
    assert attach(rows_for(0.26, 30_000), None)["probe"].met is True        # bound 0.10 + 2 x 0.08
    probe = attach(rows_for(0.27, 30_000), None)["probe"]
    assert probe.met is False and "1.04x" in probe.target


def test_the_c50_row_needs_half_the_echo_and_half_of_redis():
    redis = {(1024, "everysec"): {"xadd": {"rps": 80_000}, "xrange": {"rps": 1_000},
                                  "xadd_unbatched": {"rps": 30_000}}}
    by = attach(rows_for(0.2, 20_000), redis)
    assert by["concurrent"].met is True and by["concurrent"].ratio == 20_000 / 30_000
    assert attach(rows_for(0.2, 14_000), redis)["concurrent"].met is False    # 0.47x Redis
    assert attach(rows_for(0.2, 19_000), {(1024, "everysec"): {**redis[(1024, "everysec")],
                                                               "xadd_unbatched": {"rps": 20_000}}}
                  )["concurrent"].met is False                               # 0.475x the echo


def test_the_fsync_limit_times_every_fdatasync(tmp_path):
    m = L.fsync_limit(str(tmp_path), 1024, 20)
    assert len(m.latencies) == 20 and all(x > 0 for x in m.latencies)
    assert sum(m.latencies) <= m.seconds
