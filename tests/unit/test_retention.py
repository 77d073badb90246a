"""Deletion of expired CommitLog segments by the supervisor: real segment files in a
directory and a real control block, the clock and the disk ratio given by the test."""
from __future__ import annotations

import os
import time

import pytest

from core.config import StoreConfig
from core.files.mapped_file import offset_to_file_name
from ipc.control_block import ControlBlock, Word
from supervisor.retention import Retention, disk_used_ratio

SIZE = 4096
HOUR = 3600


@pytest.fixture
def cb():
    block = ControlBlock(f"mqstore-test-retention-{os.getpid()}", create=True)
    yield block
    block.close()


def at_hour(hour: int) -> float:
    """Today at hour:30, local time."""
    t = time.localtime()
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, hour, 30, 0, 0, 0, -1))


def make_store(tmp_path, count: int, age_h: float, when: float, **overrides):
    """`count` segments, each last modified `age_h` hours before `when`."""
    config = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=SIZE,
                         **{"file_reserved_time": 1, "delete_when": "04", **overrides})
    os.makedirs(config.commitlog_dir)
    for i in range(count):
        path = os.path.join(config.commitlog_dir, offset_to_file_name(i * SIZE))
        with open(path, "wb") as f:
            f.write(b"\0" * SIZE)
        os.utime(path, (when - age_h * HOUR, when - age_h * HOUR))
    return config


def names(config) -> list[int]:
    return sorted(int(n) for n in os.listdir(config.commitlog_dir))


def set_positions(cb, end: int) -> None:
    for w in (Word.WROTE, Word.FLUSHED, Word.CONFIRM, Word.DISPATCHED, Word.DISPATCHED_DURABLE):
        cb.set(w, end)


def test_expired_segments_go_at_the_delete_hour_and_min_phy_follows(tmp_path, cb):
    config = make_store(tmp_path, 5, age_h=2, when=at_hour(4))
    set_positions(cb, 5 * SIZE - 100)
    r = Retention(config, cb, disk_ratio=lambda: 0.1)
    assert r.delete_expired(at_hour(3)) == 0                       # not the hour
    assert r.delete_expired(at_hour(4)) == 4                       # all but the last
    assert names(config) == [4 * SIZE]
    assert cb.get(Word.MIN_PHY) == 4 * SIZE


def test_nothing_at_or_after_confirm_flushed_or_durable_dispatch_goes(tmp_path, cb):
    config = make_store(tmp_path, 6, age_h=2, when=at_hour(4))
    set_positions(cb, 6 * SIZE)
    cb.set(Word.CONFIRM, 2 * SIZE + 10)                                 # inside segment 2
    r = Retention(config, cb, disk_ratio=lambda: 0.1)
    assert r.delete_expired(at_hour(4)) == 2
    assert names(config)[0] == 2 * SIZE
    cb.set(Word.CONFIRM, 6 * SIZE)
    cb.set(Word.DISPATCHED_DURABLE, 3 * SIZE)                           # segment 3 not durable yet
    assert r.delete_expired(at_hour(4)) == 1
    cb.set(Word.DISPATCHED_DURABLE, 6 * SIZE)
    cb.set(Word.FLUSHED, 4 * SIZE - 1)
    assert r.delete_expired(at_hour(4)) == 0
    assert cb.get(Word.MIN_PHY) == 3 * SIZE


def test_young_segments_stay_unless_the_disk_is_over_the_forced_ratio(tmp_path, cb):
    config = make_store(tmp_path, 4, age_h=0.5, when=at_hour(13))
    set_positions(cb, 4 * SIZE)
    ratio = [0.80]
    r = Retention(config, cb, disk_ratio=lambda: ratio[0])
    assert r.delete_expired(at_hour(13)) == 0                      # too young, not the hour
    ratio[0] = 0.86                                                     # over 85 %: clean now
    assert r.delete_expired(at_hour(13)) == 3
    assert names(config) == [3 * SIZE]


def test_a_full_disk_deletes_expired_segments_outside_the_hour(tmp_path, cb):
    config = make_store(tmp_path, 3, age_h=2, when=at_hour(13), clean_file_forcibly_enable=False)
    set_positions(cb, 3 * SIZE)
    r = Retention(config, cb, disk_ratio=lambda: 0.99)
    assert r.delete_expired(at_hour(13)) == 2


def test_batch_limit_and_interval(tmp_path, cb):
    config = make_store(tmp_path, 6, age_h=2, when=at_hour(4), delete_file_batch_max=2,
                        clean_resource_interval=10000)
    set_positions(cb, 6 * SIZE)
    clock = [at_hour(4)]
    r = Retention(config, cb, clock=lambda: clock[0], disk_ratio=lambda: 0.1)
    assert r.tick() == 2
    assert r.tick() == 0                                                # within the interval
    clock[0] += 10
    assert r.tick() == 2
    assert len(names(config)) == 2


def test_the_disk_ratio_is_rocketmqs_used_over_used_plus_available(tmp_path):
    st = os.statvfs(tmp_path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    available = st.f_bavail * st.f_frsize                   # the root-reserved blocks count for neither
    expected = used / (used + available)
    ratio = disk_used_ratio(str(tmp_path))
    assert expected <= ratio <= expected + 0.01 + 1e-9        # rounded up to hundredths, as df's Use%
    assert round(ratio * 100, 6) == int(round(ratio * 100, 6))
    assert disk_used_ratio(str(tmp_path / "missing")) == -1.0


def test_over_the_warning_ratio_puts_stop_until_the_disk_is_below_it_again(tmp_path, cb):
    config = make_store(tmp_path, 2, age_h=0, when=time.time(), disk_space_warning_level_ratio=90)
    ratio = [0.90]
    r = Retention(config, cb, disk_ratio=lambda: ratio[0])
    assert not r.check_space() and cb.get(Word.SPACE_FULL) == 0      # at the ratio: not over it
    ratio[0] = 0.91
    r.tick()
    assert cb.get(Word.SPACE_FULL) == 1
    ratio[0] = 0.89
    r.tick()                                                          # checked on every tick
    assert cb.get(Word.SPACE_FULL) == 0


def test_deletion_starts_only_above_the_ratios_as_rocketmq_compares(tmp_path, cb):
    config = make_store(tmp_path, 3, age_h=2, when=at_hour(13), disk_max_used_space_ratio=75,
                        clean_file_forcibly_enable=False)
    set_positions(cb, 3 * SIZE)
    ratio = [0.75]
    r = Retention(config, cb, disk_ratio=lambda: ratio[0])
    assert r.delete_expired(at_hour(13)) == 0                     # at 75 %: not over it
    ratio[0] = -1.0                                                   # unreadable: RocketMQ deletes
    assert r.delete_expired(at_hour(13)) == 2
