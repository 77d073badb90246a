"""benchmarks/replication.py compares SYNC_MASTER with the Redis peer that waits for its
replica (WAIT 1), not with the one that does not."""

from tests.bench_module import load

bench = load("replication")


def test_the_sync_master_is_compared_with_redis_that_waits(capsys):
    rows = [{"role": "ASYNC_MASTER", "msgs_s": 97_532, "lag_first_half": 7_588_491, "lag_second_half": 3_296_756},
            {"role": "SYNC_MASTER", "msgs_s": 89_739, "lag_first_half": 973_066, "lag_second_half": 1_090_944}]
    redis = [{"what": "replica, no WAIT", "msgs_s": 115_017},
             {"what": "replica + WAIT 1", "msgs_s": 64_648}]
    bench.closing_note(rows, redis)
    out = capsys.readouterr().out
    assert "SYNC_MASTER / Redis replica + WAIT 1: 1.39x (target >= 1.0x): met" in out, out
    assert "SYNC_MASTER / ASYNC_MASTER batched 1 KiB produce: 0.92x (target >= 0.7x): met" in out, out
