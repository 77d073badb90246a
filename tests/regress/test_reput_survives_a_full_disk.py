"""Regression: on a full disk the reput process crashed (an uncaught ENOSPC from creating a
consume-queue or index file), was restarted, crashed again at the same record, and after five
deaths in a minute was left in BACKOFF: once space came back, puts were accepted again but
nothing was dispatched any more, so consumers never saw another message until the whole store
was restarted. DESIGN.md section 4: a full disk shows as a status and a flag, never as a crash;
the store resumes when space returns. Now the reput logs the error, waits where it is and tries
again (dispatch is idempotent), and goes on when files can be created again.

The full disk is injected in the real reput process by tests/chaos/faults (sitecustomize):
creating a consume-queue or index file fails with ENOSPC while a trigger file exists.
"""
import os

from tests.chaos.test_kill_services import pulled_bodies
from tests.integration.harness import wait_for
from tests.integration.supervised import supervised_stores  # noqa: F401 (the `store` fixture)

FAULTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "chaos", "faults")


def test_reput_waits_out_a_full_disk_and_goes_on(store, tmp_path):
    full = tmp_path / "disk-full"
    s = store(env={"PYTHONPATH": FAULTS_DIR, "NO_SPACE_SERVICE": "reput",
                   "NO_SPACE_WHILE": str(full)}).start()
    sent = {}
    for i in range(10):
        r = s.put("Full", b"before-%d" % i, queue_id=0)
        sent[(r["queue_id"], r["queue_offset"])] = b"before-%d" % i
    assert wait_for(lambda: s.status()["lags"]["dispatch"] == 0, 10)
    reput = s.service("reput")

    full.touch()
    for i in range(120):                  # a consume-queue file holds 50 entries, the index 512
        r = s.put("Full", b"during-%d" % i, queue_id=0)
        assert r["status"] == "PUT_OK", r     # the CommitLog has its segments: puts go on
        sent[(r["queue_id"], r["queue_offset"])] = b"during-%d" % i
    assert wait_for(lambda: os.path.exists(str(full) + ".fired"), 10), "the fault never fired"
    assert s.status()["lags"]["dispatch"] > 0

    full.unlink()                         # space is back
    assert wait_for(lambda: s.status()["lags"]["dispatch"] == 0, 20)
    after = s.service("reput")
    assert (after["state"], after["pid"], after["restarts"]) == ("RUNNING", reput["pid"], 0), after
    found = pulled_bodies(s, "Full", queues=1)
    assert {k: found.get(k) for k in sent} == sent
    assert s.stop() == 0
    assert not os.path.exists(s.path("abort"))
