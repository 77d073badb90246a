"""services.heap: freed frames stay in a service process, so the next one takes no page faults;
a client process keeps its allocator as it had it."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# In a fresh interpreter: optionally tune, then count the minor faults of 300 rounds of
# "allocate four 1 MiB frames, write them, free them" (after one warm-up round).
_PROBE = """
import resource, sys
sys.path.insert(0, {repo!r})
from services.heap import keep_freed_heap
if {tune}:
    assert keep_freed_heap()
def frame():                    # four frames in flight, as a pipelined consumer holds
    held = [bytearray(1 << 20) for _ in range(4)]
    for b in held:
        b[::4096] = b"x" * 256
    del held
frame()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(300):
    frame()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(tune: bool, env=None) -> int:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(repo=REPO, tune=tune)],
                         capture_output=True, text=True, check=True, env=env)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_freed_frames_are_reused_without_faults():
    untuned = _faults(False)
    tuned = _faults(True)
    assert untuned > 300 * 200           # glibc trims the freed MiB and faults it in again
    assert tuned < 300                   # the heap keeps it: at most a few faults in all


def test_a_users_own_glibc_setting_is_left_alone():
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_MMAP_THRESHOLD_": "0"}
    assert _faults(True, env) > 300 * 200   # their setting (trim at once) still rules


def test_calling_twice_is_harmless():
    from services.heap import keep_freed_heap
    assert keep_freed_heap() in (True, False)
    assert keep_freed_heap() is True


_CLIENT_FIRST = """
from ipc.client_common import PeerUnreachable
from ipc.connection import Connection
try:
    Connection("tcp://127.0.0.1:9", timeout=0.2).close()
except PeerUnreachable:
    pass
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_a_client_connection_leaves_its_users_allocator_alone():
    # Only the service processes tune the heap (services.base.run_service): a process that
    # opens a client Connection keeps glibc's trimming, as it had it.
    probe = _PROBE.format(repo=REPO, tune=False).replace("def frame():", _CLIENT_FIRST + "def frame():", 1)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert int(out.stdout) > 300 * 200
