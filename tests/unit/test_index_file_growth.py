"""An index file takes disk as it fills (issue 27): RocketMQ's layout at its full size, blocks
for the header and slot table at creation and for the entries a step ahead of the writer,
and a full disk as an OSError before an entry is written, never a SIGBUS."""
from __future__ import annotations

import errno
import os

import pytest

from core.files.fileops import REAL_FILE_OPS
from core.log.index_file import ALLOCATE_STEP, ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE, IndexFile
from core.record.hashing import index_key_hash
from tests.integration.harness import fill_disk, small_tmpfs

SLOTS, ENTRIES = 5_000_000, 20_000_000            # RocketMQ's defaults: a 420,000,040-byte file
BASE_TS = 1_700_000_000_000
SLACK = 64 * 1024                                  # file-system metadata blocks, rounding


def used(path) -> int:
    return os.stat(path).st_blocks * 512


def put(f: IndexFile, first: int, n: int) -> None:
    keys = [f"T#k{i}" for i in range(first, first + n)]
    assert f.put_hashed([index_key_hash(k) for k in keys], list(range(first, first + n)),
                        [BASE_TS + i for i in range(first, first + n)], 0) == n


def test_a_rocketmq_sized_index_takes_disk_as_entries_are_written(tmp_path):
    path = tmp_path / "20260101000000000"
    f = IndexFile(str(path), SLOTS, ENTRIES, REAL_FILE_OPS, create=True)
    table = HEADER_SIZE + SLOTS * SLOT_SIZE
    assert os.stat(path).st_size == 420_000_040                   # RocketMQ's size when read
    assert table <= used(path) <= table + ALLOCATE_STEP + SLACK  # not 420 MB
    written, before = 0, used(path)
    for _ in range(8):
        put(f, written, 25_000)
        written += 25_000
        now = used(path)
        end = table + (1 + written) * ENTRY_SIZE                 # entry 0 is never used
        assert now >= before and end <= now <= end + ALLOCATE_STEP + SLACK
        before = now
    assert used(path) < 30_000_000
    f.flush()
    f.close()
    with open(path, "rb") as raw:                                 # zeros past the last entry
        raw.seek(table + (1 + written) * ENTRY_SIZE)
        assert not raw.read(1 << 20).rstrip(b"\0")
        raw.seek(420_000_040 - 4096)
        assert raw.read() == bytes(4096)
    g = IndexFile(str(path), SLOTS, ENTRIES, REAL_FILE_OPS)       # reopened: grows from its count
    assert g.index_count == written + 1
    assert g.select_phy_offsets("T#k123456", 4, 0, 2**62) == [123456]
    put(g, written, 100_000)
    assert used(path) >= table + (1 + written + 100_000) * ENTRY_SIZE
    assert g.select_phy_offsets(f"T#k{written + 99_999}", 4, 0, 2**62) == [written + 99_999]
    g.close()


def test_a_full_disk_is_an_oserror_before_any_entry_and_the_keys_go_in_when_space_is_back(tmp_path):
    with small_tmpfs(tmp_path, "4m") as mnt:
        path = mnt / "20260101000000000"
        f = IndexFile(str(path), 1000, 1_000_000, REAL_FILE_OPS, create=True)
        filler = fill_disk(mnt)
        first_step = ALLOCATE_STEP // ENTRY_SIZE - 1
        put(f, 0, first_step)                          # inside the first step: written
        with pytest.raises(OSError) as err:            # past it: no SIGBUS, a status
            put(f, first_step, 5_000)
        assert err.value.errno == errno.ENOSPC
        assert f.index_count == first_step + 1
        assert f.select_phy_offsets(f"T#k{first_step}", 4, 0, 2**62) == []
        with pytest.raises(OSError):
            f.put_key("T#single", 1, BASE_TS)
        filler.unlink()
        put(f, first_step, 5_000)
        assert f.index_count == first_step + 5_001
        assert f.select_phy_offsets(f"T#k{first_step + 4_999}", 4, 0, 2**62) == [first_step + 4_999]
        assert f.select_phy_offsets("T#k7", 4, 0, 2**62) == [7]
        f.flush()
        f.close()
