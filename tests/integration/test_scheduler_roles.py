"""The scheduler process and the SLAVE word: while the store is a slave it delivers nothing
and keeps no offsets of its own; when the word goes back to 0 (a promotion) it resumes from
config/delayOffset.json as it is then (as replication left it)."""
from __future__ import annotations

import json
import os
import time

import pytest

from core.record.decode import decode_message
from ipc.control_block import Word
from tests.integration.harness import RawClient, ServiceHarness, wait_for
from tests.integration.test_read_services import make_config

SERVICES = ["allocator", "flusher", "reput", "appender", "reader", "scheduler"]


def _delivered(reader: RawClient) -> list:
    reply, frames = reader.call("pull", group="g", topic="t", queue_id=0, offset=0, max_msgs=64,
                                format="raw")
    if reply["status"] != "FOUND":
        return []
    data, pos, out = frames[0], 0, []
    while pos < len(data):
        m = decode_message(data, pos)
        out.append(m.body)
        pos += m.store_size
    return out


@pytest.mark.slow
def test_slave_delivers_nothing_and_a_promotion_resumes_from_the_file(tmp_path):
    cfg = make_config(tmp_path, message_delay_level="1s 2s")
    with ServiceHarness(cfg, SERVICES) as h:
        appender, reader = RawClient(h.endpoint("appender")), RawClient(h.endpoint("reader"))
        try:
            for i in range(5):
                reply, _ = appender.call("put", [b"m%d" % i], topic="t", queue_id=0,
                                         properties={"DELAY": "1"})
                assert reply["status"] == "PUT_OK", reply
            h.cb.set(Word.SLAVE, 1)                    # the supervisor's word: a slave now
            path = os.path.join(cfg.config_dir, "delayOffset.json")
            # replication brings the master's offsets: the first two were delivered there
            with open(path + ".new", "w") as f:
                json.dump({"offsetTable": {"1": 2}}, f)
            os.replace(path + ".new", path)
            due = time.time() + 1.0
            assert wait_for(lambda: time.time() > due + 0.5, timeout=5)
            assert _delivered(reader) == []
            h.cb.set(Word.SLAVE, 0)                    # promoted
            assert wait_for(lambda: _delivered(reader) == [b"m2", b"m3", b"m4"], timeout=15), \
                _delivered(reader)
            assert json.load(open(path)) == {"offsetTable": {"1": 5}}
        finally:
            appender.close()
            reader.close()
