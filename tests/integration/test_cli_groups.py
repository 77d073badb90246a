"""The CLI with the new clients against a real store: `mqstore produce --count` through
auto-batching (one result line per message), two `mqstore consume --group G --follow` that
split the queues between them, and `mqstore status` naming the members with their queues."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from ipc import Admin, Producer
from tests.integration.harness import wait_for
from tests.integration.supervised import REPO, SupervisedStore, cli


@pytest.mark.slow
def test_produce_count_auto_batches_and_two_followers_split_the_queues(tmp_path):
    s = SupervisedStore(tmp_path, mapped_file_size_commitlog=4 * 1024 * 1024).start()
    followers = []
    try:
        with Admin(s.address) as admin:
            admin.create_topic("Split", 4)
        done = cli("produce", "--topic", "Split", "--body", "hello", "--count", "2000",
                   "--address", s.address)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == 2000 and all(line.startswith("PUT_OK ") for line in lines)
        with Producer(s.address) as p:             # auto-batches go to one queue each: fill all 4
            futs = [p.send_async("Split", b"q%d" % i, queue_id=i % 4) for i in range(400)]
            assert p.flush(30) and all(f.result(0).ok for f in futs)
        for _ in range(2):
            followers.append(subprocess.Popen(
                [sys.executable, "-m", "supervisor.cli", "consume", "--topic", "Split", "--group", "gs",
                 "--follow", "--address", s.address], cwd=REPO, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True))

        def split() -> list:
            with Admin(s.address) as admin:
                return [m["queues"] for m in admin.consumer_lag("gs", "Split").get("members", ())]
        assert wait_for(lambda: sorted(map(len, split())) == [2, 2], 20, 0.1)
        status = cli("status", "--address", s.address, "--json")
        groups = json.loads(status.stdout)["groups"]
        assert [(g["group"], g["topic"], len(g["members"])) for g in groups] == [("gs", "Split", 2)]
        table = cli("status", "--address", s.address).stdout
        assert "GROUP" in table and "gs" in table
        outs = []
        for f in followers:
            f.send_signal(signal.SIGTERM)
            out, _ = f.communicate(30)
            assert f.returncode == 0
            outs.append(out.splitlines())
        assert sum(len(o) for o in outs) >= 2400
        queues = [{line.split(":")[0] for line in o} for o in outs]
        assert queues[0] | queues[1] == {"0", "1", "2", "3"}
    finally:
        for f in followers:
            if f.poll() is None:
                f.kill()
        s.ensure_stopped()
