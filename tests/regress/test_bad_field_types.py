"""Regression: messages with fields of the wrong type made the put path raise instead of
answering MESSAGE_ILLEGAL: a queue id that is not an int (None, "1", 1.0) in both puts;
properties of None in a batch (and in a SYNC_FLUSH single put, after the record had been
appended); a sys flag of None in a batch."""
import pytest

from core.record.message import Message
from core.status import PutMessageStatus

S = PutMessageStatus


@pytest.mark.parametrize("fields", [dict(queue_id=None), dict(queue_id="1"), dict(queue_id=1.0),
                                    dict(sys_flag=None)])
def test_wrong_types_are_illegal(store, fields):
    assert store.put_message(Message("T", b"x", **fields)).status is S.MESSAGE_ILLEGAL
    assert store.put_messages([Message("T", b"x", **fields)]).status is S.MESSAGE_ILLEGAL
    assert store.put_message(Message("T", b"ok")).append_result.logics_offset == 0


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_properties_none_is_no_properties(tiny_config, open_store, flush):
    st = open_store(tiny_config(flush_disk_type=flush))
    assert st.put_message(Message("T", b"x", properties=None)).ok
    assert st.put_messages([Message("T", b"y", properties=None)]).ok
    assert st.commitlog.topic_queue_table[("T", 0)] == 2
