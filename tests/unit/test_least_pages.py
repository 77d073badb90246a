"""LeastPages: the least-pages rule, and 0 once per thorough interval (RocketMQ's flush and
commit services)."""
from core.files.least_pages import LeastPages


def test_least_pages_until_the_thorough_interval_passes():
    rule = LeastPages(4, 10_000)
    start = rule.last_thorough
    assert rule.now(start + 1) == 4
    assert rule.now(start + 9.9) == 4
    assert rule.now(start + 10) == 0          # thorough: take whatever is dirty
    assert rule.now(start + 10.5) == 4        # and the interval starts again
    assert rule.now(start + 20) == 0


def test_zero_thorough_interval_always_takes_everything():
    rule = LeastPages(4, 0)
    assert rule.now() == 0 and rule.now() == 0
