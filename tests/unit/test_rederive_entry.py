"""A consume-queue entry damaged after load (bit rot under a running store): the pull that finds
its record wrong looks for the record in the CommitLog (core.read.rederive), serves it and
writes the entry again; a record damaged itself is still refused (MESSAGE_DAMAGED), and the
entry is left as it is."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from core.log.consume_queue import UNIT_SIZE
from core.read import rederive
from core.record.message import Message
from core.status import GetMessageStatus as S

COUNT = 240


@pytest.fixture
def store(tiny_config, open_store):
    s = open_store(tiny_config(mapped_file_size_consume_queue=UNIT_SIZE * 1000))
    for i in range(COUNT):           # T:0, T:1 and U:0 interleaved: neighbours are not adjacent
        topic, qid = (("T", 0), ("T", 1), ("U", 0))[i % 3]
        assert s.put_message(Message(topic, b"m%04d-" % i * (1 + i % 7), queue_id=qid,
                                     tags="AB"[i % 2], keys=f"k{i}")).status.ok
    assert s.wait_for_dispatch()
    return s


def pull_all(s, topic="T", qid=0, tag=None):
    out, statuses, offset = [], [], 0
    while True:
        r = s.get_message("g", topic, qid, offset, 7, tag)
        statuses.append(r.status)
        if r.status not in (S.FOUND, S.MESSAGE_DAMAGED) and r.next_begin_offset <= offset:
            return out, statuses
        out += [bytes(b) for b in r.buffers]
        offset = r.next_begin_offset


def entry_path(s, topic="T", qid=0):
    return os.path.join(s.config.consumequeue_dir, topic, str(qid), "%020d" % 0)


def flip(path, at, bit):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ 1 << bit]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entry=st.integers(0, COUNT // 3 - 1), at=st.sampled_from([3, 4, 5, 6, 7, 8, 9, 10, 11]),
       bit=st.integers(0, 7))
def test_an_entry_damaged_after_load_is_served_from_the_commitlog_and_written_again(
        store, entry, at, bit):
    want, _ = pull_all(store)
    path = entry_path(store)
    with open(path, "rb") as f:
        before = f.read()
    flip(path, entry * UNIT_SIZE + at, bit)
    got, statuses = pull_all(store)
    assert got == want and S.MESSAGE_DAMAGED not in statuses
    with open(path, "rb") as f:
        assert f.read() == before                  # written again (or never read wrong)
    assert pull_all(store, "T", 1)[0] and pull_all(store, "U", 0)[0]


def test_a_damaged_record_is_refused_and_its_entry_left_alone(store):
    want, _ = pull_all(store)
    raw = store.reader.cq_store.find("T", 0).get_entries(10, 1)
    phys = int.from_bytes(raw[:8], "big")
    seg = store.config.mapped_file_size_commitlog
    path = os.path.join(store.config.commitlog_dir, "%020d" % (phys - phys % seg))
    flip(path, phys % seg + 120, 3)                       # a byte of its body or properties
    with open(entry_path(store), "rb") as f:
        before = f.read()
    got, statuses = pull_all(store)
    assert S.MESSAGE_DAMAGED in statuses and len(got) == len(want) - 1
    assert want[10] not in got
    with open(entry_path(store), "rb") as f:
        assert f.read() == before
    assert store.reader.damage.count >= 1 and store.reader.damage.entries == 0


def test_the_walk_is_bounded(store, monkeypatch):
    """Past MAX_WALK bytes the record is not looked for further: MESSAGE_DAMAGED, as before."""
    monkeypatch.setattr(rederive, "MAX_WALK", 8)
    flip(entry_path(store), 20 * UNIT_SIZE + 7, 6)       # offset +64: another record's place
    got, statuses = pull_all(store)
    assert S.MESSAGE_DAMAGED in statuses


def test_an_old_entry_damaged_at_rest_is_read_right_and_a_start_reads_only_the_tail(
        tiny_config, open_store, monkeypatch):
    """At load only a queue's last TAIL_ENTRIES entries are held to their records (a start
    reads a few records of each queue, not the log); an older damaged one is found by the
    pull that reads it, which serves its record and writes the entry again."""
    from core.log import queue_check
    cfg = tiny_config(mapped_file_size_consume_queue=UNIT_SIZE * 1000,
                      mapped_file_size_commitlog=1 << 20)
    s = open_store(cfg)
    for i in range(600):
        assert s.put_message(Message("T", b"n%04d" % i, tags="AB"[i % 2])).status.ok
    assert s.wait_for_dispatch()
    want, _ = pull_all(s)
    s.shutdown()
    path = entry_path(s)
    with open(path, "rb") as f:
        before = f.read()
    size_low = before[10 * UNIT_SIZE + 11]
    flip(path, 10 * UNIT_SIZE + 11, size_low.bit_length() - 1)   # entry 10's size, smaller: in order
    held = []
    real = queue_check.RecordHeaders.matches
    monkeypatch.setattr(queue_check.RecordHeaders, "matches",
                        lambda self, *a: held.append(a) or real(self, *a))
    s = open_store(cfg)
    assert 0 < len(held) <= queue_check.TAIL_ENTRIES
    got, statuses = pull_all(s)
    assert got == want and S.MESSAGE_DAMAGED not in statuses
    with open(path, "rb") as f:
        assert f.read() == before
    assert s.reader.damage.entries == 1


def test_a_reader_over_views_remembers_the_record_it_found(tmp_path, monkeypatch):
    """The reader process cannot write the entry again: it serves the record it found and
    remembers it, so that the next pulls of that entry do not walk the CommitLog again."""
    from core.read import store_reader
    from tests.unit.test_reader_pull_fast import answer, build
    ours, _, theirs, _ = build(tmp_path)
    cq = ours.cq_store.find("T", 2)
    want = answer(theirs.get_message("g", "T", 2, 3, 1))
    path = os.path.join(ours.config.consumequeue_dir, "T", "2", "%020d" % 0)
    flip(path, 3 * UNIT_SIZE + 7, 3)                        # entry 3: offset +-8
    walks = []
    real = store_reader.find_record
    monkeypatch.setattr(store_reader, "find_record", lambda *a: walks.append(a) or real(*a))
    for _ in range(3):
        assert answer(ours.pull(cq, 3, 1, None)) == want
    assert len(walks) == 1 and ours.damage.entries == 3


def test_a_tag_filtered_pull_serves_the_rederived_record_only_when_its_tag_matches(store):
    """T:0's entry 4 holds tag A (message 12). Its offset damaged: a pull filtered by A serves
    its record. Its tag code damaged too, into B's: a pull filtered by B re-derives the entry,
    finds the record's tag is A and goes past it without serving it."""
    want = [m for m in pull_all(store, tag="A")[0]]
    path = entry_path(store)
    flip(path, 4 * UNIT_SIZE + 7, 4)                        # offset +-16
    got, statuses = pull_all(store, tag="A")
    assert got == want and S.MESSAGE_DAMAGED not in statuses
    b_before = pull_all(store, tag="B")[0]
    flip(path, 4 * UNIT_SIZE + 7, 4)                        # again (it was written again) ...
    with open(path, "r+b") as f:                            # ... and the tag code into B's (66)
        f.seek(4 * UNIT_SIZE + 12)
        f.write((66).to_bytes(8, "big"))
    got, statuses = pull_all(store, tag="B")
    assert got == b_before and S.MESSAGE_DAMAGED not in statuses
