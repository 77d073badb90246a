"""core/fsck_index.py: a flip anywhere in an index file's header is found by `check` (issue
33: 0 of 3 were before), a header a killed writer left behind is not taken for damage, and
`check --fix` rebuilds the index so that its keys answer again."""
from __future__ import annotations

import os
import shutil
import struct

import pytest

from core import MessageStore, fsck
from core.files.fileops import REAL_FILE_OPS
from core.log.index_file import ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE, IndexFile
from tests.crash.flip_campaign import flip
from tests.unit.test_fsck import build_store, kinds, patch

# (field, byte offset in the header, width): RocketMQ's IndexHeader
FIELDS = [("begin timestamp", 0, 8), ("end timestamp", 8, 8), ("begin phys offset", 16, 8),
          ("end phys offset", 24, 8), ("slot count", 32, 4), ("index count", 36, 4)]


@pytest.fixture(scope="module")
def intact(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("idx") / "store")


def index_path(cfg, which: int = 0) -> str:
    """The `which`th index file (the store has two: a full one and the newest)."""
    names = sorted(n for n in os.listdir(cfg.index_dir) if not n.endswith(".tmp"))
    assert len(names) == 2
    return os.path.join(cfg.index_dir, names[which])


def copy_of(cfg, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(cfg.store_path_root_dir, root)
    return cfg.replace(store_path_root_dir=str(root))


def test_an_intact_index_header_is_no_problem(intact):
    assert "index_header" not in kinds(fsck.check(intact.store_path_root_dir))


@pytest.mark.parametrize("field, at, width", FIELDS)
@pytest.mark.parametrize("which", ["low", "middle", "high"])
@pytest.mark.parametrize("file", [0, 1])
def test_a_flipped_bit_in_any_header_field_is_found(intact, tmp_path, field, at, width, which, file):
    cfg = copy_of(intact, tmp_path)
    byte = {"low": at + width - 1, "middle": at + width // 2, "high": at}[which]
    bit = {"low": 0, "middle": 3, "high": 6}[which]
    flip(index_path(cfg, file), byte, bit)
    report = fsck.check(cfg.store_path_root_dir)
    assert "index_header" in kinds(report), f"{field}: {report.format_text()}"


def test_entries_a_killed_writer_left_past_the_count_are_no_damage(intact, tmp_path):
    """A put writes its entries and slots before the header: killed in between, the file has
    whole entries past the count and slots pointing at them; check must not call that damage."""
    cfg = copy_of(intact, tmp_path)
    path = index_path(cfg, 1)
    f = IndexFile(path, cfg.max_hash_slot_num, cfg.max_index_num, REAL_FILE_OPS)
    try:
        header = f._header()
        f._put_each([1234567, 7654321], [header[3], header[3]], [header[1], header[1]], 0, 2, header)
        f.flush()                                      # entries and slots, and no header
    finally:
        f.close()
    assert "index_header" not in kinds(fsck.check(cfg.store_path_root_dir))


def test_fix_rebuilds_an_index_whose_header_is_damaged(intact, tmp_path):
    cfg = copy_of(intact, tmp_path)
    patch(index_path(cfg, 1), 36, struct.pack(">i", 3))            # the count cut to 2 entries
    before = fsck.check(cfg.store_path_root_dir)
    assert "index_header" in kinds(before)
    report = fsck.check(cfg.store_path_root_dir, fix=True)
    assert report.ok, report.format_text()
    assert fsck.check(cfg.store_path_root_dir).ok
    store = MessageStore(cfg)
    store.load()
    try:
        assert len(store.query_message("T0", "common", 1000, 0, 2**62).messages) > 2
    finally:
        store.shutdown()


# (field, byte offset in a 20-byte entry, width): key hash, phys offset, time diff, prev index
ENTRY_FIELDS = [("key hash", 0, 4), ("phys offset", 4, 8), ("time diff", 12, 4), ("prev index", 16, 4)]


def entry_at(cfg, path: str, number: int) -> int:
    return HEADER_SIZE + cfg.max_hash_slot_num * SLOT_SIZE + number * ENTRY_SIZE


def test_intact_entries_and_slots_are_no_problem(intact):
    assert "index_entry" not in kinds(fsck.check(intact.store_path_root_dir))


@pytest.mark.parametrize("field, at, width", ENTRY_FIELDS)
@pytest.mark.parametrize("bit", [0, 9, 20])
@pytest.mark.parametrize("number", [1, 150, 400])
def test_a_flipped_bit_in_any_entry_field_is_found_and_fixed(intact, tmp_path, field, at, width,
                                                            bit, number):
    """A time difference flipped alone answered every unbounded query as before and `check`
    found nothing (24 of 25 time-difference flips); every field is now held to its record."""
    cfg = copy_of(intact, tmp_path)
    path = index_path(cfg, 0)
    bit %= width * 8 - 1                           # a sign bit flip is a past-the-end offset
    flip(path, entry_at(cfg, path, number) + at + width - 1 - bit // 8, bit % 8)
    report = fsck.check(cfg.store_path_root_dir)
    assert kinds(report) & {"index_entry", "index_missing", "index_past_end"}, \
        f"{field}: {report.format_text()}"
    fixed = fsck.check(cfg.store_path_root_dir, fix=True)
    assert fixed.ok, fixed.format_text()


def test_a_time_difference_flip_is_an_index_entry_problem(intact, tmp_path):
    cfg = copy_of(intact, tmp_path)
    path = index_path(cfg, 0)
    flip(path, entry_at(cfg, path, 200) + 15, 2)                # 4 s later than its record
    report = fsck.check(cfg.store_path_root_dir)
    assert set(report.counts) == {"index_entry"}, report.format_text()
    assert "time difference" in report.problems[0].detail


def test_a_link_into_another_chain_is_an_index_entry_problem(intact, tmp_path):
    """The oldest entry of a slot linked (prev 0 -> 1) into the chain of entry 1: its queries
    still answer, and the chain is wrong."""
    cfg = copy_of(intact, tmp_path)
    path = index_path(cfg, 0)
    data = open(path, "rb").read()
    base = entry_at(cfg, path, 0)
    number = next(n for n in range(2, 500) if struct.unpack_from(">i", data, base + n * ENTRY_SIZE + 16)[0] == 0
                  and struct.unpack_from(">i", data, base + n * ENTRY_SIZE)[0] % cfg.max_hash_slot_num
                  != struct.unpack_from(">i", data, base + ENTRY_SIZE)[0] % cfg.max_hash_slot_num)
    flip(path, base + number * ENTRY_SIZE + 19, 0)
    report = fsck.check(cfg.store_path_root_dir)
    assert set(report.counts) == {"index_entry"}, report.format_text()
    assert "link to another entry" in report.problems[0].detail


def test_entries_checked_in_chunks_give_the_same_answer(intact, tmp_path, monkeypatch):
    """The entries are checked CHUNK at a time, the slots' chains carried across chunks."""
    from core import fsck_index
    cfg = copy_of(intact, tmp_path)
    whole = fsck.check(cfg.store_path_root_dir)
    monkeypatch.setattr(fsck_index, "CHUNK", 37)
    assert "index_entry" not in kinds(whole) and fsck.check(cfg.store_path_root_dir).ok
    path = index_path(cfg, 0)
    flip(path, entry_at(cfg, path, 200) + 15, 2)
    flip(path, entry_at(cfg, path, 300) + 19, 1)
    chunked = fsck.check(cfg.store_path_root_dir)
    monkeypatch.setattr(fsck_index, "CHUNK", 1 << 20)
    whole = fsck.check(cfg.store_path_root_dir)
    assert [p.detail for p in chunked.problems] == [p.detail for p in whole.problems]
    assert "index_entry" in kinds(chunked)
