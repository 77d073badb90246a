"""Regression: a reput process killed inside IndexFile.put_key, after the slot was written but
before the header's count, left the slot pointing at the entry just past the count. The put
of the same record after the restart chained that entry to itself, and every older key of
that slot became unfindable (fsck: index_missing after a SIGKILL of reput)."""
from core.files.fileops import FileOps
from core.log.index_file import HEADER_SIZE, IndexFile


def test_put_after_a_put_torn_between_slot_and_header(tmp_path):
    path = str(tmp_path / "20260101000000000")
    f = IndexFile(path, 4, 64, FileOps(), create=True)       # 4 slots: many keys share one
    keys = [f"T#k{i}" for i in range(12)]
    for i, k in enumerate(keys[:-1]):
        assert f.put_key(k, 100 + i, 1_700_000_000_000)
    count = f.index_count
    header = bytes(f._mapping.buf[:HEADER_SIZE])
    assert f.put_key(keys[-1], 111, 1_700_000_000_000)       # the put the kill interrupts...
    f._mapping.buf[:HEADER_SIZE] = header                     # ...before its header was written
    assert f.index_count == count
    assert f.put_key(keys[-1], 111, 1_700_000_000_000)       # re-dispatched after the restart
    for i, k in enumerate(keys):
        assert 100 + i in f.select_phy_offsets(k, 64, 0, 2**62), k
    f.close()
