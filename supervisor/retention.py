"""Scheduled deletion of expired CommitLog segments (RocketMQ's CleanCommitLogService) and the
disk-space check that stops puts on a nearly full disk; the supervisor is the only deleter of
CommitLog files (docs/SERVICES.md).

How full the disk is, is RocketMQ's ratio (`disk_used_ratio`): used / (used + available to
unprivileged users), rounded up to hundredths, what `df` shows as Use% (the blocks reserved
for root count as neither).

The supervisor calls `Retention.tick()` every second. Each call checks the disk (RocketMQ's
isSpaceFull): above `disk_space_warning_level_ratio` percent it sets SPACE_FULL, and the
appender answers every put SERVICE_NOT_AVAILABLE until the ratio is back at or below it.
Every `clean_resource_interval` ms, deletion runs when one of these holds:
- the hour of the day is one of `delete_when` ("04", "04;16"),
- the store's file system is fuller than `disk_max_used_space_ratio` percent,
and it deletes, oldest first, segments last modified more than `file_reserved_time` hours ago.
When the file system is fuller than `disk_space_clean_forcibly_ratio` and
`clean_file_forcibly_enable` is on, segments are deleted whatever their age (RocketMQ's
"clean immediately"), so that a full disk does not stop the store.

What is never deleted: the last segment, and any segment that is not wholly below CONFIRM,
FLUSHED and DISPATCHED_DURABLE (what readers may still need to see, what is not durable yet,
and what the consume queues and the index may still have to be rebuilt from). Only a prefix
of the log goes: deletion stops at the first segment that must stay. At most
`delete_file_batch_max` segments go per tick.

For each segment, MIN_PHY is raised to the segment's end *before* the file is unlinked, so
that the reader and the reput dispatcher stop at the new first byte (a pull below it is
OFFSET_TOO_SMALL) before the bytes disappear; processes that still map the file keep their
view until they unmap it, which Linux allows. Consume-queue and index files that point only
into deleted segments belong to the reput process, which drops them by MIN_PHY.
"""
from __future__ import annotations

import logging
import os
import time

from core.files.fileops import REAL_FILE_OPS
from ipc.control_block import ControlBlock, Word

log = logging.getLogger("mqstore.supervisor.retention")


def disk_used_ratio(path: str) -> float:
    """RocketMQ's used share (0..1) of the file system holding `path`: used / (used + available),
    rounded up to hundredths; -1.0 when it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    seen = used + st.f_bavail * st.f_frsize
    return -(-used * 100 // seen) / 100 if seen > 0 else 0.0


class Retention:
    def __init__(self, config, cb: ControlBlock, fileops=REAL_FILE_OPS, clock=time.time,
                 disk_ratio=None):
        self.config = config
        self.cb = cb
        self.fileops = fileops
        self.clock = clock                        # wall-clock seconds (delete_when is an hour)
        self.disk_ratio = disk_ratio or (lambda: disk_used_ratio(config.commitlog_dir))
        self.interval_s = config.clean_resource_interval / 1000.0
        self._next = 0.0

    def tick(self) -> int:
        """Check the disk, and delete what is due now (at most once per interval); the number
        of segments deleted."""
        now = self.clock()
        self.check_space()
        if now < self._next:
            return 0
        self._next = now + self.interval_s
        return self.delete_expired(now)

    def check_space(self) -> bool:
        """Set SPACE_FULL while the disk is fuller than disk_space_warning_level_ratio, clear
        it once it is not; True while it is set."""
        ratio = self.disk_ratio()
        limit = self.config.disk_space_warning_level_ratio
        full = ratio * 100 > limit
        if full != bool(self.cb.get(Word.SPACE_FULL)):
            self.cb.set(Word.SPACE_FULL, int(full))
            if full:
                log.error("the disk is %.0f%% full, over disk_space_warning_level_ratio %d%%: puts "
                          "are refused (SERVICE_NOT_AVAILABLE) until it is not", ratio * 100, limit)
            else:
                log.warning("the disk is %.0f%% full, at or below disk_space_warning_level_ratio "
                            "%d%%: puts are taken again", ratio * 100, limit)
        return full

    def delete_expired(self, now: float) -> int:
        cfg = self.config
        ratio = self.disk_ratio() * 100
        unknown = ratio < 0                          # RocketMQ deletes when it cannot tell
        forced = cfg.clean_file_forcibly_enable and ratio > cfg.disk_space_clean_forcibly_ratio
        timely = time.localtime(now).tm_hour in cfg.delete_when_hours
        if not (timely or forced or unknown or ratio > cfg.disk_max_used_space_ratio):
            return 0
        reserved_s = cfg.file_reserved_time * 3600
        limit = min(self.cb.get(Word.CONFIRM), self.cb.get(Word.FLUSHED),
                    self.cb.get(Word.DISPATCHED_DURABLE))
        deleted = 0
        for start, path in self.segments()[:-1]:
            end = start + cfg.mapped_file_size_commitlog
            if end > limit or deleted >= cfg.delete_file_batch_max:
                break
            try:
                age = now - os.stat(path).st_mtime
            except FileNotFoundError:
                continue
            if age < reserved_s and not forced:
                break
            self.cb.raise_to(Word.MIN_PHY, end)
            try:
                self.fileops.unlink(path)
            except FileNotFoundError:
                pass
            deleted += 1
            log.info("deleted CommitLog segment %s (%.1f h old%s); the log now starts at %d",
                     os.path.basename(path), age / 3600, ", disk over the forced-clean ratio"
                     if forced else "", end)
        return deleted

    def segments(self) -> list[tuple[int, str]]:
        """(start offset, path) of every CommitLog segment, oldest first."""
        try:
            names = os.listdir(self.config.commitlog_dir)
        except FileNotFoundError:
            return []
        return sorted((int(n), os.path.join(self.config.commitlog_dir, n))
                      for n in names if n.isdigit())
