"""Regression: recovery kept a record whose tail was torn off.

The body CRC covers only the body, so a power cut that zeroed the end of the last record
(its properties, or its topic when it has no properties) left a record that passed every
check: after restart it was served with its KEYS/TAGS/UNIQ_KEY gone or its topic changed.
A torn write leaves zeros; RocketMQ's own records never end their properties with a NUL
(5.2+ always ends them with the 0x02 separator) and topics never contain one, so the
recovery check now treats either as the end of the log, and a NUL in a topic is refused at
put time.
"""
import os

import pytest

from core.record.codec import RecordCheck, check_record, encode_message, prepare_record
from core.record.message import Message
from core.status import GetMessageStatus, PutMessageStatus


def test_check_record_refuses_a_zeroed_properties_tail():
    rec = bytearray(encode_message(Message("T", b"body", keys="k1", tags="tag")))
    rec[-5:] = bytes(5)
    assert check_record(rec, 0, len(rec), True)[0] is RecordCheck.CORRUPT


def test_check_record_refuses_a_zeroed_topic_tail():
    rec = bytearray(encode_message(Message("Topic", b"body")))   # no properties
    rec[-4:-2] = bytes(2)                                         # last topic bytes
    assert check_record(rec, 0, len(rec), True)[0] is RecordCheck.CORRUPT


def test_nul_in_a_topic_is_refused_at_put():
    assert prepare_record(Message("a\x00b", b"x"), 100) is PutMessageStatus.MESSAGE_ILLEGAL


@pytest.mark.parametrize("abnormal", [False, True])
def test_restart_after_a_torn_last_record(tiny_config, open_store, abnormal):
    cfg = tiny_config()
    st = open_store(cfg)
    results = [st.put_message(Message("T", b"body-%d" % i, keys="key-%d" % i)) for i in range(5)]
    st.shutdown()
    last = results[-1].append_result
    path = os.path.join(cfg.commitlog_dir, "0" * 20)
    with open(path, "r+b") as f:
        f.seek(last.next_offset - 6)
        f.write(bytes(6))                                         # the tail of KEYS is lost
    if abnormal:
        open(cfg.abort_path, "w").close()
    st = open_store(cfg)
    assert st.get_max_phy_offset() == last.wrote_offset
    assert st.get_max_offset_in_queue("T", 0) == 4
    assert st.get_message("g", "T", 0, 4, 1).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
