"""Regression: the dispatcher gave a delay record's consume-queue entry the delivery time of
RocketMQ's default levels ("1s 5s 10s ...") as tag code, whatever the store's own
`message_delay_level`: with "1s 2s 3s" a level-3 message's entry said store time + 10 s, not
+ 3 s, and `check` took the right tag code for a wrong one. Dispatch (the embedded reput, a
recovery's rebuild, the reput process alike: one Dispatcher), and `check` now use the store's
levels."""
import shutil
import struct

import pytest

from core import Message, MessageStore, fsck
from core.record.codec import SCHEDULE_TOPIC

LEVELS = {1: 1000, 2: 2000, 3: 3000, 7: 3000}        # "1s 2s 3s", a level above 3 taken as 3


def _tag_codes(store, queue_id):
    cq = store.cq_store.find(SCHEDULE_TOPIC, queue_id)
    codes: list = []
    while len(codes) < cq.get_max_offset_in_queue():       # a tiny queue file holds a few
        raw = cq.get_entries(len(codes), cq.get_max_offset_in_queue() - len(codes))
        codes += [t for _, _, t in struct.iter_unpack(">qiq", raw)]
    return codes


@pytest.mark.parametrize("count", [1, 40])         # one record, and a run the numpy path takes
def test_tag_code_is_the_delivery_time_of_the_configured_levels(tiny_config, count):
    cfg = tiny_config(message_delay_level="1s 2s 3s")
    store = MessageStore(cfg)
    store.load()
    store.start()
    store.schedule_service.stop()                   # nothing delivered: the entries stay
    want: dict = {}
    for level, delay in LEVELS.items():
        for i in range(count):
            r = store.put_message(Message("R", b"d%d" % i, tags="T", properties={"DELAY": str(level)}))
            assert r.ok
            want.setdefault(min(level, 3) - 1, []).append(r.append_result.store_timestamp + delay)
    assert store.wait_for_dispatch()
    for queue_id, codes in want.items():
        assert _tag_codes(store, queue_id) == codes
    store.shutdown()
    report = fsck.check(cfg.store_path_root_dir, config=cfg)
    assert "cq_tags" not in report.counts                # check reads them as right
    shutil.rmtree(cfg.consumequeue_dir)                 # rebuilt by recovery's dispatch
    store = MessageStore(cfg)
    store.load()
    try:
        for queue_id, codes in want.items():
            assert _tag_codes(store, queue_id) == codes
    finally:
        store.shutdown()
