"""Regression: `mqstore stop` (and `status`) while a store recovers after a crash talked to
the front door of the supervisor that had died. A killed supervisor leaves run/address; the
next one rewrote run/supervisor.pid as soon as it held the lock but removed the old address
only after its recovery, so `stop` found that address with a live pid, sent `stop` to a front
door nobody answers, failed after 5 s with "no answer from tcp://..." (exit 1) and the store
went on to start. The recovery after a crash (the abnormal one, the long one) is when an
operator most needs to stop a store (cmd_stop: "a supervisor with a live pid file but no
run/address is still recovering: SIGTERM ends its recovery").

The recovery is held by tests/chaos/faults (sitecustomize) while a trigger
file exists, so that `stop` lands in it for certain.
"""
import os
import signal

from tests.integration.harness import wait_for
from tests.integration.supervised import cli, pid_gone
from tests.integration.supervised import supervised_stores  # noqa: F401 (the `store` fixture)

HOLD_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "chaos", "faults")


def _pid_file(s) -> str | None:
    """run/supervisor.pid, or None while it is being replaced."""
    try:
        with open(s.path("run", "supervisor.pid")) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def test_stop_during_the_recovery_after_a_killed_supervisor(store, tmp_path):
    hold = tmp_path / "hold-recovery"
    s = store(env={"PYTHONPATH": HOLD_DIR, "HOLD_RECOVERY_WHILE": str(hold)}).start()
    assert s.put("Crash", b"acknowledged")["status"] == "PUT_OK"
    pids = [x["pid"] for x in s.status()["services"]]
    old_address = s.address
    s.kill()                                               # SIGKILL: run/address stays
    assert wait_for(lambda: all(pid_gone(p) for p in pids), 10)
    assert os.path.exists(s.path("abort"))

    hold.touch()
    s.start(wait_ready=False)
    try:
        assert wait_for(lambda: _pid_file(s) == str(s.proc.pid), 30), \
            "the new supervisor never took the lock"
        status = cli("status", "--store", s.root, timeout=30)
        assert status.returncode == 1
        assert old_address not in status.stderr, status.stderr
        out = cli("stop", "--store", s.root, "--timeout", "30", timeout=60)
        assert out.returncode == 0, out.stderr
        assert "interrupted before it was ready" in out.stdout
        assert s.wait_exit(30) == 130
        printed = []
        while (line := s.lines.get(timeout=10)) is not None:
            printed.append(line)
        assert not any(line.startswith("mqstore ready") for line in printed), printed
        assert os.path.exists(s.path("abort")), "the next start must still recover abnormally"
        assert not os.path.exists(s.path("run", "address"))
    finally:
        if hold.exists():
            hold.unlink()
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGTERM)
            s.wait_exit(60)

    s.start()                                             # no hold now: recovery runs through
    assert s.status()["supervisor"]["recovery"] == "abnormal"
    assert s.stop() == 0
