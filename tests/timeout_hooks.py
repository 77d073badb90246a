"""Per-test timeouts that also end a hanging hypothesis test.

pytest-timeout's default method raises a failure inside the test when its alarm fires. A
hypothesis test takes that failure as a falsifying example and shrinks it, calling the test
again with no alarm left: a hang then lasts until CI is killed (it did once, for 25 minutes).
Hypothesis tests therefore time out with the thread method, which dumps every stack and ends
the run.
"""
from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    seconds = config.getini("timeout")
    for item in items:
        test = getattr(item, "obj", None)
        if getattr(test, "is_hypothesis_test", False) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(float(config.getoption("timeout") or seconds or 0),
                                                method="thread"))
