"""services.reader.ops.parse_pull: the inline check of a common pull gives exactly the request
the field-by-field check gives, and anything unusual still gets the error reply that names the
field (a cached name never lets a bad value through)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ipc.protocol import ErrorCode, ProtocolError
from services.reader import ops as read_ops
from services.reader.ops import _parse_pull_fields, parse_pull

BASE = {"op": "pull", "rid": 1, "group": "g1", "topic": "orders", "queue_id": 3, "offset": 40,
        "max_msgs": 1024, "poll_ms": 2000, "format": "raw"}


def outcome(fn, env):
    try:
        return fn(env)
    except ProtocolError as e:
        return (e.code, e.reason)


def test_common_request_and_defaults():
    read_ops._valid_names.clear()
    first = parse_pull(dict(BASE))                       # names not seen yet: careful path
    again = parse_pull(dict(BASE))                       # now inline
    assert first == again == _parse_pull_fields(dict(BASE))
    assert again.raw and again.max_msgs == 1024 and again.key == ("orders", 3)
    minimal = {"op": "pull", "rid": 2, "group": "g1", "topic": "orders", "queue_id": 0, "offset": 0}
    req = parse_pull(minimal)
    assert (req.max_msgs, req.poll_ms, req.raw, req.tag_filter, req.repeat) == (32, 0, False, None, 1)
    assert parse_pull(dict(BASE, repeat=1024)) == _parse_pull_fields(dict(BASE, repeat=1024))
    assert parse_pull(dict(BASE, repeat=1024)).repeat == 1024
    nils = dict(minimal, max_msgs=None, poll_ms=None, format=None, tag_filter=None, repeat=None)
    assert parse_pull(nils) == req


@pytest.mark.parametrize("field,value,code", [
    ("group", "bad group!", ErrorCode.BAD_FIELD), ("topic", "bad topic!", ErrorCode.BAD_TOPIC),
    ("group", ["g1"], ErrorCode.BAD_FIELD), ("topic", {"x": 1}, ErrorCode.BAD_FIELD),
    ("queue_id", -1, ErrorCode.BAD_FIELD), ("queue_id", 1 << 31, ErrorCode.BAD_FIELD),
    ("queue_id", True, ErrorCode.BAD_FIELD), ("offset", "7", ErrorCode.BAD_FIELD),
    ("offset", -5, ErrorCode.BAD_FIELD), ("max_msgs", 0, ErrorCode.BAD_FIELD),
    ("max_msgs", 1025, ErrorCode.BAD_FIELD), ("max_msgs", 3.0, ErrorCode.BAD_FIELD),
    ("poll_ms", 600_001, ErrorCode.BAD_FIELD), ("format", "json", ErrorCode.BAD_FIELD),
    ("format", 1, ErrorCode.BAD_FIELD), ("tag_filter", 5, ErrorCode.BAD_FIELD),
    ("repeat", 0, ErrorCode.BAD_FIELD), ("repeat", 1025, ErrorCode.BAD_FIELD),
    ("repeat", True, ErrorCode.BAD_FIELD), ("repeat", "2", ErrorCode.BAD_FIELD),
])
def test_bad_fields_are_named_even_after_good_requests(field, value, code):
    parse_pull(dict(BASE))                               # the names are cached now
    with pytest.raises(ProtocolError) as e:
        parse_pull(dict(BASE, **{field: value}))
    assert e.value.code == code and field in e.value.reason
    if field in ("group", "topic") and isinstance(value, str):
        assert e.value.reason.startswith(f"{field} {value!r} has characters outside")


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "group": st.sampled_from(["g1", "", "x" * 128, "ok|%-_", 7, None]),
    "topic": st.sampled_from(["orders", "T", "no space", b"orders", None]),
    "queue_id": st.one_of(st.integers(-2, 2 ** 31 + 1), st.booleans(), st.none()),
    "offset": st.one_of(st.integers(-2, 2 ** 63 + 1), st.floats(allow_nan=False), st.none()),
    "max_msgs": st.one_of(st.integers(-1, 1026), st.none()),
    "poll_ms": st.one_of(st.integers(-1, 600_002), st.none()),
    "format": st.sampled_from(["raw", "fields", "RAW", None, 0]),
    "tag_filter": st.sampled_from(["*", "A || B", "", None, 1]),
    "repeat": st.one_of(st.integers(-1, 1026), st.booleans(), st.none()),
}))
def test_inline_check_agrees_with_the_careful_one(env):
    parse_pull(dict(BASE))                               # cache the common names
    assert outcome(parse_pull, dict(env)) == outcome(_parse_pull_fields, dict(env))
