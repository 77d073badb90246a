"""`EpochFile`: `config/epochs.json`, the store's replication history (RocketMQ 5's epoch
file, DESIGN.md section 10), and the divergence rule between two histories.

An entry `(epoch, start_offset, store_id)` says that from CommitLog offset `start_offset` on,
the bytes were written by the master of `epoch`, the store `store_id`. A store appends an entry
each time it becomes master (epoch = the highest it has seen + 1, start = its max offset); a
slave records its master's entries as it follows (`adopt`). Epochs grow along the list and so
do start offsets.

The file is one JSON object `{"version": 1, "store_id": ID, "entries": [[epoch, start,
store_id], ...]}` (ID: this store's own id, random hex made at its first start as a replica),
replaced whole through the I/O seam (`FileOps.write_file_atomic`: tmp, fsync, rename, fsync
the directory), so a crash leaves the old history or the new one, never half of one. Its one
writer is the store's `ha` process (services/ha/service.py); `mqstore status` and tests read it.

`common_offset(mine, my_max, theirs, their_max)` is the last offset up to which two logs hold
the same bytes, as far as their histories say: the end of the newest epoch both histories have
(same epoch, start offset and master), bounded by both logs' ends. A slave cut back to it can follow the
other store; histories with no epoch in common share nothing (0).
"""
from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass

from core.files.fileops import FileOps

EPOCHS_FILE = "epochs.json"
VERSION = 1


class EpochFileError(ValueError):
    """config/epochs.json cannot be read as a history; the message says why."""


def check_entries(entries) -> list[tuple[int, int, str]]:
    """The entries as tuples; EpochFileError unless epochs and start offsets grow (epochs
    strictly), every value of its type."""
    out: list[tuple[int, int, str]] = []
    if not isinstance(entries, (list, tuple)):
        raise EpochFileError("the epoch history must be a list of [epoch, start_offset, store_id]")
    for item in entries:
        if (not isinstance(item, (list, tuple)) or len(item) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in item[:2])
                or not isinstance(item[2], str)):
            raise EpochFileError(f"bad epoch entry {item!r}: expected [epoch, start_offset, store_id]")
        epoch, start, store = item
        if epoch < 1 or start < 0:
            raise EpochFileError(f"bad epoch entry {item!r}: epoch >= 1 and start_offset >= 0")
        if out and (epoch <= out[-1][0] or start < out[-1][1]):
            raise EpochFileError(f"epoch entry {item!r} after {list(out[-1])}: epochs must grow "
                                 "and start offsets must not go down")
        out.append((epoch, start, store))
    return out


def clip(entries, max_offset: int) -> list[tuple[int, int, str]]:
    """The entries that begin at or below `max_offset` (a log that ends there holds no byte of
    a later one), but always the first, so an empty log keeps its epoch."""
    return [e for i, e in enumerate(entries) if i == 0 or e[1] <= max_offset]


def as_master(entries, store_id: str, max_offset: int, min_offset: int = 0) -> list:
    """The history of a store that becomes master with its log ending at `max_offset`: as it
    is when the newest epoch is this store's own (a restart), else with a new epoch from
    there (a store without history: from `min_offset`, its whole log)."""
    entries = list(entries)
    if entries and entries[-1][2] == store_id:
        return entries
    start = max_offset if entries else min(min_offset, max_offset)
    return clip(entries, max_offset) + [(last_epoch(entries) + 1, start, store_id)]


def last_epoch(entries) -> int:
    return entries[-1][0] if entries else 0


def _end_of(entries, index: int, max_offset: int) -> int:
    return entries[index + 1][1] if index + 1 < len(entries) else max_offset


def common_offset(mine, my_max: int, theirs, their_max: int) -> int:
    """The offset up to which both logs are the same bytes (see the module docstring)."""
    theirs_at = {tuple(e): i for i, e in enumerate(theirs)}
    for i in range(len(mine) - 1, -1, -1):
        j = theirs_at.get(tuple(mine[i]))
        if j is None:
            continue
        return min(_end_of(mine, i, my_max), _end_of(theirs, j, their_max), my_max, their_max)
    return 0


