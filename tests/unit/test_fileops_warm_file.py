"""Segments warmed ahead of need (warm_mapped_file_enable): the seam's warm_file prefaults a
whole file without changing its bytes, and an embedded store with warming on rolls through
segments created and warmed by its allocator thread."""
import os

from core import Message
from core.files.fileops import FileOps


def test_warm_file_keeps_the_zeros_and_reports_mlock(tmp_path):
    ops = FileOps()
    path = str(tmp_path / "00000000000000000000")
    ops.create_file(path, 64 * 1024)
    assert ops.warm_file(path, 64 * 1024) in (True, False)
    with open(path, "rb") as f:
        assert f.read() == bytes(64 * 1024)


def test_store_with_warming_rolls_through_prepared_segments(tiny_config, open_store):
    cfg = tiny_config(warm_mapped_file_enable=True)
    store = open_store(cfg)
    for i in range(300):
        assert store.put_message(Message(topic="W", body=b"w" * 200)).ok
    assert store.wait_for_dispatch()
    names = sorted(n for n in os.listdir(cfg.commitlog_dir) if n.isdigit())
    assert len(names) >= 4
    got = store.get_message("g", "W", 0, 0, 32)
    assert got.status.name == "FOUND" and got.messages[0].body == b"w" * 200
