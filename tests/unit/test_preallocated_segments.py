"""The segment the allocator makes ahead of the writer is deleted at a clean shutdown when
nothing was written to it, as RocketMQ's AllocateMappedFileService deletes its pre-allocated
files, so a clean store holds exactly the segments its data needs."""
from __future__ import annotations

import os

from core.files.fileops import REAL_FILE_OPS
from core.record.message import Message


def _segments(cfg) -> list[str]:
    return sorted(n for n in os.listdir(cfg.commitlog_dir) if n.isdigit())


def test_clean_shutdown_leaves_only_the_written_segments(tiny_config, open_store, wait_until):
    cfg = tiny_config()
    store = open_store(cfg)
    size = cfg.mapped_file_size_commitlog
    body = b"x" * 200
    while store.get_max_phy_offset() < size + size // 2:        # into the second segment
        assert store.put_message(Message(topic="T", body=body)).status == "PUT_OK"
    assert wait_until(lambda: len(_segments(cfg)) == 3, 5.0), "the third segment was not made ahead"
    end = store.get_max_phy_offset()
    store.shutdown()
    assert _segments(cfg) == [f"{0:020d}", f"{size:020d}"]
    assert not os.path.exists(cfg.abort_path)

    again = open_store(cfg)
    assert again.get_max_phy_offset() == end
    got = again.get_message("g", "T", 0, 0, 1000)
    assert got.status == "FOUND" and all(m.body == body for m in got.messages)
    while again.get_max_phy_offset() < 2 * size + 10:           # rolls into a new third segment
        assert again.put_message(Message(topic="T", body=body)).status == "PUT_OK"
    assert again.get_message("g", "T", 0, got.max_offset - 1, 1).status == "FOUND"


def test_a_segment_with_data_is_never_deleted_as_unwritten(tmp_path):
    written, empty = tmp_path / "00000000000000000000", tmp_path / "00000000000000001024"
    for path in (written, empty):
        REAL_FILE_OPS.create_file(str(path), 1024)
    with open(written, "r+b") as f:
        f.write((120).to_bytes(4, "big"))
    assert REAL_FILE_OPS.unlink_unwritten(str(written)) is False
    assert REAL_FILE_OPS.unlink_unwritten(str(empty)) is True
    assert written.exists() and not empty.exists()
    assert REAL_FILE_OPS.unlink_unwritten(str(empty)) is False                # already gone
