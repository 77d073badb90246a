"""A KEYS string is stored as the producer gave it, as RocketMQ's Message.setKeys(String) puts
the property: extra, leading or trailing spaces were collapsed into single separators, so a
consumer got back other KEYS than it sent. The index still takes every non-empty token."""
from __future__ import annotations

import pytest

from core.record.codec import encode_message
from core.record.decode import decode_message
from core.record.message import Message


@pytest.mark.parametrize("keys", [" a  b ", "a  b", " lead", "trail ", "single"])
@pytest.mark.parametrize("props", [{}, {"p": "v"}])
def test_keys_string_round_trips_verbatim(keys, props):
    msg = Message("T", b"body", keys=keys, properties=dict(props))
    assert decode_message(encode_message(msg)).keys == keys
    assert msg.all_properties()["KEYS"] == keys


def test_the_index_takes_each_token_of_spaced_keys(store):
    assert store.put_message(Message("T", b"x", keys=" a  b ")).ok
    assert store.wait_for_dispatch()
    for key in ("a", "b"):
        found = store.query_message("T", key, 10, 0, 1 << 62).messages
        assert [m.keys for m in found] == [" a  b "]
