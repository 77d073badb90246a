"""services.base.die_with_parent: a service asks the kernel to kill it with its supervisor
(`--parent-pid`), and dies at once when that supervisor is already gone."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(parent_pid: int) -> subprocess.CompletedProcess:
    code = f"from services.base import die_with_parent; die_with_parent({parent_pid}); print('alive')"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=REPO, timeout=60)


def test_a_service_started_by_a_live_supervisor_runs():
    r = _run(os.getpid())
    assert r.returncode == 0 and r.stdout == b"alive\n"


def test_a_service_whose_supervisor_died_before_it_asked_dies_at_once():
    r = _run(1 if os.getpid() != 1 else 2)            # not its parent: as after a reparenting
    assert r.returncode == -signal.SIGKILL and b"alive" not in r.stdout


def test_a_service_is_killed_when_its_supervisor_dies():
    """A middle process starts a 'service' that asks to die with it, then is SIGKILLed: the
    service goes too (PR_SET_PDEATHSIG), instead of running on under init."""
    middle = ("import os, subprocess, sys, time\n"
              "svc = subprocess.Popen([sys.executable, '-c', 'import os, time; from services.base import "
              "die_with_parent; die_with_parent(%d); print(os.getpid(), flush=True); time.sleep(60)' "
              "% os.getpid()], stdout=subprocess.PIPE)\n"
              "print(svc.stdout.readline().decode().strip(), flush=True)\n"
              "time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", middle], stdout=subprocess.PIPE, cwd=REPO)
    try:
        service_pid = int(p.stdout.readline())
        os.kill(p.pid, signal.SIGKILL)
        p.wait(30)
        deadline = time.monotonic() + 30
        while _alive(service_pid):
            assert time.monotonic() < deadline, "the service outlived its supervisor"
            time.sleep(0.01)
    finally:
        p.kill()


def _alive(pid: int) -> bool:
    """Running (a zombie not yet reaped by init counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return not f.read().rsplit(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return False
