"""`mqstore consume` as a shell user runs it against a real supervised store: output closed
early by the reader (`| head`) commits nothing the command could not write."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from ipc import Admin, Producer
from tests.integration.supervised import REPO, SupervisedStore

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("cli-consume")).start()
    yield s
    s.ensure_stopped()


def committed(address: str, group: str, topic: str) -> dict:
    with Admin(address) as admin:
        return {q["queue_id"]: q["consumer_offset"] for q in admin.consumer_lag(group, topic)["queues"]}


def test_output_closed_by_head_commits_only_what_was_written(store):
    with Producer(store.address) as p:          # 400 KiB a queue: far more than a pipe holds
        for q in range(4):
            for i in range(0, 400, 10):
                assert p.send_batch("Piped", [b"%04d" % j + b"x" * 1020 for j in range(i, i + 10)],
                                    queue_id=q).ok
    cli = f"{sys.executable} -m supervisor.cli consume --topic Piped --group heads --address {store.address}"
    run = subprocess.run(f"{cli} | head -3", shell=True, cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert len(run.stdout.splitlines()) == 3
    offsets = committed(store.address, "heads", "Piped")
    assert sum(max(o, 0) for o in offsets.values()) <= 3, offsets   # not the batch lost in the pipe
    assert "0 messages" in run.stderr or "3 messages" in run.stderr      # the count it committed


@pytest.mark.slow
def test_follow_through_store_follows_a_store_restarted_on_new_ports(tmp_path):
    s = SupervisedStore(tmp_path, "moved").start()
    try:
        with Producer(s.address) as p:
            assert p.send("Moved", b"one", queue_id=0).ok
        follow = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "consume", "--topic", "Moved",
                                   "--group", "g", "--follow", "--timeout", "1", "--store", s.root],
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert follow.stdout.readline().endswith("\tone\n")
            old = s.address
            assert s.stop() == 0
            s.start()                                         # --port 0: new ports
            assert s.address != old
            with Producer(s.address) as p:
                assert p.send("Moved", b"two", queue_id=0).ok
            assert follow.stdout.readline().endswith("\ttwo\n")
        finally:
            follow.send_signal(signal.SIGTERM)
            out, err = follow.communicate(timeout=30)
        assert follow.returncode == 0, err
    finally:
        s.ensure_stopped()


def test_each_message_is_one_line_with_its_control_characters_escaped(store):
    with Producer(store.address) as p:
        assert p.send("Ctl", b"a\tb\x1b[31m\nc\\d\xff", tags="T\x07", queue_id=0).ok
    cli = [sys.executable, "-m", "supervisor.cli", "consume", "--topic", "Ctl", "--group", "g",
           "--queues", "0", "--address", store.address]
    run = subprocess.run(cli, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.stdout == "0:0\tT\\x07\t-\ta\\tb\\x1b[31m\\nc\\\\d\\xff\n", run.stdout
