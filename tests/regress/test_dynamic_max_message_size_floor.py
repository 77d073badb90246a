"""Regression: changing `max_message_size` on an open store to a value below 10 took effect,
so every put of more than a few bytes became MESSAGE_ILLEGAL. RocketMQ's CommitLog re-reads
maxMessageSize on every put but ignores values below 10 (updateMaxMessageSize; reference
2.7): the previous limit stays in force, for single puts and batches alike."""
from core.record.message import Message
from core.status import PutMessageStatus as S


def test_limit_below_ten_is_ignored(tiny_config, open_store):
    st = open_store(tiny_config(max_message_size=1000))
    st.config = st.config.replace(max_message_size=5)
    assert st.put_message(Message("D", b"x" * 50)).ok
    assert st.put_messages([Message("D", b"x" * 50), Message("D", b"y" * 50)]).ok
    assert st.put_message(Message("D", b"x" * 1001)).status is S.MESSAGE_ILLEGAL
    assert st.put_messages([Message("D", b"x" * 600), Message("D", b"y" * 600)]).status \
        is S.MESSAGE_ILLEGAL


def test_limit_of_ten_applies(tiny_config, open_store):
    st = open_store(tiny_config(max_message_size=1000))
    st.config = st.config.replace(max_message_size=10)
    assert st.put_message(Message("D", b"x" * 11)).status is S.MESSAGE_ILLEGAL
    assert st.put_message(Message("D", b"x" * 10)).ok
    assert st.put_messages([Message("D", b"x" * 6), Message("D", b"y" * 6)]).status \
        is S.MESSAGE_ILLEGAL