class EpochFile:
    def __init__(self, config_dir: str, fileops: FileOps):
        self.path = os.path.join(config_dir, EPOCHS_FILE)
        self.fileops = fileops
        self.entries: list[tuple[int, int, str]] = []
        self.store_id = ""

    def load(self) -> "EpochFile":
        """Read the file; a store without one gets a new id, saved at once."""
        try:
            raw = self.fileops.read_file(self.path)
        except FileNotFoundError:
            self.entries = []
            self.store_id = secrets.token_hex(8)
            self.save([])
            return self
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise EpochFileError(f"{self.path} is not JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise EpochFileError(f"{self.path}: expected {{\"version\": {VERSION}, \"entries\": [...]}}")
        try:
            self.entries = check_entries(doc.get("entries"))
        except EpochFileError as e:
            raise EpochFileError(f"{self.path}: {e}") from None
        store_id = doc.get("store_id")
        if not isinstance(store_id, str) or not store_id:
            raise EpochFileError(f"{self.path}: no store_id")
        self.store_id = store_id
        return self

    @property
    def epoch(self) -> int:
        return last_epoch(self.entries)

    def save(self, entries) -> None:
        entries = check_entries(entries)
        self.fileops.make_dirs(os.path.dirname(self.path))
        doc = {"version": VERSION, "store_id": self.store_id, "entries": [list(e) for e in entries]}
        self.fileops.write_file_atomic(self.path, json.dumps(doc).encode())
        self.entries = entries

    def become_master(self, max_offset: int, min_offset: int = 0) -> int:
        """Record a new epoch starting at `max_offset` unless this store already is the master
        of the newest one (a restart); return the store's epoch. A store with no history (its
        first start, or one made before replication) owns its whole log: its first epoch starts
        at `min_offset`."""
        entries = as_master(self.entries, self.store_id, max_offset, min_offset)
        if entries != self.entries:
            self.save(entries)
        return self.epoch

    def adopt(self, master_entries, max_offset: int) -> None:
        """Follow a master: the history becomes the master's, as far as this log reaches."""
        entries = clip(check_entries(master_entries), max_offset)
        if entries != self.entries:
            self.save(entries)


@dataclass(frozen=True)
class FollowPoint:
    """A master's answer to a slave's handshake: `start` (continue from there), `truncate_to`
    (cut the slave's log there first), or `refused` (the reason; `newer` when the peer has been
    master of a later epoch than this one, which means this master is stale)."""
    start: int | None = None
    truncate_to: int | None = None
    refused: str | None = None
    newer: bool = False


def follow_point(master_id: str, master_entries, master_min: int, master_max: int,
                 slave_id: str, slave_entries, slave_max: int) -> FollowPoint:
    """Where the slave of a handshake continues (DESIGN.md section 10). An empty slave starts
    at 0; a slave whose log holds bytes the master's history does not share is told to
    truncate to `common_offset`; a slave with the master's own id, with a newer epoch, with a
    log but no history, behind the master's first byte, or empty while the master's log no
    longer begins at 0 (retention: the slave's own positions would begin past nothing) is
    refused."""
    slave_entries = clip(slave_entries, slave_max)
    if slave_id == master_id:
        return FollowPoint(refused=f"the peer has this master's own store id {master_id}: a store "
                                   "cannot follow itself")
    if last_epoch(slave_entries) > last_epoch(master_entries):
        return FollowPoint(refused=f"the peer has epoch {last_epoch(slave_entries)}, newer than this "
                                   f"master's {last_epoch(master_entries)}: this master is stale",
                           newer=True)
    first = max(master_min, 0)
    if slave_max == 0 and first == 0:
        return FollowPoint(start=0)
    if slave_max == 0:
        return FollowPoint(refused=f"the peer's log is empty and this master's begins at {first} (its "
                                   "first segments were deleted): a slave must begin where its master's "
                                   "log began; copy the master's store to start it")
    if not slave_entries:
        return FollowPoint(refused=f"the peer's log ends at {slave_max} but it has no epoch history: "
                                   "it cannot be shown to hold this master's bytes; empty it first")
    common = common_offset(slave_entries, slave_max, master_entries, master_max)
    if common < first:
        return FollowPoint(refused=f"the peer shares bytes with this master only up to {common}, "
                                   f"before the master's first byte {first}; empty it first")
    if common < slave_max:
        return FollowPoint(truncate_to=common)
    return FollowPoint(start=slave_max)
