"""Scheduled deletion of expired CommitLog segments (RocketMQ's CleanCommitLogService); the
supervisor is the only deleter of CommitLog files (docs/SERVICES.md).

Every `clean_resource_interval` ms the supervisor calls `Retention.tick()`. Deletion runs when
one of these holds:
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
import shutil
import time

from core.fileops import REAL_FILE_OPS
from ipc.control_block import ControlBlock, Word

log = logging.getLogger("mqstore.supervisor.retention")


class Retention:
    def __init__(self, config, cb: ControlBlock, fileops=REAL_FILE_OPS, clock=time.time,
                 disk_ratio=None):
        self.config = config
        self.cb = cb
        self.fileops = fileops
        self.clock = clock                        # wall-clock seconds (delete_when is an hour)
        self.disk_ratio = disk_ratio or self._disk_ratio
        self.interval_s = config.clean_resource_interval / 1000.0
        self._next = 0.0

    def _disk_ratio(self) -> float:
        usage = shutil.disk_usage(self.config.commitlog_dir)
        return usage.used / usage.total if usage.total else 0.0

    def tick(self) -> int:
        """Delete what is due now (at most once per interval); the number of segments deleted."""
        now = self.clock()
        if now < self._next:
            return 0
        self._next = now + self.interval_s
        return self.delete_expired(now)

    def delete_expired(self, now: float) -> int:
        cfg = self.config
        ratio = self.disk_ratio() * 100
        forced = cfg.clean_file_forcibly_enable and ratio >= cfg.disk_space_clean_forcibly_ratio
        timely = time.localtime(now).tm_hour in cfg.delete_when_hours
        if not (timely or forced or ratio >= cfg.disk_max_used_space_ratio):
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
