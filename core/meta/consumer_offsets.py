"""Consumer group offsets (RocketMQ's ConsumerOffsetManager): `config/consumer_offsets.json`,
owned by whoever holds the store: the reader process (services/reader/service.py) or an embedded
`core.MessageStore`.

The file has RocketMQ's consumerOffset.json shape, `{"offsetTable": {"topic@group":
{"queue_id": offset, ...}}}`, so an operator who knows RocketMQ can read it. Commits change
the table in memory; `persist_if_due` writes the whole file atomically
(`FileOps.write_file_atomic`: tmp, fsync, rename, fsync the directory) at most every
`min_interval` seconds, and `persist` at drain. On a slave the file is the master's (the ha
process writes it: docs/SERVICES.md, ha): the owner does not persist then, and calls
`take_replicated` to pick up each new copy. A file that cannot be parsed is kept aside
as `consumer_offsets.json.corrupt` and the table starts empty: the store must come up.
Commits and writes may come from several threads (an embedded store's callers): the table
is changed and copied under one lock, and the file written by one thread at a time.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time

from core.files.fileops import REAL_FILE_OPS, FileOps

log = logging.getLogger(__name__)
FILE_NAME = "consumer_offsets.json"


def parse_offset_file(data: bytes) -> dict[str, dict[int, int]]:
    """The offset table of a consumer_offsets.json's bytes ("topic@group" -> {queue id:
    offset}); ValueError saying why when they are not one."""
    try:
        table = json.loads(data)["offsetTable"]
        out = {}
        for key, queues in table.items():
            if not isinstance(key, str) or "@" not in key:
                raise ValueError(f"key {key!r} is not topic@group")
            out[key] = {int(q): int(o) for q, o in queues.items()}
        return out
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"not an offset table: {type(e).__name__}: {e}") from None


class ConsumerOffsetStore:
    def __init__(self, config_dir: str, fileops: FileOps = REAL_FILE_OPS, min_interval: float = 0.1):
        self.path = os.path.join(config_dir, FILE_NAME)
        self.fileops = fileops
        self.min_interval = min_interval
        self._table: dict[str, dict[int, int]] = {}
        self._dirty = False
        self._last_write = 0.0
        self._lock = threading.Lock()            # the table
        self._writing = threading.Lock()         # the file
        self._replicated_stamp = None            # the file as take_replicated last read it

    def load(self) -> None:
        try:
            data = self.fileops.read_file(self.path)
        except FileNotFoundError:
            return
        try:
            self._table = parse_offset_file(data)
        except ValueError as e:
            log.error("%s cannot be read (%s); kept as %s.corrupt, starting empty", self.path, e,
                      FILE_NAME)
            self.fileops.write_file_atomic(self.path + ".corrupt", data)
            self._table = {}

    def take_replicated(self) -> bool:
        """On a slave: merge the master's file, as the slave's ha process last wrote it, into
        the table (each topic@group of the file replaces the slave's, as RocketMQ's slave
        takes its master's table; groups only the slave knows are kept in memory). Read only
        when the file changed since the last call; True when it was merged. An unreadable
        file is logged and left alone (the ha process writes only tables it could parse)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._replicated_stamp:
            return False
        self._replicated_stamp = stamp
        try:
            table = parse_offset_file(self.fileops.read_file(self.path))
        except (OSError, ValueError) as e:
            log.error("%s not taken from the master: %s", self.path, e)
            return False
        with self._lock:
            self._table.update(table)
        return True

    @staticmethod
    def _key(group: str, topic: str) -> str:
        return f"{topic}@{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            queues = self._table.setdefault(self._key(group, topic), {})
            if queues.get(queue_id) != offset:
                queues[queue_id] = offset
                self._dirty = True

    def fetch(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, -1 when the group never committed one for this queue."""
        return self._table.get(self._key(group, topic), {}).get(queue_id, -1)

    def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        with self._lock:
            return dict(self._table.get(self._key(group, topic), {}))

    @property
    def dirty(self) -> bool:
        return self._dirty

    def due_in(self, now: float | None = None) -> float | None:
        """Seconds until a pending write may happen; None when nothing is pending."""
        if not self._dirty:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, self._last_write + self.min_interval - now)

    def persist_if_due(self, now: float | None = None) -> bool:
        due = self.due_in(now)
        if due is None or due > 0:
            return False
        self.persist()
        return True

    def persist(self) -> None:
        with self._writing:                      # one writer: an older copy never lands last
            with self._lock:
                if not self._dirty:
                    return
                table = {key: {str(q): o for q, o in sorted(queues.items())}
                         for key, queues in sorted(self._table.items())}
                self._dirty = False              # a commit from now on makes it dirty again
            try:
                self.fileops.make_dirs(os.path.dirname(self.path))
                self.fileops.write_file_atomic(self.path,
                                               json.dumps({"offsetTable": table}, indent=1).encode())
            except BaseException:
                self._dirty = True               # not written: try again next time
                raise
            self._last_write = time.monotonic()
