"""Regression: a message whose flag, sys flag, reconsume times, born timestamp or prepared
transaction offset did not fit its Java field made `put_message` raise struct.error from
inside the append lock, instead of answering MESSAGE_ILLEGAL; and the single-put fast path
then left its lock timestamp set, so every later put answered OS_PAGECACHE_BUSY."""
import pytest

from core.record.codec import prepare_record
from core.record.message import Message
from core.status import PutMessageStatus

BAD = [
    dict(flag=1 << 31), dict(flag=-(1 << 31) - 1), dict(sys_flag=1 << 31),
    dict(reconsume_times=1 << 40), dict(born_timestamp=1 << 63),
    dict(prepared_transaction_offset=-(1 << 63) - 1), dict(flag=1.5), dict(born_timestamp="x"),
]


@pytest.mark.parametrize("fields", BAD)
def test_prepare_refuses(fields):
    assert prepare_record(Message("T", b"x", **fields), 1024) is PutMessageStatus.MESSAGE_ILLEGAL


@pytest.mark.parametrize("fields", BAD)
def test_store_answers_illegal_and_keeps_working(store, fields):
    assert store.put_message(Message("T", b"x", **fields)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_messages([Message("T", b"x", **fields)]).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.commitlog.begin_time_in_lock == 0
    r = store.put_message(Message("T", b"fine"))
    assert r.ok and r.append_result.logics_offset == 0


def test_extreme_values_that_fit_are_accepted():
    msg = Message("T", b"x", flag=-(1 << 31), sys_flag=0, reconsume_times=(1 << 31) - 1,
                  born_timestamp=(1 << 63) - 1, prepared_transaction_offset=-(1 << 63))
    assert not isinstance(prepare_record(msg, 1024), PutMessageStatus)
