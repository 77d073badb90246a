"""A repeated pull (`repeat`, docs/PROTOCOL.md) of services.reader.pull.BatchStoreReader answers
exactly what a client gets by pulling again at each next_begin_offset with single pulls of
core.read.store_reader.StoreReader, within `max_msgs` in all and the MAX_REPEAT_BYTES cap, whether the
pulls go one by one or several at once on the fast path, with views or copies, with or
without a tag filter."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from core.log.consume_queue import BLANK_SIZE
from services.reader import pull as read_pull
from tests.unit.test_reader_pull_fast import S, answer, build


@pytest.fixture(params=["tuples", "arrays"])
def planner(request, monkeypatch):
    """Every test runs with each way of planning the fast path's runs."""
    monkeypatch.setattr(read_pull, "ARRAYS_MIN_ENTRIES", 1 << 30 if request.param == "tuples" else 0)
    return request.param


def by_single_pulls(theirs, queue_id, offset, max_msgs, tag_filter, repeat):
    """The reference: single pulls, one after the other, as `_repeat` describes them."""
    first = theirs.get_message("g", "T", queue_id, offset, max_msgs, tag_filter)
    if first.status is not S.FOUND:
        return answer(first)
    _, nxt, lo, hi, records = answer(first)
    total = len(records)
    for _ in range(repeat - 1):
        if total >= max_msgs or sum(map(len, records)) >= read_pull.MAX_REPEAT_BYTES or nxt >= hi:
            break
        more = theirs.get_message("g", "T", queue_id, nxt, max_msgs - total, tag_filter)
        if more.status is not S.FOUND:
            break
        _, nxt, lo, hi, got = answer(more)
        records += got
        total += len(got)
    return S.FOUND, nxt, lo, hi, records


@pytest.mark.parametrize("overrides,cap", [
    ({}, None),
    ({"max_transfer_count_on_message_in_memory": 5, "max_transfer_bytes_on_message_in_memory": 700}, None),
    ({"max_transfer_count_on_message_in_memory": 4}, 1500),
    ({"access_message_in_memory_max_ratio": 0, "max_transfer_count_on_message_in_disk": 3}, None),
])
def test_repeated_pulls_answer_as_single_pulls_in_a_row(tmp_path, monkeypatch, planner, overrides, cap):
    if cap is not None:
        monkeypatch.setattr(read_pull, "MAX_REPEAT_BYTES", cap)
    ours, _, theirs, _ = build(tmp_path, **overrides)
    several = 0
    for queue_id in (0, 1, 2):
        cq = ours.cq_store.find("T", queue_id)
        lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        for offset in range(0, hi + 2, 5):
            for max_msgs, repeat in ((1, 5), (7, 2), (32, 3), (100, 40), (1024, 1024)):
                want = by_single_pulls(theirs, queue_id, offset, max_msgs, None, repeat)
                got = ours.pull(cq, offset, max_msgs, None, views=queue_id == 1, repeat=repeat)
                assert answer(got) == want, (queue_id, offset, max_msgs, repeat)
                assert got.message_count == len(want[4])
                found = ours._plain_pull(cq, offset, max_msgs, lo, hi, False, repeat) if offset < hi else None
                several += bool(found and found[1] > 1)
    if overrides.get("access_message_in_memory_max_ratio") == 0:
        assert several == 0                              # on disk: never the fast path
    else:
        assert several > 50                              # several pulls at once, commonly


def test_repeated_pulls_with_a_tag_filter(tmp_path, planner):
    ours, _, theirs, _ = build(tmp_path, max_transfer_count_on_message_in_memory=6)
    cq = ours.cq_store.find("T", 0)
    for offset in range(0, cq.get_max_offset_in_queue() + 1, 5):
        for tag_filter in ("A", "B || A", "Z"):
            want = by_single_pulls(theirs, 0, offset, 200, tag_filter, 8)
            assert answer(ours.pull(cq, offset, 200, tag_filter, repeat=8)) == want, (offset, tag_filter)


def test_the_byte_cap_stops_a_repeated_pull(tmp_path, monkeypatch, planner):
    monkeypatch.setattr(read_pull, "MAX_REPEAT_BYTES", 1)
    ours, _, _, _ = build(tmp_path, max_transfer_count_on_message_in_memory=4)
    cq = ours.cq_store.find("T", 0)
    lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
    assert ours.pull(cq, 0, 1024, repeat=50).message_count == 4     # one pull, then the cap
    monkeypatch.setattr(read_pull, "MAX_REPEAT_BYTES", 1 << 30)
    batch, pulls = ours._plain_pull(cq, 0, 1024, lo, hi, False, 50)
    assert batch.message_count == 4 * pulls and pulls > 1


DEFECTS = ("blank", "zero", "unreadable", "gone", "segment end", "byte limit")


@st.composite
def entries(draw):
    """Consume-queue entries, runs of back to back records with gaps, and the planner's other
    inputs; in half the cases with one thing that makes the fast path decline."""
    defect = draw(st.sampled_from((None,) * len(DEFECTS) + DEFECTS))
    seg = 4096 if defect == "segment end" else 1 << 20
    phys = start = draw(st.integers(0, 3 * seg))
    out = []
    for _ in range(draw(st.integers(1, 300))):
        out.append((phys, draw(st.integers(91, 400)), 0))
        phys += out[-1][1] + (draw(st.integers(1, 500)) if draw(st.integers(0, 20)) == 0 else 0)
    if defect in ("blank", "zero"):
        at = draw(st.integers(0, len(out) - 1))
        out[at] = (out[at][0], BLANK_SIZE if defect == "blank" else 0, 0)
    raw = b"".join(struct.pack(">qiq", *e) for e in out)
    end = phys - draw(st.integers(1, 300)) if defect == "unreadable" else phys + draw(st.integers(0, 10))
    low = start + 1 if defect == "gone" else draw(st.integers(0, start))
    limit = 2000 if defect == "byte limit" else 1 << 20
    return raw, len(out), draw(st.integers(1, 40)), draw(st.integers(0, 3000)), end, low, seg, limit


@settings(max_examples=150, deadline=None)
@given(entries(), st.sampled_from([300, 5000, 1 << 30]))
def test_both_planners_plan_the_same(args, cap):
    read_pull.MAX_REPEAT_BYTES, saved = cap, read_pull.MAX_REPEAT_BYTES
    try:
        assert read_pull._plan_arrays(*args) == read_pull._plan_tuples(*args)
    finally:
        read_pull.MAX_REPEAT_BYTES = saved
