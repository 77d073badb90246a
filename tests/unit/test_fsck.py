"""core.fsck: a clean store checks clean; each kind of damage is found with its kind and offset;
fix=True repairs what recovery and a rebuild from the CommitLog can repair."""
from __future__ import annotations

import hashlib
import os
import struct

import pytest

from core import Message, MessageStore, StoreConfig, StoreFormatError, fsck
from core.log.checkpoint import StoreCheckpoint
from core.record.codec import DispatchRequest, check_record
from core.log.consume_queue import ENTRY, UNIT_SIZE
from core.files.fileops import REAL_FILE_OPS
from core.record.hashing import index_key_hash
from core.log.index_file import ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE
from core.record.message import SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_PREPARED
from core.files.store_files import AbortFile, StoreLock, StoreLockedError

SEGMENT = 4096 * 4
TOPICS = ("T0", "T1", "T2")


def tiny_config(root, **kw) -> StoreConfig:
    """Records without the CRC property (as RocketMQ writes them) unless `kw` says otherwise:
    the damage these tests make by hand is of the fields the body CRC does not cover."""
    kw.setdefault("enabled_append_prop_crc", False)
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=SEGMENT,
                       mapped_file_size_consume_queue=20 * 50, max_hash_slot_num=64,
                       max_index_num=512, **kw)


def message(i: int, sys_flag: int = 0) -> Message:
    return Message(topic=TOPICS[i % 3], body=bytes([65 + i % 26]) * (50 + i % 40), queue_id=i % 2,
                   tags=f"tag{i % 4}", keys=f"k{i} common", sys_flag=sys_flag,
                   properties={"UNIQ_KEY": f"U{i:05d}"})


