"""harness.wait_exit works in a process holding more than 1,024 descriptors: it used
select(), which refuses a descriptor numbered 1024 or more, and the pure-Python suite failed
there once its process had opened that many."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from tests.integration.harness import wait_exit


def test_wait_exit_with_a_descriptor_past_1023():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    held = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open("/dev/null", os.O_RDONLY))
        quick = subprocess.Popen([sys.executable, "-c", "pass"])
        assert wait_exit(quick, 30) == 0
        slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        with pytest.raises(subprocess.TimeoutExpired):
            wait_exit(slow, 0.2)
        slow.kill()
        assert wait_exit(slow, 30) == -9
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
