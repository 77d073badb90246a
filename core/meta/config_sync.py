"""The metadata files a master gives its slaves (RocketMQ's SlaveSynchronize: topic config,
consumer offsets, delay offsets): which files, how a master notices that one changed, and how a
slave checks a copy and installs it. The ha process carries them (services/ha/master.py sends,
services/ha/slave.py installs; the wire is ipc/ha_protocol.py's `config` push).

- `SYNCED_FILES`: name -> the parser of that file's own module (core.meta.topics,
  core.meta.consumer_offsets, core.delay.offsets), so a copy is checked by the one reader of its
  format before it replaces anything.
- `ConfigSnapshot` (master): `changed()` stats each file (inode, mtime, size) and reads only
  those whose stamp moved; a file is known by the SHA-256 of its bytes, so a rewrite with the
  same content is no change.
- `install` (slave): checks the bytes, and replaces `<config_dir>/<name>` atomically through
  the I/O seam (`FileOps.write_file_atomic`: tmp, fsync, rename, fsync the directory) unless the
  file already holds those bytes.

The timer wheel's checkpoint (timerqueue/checkpoint.json) is not among them: it speaks for the
window files beside it, which a slave does not have. A promoted slave finds no checkpoint and
rebuilds its wheel from the timer topic's consume queue, which replication gave it
(core.delay.timer_job): no timer is lost; those the old master had delivered and that the queue still
holds are delivered again, with the same UNIQ_KEY.
"""
from __future__ import annotations

import hashlib
import logging
import os

from core.meta.consumer_offsets import FILE_NAME as OFFSETS_FILE, parse_offset_file
from core.delay.offsets import FILE_NAME as DELAY_FILE, parse_delay_file
from core.files.fileops import FileOps
from core.meta.topics import FILE_NAME as TOPICS_FILE, TopicTableError, parse_topic_file

log = logging.getLogger(__name__)
MAX_FILE_BYTES = 16 * 1024 * 1024      # a bigger copy is refused on either side

SYNCED_FILES = {
    TOPICS_FILE: lambda raw: parse_topic_file(TOPICS_FILE, raw),
    OFFSETS_FILE: parse_offset_file,
    DELAY_FILE: parse_delay_file,
}


class ConfigFileError(ValueError):
    """A copy that is not a file a master may send; the message says why."""


def digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def check(name: str, data: bytes) -> None:
    """Raise ConfigFileError unless `data` is a readable `name` of at most MAX_FILE_BYTES."""
    parse = SYNCED_FILES.get(name)
    if parse is None:
        raise ConfigFileError(f"{name!r} is not a replicated file (one of {', '.join(sorted(SYNCED_FILES))})")
    if len(data) > MAX_FILE_BYTES:
        raise ConfigFileError(f"{name}: {len(data)} bytes, over the {MAX_FILE_BYTES} a copy may have")
    try:
        parse(data)
    except (ValueError, TopicTableError) as e:
        raise ConfigFileError(f"{name}: {e}") from None


def install(config_dir: str, name: str, data: bytes, fileops: FileOps) -> bool:
    """Check `data` and make it `<config_dir>/<name>`; False when the file held it already."""
    check(name, data)
    path = os.path.join(config_dir, name)
    try:
        if digest(fileops.read_file(path)) == digest(data):
            return False
    except FileNotFoundError:
        pass
    fileops.make_dirs(config_dir)
    fileops.write_file_atomic(path, data)
    return True


class ConfigSnapshot:
    """The master's replicated files as last read: name -> (digest, bytes)."""

    def __init__(self, config_dir: str, fileops: FileOps):
        self.config_dir = config_dir
        self.fileops = fileops
        self.files: dict[str, tuple[bytes, bytes]] = {}
        self._stamps: dict[str, tuple] = {}

    def refresh(self) -> list[str]:
        """Read the files whose stamp moved; the names whose content changed. A file that is
        missing, unreadable or too big keeps its previous copy (none at first), logged."""
        changed = []
        for name in SYNCED_FILES:
            path = os.path.join(self.config_dir, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if self._stamps.get(name) == stamp:
                continue
            self._stamps[name] = stamp
            try:
                data = self.fileops.read_file(path)
                check(name, data)
            except (OSError, ConfigFileError) as e:
                log.error("%s is not sent to slaves: %s", path, e)
                continue
            d = digest(data)
            if self.files.get(name, (None,))[0] != d:
                self.files[name] = (d, data)
                changed.append(name)
        return changed
