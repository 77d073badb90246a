"""Regression: a put to a new topic when `config/topics.json` could not be written (a full
disk) answered an ERROR reply, "internal error: OSError: [Errno 28] No space left on device",
instead of a status (STYLE.md: statuses on the hot path; DESIGN.md section 5: a full disk
answers SERVICE_NOT_AVAILABLE), and left the topic in the appender's memory only: the put that
followed was stored under a topic that topics.json, and so the reader and consumers, did not
know. Now the put answers SERVICE_NOT_AVAILABLE, the topic is not kept, and a put once space
is back creates and saves it.

The full disk is injected in the real appender by tests/chaos/faults (sitecustomize).
"""
import json
import os

from tests.integration.harness import wait_for
from tests.integration.supervised import supervised_stores  # noqa: F401 (the `store` fixture)

FAULTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "chaos", "faults")


def test_a_new_topic_that_cannot_be_saved_is_refused_with_a_status(store, tmp_path):
    full = tmp_path / "disk-full"
    s = store(env={"PYTHONPATH": FAULTS_DIR, "NO_SPACE_SERVICE": "appender",
                   "NO_SPACE_WHILE": str(full)}).start()
    assert s.put("Old", b"x")["status"] == "PUT_OK"
    appender = s.service("appender")

    full.touch()
    assert s.put("Fresh", b"refused")["status"] == "SERVICE_NOT_AVAILABLE"
    assert s.put("Fresh", b"refused again")["status"] == "SERVICE_NOT_AVAILABLE"
    assert s.put("Old", b"y")["status"] == "PUT_OK"         # known topics go on
    full.unlink()

    r = s.put("Fresh", b"stored")
    assert r["status"] == "PUT_OK", r
    with open(s.path("config", "topics.json")) as f:
        assert "Fresh" in json.load(f)["topicConfigTable"]
    reader = s.call("hello")[0]["reader"]
    assert wait_for(lambda: s.call("topic_info", endpoint=reader, topic="Fresh")[0]["status"] == "OK", 10)
    assert wait_for(lambda: s.status()["lags"]["dispatch"] == 0, 10)
    reply, _ = s.call("queue_offsets", endpoint=reader, topic="Fresh")
    assert sum(q["max_offset"] for q in reply["queues"]) == 1       # only the stored put
    after = s.service("appender")
    assert (after["pid"], after["restarts"]) == (appender["pid"], 0)
    assert s.stop() == 0
