"""IndexService: RocketMQ's IndexServiceTest, keys and transaction filtering, rolling and
naming, queries across files, idempotent re-dispatch, abnormal-exit load, truncate, expiry."""
from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.record.codec import DispatchRequest
from core.files.fileops import REAL_FILE_OPS
from core.log.index_file import IndexFile, index_file_size
from core.log.index_service import IndexService, index_keys, next_file_name, time_file_name
from core.record.message import (
    SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK,
)

LONG_MAX = 2**63 - 1
BASE_TS = 1_700_000_000_000
SLOTS, ENTRIES = 7, 5                      # 4 entries per file


def req(offset, ts=None, keys="", uniq="", topic="T", sys_flag=0):
    return DispatchRequest(topic=topic, queue_id=0, commit_log_offset=offset, msg_size=100,
                           tags_code=0, store_timestamp=BASE_TS + offset * 10 if ts is None else ts,
                           consume_queue_offset=0, keys=keys, uniq_key=uniq, sys_flag=sys_flag,
                           prepared_transaction_offset=0)


class Clock:
    """A millisecond clock that advances only when told to (so names collide on purpose)."""

    def __init__(self, ms=BASE_TS):
        self.ms = ms

    def __call__(self):
        return self.ms


def service(d, clock=None, slots=SLOTS, entries=ENTRIES, **kw) -> IndexService:
    s = IndexService(str(d), slots, entries, REAL_FILE_OPS, clock_ms=clock or Clock(), **kw)
    s.load(True, 0)
    return s


def file_images(directory) -> list[bytes]:
    names = sorted(n for n in os.listdir(directory) if not n.endswith(".tmp"))
    return [open(os.path.join(directory, n), "rb").read() for n in names]


# ---- RocketMQ's IndexServiceTest ---------------------------------------------------------------

def test_query_on_empty_service_does_not_raise(tmp_path):
    s = IndexService(str(tmp_path / "index"), SLOTS, ENTRIES, REAL_FILE_OPS)
    assert s.query_offset("test", "", 2**31 - 1, 10, 100) == ([], 0, 0)
    s.load(True, 0)
    assert s.query_offset("test", "", 2**31 - 1, 10, 100) == ([], 0, 0)
    assert s.max_indexed_phy_offset() == 0
    s.flush()
    s.truncate(0)
    assert s.delete_expired_file(100) == 0
    s.shutdown()


# ---- building --------------------------------------------------------------------------------

def test_keys_of_a_record():
    r = req(0, keys="a  b c ", uniq="U1", topic="top")
    assert index_keys(r) == ["top#U1", "top#a", "top#b", "top#c"]
    assert index_keys(req(0)) == []


def test_build_and_query(tmp_path):
    s = service(tmp_path / "index", entries=50)
    s.build_index(req(0, keys="k1 k2", uniq="U0"))
    s.build_index(req(100, keys="k1"))
    assert s.query_offset("T", "k1", 10, 0, LONG_MAX) == ([100, 0], BASE_TS + 1000, 100)
    assert s.query_offset("T", "U0", 10, 0, LONG_MAX)[0] == [0]
    assert s.query_offset("T", "k2", 10, 0, LONG_MAX)[0] == [0]
    assert s.query_offset("OTHER", "k1", 10, 0, LONG_MAX)[0] == []
    assert s.max_indexed_phy_offset() == 100
    s.shutdown()


def test_rollback_is_not_indexed_but_prepared_is(tmp_path):
    s = service(tmp_path / "index", entries=50)
    s.build_index(req(0, keys="r", sys_flag=SYSFLAG_TRANSACTION_ROLLBACK))
    s.build_index(req(10, keys="p", sys_flag=SYSFLAG_TRANSACTION_PREPARED))
    s.build_index(req(20, keys="c", sys_flag=SYSFLAG_TRANSACTION_COMMIT))
    for key, want in (("r", []), ("p", [10]), ("c", [20])):
        assert s.query_offset("T", key, 10, 0, LONG_MAX)[0] == want
    s.shutdown()


