"""The pipeline benchmark keeps the median of its repeated reads (ours and Redis XRANGE alike),
not the first, the best or the worst."""

from tests.bench_module import load

bench = load("pipeline")
READ_REPEATS, median_by = bench.READ_REPEATS, bench.median_by


def test_the_median_run_is_kept_whatever_the_order():
    runs = [{"messages": 600, "seconds": 1.0}, {"messages": 400, "seconds": 1.0},
            {"messages": 500, "seconds": 2.0}]
    assert median_by(runs, lambda r: r["messages"] / r["seconds"]) is runs[1]
    assert median_by([{"rps": 3}, {"rps": 9}, {"rps": 5}], lambda r: r["rps"]) == {"rps": 5}
    assert READ_REPEATS % 2 == 1
