"""A hanging hypothesis test ends the run at its timeout (tests/timeout_hooks.py) instead of
hanging it: run in a pytest of its own, with a 1-second timeout."""
import os
import subprocess
import sys

HANGING = '''
import time
from hypothesis import given, settings, strategies as st

@settings(max_examples=5, deadline=None, database=None)
@given(st.integers(0, 10))
def test_hangs(x):
    while True:
        time.sleep(0.05)
'''


def test_a_hanging_hypothesis_test_times_out(tmp_path):
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {tests_dir!r})\n"
        "from timeout_hooks import pytest_collection_modifyitems  # noqa: F401\n")
    (tmp_path / "test_hang.py").write_text(HANGING)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--timeout=1", str(tmp_path / "test_hang.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "Timeout" in out.stdout + out.stderr
