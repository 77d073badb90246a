"""`ConsumeQueue` and `ConsumeQueueStore`: RocketMQ's ConsumeQueueTest (repeated build ignored,
correctMinOffset numbers, a queue that starts late), idempotent and conflicting writes,
recovery of the valid prefix, truncation to a CommitLog end, offset by time and expiry."""
from __future__ import annotations

import os
import struct

import pytest

from core.log.consume_queue import BLANK_SIZE, ENTRY, UNIT_SIZE, ConsumeQueue
from core.log.consume_queue_store import ConsumeQueueStore
from core.files.fileops import REAL_FILE_OPS
from core.files.mapped_file import offset_to_file_name
from core.record.message import Message

FILE = 20 * 50                                      # 50 entries per file


@pytest.fixture
def make_cq(tmp_path):
    def make(topic="T", queue_id=0, size=FILE):
        cq = ConsumeQueue(topic, queue_id, str(tmp_path / "cq"), size, REAL_FILE_OPS)
        cq.load()
        cq.recover()
        return cq
    return make


def fill(cq, count, unit=100, first=0, tags=lambda i: i):
    for i in range(first, first + count):
        assert cq.put_message_position_info(i * unit, unit, tags(i), i)


def entries(cq):
    lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
    return [cq.get_entry(i) for i in range(lo, hi)]


def test_entry_layout(make_cq):
    cq = make_cq()
    cq.put_message_position_info(1580, 158, -7, 0)
    raw = open(os.path.join(cq.queue.store_path, offset_to_file_name(0)), "rb").read(20)
    assert raw == struct.pack(">qiq", 1580, 158, -7)
    assert ENTRY.size == UNIT_SIZE == 20
    assert cq.get_entry(0) == (1580, 158, -7)


def test_min_max_and_rolling(make_cq):
    cq = make_cq()
    assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) == (0, 0)
    fill(cq, 120)
    assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) == (0, 120)
    assert [mf.file_from_offset for mf in cq.queue.files] == [0, 1000, 2000]
    assert cq.max_physic_offset == 120 * 100
    assert cq.last_entry() == (11900, 100, 119)
    assert entries(cq) == [(i * 100, 100, i) for i in range(120)]


def test_get_entries_stops_at_the_file_end(make_cq):
    cq = make_cq()
    fill(cq, 120)
    raw = cq.get_entries(45, 32)
    assert len(raw) == 5 * UNIT_SIZE                  # 45..49, then the file ends
    assert [e[0] for e in ENTRY.iter_unpack(raw)] == [4500, 4600, 4700, 4800, 4900]
    assert len(cq.get_entries(50, 32)) == 32 * UNIT_SIZE
    assert len(cq.get_entries(110, 32)) == 10 * UNIT_SIZE
    assert cq.get_entries(120, 1) is None
    assert cq.roll_next_file(45) == 50
    assert cq.roll_next_file(50) == 100


def test_repeated_build_is_ignored(make_cq):
    """ConsumeQueueTest.testPutMessagePositionInfo_buildCQRepeatedly."""
    cq = make_cq()
    fill(cq, 200)
    before = entries(cq)
    for _ in range(10):
        assert cq.put_message_position_info(0, 100, 0, 0)
        assert cq.put_message_position_info(5000, 100, 50, 50)
    assert entries(cq) == before
    assert cq.get_max_offset_in_queue() == 200


def test_conflicting_entry_truncates_and_rewrites(make_cq):
    cq = make_cq()
    fill(cq, 80)
    assert cq.put_message_position_info(99999, 7, 1, 30)
    assert cq.get_max_offset_in_queue() == 31
    assert cq.get_entry(30) == (99999, 7, 1)
    assert cq.get_entry(29) == (2900, 100, 29)
    assert len(cq.queue.files) == 1
    assert cq.max_physic_offset == 99999 + 7


def test_queue_that_starts_late_is_filled_with_blanks(make_cq):
    cq = make_cq()
    assert cq.put_message_position_info(5000, 100, 3, 100)
    assert cq.get_min_offset_in_queue() == 100
    assert cq.get_max_offset_in_queue() == 101
    assert [mf.file_from_offset for mf in cq.queue.files] == [2000]
    assert cq.get_entry(100) == (5000, 100, 3)
    assert cq.get_entry(99) is None                   # below the queue's start


def test_fill_blank_then_correct_min_offset(make_cq, tmp_path):
    """ConsumeQueueTest.testFillBankThenCorrectMinOffset: a queue begun at offset 100 keeps
    min 100 after a reload, a recover and correctMinOffset(1)."""
    cq = make_cq()
    cq.put_message_position_info(5000, 100, 3, 100)
    cq.flush(0)
    cq.shutdown()
    cq2 = make_cq()
    cq2.correct_min_offset(1)
    assert (cq2.get_min_offset_in_queue(), cq2.get_max_offset_in_queue()) == (100, 101)


