"""Regression: `decode_message` accepted a record cut short inside its properties.

It checked that the length fields add up to TOTALSIZE but not that the buffer holds that
many bytes, so a record missing its last bytes (a lookup by offset with too small a size)
decoded with truncated properties (KEYS "k1 k2" came back as "k"), instead of raising.
"""
import pytest

from core.record.codec import encode_message
from core.record.decode import decode_message
from core.record.message import Message


def test_a_record_cut_inside_its_properties_is_refused():
    rec = encode_message(Message("T", b"body", tags="A", keys="k1 k2"))
    assert decode_message(rec).keys == "k1 k2"
    for cut in range(1, 8):
        with pytest.raises(ValueError):
            decode_message(rec[:-cut])


def test_a_lookup_with_too_small_a_size_finds_nothing(store):
    r = store.put_message(Message("T", b"body", tags="A", keys="k1 k2")).append_result
    assert store.look_message_by_offset(r.wrote_offset, r.wrote_bytes).keys == "k1 k2"
    assert store.look_message_by_offset(r.wrote_offset, r.wrote_bytes - 3) is None
