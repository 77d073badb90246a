"""core/record/split.py, as ipc.received.split_records uses it: the lean loop for v1 records with IPv4 hosts and the careful
record-by-record loop it hands over to must together split any frame of records exactly (v1,
v2, IPv6 hosts, in any mix, and runs of records of one size, which are split with numpy), and
refuse any frame that is not whole records wherever the bad bytes are."""
from __future__ import annotations

import struct

from hypothesis import given, settings, strategies as st

from core.record.codec import MAGIC_BLANK, MAGIC_V2
from core.record.decode import decode_message
from ipc.received import RUN_MIN, RecordSpans, _split_carefully, _take_run, find_records, split_records
from tests.unit.test_received import record, same

KINDS = ("v4", "v6-born", "v6-store", "v2")


def make(kind: str, i: int, body: bytes) -> bytes:
    if kind == "v6-born":
        return record(i, body=body, born_host=("fe80::1", 7))
    if kind == "v6-store":
        return record(i, body=body, store_host=("::1", 10911))
    rec = record(i, body=body)
    if kind == "v4":
        return rec
    topic_at = 84 + 4 + len(body)                       # v2: a two-byte topic length
    v2 = bytearray(rec[:topic_at]) + struct.pack(">h", rec[topic_at]) + rec[topic_at + 1:]
    struct.pack_into(">ii", v2, 0, len(rec) + 1, MAGIC_V2)
    return bytes(v2)


def careful(buf: bytes) -> list:
    out = RecordSpans(buf)
    _split_carefully(buf, 0, out)
    return out.views()


def both_split_alike(frame: bytes):
    """The fast split and the careful loop agree on `frame`: both refuse it, or both find the
    same records (bodies and headers); the fast split's views, or None."""
    try:
        fast = split_records(frame)
    except ValueError:
        fast = None
    try:
        slow = careful(frame)
    except ValueError:
        slow = None
    assert (fast is None) == (slow is None)
    if slow is not None:
        assert [(v._p, v._n) for v in fast] == [(v._p, v._n) for v in slow]
        assert [v._h or v._header() for v in fast] == [v._h for v in slow]
    return fast


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.binary(max_size=64)), max_size=12))
def test_any_mix_of_records_splits_exactly(specs):
    recs = [make(kind, i, body) for i, (kind, body) in enumerate(specs)]
    frame = b"".join(recs)
    views = split_records(frame)
    assert len(views) == len(recs) == len(careful(frame))
    for view, rec in zip(views, recs):
        same(view, rec)
        assert view.store_size == len(rec)
    assert [v.queue_offset for v in split_records(memoryview(frame))] == [100 + i for i in range(len(recs))]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(KINDS), min_size=1, max_size=6), st.data())
def test_a_bad_byte_anywhere_is_refused_or_still_whole_records(kinds, data):
    recs = [make(kind, i, b"body-%d" % i) for i, kind in enumerate(kinds)]
    frame = bytearray(b"".join(recs))
    pos = data.draw(st.integers(0, len(frame) - 1))
    frame[pos] ^= data.draw(st.integers(1, 255))
    both_split_alike(bytes(frame))                       # e.g. a flipped body byte: still records


def test_truncated_and_overlong_frames():
    recs = [record(i) for i in range(3)]
    frame = b"".join(recs)
    for cut in (1, 50, len(recs[-1]) - 1):
        try:
            split_records(frame[:-cut])
        except ValueError as e:
            assert "record at" in str(e)
        else:
            raise AssertionError(f"a frame cut by {cut} bytes was accepted")
    longer = bytearray(frame)
    struct.pack_into(">i", longer, len(recs[0]) + len(recs[1]), len(recs[2]) + 1)
    try:
        split_records(bytes(longer))
    except ValueError:
        pass
    else:
        raise AssertionError("a record running past the end was accepted")
    blank = struct.pack(">ii", 16, MAGIC_BLANK) + b"\x00" * 8
    for bad in (blank + recs[0], recs[0] + blank):
        try:
            split_records(bad)
        except ValueError:
            pass
        else:
            raise AssertionError("a blank was accepted")
    assert decode_message(recs[1]).queue_offset == split_records(frame[len(recs[0]):])[0].queue_offset


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.binary(max_size=64)), min_size=1, max_size=8),
       st.sampled_from(["body", "queue_offset", "topic", "msg_id", "store_host"]))
def test_the_lean_loop_defers_the_header_and_decodes_the_same_whatever_is_read_first(specs, first):
    recs = [make(kind, i, body) for i, (kind, body) in enumerate(specs)]
    views = split_records(b"".join(recs))
    lean = next((i for i, (kind, _) in enumerate(specs) if kind != "v4"), len(specs))
    for i, (view, rec, (kind, body)) in enumerate(zip(views, recs, specs)):
        assert (view._h is None) == (i < lean)          # the lean loop, up to the first other kind
        getattr(view, first)                            # any first access, then everything agrees
        same(view, rec)
        assert view.body == body and view._h is not None


def like(i: int, kind: str = "v4", body_len: int = 8) -> bytes:
    """A record of one size whatever `i` is (below 10^5), as a producer's batch of like messages."""
    if kind != "v4":
        return make(kind, i, b"%05d" % i + b"x" * (body_len - 5))
    return record(i, body=b"%05d" % i + b"x" * (body_len - 5), keys=f"k{i:05d}")


def test_a_run_of_like_records_is_split_in_one_numpy_step():
    recs = [like(i) for i in range(3 * RUN_MIN)]
    frame = b"".join(recs)
    out = RecordSpans(frame)
    assert _take_run(frame, 0, len(recs[0]), 8, len(frame), out) == len(recs)
    assert [v.body for v in out.views()] == [b"%05dxxx" % i for i in range(len(recs))]
    views = split_records(frame)
    assert len(views) == len(recs) and all(v._h is None for v in views)
    for view, rec in zip(views, recs):
        same(view, rec)
    out = RecordSpans(frame)
    assert _take_run(frame[:len(recs[0]) * (RUN_MIN - 1)], 0, len(recs[0]), 8, len(recs[0]) * (RUN_MIN - 1),
                     out) == 0 and len(out) == 0              # too short to be worth a numpy step
    spans = find_records(frame)                              # checked, no message made yet
    assert len(spans) == len(recs) and [v.body for v in spans.views()] == [v.body for v in views]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3 * RUN_MIN), st.sampled_from(KINDS), st.integers(5, 9)),
                min_size=1, max_size=5), st.data())
def test_runs_of_like_records_split_as_the_careful_loop_does_even_with_a_bad_byte(runs, data):
    recs = [like(i, kind, body_len) for count, kind, body_len in runs for i in range(count)]
    frame = bytearray(b"".join(recs))
    if data.draw(st.booleans()):
        pos = data.draw(st.integers(0, len(frame) - 1))
        frame[pos] ^= data.draw(st.integers(1, 255))
    fast = both_split_alike(bytes(frame))
    if bytes(frame) == b"".join(recs):
        assert [view.body for view in fast] == [decode_message(rec).body for rec in recs]