def build_store(root, count=290, **kw) -> StoreConfig:
    """`count` messages over 3 topics x 2 queues, every 7th one a transaction (prepared or committed)."""
    cfg = tiny_config(root, **kw)
    store = MessageStore(cfg)
    store.load()
    store.start()
    for i in range(count):
        flag = (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_COMMIT)[i // 7 % 2] if i % 7 == 3 else 0
        assert store.put_message(message(i, flag)).status.ok
    assert store.wait_for_dispatch()
    store.shutdown()
    return cfg


@pytest.fixture
def cfg(tmp_path):
    return build_store(tmp_path / "store")


def records(cfg) -> list[DispatchRequest]:
    """Every record of the log, in order, as the dispatcher sees it."""
    out = []
    names = sorted(n for n in os.listdir(cfg.commitlog_dir) if n.isdigit())
    for name in names:
        data = open(os.path.join(cfg.commitlog_dir, name), "rb").read()
        pos = 0
        while True:
            req, size = check_record(data, pos, len(data), False)
            if not isinstance(req, DispatchRequest):
                break
            out.append(req)
            pos += size
    return out


def patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def cq_path(cfg, topic: str, queue_id: int) -> str:
    return os.path.join(cfg.consumequeue_dir, topic, str(queue_id), f"{0:020d}")


def cq_entries(cfg, topic, queue_id) -> list[tuple[int, int, int]]:
    data = open(cq_path(cfg, topic, queue_id), "rb").read()
    return [e for e in ENTRY.iter_unpack(data) if e[1] > 0]


def kinds(report) -> set[str]:
    return {p.kind for p in report.problems}


def only(report, kind):
    assert set(report.counts) == {kind}, report.format_text()
    return [p for p in report.problems if p.kind == kind]


def tree_digest(root) -> dict:
    out = {}
    for parent, _, names in os.walk(root):
        for n in names:
            path = os.path.join(parent, n)
            out[path] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return out


# ---- clean stores ------------------------------------------------------------------------------

def test_clean_store_is_ok_with_stats(cfg):
    recs = records(cfg)
    report = fsck.check(cfg.store_path_root_dir)
    assert report.ok, report.format_text()
    s = report.stats
    assert s["records"] == len(recs) == 290
    assert s["log_end"] == recs[-1].commit_log_offset + recs[-1].msg_size
    assert s["segments"] >= 4 and s["queues"] == 6
    assert s["queue_entries"] == sum(1 for r in recs if r.sys_flag & 0xC != SYSFLAG_TRANSACTION_PREPARED)
    assert s["keys_checked"] > 2 * s["queue_entries"] and s["index_entries"] > 0
    assert "result: clean" in report.format_text()


def test_check_changes_nothing_and_does_not_take_the_lock(cfg):
    before = tree_digest(cfg.store_path_root_dir)
    with StoreLock(cfg.lock_path):                        # as a running store would hold it
        report = fsck.check(cfg.store_path_root_dir)
    assert report.ok
    assert tree_digest(cfg.store_path_root_dir) == before


def test_empty_and_missing_stores(tmp_path):
    with pytest.raises(fsck.NotAStoreError):
        fsck.check(tmp_path / "nowhere")
    with pytest.raises(fsck.NotAStoreError):
        fsck.check(tmp_path)
    store = MessageStore(tiny_config(tmp_path / "fresh"))
    store.load()
    store.shutdown()
    assert fsck.check(tmp_path / "fresh").ok


def test_progress_reaches_the_total(cfg):
    calls = []
    fsck.check(cfg.store_path_root_dir, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1]
    assert all(0 <= d <= t for d, t in calls)


def test_format_keys_come_from_the_store(cfg):
    defaults = StoreConfig(store_path_root_dir="/elsewhere")
    report = fsck.check(cfg.store_path_root_dir, config=defaults)
    assert report.ok and not report.notes
    other = defaults.replace(mapped_file_size_commitlog=8192, message_index_enable=False)
    report = fsck.check(cfg.store_path_root_dir, config=other)
    assert report.ok and report.stats["keys_checked"] == 0
    assert any("created with mapped_file_size_commitlog = 16384" in n for n in report.notes)


# ---- damage, one kind at a time ----------------------------------------------------------------

def test_flipped_body_byte_in_a_middle_record(cfg):
    rec = next(r for r in records(cfg) if SEGMENT + 100 < r.commit_log_offset < 2 * SEGMENT)
    seg = os.path.join(cfg.commitlog_dir, f"{SEGMENT:020d}")
    body_at = rec.commit_log_offset - SEGMENT + 88              # 84 + 4-byte body length, IPv4 hosts
    data = open(seg, "rb").read(body_at + 1)
    patch(seg, body_at, bytes([data[body_at] ^ 0x20]))
    report = fsck.check(cfg.store_path_root_dir)
    (p,) = only(report, "record_crc")
    assert p.offset == rec.commit_log_offset and p.path == seg


def test_cq_entry_past_the_end(cfg):
    end = fsck.check(cfg.store_path_root_dir).stats["log_end"]
    n = len(cq_entries(cfg, "T1", 1))
    patch(cq_path(cfg, "T1", 1), n * UNIT_SIZE, ENTRY.pack(end + 10, 150, 0))
    (p,) = only(fsck.check(cfg.store_path_root_dir), "cq_past_end")
    assert p.offset == n and p.path == cq_path(cfg, "T1", 1)


def test_missing_cq_entry(cfg):
    entries = cq_entries(cfg, "T2", 0)
    last = len(entries) - 1
    patch(cq_path(cfg, "T2", 0), last * UNIT_SIZE, bytes(UNIT_SIZE))
    (p,) = only(fsck.check(cfg.store_path_root_dir), "cq_missing")
    assert p.offset == last and str(entries[last][0]) in p.detail


def test_cq_entry_with_a_wrong_size(cfg):
    phys, size, tags = cq_entries(cfg, "T0", 0)[7]
    patch(cq_path(cfg, "T0", 0), 7 * UNIT_SIZE, ENTRY.pack(phys, size + 4, tags))
    (p,) = only(fsck.check(cfg.store_path_root_dir), "cq_size")
    assert p.offset == 7 and f"size {size + 4}" in p.detail


def test_cq_entry_with_a_wrong_tag_code_and_a_wrong_pointer(cfg):
    phys, size, tags = cq_entries(cfg, "T0", 1)[3]
    patch(cq_path(cfg, "T0", 1), 3 * UNIT_SIZE, ENTRY.pack(phys, size, tags + 1))
    phys, size, tags = cq_entries(cfg, "T0", 1)[5]
    patch(cq_path(cfg, "T0", 1), 5 * UNIT_SIZE, ENTRY.pack(phys + 1, size, tags))
    report = fsck.check(cfg.store_path_root_dir)
    assert [(p.kind, p.offset) for p in report.problems if p.kind != "cq_missing"] == \
        [("cq_bad_pointer", 5), ("cq_tags", 3)]
    assert [p.offset for p in report.problems if p.kind == "cq_missing"] == [5]


def test_cq_entry_of_another_queue_and_a_gap(cfg):
    other = cq_entries(cfg, "T1", 0)[2]
    patch(cq_path(cfg, "T0", 0), 2 * UNIT_SIZE, ENTRY.pack(*other))
    patch(cq_path(cfg, "T0", 0), 4 * UNIT_SIZE, ENTRY.pack(0, 0x7FFFFFFF, 0) * 2)
    report = fsck.check(cfg.store_path_root_dir)
    assert [(p.kind, p.offset) for p in report.problems] == \
        [("cq_gap", 4), ("cq_wrong_record", 2), ("cq_missing", 2), ("cq_missing", 4)]
    assert "queue offsets 4 to 5" in report.problems[0].detail


def _index_entry_position(cfg, phys: int, key: str) -> tuple[str, int]:
    want = index_key_hash(key)
    for name in sorted(n for n in os.listdir(cfg.index_dir) if not n.endswith(".tmp")):
        path = os.path.join(cfg.index_dir, name)
        data = open(path, "rb").read()
        count = struct.unpack_from(">i", data, 36)[0]
        first = HEADER_SIZE + cfg.max_hash_slot_num * SLOT_SIZE
        for i in range(1, count):
            h, p = struct.unpack_from(">iq", data, first + i * ENTRY_SIZE)
            if p == phys and h == want:
                return path, first + i * ENTRY_SIZE
    raise AssertionError(f"no entry for {key} at {phys}")


def test_index_missing_a_key(cfg):
    rec = records(cfg)[100]
    path, at = _index_entry_position(cfg, rec.commit_log_offset, f"{rec.topic}#k100")
    patch(path, at, struct.pack(">i", index_key_hash(f"{rec.topic}#k100") ^ 1))
    (p,) = only(fsck.check(cfg.store_path_root_dir), "index_missing")
    assert p.offset == rec.commit_log_offset and "k100" in p.detail and "U00100" not in p.detail


def test_index_entry_past_the_end(cfg):
    rec = records(cfg)[-1]
    path, at = _index_entry_position(cfg, rec.commit_log_offset, f"{rec.topic}#{rec.uniq_key}")
    patch(path, at + 4, struct.pack(">q", 10 * SEGMENT))
    report = fsck.check(cfg.store_path_root_dir)
    assert kinds(report) == {"index_past_end", "index_missing"}


def test_torn_checkpoint(cfg):
    patch(cfg.checkpoint_path, 70, b"\x55")
    (p,) = only(fsck.check(cfg.store_path_root_dir), "checkpoint_torn")
    assert p.offset == 80


def test_checkpoint_ahead_of_the_data(cfg):
    ckpt = StoreCheckpoint(cfg.checkpoint_path, REAL_FILE_OPS)
    ckpt.dispatched_phy_offset += 1000
    ckpt.shutdown()
    (p,) = only(fsck.check(cfg.store_path_root_dir), "checkpoint_ahead")
    assert p.offset == 72


def test_garbage_after_the_end(cfg):
    end = fsck.check(cfg.store_path_root_dir).stats["log_end"]
    seg_start = end - end % SEGMENT
    patch(os.path.join(cfg.commitlog_dir, f"{seg_start:020d}"), end - seg_start + 100, b"\xab" * 10)
    (p,) = only(fsck.check(cfg.store_path_root_dir), "data_after_end")
    assert p.offset == end + 100


def test_data_in_a_segment_after_the_end_and_a_wrong_physical_offset(cfg):
    end = fsck.check(cfg.store_path_root_dir).stats["log_end"]
    later = os.path.join(cfg.commitlog_dir, f"{end - end % SEGMENT + SEGMENT:020d}")
    REAL_FILE_OPS.create_file(later, SEGMENT)          # as a crash leaves one made ahead
    patch(later, 5000, b"\x01")
    rec = records(cfg)[20]
    seg = os.path.join(cfg.commitlog_dir, f"{rec.commit_log_offset // SEGMENT * SEGMENT:020d}")
    patch(seg, rec.commit_log_offset % SEGMENT + 28, struct.pack(">q", 12345))
    report = fsck.check(cfg.store_path_root_dir)
    assert [(p.kind, p.offset) for p in report.problems] == \
        [("record_offset", rec.commit_log_offset), ("data_after_end", end - end % SEGMENT + SEGMENT + 5000)]


# ---- fix=True ----------------------------------------------------------------------------------

def _damage_everything_repairable(cfg):
    end = fsck.check(cfg.store_path_root_dir).stats["log_end"]
    n = len(cq_entries(cfg, "T1", 1))
    patch(cq_path(cfg, "T1", 1), n * UNIT_SIZE, ENTRY.pack(end + 10, 150, 0))
    patch(cq_path(cfg, "T2", 0), (len(cq_entries(cfg, "T2", 0)) - 1) * UNIT_SIZE, bytes(UNIT_SIZE))
    phys, size, tags = cq_entries(cfg, "T0", 0)[7]
    patch(cq_path(cfg, "T0", 0), 7 * UNIT_SIZE, ENTRY.pack(phys, size + 4, tags))
    rec = records(cfg)[100]
    path, at = _index_entry_position(cfg, rec.commit_log_offset, f"{rec.topic}#k100")
    patch(path, at, struct.pack(">i", index_key_hash(f"{rec.topic}#k100") ^ 1))
    patch(cfg.checkpoint_path, 70, b"\x55")
    seg_start = end - end % SEGMENT
    patch(os.path.join(cfg.commitlog_dir, f"{seg_start:020d}"), end - seg_start + 100, b"\xab" * 10)


def test_fix_repairs_the_repairable(cfg):
    _damage_everything_repairable(cfg)
    before = fsck.check(cfg.store_path_root_dir)
    assert set(before.counts) == {"cq_past_end", "cq_missing", "cq_size", "index_missing",
                                  "checkpoint_torn", "data_after_end"}
    report = fsck.check(cfg.store_path_root_dir, fix=True)
    assert report.ok, report.format_text()
    assert {p.kind for p in report.fixed} == set(before.counts)
    assert any("normal recovery" in a for a in report.actions)
    assert any("rebuilt" in a for a in report.actions)
    assert report.stats["records"] == before.stats["records"]
    assert not os.path.exists(cfg.abort_path)
    assert not any(n.endswith(fsck.ASIDE_SUFFIX) for n in os.listdir(cfg.store_path_root_dir))
    assert fsck.check(cfg.store_path_root_dir).ok
    store = MessageStore(cfg)                            # and the store opens and serves it
    store.load()
    try:
        assert store.get_max_offset_in_queue("T0", 0) == len(cq_entries(cfg, "T0", 0))
        assert store.query_message("T0", "k0", 10, 0, 2**62).messages
    finally:
        store.shutdown()


def test_fix_leaves_a_middle_crc_error_and_drops_nothing(cfg):
    """A CRC error older than the last three written segments (which the normal recovery of
    `--fix` checks, as RocketMQ's does) is reported and left: fixing it would drop the rest."""
    recs = records(cfg)
    assert recs[-1].commit_log_offset // SEGMENT >= 3           # four written segments at least
    rec = next(r for r in recs if 100 < r.commit_log_offset < SEGMENT)
    seg = os.path.join(cfg.commitlog_dir, f"{0:020d}")
    patch(seg, rec.commit_log_offset + 90, b"\x00\x00")
    report = fsck.check(cfg.store_path_root_dir, fix=True)
    assert set(report.counts) == {"record_crc"} and report.stats["records"] == 290
    assert not report.fixed


def test_fix_after_a_crash_runs_the_abnormal_recovery_and_removes_the_abort_file(cfg):
    AbortFile(cfg.abort_path, REAL_FILE_OPS).create(pid=999_999_999)
    patch(cq_path(cfg, "T2", 0), (len(cq_entries(cfg, "T2", 0)) - 1) * UNIT_SIZE, bytes(UNIT_SIZE))
    before = fsck.check(cfg.store_path_root_dir)
    assert any("abort file present" in n for n in before.notes)
    report = fsck.check(cfg.store_path_root_dir, fix=True)
    assert report.ok, report.format_text()
    assert any("abnormal recovery" in a for a in report.actions)
    assert not os.path.exists(cfg.abort_path)


def test_fix_of_a_clean_store_does_nothing(cfg):
    before = tree_digest(cfg.store_path_root_dir)
    report = fsck.check(cfg.store_path_root_dir, fix=True)
    assert report.ok and not report.actions
    assert tree_digest(cfg.store_path_root_dir) == before


def test_fix_refuses_while_the_store_is_locked(cfg):
    patch(cfg.checkpoint_path, 70, b"\x55")
    with StoreLock(cfg.lock_path):
        with pytest.raises(StoreLockedError):
            fsck.check(cfg.store_path_root_dir, fix=True)
    assert "checkpoint_torn" in fsck.check(cfg.store_path_root_dir).counts


def test_run_recovery_creates_no_abort_file(cfg):
    report = fsck.run_recovery(cfg)
    assert not report.abnormal and report.end_offset == fsck.check(cfg.store_path_root_dir).stats["log_end"]
    assert not os.path.exists(cfg.abort_path)


def test_fix_rebuilds_queues_and_index_the_store_refuses_to_load(cfg):
    os.truncate(cq_path(cfg, "T1", 0), 999)
    with open(os.path.join(cfg.index_dir, "not-an-index"), "wb") as f:
        f.write(b"x")
    before = fsck.check(cfg.store_path_root_dir)
    assert {"cq_file", "index_file"} <= set(before.counts)
    assert [p.offset for p in before.problems if p.kind == "cq_missing"] == [0]
    report = fsck.check(cfg.store_path_root_dir, fix=True)
    assert report.ok, report.format_text()
    assert report.actions[0].startswith("recovery failed") and "rebuilt" in report.actions[-1]


def test_unreadable_store_format_file(cfg):
    with open(cfg.store_format_path, "w") as f:
        f.write("{not json")
    report = fsck.check(cfg.store_path_root_dir, config=cfg)
    (p,) = only(report, "store_format")
    assert p.path == cfg.store_format_path and "cannot be read" in p.detail
    with pytest.raises(StoreFormatError):                    # a repair needs the file restored
        fsck.check(cfg.store_path_root_dir, fix=True, config=cfg)
