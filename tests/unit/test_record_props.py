"""core/record/props.py: the property string's builder, its C join held to the general reference
(the differential test that came from test_codec_roundtrip.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.record.message import Message
from core.record.props import properties_string, properties_string_general
from tests.unit.test_codec_roundtrip import key_tokens, plain_text

loose_values = st.one_of(plain_text, st.none(), st.integers(-5, 5), st.just(""))


PROPERTY_CASES = (
    st.dictionaries(st.one_of(plain_text, st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY"])), loose_values, max_size=5),
    st.one_of(st.none(), st.just(""), plain_text, st.integers(1, 9)),
    st.one_of(st.none(), st.just(""), st.just(" a  b "), st.lists(key_tokens, max_size=3), key_tokens),
)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.one_of(plain_text, st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY"])),
                       loose_values, max_size=5),
       st.one_of(st.none(), st.just(""), plain_text, st.integers(1, 9)),
       st.one_of(st.none(), st.just(""), st.just(" a  b "), st.lists(key_tokens, max_size=3),
                 key_tokens))
def test_fast_property_string_equals_the_general_one(props, tags, keys):
    """`properties_string` joins the common message in C; for any message it must give what
    `properties_string_general` gives (TAGS/KEYS over properties, None values, non-str
    values and tags, KEYS to normalize)."""
    def outcome(f):
        try:
            return f(msg)
        except TypeError:                  # refused (prepare_record: MESSAGE_ILLEGAL)
            return TypeError
    msg = Message("T", b"", tags=tags, keys=keys, properties=props)
    assert outcome(properties_string) == outcome(properties_string_general)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(*PROPERTY_CASES)
def test_fast_property_string_equals_the_general_one_many(props, tags, keys):
    test_fast_property_string_equals_the_general_one.hypothesis.inner_test(props, tags, keys)