def test_first_record_at_zero_is_indexed_and_redispatch_is_idempotent(tmp_path):
    d = tmp_path / "index"
    s = service(d, entries=50)
    records = [req(0, keys="a b", uniq="U0"), req(50, keys="a"), req(90, uniq="U2")]
    for r in records:
        s.build_index(r)
    s.flush()
    image = file_images(d)
    for r in records:                       # a recovery re-dispatching the same records
        s.build_index(r)
    s.flush()
    assert file_images(d) == image
    assert s.query_offset("T", "a", 10, 0, LONG_MAX)[0] == [50, 0]
    s.shutdown()


# ---- rolling ---------------------------------------------------------------------------------

def test_roll_to_new_files_and_query_across_them_newest_first(tmp_path):
    d, clock = tmp_path / "index", Clock()
    s = service(d, clock)
    for i in range(10):                     # 10 entries, 4 per file -> 3 files
        s.build_index(req(i * 10, keys="k"))
    files = s.files
    assert [f.index_count for f in files] == [5, 5, 3]
    names = [f.name for f in files]
    assert names == sorted(names) and len(set(names)) == 3
    assert names[0] == time_file_name(clock.ms) and names[1] == next_file_name(names[0])
    assert all(len(n) == 17 and n.isdigit() for n in names)
    assert s.last_flushed_index_timestamp == files[1].end_timestamp == BASE_TS + 700
    assert (files[1].begin_phy_offset, files[2].begin_phy_offset) == (40, 80)
    assert s.query_offset("T", "k", 64, 0, LONG_MAX)[0] == [90, 80, 70, 60, 50, 40, 30, 20, 10, 0]
    assert s.query_offset("T", "k", 3, 0, LONG_MAX)[0] == [90, 80, 70]
    s.shutdown()


def test_one_record_whose_keys_span_two_files(tmp_path):
    s = service(tmp_path / "index")
    s.build_index(req(0, keys="a b c"))
    s.build_index(req(10, keys="x y", uniq="U"))          # U fills file 1; x and y go to file 2
    assert [f.index_count for f in s.files] == [5, 3]
    assert s.files[1].begin_phy_offset == 10
    assert s.query_offset("T", "y", 10, 0, LONG_MAX)[0] == [10]
    assert s.query_offset("T", "U", 10, 0, LONG_MAX)[0] == [10]
    s.shutdown()


def test_file_name_helpers():
    assert next_file_name("20231231235959999") == "20240101000000000"
    assert next_file_name("20240228235959999") == "20240229000000000"


def test_max_num_is_capped_by_batch_size(tmp_path):
    s = service(tmp_path / "index", entries=40, max_msgs_num_batch=5)
    for i in range(20):
        s.build_index(req(i, keys="k"))
    assert len(s.query_offset("T", "k", 1000, 0, LONG_MAX)[0]) == 5
    assert s.query_offset("T", "k", 0, 0, LONG_MAX)[0] == []
    s.shutdown()


def test_time_range_filtering_across_files(tmp_path):
    s = service(tmp_path / "index")
    for i in range(12):                     # files of 4 entries, 1 s apart each
        s.build_index(req(i, ts=BASE_TS + i * 1000, keys="k"))
    assert s.query_offset("T", "k", 64, BASE_TS + 3000, BASE_TS + 6000)[0] == [6, 5, 4, 3]
    assert s.query_offset("T", "k", 64, BASE_TS + 11_000, LONG_MAX)[0] == [11]
    assert s.query_offset("T", "k", 64, 0, BASE_TS - 1)[0] == []
    assert s.query_offset("T", "k", 64, BASE_TS + 20_000, LONG_MAX)[0] == []
    s.shutdown()


# ---- load ------------------------------------------------------------------------------------

def _three_files(d) -> tuple[IndexService, int]:
    s = service(d)
    for i in range(10):
        s.build_index(req(i * 10, keys=f"k{i}"))
    return s, s.last_flushed_index_timestamp


