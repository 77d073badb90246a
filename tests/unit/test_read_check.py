"""core.read.check: a run's check (numpy for records of one size) finds the first damaged
record exactly as the record-by-record check does, for every single-bit flip; records that are
not the ones their entries name (offset, queue, topic) are refused with a reason."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.record.codec import encode_message
from core.record.message import Message
from core.read.check import check_run, record_problem
from core.record.crc_property import FORCED


def run(n: int, sealed: bool, same: bool, start: int = 4096, qoff: int = 7):
    recs, phys = [], start
    for i in range(n):
        body = b"b" * (40 if same else 40 + i % 3)
        recs.append(encode_message(Message("Topic", body, queue_id=2, tags="t", keys=f"k{i:03d}"),
                                   qoff + i, phys, 1_700_000_000_000 + i, prop_crc=sealed))
        phys += len(recs[-1])
    sizes = [len(r) for r in recs]
    starts = [start + sum(sizes[:i]) for i in range(n)]
    return bytearray(b"".join(recs)), sizes, starts, list(range(qoff, qoff + n))


def one_by_one(chunk, sizes, phys, topic, qid, offsets, check_crc):
    pos = 0
    for i, size in enumerate(sizes):
        why = record_problem(chunk, pos, size, phys[i], topic, qid, offsets[i], check_crc)
        if why is not None:
            return i
        pos += size
    return None


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 20), st.booleans(), st.booleans(), st.sampled_from([True, FORCED]), st.data())
def test_a_run_finds_the_first_flip_as_the_record_by_record_check(n, sealed, same, check_crc, data):
    chunk, sizes, phys, offsets = run(n, sealed, same)
    intact = check_run(bytes(chunk), sizes, phys, b"Topic", 2, offsets, check_crc)
    assert intact == (None if sealed or check_crc is True else (0, "CRC mismatch"))
    at = data.draw(st.integers(0, len(chunk) - 1))
    chunk[at] ^= 1 << data.draw(st.integers(0, 7))
    found = check_run(bytes(chunk), sizes, phys, b"Topic", 2, offsets, check_crc)
    want = one_by_one(bytes(chunk), sizes, phys, b"Topic", 2, offsets, check_crc)
    assert (found[0] if found else None) == want
    if sealed:                                      # the record CRC covers every byte
        owner = next(i for i in range(n) if at < sum(sizes[:i + 1]))
        assert want == owner


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.integers(1, 20), st.booleans(), st.booleans(), st.sampled_from([True, FORCED]), st.data())
def test_a_run_finds_the_first_flip_as_the_record_by_record_check_many(n, sealed, same, check_crc, data):
    test_a_run_finds_the_first_flip_as_the_record_by_record_check.hypothesis.inner_test(n, sealed, same, check_crc, data)


def test_a_record_that_is_not_the_entrys_is_refused_with_a_reason():
    chunk, sizes, phys, offsets = run(3, True, True)
    rec = bytes(chunk[:sizes[0]])
    assert record_problem(rec, 0, sizes[0], phys[0], b"Topic", 2, offsets[0]) is None
    assert "PHYSICALOFFSET" in record_problem(rec, 0, sizes[0], phys[0] + 1)
    assert "QUEUEID" in record_problem(rec, 0, sizes[0], phys[0], b"Topic", 3)
    assert "topic" in record_problem(rec, 0, sizes[0], phys[0], b"Other", 2)
    assert "QUEUEOFFSET" in record_problem(rec, 0, sizes[0], phys[0], b"Topic", 2, 8)
    assert "TOTALSIZE" in record_problem(rec + b"\0", 0, sizes[0] + 1)
    old = encode_message(Message("Topic", b"x"), 0, 0)               # no CRC property
    assert record_problem(old, 0, len(old)) is None
    assert record_problem(old, 0, len(old), check_crc=FORCED) == "CRC mismatch"