def test_late_start_inside_a_file_skips_blanks_after_reload(make_cq):
    cq = make_cq()
    cq.put_message_position_info(5000, 100, 3, 110)   # file 2000 holds 100..149
    cq.flush(0)
    cq.shutdown()
    cq2 = make_cq()
    assert cq2.get_entry(105) == (0, BLANK_SIZE, 0)
    cq2.correct_min_offset(0)
    assert (cq2.get_min_offset_in_queue(), cq2.get_max_offset_in_queue()) == (110, 111)
    assert cq2.max_physic_offset == 5100


def test_gap_in_the_middle_is_filled(make_cq):
    cq = make_cq()
    fill(cq, 10)
    assert cq.put_message_position_info(5000, 100, 1, 60)
    assert cq.get_max_offset_in_queue() == 61
    assert cq.get_entry(30) == (0, BLANK_SIZE, 0)
    assert cq.get_min_offset_in_queue() == 0


def test_correct_min_offset_numbers(make_cq):
    """ConsumeQueueTest.testCorrectMinOffset: 10000 entries at 100*i, size 100."""
    cq = make_cq()
    fill(cq, 10000)
    max_offset = cq.get_max_offset_in_queue()
    assert max_offset == 10000
    cq.correct_min_offset(0)
    assert cq.get_min_offset_in_queue() == 0
    cq.min_logic_offset = 100
    cq.correct_min_offset(2000)
    assert cq.get_min_offset_in_queue() == 20
    cq.min_logic_offset = (max_offset - 1) * 20
    cq.correct_min_offset(max_offset * 100)
    assert cq.min_logic_offset == max_offset * 20
    cq.min_logic_offset = max_offset * 20
    cq.correct_min_offset(max_offset * 100)
    assert cq.min_logic_offset == max_offset * 20


def test_correct_min_offset_never_moves_back(make_cq):
    cq = make_cq()
    fill(cq, 100)
    cq.correct_min_offset(5000)
    assert cq.get_min_offset_in_queue() == 50
    cq.correct_min_offset(0)
    assert cq.get_min_offset_in_queue() == 50


def test_recover_keeps_the_valid_prefix(make_cq):
    cq = make_cq()
    fill(cq, 120)
    cq.flush(0)
    path = cq.queue.files[-1].path                    # file 2000: entries 100..119
    cq.shutdown()
    with open(path, "r+b") as f:
        f.seek(10 * UNIT_SIZE + 8)
        f.write(struct.pack(">i", 0))                 # entry 110 gets size 0: invalid
    cq2 = make_cq()
    assert cq2.get_max_offset_in_queue() == 110
    assert cq2.max_physic_offset == 110 * 100
    with open(path, "rb") as f:
        data = f.read()
    assert data[10 * UNIT_SIZE:] == bytes(FILE - 10 * UNIT_SIZE)      # cut durably
    assert cq2.put_message_position_info(11000, 100, 110, 110)
    assert cq2.get_max_offset_in_queue() == 111


def test_recover_of_an_exactly_full_last_file(make_cq):
    cq = make_cq()
    fill(cq, 100)
    cq.flush(0)
    cq.shutdown()
    cq2 = make_cq()
    assert cq2.get_max_offset_in_queue() == 100
    assert cq2.put_message_position_info(10000, 100, 100, 100)
    assert [mf.file_from_offset for mf in cq2.queue.files] == [0, 1000, 2000]


def test_truncate_dirty_logic_files(make_cq):
    cq = make_cq()
    fill(cq, 120)
    cq.truncate_dirty_logic_files(7050)               # entries at 7100 and later go
    assert cq.get_max_offset_in_queue() == 71
    assert cq.max_physic_offset == 7100
    assert [mf.file_from_offset for mf in cq.queue.files] == [0, 1000]
    cq.truncate_dirty_logic_files(5000)               # exactly a file's first entry
    assert cq.get_max_offset_in_queue() == 50
    assert cq.last_entry() == (4900, 100, 49)
    cq.truncate_dirty_logic_files(0)
    assert cq.get_max_offset_in_queue() == 0
    assert cq.max_physic_offset == -1


def test_truncate_keeps_the_blank_head(make_cq):
    cq = make_cq()
    for i in range(60, 70):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cq.truncate_dirty_logic_files(6500)
    assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) == (60, 65)