def test_load_after_abnormal_exit_drops_newer_files(tmp_path):
    d = tmp_path / "index"
    s, checkpoint_ts = _three_files(d)
    names = [f.name for f in s.files]
    s.shutdown()
    normal = IndexService(str(d), SLOTS, ENTRIES, REAL_FILE_OPS)
    normal.load(True, checkpoint_ts)
    assert [f.name for f in normal.files] == names
    normal.close()
    crashed = IndexService(str(d), SLOTS, ENTRIES, REAL_FILE_OPS)
    crashed.load(False, checkpoint_ts)
    assert [f.name for f in crashed.files] == names[:2]
    assert sorted(n for n in os.listdir(d) if not n.endswith(".tmp")) == names[:2]   # tmp: being freed
    assert crashed.last_flushed_index_timestamp == checkpoint_ts
    assert crashed.query_offset("T", "k9", 10, 0, LONG_MAX)[0] == []
    assert crashed.query_offset("T", "k7", 10, 0, LONG_MAX)[0] == [70]
    crashed.close()


def test_reopened_service_gives_same_answers(tmp_path):
    d = tmp_path / "index"
    s, _ = _three_files(d)
    answers = [s.query_offset("T", f"k{i}", 10, 0, LONG_MAX) for i in range(11)]
    s.shutdown()
    again = IndexService(str(d), SLOTS, ENTRIES, REAL_FILE_OPS)
    again.load(True, 0)
    assert [again.query_offset("T", f"k{i}", 10, 0, LONG_MAX) for i in range(11)] == answers
    again.close()


def test_load_removes_leftovers_and_refuses_bad_files(tmp_path):
    d = tmp_path / "index"
    s, _ = _three_files(d)
    s.shutdown()
    (d / "20990101000000000.tmp").write_bytes(b"partial")
    s = IndexService(str(d), SLOTS, ENTRIES, REAL_FILE_OPS)
    s.load(True, 0)
    assert not (d / "20990101000000000.tmp").exists() and len(s.files) == 3
    s.close()
    with pytest.raises(ValueError, match="expected"):
        IndexService(str(d), SLOTS, ENTRIES + 1, REAL_FILE_OPS).load(True, 0)
    (d / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="notes.txt"):
        IndexService(str(d), SLOTS, ENTRIES, REAL_FILE_OPS).load(True, 0)


def test_new_names_avoid_existing_files(tmp_path):
    d, clock = tmp_path / "index", Clock()
    d.mkdir()
    taken = time_file_name(clock.ms)
    IndexFile(str(d / taken), SLOTS, ENTRIES, REAL_FILE_OPS, create=True).destroy()
    REAL_FILE_OPS.create_file(str(d / next_file_name(taken)), index_file_size(SLOTS, ENTRIES))
    s = IndexService(str(d), SLOTS, ENTRIES, REAL_FILE_OPS, clock_ms=clock)
    s.load(True, 0)                          # one empty file already there
    for i in range(5):
        s.build_index(req(i, keys="k"))
    names = [f.name for f in s.files]
    assert names == sorted(names) and len(set(names)) == len(names) == 2
    s.shutdown()


# ---- truncate and expiry ---------------------------------------------------------------------

def test_truncate_destroys_and_truncates_files(tmp_path):
    d = tmp_path / "index"
    s, _ = _three_files(d)                  # entries at 0..90 step 10; files begin at 0, 40, 80
    s.truncate(55)
    assert [f.index_count for f in s.files] == [5, 3]
    assert s.max_indexed_phy_offset() == 50
    assert s.query_offset("T", "k5", 10, 0, LONG_MAX)[0] == [50]
    assert s.query_offset("T", "k6", 10, 0, LONG_MAX)[0] == []
    assert s.last_flushed_index_timestamp == s.files[0].end_timestamp
    s.truncate(20)
    assert [f.index_count for f in s.files] == [3]
    assert s.last_flushed_index_timestamp == 0
    s.shutdown()


