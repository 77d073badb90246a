"""How far the scheduler has delivered each delay level: `config/delayOffset.json`, RocketMQ's
file and shape, `{"offsetTable": {"1": 12, "2": 0, ...}}` (level -> the next offset of its
schedule queue, SCHEDULE_TOPIC_XXXX queue level - 1, still to deliver).

One writer: the scheduler (core.delay.schedule), in the embedded store or the scheduler process.
`persist` replaces the file atomically (`FileOps.write_file_atomic`: tmp, fsync, rename, fsync
the directory) and only with offsets whose re-puts were acknowledged, so a crash loses no
message: what it delivers again is what it had not persisted yet.

A missing file means nothing was delivered yet: every level starts at its queue's first entry.
A file that cannot be parsed (a copy from elsewhere that was cut short, a disk error) is kept
aside as `delayOffset.json.corrupt` and treated as missing: the levels are delivered again from
their queues' first entries, duplicates rather than losses. RocketMQ's fastjson writes the
level keys unquoted (`{1:12}`); such a file is read too.
"""
from __future__ import annotations

import json
import logging
import os
import re

from core.files.fileops import REAL_FILE_OPS, FileOps

log = logging.getLogger(__name__)
FILE_NAME = "delayOffset.json"
_UNQUOTED_KEY = re.compile(r"([{,]\s*)(\d+)(\s*:)")


def parse_delay_file(data: bytes) -> dict[int, int]:
    """Level -> offset of a delayOffset.json's bytes (quoted or fastjson's unquoted keys);
    ValueError saying why when they are not such a table."""
    try:
        text = data.decode("utf-8")
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = json.loads(_UNQUOTED_KEY.sub(r'\1"\2"\3', text))
        table = {int(level): int(offset) for level, offset in parsed["offsetTable"].items()}
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"not a delay offset table: {type(e).__name__}: {e}") from None
    if any(level < 1 or offset < 0 for level, offset in table.items()):
        raise ValueError("a level below 1 or an offset below 0")
    return table


class DelayOffsetStore:
    def __init__(self, config_dir: str, fileops: FileOps = REAL_FILE_OPS):
        self.path = os.path.join(config_dir, FILE_NAME)
        self.fileops = fileops
        self.table: dict[int, int] = {}
        self.found = False             # whether a readable file was there at load
        self._written: dict[int, int] = {}

    def load(self) -> dict[int, int]:
        """Read the file (see the module docstring for a missing or unreadable one)."""
        self.table, self.found = {}, False
        try:
            data = self.fileops.read_file(self.path)
        except FileNotFoundError:
            return self.table
        try:
            self.table = parse_delay_file(data)
            self.found = True
        except ValueError as e:
            log.error("%s cannot be read (%s); kept as %s.corrupt, every level is delivered again "
                      "from the start of its queue", self.path, e, FILE_NAME)
            self.fileops.write_file_atomic(self.path + ".corrupt", data)
            self.table = {}
        self._written = dict(self.table)
        return self.table

    def get(self, level: int, default: int = 0) -> int:
        return self.table.get(level, default)

    def set(self, level: int, offset: int) -> None:
        self.table[level] = offset

    @property
    def dirty(self) -> bool:
        return self.table != self._written

    def persist(self) -> None:
        """Write the table if it changed since the last write."""
        if not self.dirty:
            return
        table = dict(sorted(self.table.items()))
        self.fileops.make_dirs(os.path.dirname(self.path))
        body = {"offsetTable": {str(level): offset for level, offset in table.items()}}
        self.fileops.write_file_atomic(self.path, json.dumps(body, indent=1).encode())
        self._written = table