def test_offset_in_queue_by_time(make_cq):
    cq = make_cq()
    fill(cq, 120)
    times = {i * 100: 1000 + 10 * i for i in range(120)}

    def store_time_of(phys, size):
        return times.get(phys, -1)

    assert cq.get_offset_in_queue_by_time(1000, store_time_of) == 0
    assert cq.get_offset_in_queue_by_time(1000 + 10 * 77, store_time_of) == 77
    assert cq.get_offset_in_queue_by_time(1000 + 10 * 77 - 2, store_time_of) == 77   # lower
    assert cq.get_offset_in_queue_by_time(0, store_time_of) == 0
    assert cq.get_offset_in_queue_by_time(10 ** 9, store_time_of) == 120


def test_delete_expired_file(make_cq):
    cq = make_cq()
    fill(cq, 120)
    assert cq.delete_expired_file(6000) == 1          # file 0 ends at 4900 < 6000
    assert [mf.file_from_offset for mf in cq.queue.files] == [1000, 2000]
    assert cq.get_min_offset_in_queue() == 60


def test_store_loads_every_queue_and_skips_foreign_dirs(tmp_path):
    root = str(tmp_path / "consumequeue")
    s = ConsumeQueueStore(root, FILE, REAL_FILE_OPS)
    s.load()
    for topic, qid in (("A", 0), ("A", 3), ("B%x", 1)):
        cq = s.find_or_create(topic, qid)
        for i in range(5):
            cq.put_message_position_info(i * 10 + qid, 10, 0, i)
    s.flush(0)
    s.shutdown()
    os.makedirs(os.path.join(root, "A", "not-a-queue"))
    open(os.path.join(root, "stray-file"), "w").close()
    s2 = ConsumeQueueStore(root, FILE, REAL_FILE_OPS)
    s2.load()
    s2.recover()
    assert sorted(s2.queues) == [("A", 0), ("A", 3), ("B%x", 1)]
    assert s2.topic_queue_table() == {("A", 0): 5, ("A", 3): 5, ("B%x", 1): 5}
    assert s2.max_physic_offset() == 4 * 10 + 3 + 10
    assert s2.find("nope", 0) is None


def test_store_truncate_dirty(tmp_path):
    s = ConsumeQueueStore(str(tmp_path / "cq"), FILE, REAL_FILE_OPS)
    s.load()
    a, b = s.find_or_create("A", 0), s.find_or_create("B", 0)
    for i in range(10):
        a.put_message_position_info(i * 200, 100, 0, i)
        b.put_message_position_info(i * 200 + 100, 100, 0, i)
    s.truncate_dirty(1000)                            # records starting at >= 1000 go
    assert a.get_max_offset_in_queue() == 5           # 0, 200, .., 800
    assert b.get_max_offset_in_queue() == 5           # 100, .., 900 (ends at 1000)
    assert s.max_physic_offset() == 1000


def test_build_repeatedly_through_a_store(tiny_config, open_store):
    """ConsumeQueueTest: 100 IPv4 and 100 IPv6 messages on topic abc, then the first record
    dispatched again is ignored."""
    store = open_store(tiny_config())
    for i in range(200):
        host = ("127.0.0.1", 8000 + i) if i % 2 == 0 else ("::1", 8000 + i)
        assert store.put_message(Message("abc", b"body-%d" % i, tags="T", born_host=host)).ok
    assert store.wait_for_dispatch()
    cq = store.cq_store.find("abc", 0)
    before = entries(cq)
    assert len(before) == 200
    phys, size, tags = before[0]
    assert cq.put_message_position_info(phys, size, tags, 0)
    assert entries(cq) == before
    assert all(e[0] >= 0 and e[1] > 0 for e in before)


@pytest.mark.parametrize("first,count", [(0, 7), (3, 120), (48, 5), (0, 50)])
def test_put_entries_equals_entry_by_entry(make_cq, tmp_path, first, count):
    """Consecutive packed entries: one copy per segment (the first entry of the queue and of a
    new segment through `put_message_position_info`), at a late start, partly or wholly over
    identical entries already there; the result is the same bytes."""
    def entries(lo, hi):
        return b"".join(ENTRY.pack(i * 100, 100, i) for i in range(lo, hi))
    one = ConsumeQueue("A", 0, str(tmp_path / "one"), FILE, REAL_FILE_OPS)
    many = ConsumeQueue("A", 0, str(tmp_path / "many"), FILE, REAL_FILE_OPS)
    for cq in (one, many):
        cq.load()
    for i in range(first, first + count):
        one.put_message_position_info(i * 100, 100, i, i)
    half = first + count // 2
    many.put_entries(first, entries(first, half), half * 100)
    many.put_entries(first, entries(first, first + count), (first + count) * 100)   # overlaps
    many.put_entries(first, entries(first, first + count), (first + count) * 100)   # again
    for cq in (one, many):
        assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) == (first, first + count)
    assert one.get_entries(first, count) == many.get_entries(first, count)
    assert many.max_physic_offset == (first + count) * 100
    one.shutdown()
    many.shutdown()
