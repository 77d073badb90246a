"""Regression: a start that cut the log at a record failing its check (one flipped body byte)
dropped every intact record after it without a word: the supervisor printed only "recovery
done: the log spans [0, X)" and no log file named the cut. Now (issue 33) such a record is
quarantined, not a cut: the records after it stay, the report lists it and a WARNING names its
offset and where the copy is; a torn last record (an ordinary crash tail) is cut, and is not a
warning."""
import logging
import os

import pytest

from core.config import StoreConfig
from core.files.mapped_file import offset_to_file_name
from core.record.message import Message
from tests.unit.recovery_workload import open_store

SEG = 64 * 1024


def fill(root, abort: bool):
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=SEG,
                      flush_disk_type="SYNC_FLUSH")
    st = open_store(cfg)
    results = [st.put_message(Message("T", b"body-%04d" % i + b"x" * 500, queue_id=0))
               for i in range(300)]                       # about 3 segments, with blanks
    assert all(r.ok for r in results) and st.wait_for_dispatch()
    st.shutdown()
    if abort:
        open(cfg.abort_path, "w").close()
    return cfg, [r.append_result for r in results]


def patch(cfg, offset: int, data: bytes) -> None:
    with open(os.path.join(cfg.commitlog_dir, offset_to_file_name(offset - offset % SEG)), "r+b") as f:
        f.seek(offset % SEG)
        f.write(data)


@pytest.mark.parametrize("abort", [False, True])
def test_a_bad_record_with_records_behind_it_is_a_warning(tmp_path, caplog, abort):
    cfg, appended = fill(tmp_path, abort)
    victim = appended[290]                 # in the last segment: a normal recovery scans it
    body_at = victim.wrote_offset + victim.wrote_bytes - 2 - 20    # inside the body's tail
    patch(cfg, body_at, b"\xff")
    with caplog.at_level(logging.INFO, logger="core"):
        st = open_store(cfg)
    try:
        report = st.recovery_report
        assert report.end_offset == appended[-1].wrote_offset + appended[-1].wrote_bytes
        assert report.dropped_records == 0
        assert [(q.start, q.length) for q in report.quarantined] == [(victim.wrote_offset, victim.wrote_bytes)]
    finally:
        st.shutdown()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"the record at {victim.wrote_offset} is damaged" in w and "quarantined" in w
               for w in warnings), warnings


def test_a_torn_last_record_is_not_a_warning(tmp_path, caplog):
    cfg, appended = fill(tmp_path, abort=True)
    last = appended[-1]
    patch(cfg, last.wrote_offset + 100, bytes(last.wrote_bytes - 100))   # its tail never written
    with caplog.at_level(logging.INFO, logger="core"):
        st = open_store(cfg)
    try:
        assert st.recovery_report.end_offset == last.wrote_offset
        assert st.recovery_report.dropped_records == 1
    finally:
        st.shutdown()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("incomplete last record" in r.getMessage() for r in caplog.records)
