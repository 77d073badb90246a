"""core.log.replica_log.ReplicaLog and CommitLog.append_replicated: a master's CommitLog bytes,
applied to an empty slave log in chunks cut anywhere (never across a segment), give the same
bytes, a record boundary at the end of every whole record, the last record's store timestamp,
and a store that recovers and serves every message; chunks that do not continue the log, that
cross a segment, or that frame no record are refused."""
from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from core.log.commitlog import CommitLog
from core.config import StoreConfig
from core.files.fileops import REAL_FILE_OPS
from core.record.message import Message
from core.log.replica_log import ReplicaDamaged, ReplicaLog
from core.store import MessageStore
from tests.conftest import TINY

SEGMENT = TINY["mapped_file_size_commitlog"]


@pytest.fixture(scope="module")
def master_log(tmp_path_factory):
    """(bytes of a master's CommitLog, record ends, last store timestamp) over several segments."""
    root = tmp_path_factory.mktemp("master")
    st = MessageStore(StoreConfig(**TINY, store_path_root_dir=str(root)))
    st.load()
    st.start()
    ends, last_ts = [], 0
    for i in range(300):
        r = st.put_message(Message("R", b"body %d " % i + b"x" * (i % 97), queue_id=i % 2, keys=f"k{i}"))
        ends.append(r.append_result.wrote_offset + r.append_result.wrote_bytes)
        last_ts = r.append_result.store_timestamp
    end = st.get_max_phy_offset()
    st.shutdown()
    data = bytearray()
    for start in range(0, end, SEGMENT):
        with open(os.path.join(root, "commitlog", f"{start:020d}"), "rb") as f:
            data += f.read(min(SEGMENT, end - start))
    assert end > 2 * SEGMENT
    return bytes(data), ends, last_ts


def _chunks(data: bytes, cuts: list[int]):
    """(offset, bytes) pieces of `data` cut at `cuts` and at every segment boundary."""
    points = sorted({0, len(data), *(c for c in cuts if 0 < c < len(data)),
                     *range(SEGMENT, len(data), SEGMENT)})
    return [(a, data[a:b]) for a, b in zip(points, points[1:])]


def _slave(root: str) -> CommitLog:
    return CommitLog(StoreConfig(**TINY, store_path_root_dir=root), REAL_FILE_OPS)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(min_value=1, max_value=80_000), max_size=40))
def test_chunks_cut_anywhere_rebuild_the_log(master_log, cuts):
    data, ends, last_ts = master_log
    with tempfile.TemporaryDirectory() as root:
        cl = _slave(root)
        rep = ReplicaLog(cl, 0)
        for offset, piece in _chunks(data, cuts):
            boundary = rep.apply(offset, piece)
            assert rep.written == offset + len(piece)
            whole = [e for e in ends if e <= rep.written]
            # the boundary is the last whole record's end (or the segment end after its blank)
            assert boundary >= (whole[-1] if whole else 0) and boundary <= rep.written
            assert boundary in ends or boundary % SEGMENT == 0 or boundary == 0
        assert rep.boundary == len(data) == ends[-1] and rep.last_store_ts == last_ts
        cl.shutdown()
        got = bytearray()
        for start in range(0, len(data), SEGMENT):
            with open(os.path.join(root, "commitlog", f"{start:020d}"), "rb") as f:
                got += f.read(min(SEGMENT, len(data) - start))
        assert bytes(got) == data


def test_a_replicated_log_recovers_and_serves_every_message(master_log, tmp_path):
    data, ends, _ = master_log
    cl = _slave(str(tmp_path))
    rep = ReplicaLog(cl, 0)
    for offset, piece in _chunks(data, list(range(777, len(data), 777))):
        rep.apply(offset, piece)
    cl.shutdown()
    st = MessageStore(StoreConfig(**TINY, store_path_root_dir=str(tmp_path)))
    st.load()
    try:
        assert st.get_max_phy_offset() == len(data)
        for q in (0, 1):
            bodies, offset = [], 0
            while True:
                got = st.get_message("g", "R", q, offset, 32)
                if not got.messages:
                    break
                bodies += [bytes(m.body) for m in got.messages]
                offset = got.next_begin_offset
            assert bodies == [b"body %d " % i + b"x" * (i % 97) for i in range(q, 300, 2)]
    finally:
        st.shutdown()


def test_chunks_that_do_not_fit_are_refused(master_log, tmp_path):
    data, _, _ = master_log
    cl = _slave(str(tmp_path))
    rep = ReplicaLog(cl, 0)
    with pytest.raises(ValueError, match="does not continue"):
        rep.apply(100, data[100:200])                  # an empty log starts at a segment
    rep.apply(0, data[:1000])
    with pytest.raises(ValueError, match="does not continue"):
        rep.apply(1200, data[1200:1300])
    with pytest.raises(ValueError, match="crosses a segment"):
        rep.apply(1000, data[1000:SEGMENT + 10])
    with pytest.raises(ReplicaDamaged):
        rep.apply(1000, b"\x00\x00\x00\x10" + b"\x7f" * 200)   # where a record must start
    cl.shutdown()


def test_a_chunk_ending_inside_a_blank_record_leaves_the_boundary_before_it(master_log, tmp_path):
    data, ends, _ = master_log
    blanks = [max(e for e in ends if e <= seg_end) for seg_end in range(SEGMENT, len(data), SEGMENT)]
    cuts = [b + 8 for b in blanks if b + 8 < (b // SEGMENT + 1) * SEGMENT]
    assert cuts                                    # the workload leaves blank tails to cut into
    cl = _slave(str(tmp_path))
    rep = ReplicaLog(cl, 0)
    for offset, piece in _chunks(data, cuts):
        rep.apply(offset, piece)
        assert rep.boundary <= rep.written
        if rep.written in cuts:
            assert rep.boundary == rep.written - 8      # still before the blank: not whole yet
    assert rep.boundary == len(data)
    cl.shutdown()