def test_truncate_reseeds_an_empty_newest_file(tmp_path):
    d = tmp_path / "index"
    s = service(d)
    for i in range(4):
        s.build_index(req(i * 10, keys="k"))
    s.files[0].flush()
    empty = IndexFile(str(d / next_file_name(s.files[0].name)), SLOTS, ENTRIES, REAL_FILE_OPS,
                      create=True, prev_end_phy_offset=30, prev_end_timestamp=BASE_TS + 300)
    empty.close()
    s.close()
    s = IndexService(str(d), SLOTS, ENTRIES, REAL_FILE_OPS)
    s.load(True, 0)
    s.truncate(25)
    assert [f.index_count for f in s.files] == [4, 1]
    assert s.files[1].end_phy_offset == s.files[0].end_phy_offset == 20
    s.build_index(req(25, keys="k"))        # not mistaken for an already indexed record
    assert s.query_offset("T", "k", 10, 0, LONG_MAX)[0] == [25, 20, 10, 0]
    s.shutdown()


def test_delete_expired_file(tmp_path):
    d = tmp_path / "index"
    s, _ = _three_files(d)                  # file ends: 30, 70, 90
    assert s.delete_expired_file(30) == 0
    assert s.delete_expired_file(71) == 2
    # The names go at once; the blocks of *.deleted.tmp are freed in the background.
    assert len(s.files) == 1 and len([n for n in os.listdir(d) if not n.endswith(".tmp")]) == 1
    assert s.delete_expired_file(10_000) == 0          # the last file is never deleted
    s.shutdown()


_RECORDS = st.lists(st.tuples(st.integers(1, 30), st.lists(st.sampled_from(["a", "b", "Aa", "BB"]),
                                                               max_size=3),
                              st.booleans()), min_size=1, max_size=16)


@settings(max_examples=60, deadline=None)
@given(records=_RECORDS, cut_frac=st.floats(0, 1), interrupt_frac=st.floats(0, 1),
       partial_keys=st.integers(0, 3))
def test_truncate_or_interruption_then_redispatch_rebuilds_the_same_index(
        records, cut_frac, interrupt_frac, partial_keys):
    reqs, phys = [], 0
    for i, (dphys, keys, has_uniq) in enumerate(records):
        reqs.append(req(phys, ts=BASE_TS + phys * 1000, keys=" ".join(keys),
                        uniq=f"U{i}" if has_uniq else ""))
        phys += dphys
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        clean = IndexService(d1, 3, 4, REAL_FILE_OPS, clock_ms=Clock())
        clean.load(True, 0)
        for r in reqs:
            clean.build_index(r)
        clean.flush()
        # a crash mid-record: the keys put so far stay, then the dispatcher starts again
        # from an earlier record (or the index is truncated back to it first)
        other = IndexService(d2, 3, 4, REAL_FILE_OPS, clock_ms=Clock())
        other.load(True, 0)
        stop = int(interrupt_frac * len(reqs))
        for r in reqs[:stop]:
            other.build_index(r)
        if stop < len(reqs) and other.files:
            for key in index_keys(reqs[stop])[:partial_keys]:
                if not other.files[-1].put_key(key, reqs[stop].commit_log_offset,
                                                reqs[stop].store_timestamp):
                    break                   # the crash came before rolling to a new file
        restart = int(cut_frac * stop)
        if cut_frac > 0.5:
            other.truncate(reqs[restart].commit_log_offset if restart < len(reqs) else phys)
        for r in reqs[restart:]:
            other.build_index(r)
        other.flush()
        assert [f.index_count for f in other.files] == [f.index_count for f in clean.files]
        for key in ("a", "b", "Aa", "U0", f"U{len(reqs) - 1}"):
            assert other.query_offset("T", key, 64, 0, LONG_MAX)[0] == \
                clean.query_offset("T", key, 64, 0, LONG_MAX)[0]
        images = (file_images(d1), file_images(d2))
        clean.close()
        other.close()
        assert images[0] == images[1]
