"""Regression: the appender saved `config/topics.json` (the whole table, with an fsync) once
per new topic. Thousands of topics created at once (a store with tens of thousands of
queues, issue 27) made each save longer than the last; the appender stayed busy past its
10 s heartbeat, was killed by the supervisor, restarted, and killed again. Now the puts to new
topics taken in one round create them with one save."""
import json

from ipc import Producer
from tests.integration.supervised import supervised_stores  # noqa: F401 (the `store` fixture)

TOPICS = 400


def test_a_burst_of_new_topics_is_saved_in_few_writes(store):
    s = store().start()
    with Producer(s.address, timeout=60.0, window=1024) as p:
        futures = [p.send_async(f"Burst{t}", b"x", queue_id=t % 4) for t in range(TOPICS)]
        assert all(f.result(60).status == "PUT_OK" for f in futures)
    with open(s.path("config", "topics.json")) as f:
        doc = json.load(f)
    assert {f"Burst{t}" for t in range(TOPICS)} <= set(doc["topicConfigTable"])
    assert all(doc["topicConfigTable"][f"Burst{t}"]["writeQueueNums"] == 4 for t in range(TOPICS))
    assert doc["dataVersion"]["counter"] < TOPICS // 4, doc["dataVersion"]
    assert s.stop() == 0
