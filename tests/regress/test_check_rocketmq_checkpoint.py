"""Regression: `core.fsck.check` reported a store as RocketMQ leaves it with a
`checkpoint_torn` problem: RocketMQ's StoreCheckpoint writes its five fields at 0..39 of the
4 KiB file (reference 7.1) and no CRC, so the CRC of mqstore's extension (DESIGN.md 3,
at 80) never matches. Such a checkpoint (bytes 40..4095 all zero) is a note, not a problem;
recovery still ignores it (a scan from the oldest segment after an abnormal exit). A torn
checkpoint of mqstore's own is still reported."""
import os
import struct

from core import MessageStore, fsck


def test_a_rocketmq_checkpoint_checks_clean(tiny_config, written_store):
    cfg = tiny_config()
    end = written_store(cfg, 30, body=b"x" * 40)
    with open(cfg.checkpoint_path, "r+b") as f:
        ts = struct.unpack_from(">q", f.read(8))[0]
        f.seek(0)
        f.write(struct.pack(">qqqqq", ts, ts, 0, 0, end) + bytes(4096 - 40))
    report = fsck.check(cfg.store_path_root_dir, config=cfg)
    assert report.ok, report.format_text()
    assert any("RocketMQ" in n for n in report.notes), report.notes
    store = MessageStore(cfg)                      # and it still opens and serves
    store.load()
    try:
        assert len(store.get_message("g", "T", 0, 0, 32).messages) == 30
    finally:
        store.shutdown()


def test_a_torn_checkpoint_of_ours_is_still_reported(tiny_config, written_store):
    cfg = tiny_config()
    written_store(cfg, 30, body=b"x" * 40)
    with open(cfg.checkpoint_path, "r+b") as f:
        f.seek(8)
        f.write(b"\xff")
    report = fsck.check(cfg.store_path_root_dir, config=cfg)
    assert set(report.counts) == {"checkpoint_torn"}, report.format_text()
    assert os.path.getsize(cfg.checkpoint_path) == 4096
