"""`check`: the store's built-in consistency check and repair (STYLE.md, "A built-in check").

Verifies, read-only (segments mapped PROT_READ, the index opened through a FileOps that refuses
every change, the store lock not taken): every CommitLog record from the first segment parses,
passes its body CRC and holds its position in PHYSICALOFFSET, blanks reach their segment's end,
and only zeros follow the end of the log; every consume-queue entry from the queue's min to max
offset points at a record of its topic and queue with that QUEUEOFFSET, size and tag code, never
past the end, with no fillers inside, and every non-transactional or committed record is in its
queue; the index finds every record's UNIQ_KEY and KEYS through `IndexService.query_offset` and
no entry points past the end; the checkpoint's CRC holds and its offsets are not past the end;
the store format file reads. On a running store a check sees writes in flight.

`fix=True` takes the lock (StoreLockedError while a store holds it), then runs the store's own
recovery as a start would (`MessageStore.load()`, which persists what it did, then `shutdown()`,
which after a load alone neither creates nor removes the abort file), removes an abort file that
was there, and if queues or index are still wrong rebuilds both: `consumequeue/` and `index/` are
moved aside and `load()` re-dispatches the whole log (with no queues its catch-up starts at the
first record). Recovery cuts the log at the first invalid record it scans, as a start would.

`Problem.offset` is a CommitLog offset for CommitLog problems and `index_missing`, a queue offset
for consume-queue problems (a run of consecutive ones is reported once), an entry number for
index entries, a byte position for the checkpoint. Format keys come from the store's
`config/store_format.json`, other settings from `config` or the defaults.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
from array import array
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from core.checkpoint import CHECKPOINT_SIZE, CRC_POS, FIELDS, checkpoint_crc
from core.codec import DispatchRequest, RecordCheck, check_record
from core.config import FORMAT_KEYS, ConfigError, StoreConfig, StoreFormatError, check_store_format
from core.consume_queue import BLANK_SIZE, ENTRY_DTYPE, UNIT_SIZE
from core.fileops import REAL_FILE_OPS, TMP_SUFFIX, FileOps
from core.index_file import ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE, index_file_size
from core.index_service import IndexService, build_key, index_keys
from core.mapped_file_queue import StoreLoadError
from core.message import (
    SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_NOT,
    SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK,
)
from core.store import MessageStore
from core.store_files import AbortFile, StoreLock, read_pid

KINDS = {  # kind: what it means, in report order
    "store_format": "a store format file the store cannot read (it refuses to open)",
    "segment_file": "CommitLog segment files of the wrong size, misnamed or missing",
    "record_crc": "CommitLog records failing their body CRC",
    "record_corrupt": "CommitLog records whose lengths do not add up (recovery cuts the log there)",
    "record_offset": "CommitLog records whose PHYSICALOFFSET is not their position",
    "blank_size": "blank records not reaching their segment's end",
    "data_after_end": "non-zero bytes after the end of the log",
    "cq_file": "consume-queue files of the wrong size, misnamed or missing",
    "cq_garbage": "non-zero bytes after a consume queue's last entry",
    "cq_gap": "filler entries (missing queue offsets) inside a consume queue",
    "cq_past_end": "consume-queue entries pointing past the end of the log",
    "cq_bad_pointer": "consume-queue entries not pointing at a record",
    "cq_wrong_record": "consume-queue entries pointing at a record of another queue or queue offset",
    "cq_size": "consume-queue entries with a wrong record size",
    "cq_tags": "consume-queue entries with a wrong tag code",
    "cq_missing": "records missing from their consume queue",
    "index_file": "index files of the wrong size or misnamed (the store refuses to load them)",
    "index_missing": "record keys the index does not find",
    "index_past_end": "index entries pointing past the end of the log",
    "checkpoint_missing": "no checkpoint file",
    "checkpoint_torn": "a checkpoint of the wrong size or whose CRC does not match",
    "checkpoint_ahead": "checkpoint offsets past the end of the log",
}
MAX_PER_KIND = 1000               # problems kept per kind; `counts` has them all
PROGRESS_STEP = 4 << 20
HOT_KEY_MATCHES = 16              # a key with this many matches in a second is fetched whole
LONG_MAX = (1 << 63) - 1
ASIDE_SUFFIX = ".fsck-old"
_CQ_TYPES = (SYSFLAG_TRANSACTION_NOT, SYSFLAG_TRANSACTION_COMMIT)
_UNINDEXED = (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)
_INDEX_ENTRY = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
_DEFAULTS = {f.name: f.default for f in fields(StoreConfig)}
_STATS = ("segments", "records", "bytes", "log_min", "log_end", "queues", "queue_entries",
          "index_files", "index_entries", "keys_checked")


class NotAStoreError(FileNotFoundError):
    """The directory does not exist or holds no store (no `commitlog/`)."""


@dataclass(frozen=True)
class Problem:
    kind: str
    path: str
    offset: int
    detail: str


@dataclass
class FsckReport:
    store_root: str
    problems: list = field(default_factory=list)   # at most MAX_PER_KIND of each kind
    counts: dict = field(default_factory=dict)     # kind -> how many were found
    stats: dict = field(default_factory=lambda: dict.fromkeys(_STATS, 0))
    notes: list = field(default_factory=list)
    actions: list = field(default_factory=list)    # what fix=True did
    fixed: list = field(default_factory=list)      # problems found before a repair and gone after

    @property
    def ok(self) -> bool:
        return not self.counts

    def add(self, kind: str, path: str, offset: int, detail: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.counts[kind] <= MAX_PER_KIND:
            self.problems.append(Problem(kind, path, int(offset), detail))

    def to_dict(self) -> dict:
        return {"store": self.store_root, "ok": self.ok, "counts": self.counts, "stats": self.stats,
                "problems": [asdict(p) for p in self.problems], "notes": self.notes,
                "actions": self.actions, "fixed": [asdict(p) for p in self.fixed]}

    def format_text(self, per_kind: int = 20) -> str:
        s = self.stats
        lines = [f"store {self.store_root}",
                 f"  commitlog   {s['segments']} segments, {s['records']} records, {s['bytes']} bytes "
                 f"(offsets {s['log_min']} to {s['log_end']})",
                 f"  queues      {s['queues']} queues, {s['queue_entries']} entries",
                 f"  index       {s['index_files']} files, {s['index_entries']} entries, "
                 f"{s['keys_checked']} keys checked",
                 f"  checkpoint  {s.get('checkpoint', 'not read')}"]
        lines += [f"note: {n}" for n in self.notes] + [f"done: {a}" for a in self.actions]
        if self.fixed:
            lines.append(f"fixed: {len(self.fixed)} problems ({', '.join(sorted({p.kind for p in self.fixed}))})")
        for kind in (k for k in KINDS if k in self.counts):
            lines.append(f"{kind} ({self.counts[kind]}): {KINDS[kind]}")
            lines += [f"  {p.path} @ {p.offset}: {p.detail}"
                      for p in [p for p in self.problems if p.kind == kind][:per_kind]]
            if self.counts[kind] > per_kind:
                lines.append(f"  ... and {self.counts[kind] - per_kind} more")
        total = sum(self.counts.values())
        lines.append("result: clean" if self.ok else f"result: {total} problem{'s' * (total != 1)}")
        return "\n".join(lines)


class ReadOnlyFileOps(FileOps):
    """The I/O seam for a check: maps read-only, keeps leftovers, refuses every change."""

    def map_file(self, path: str, size: int, writable: bool = True):
        return super().map_file(path, size, writable=False)

    def remove_leftovers(self, directory: str) -> list[str]:
        return []

    def _refuse(self, *args, **kwargs):
        raise PermissionError("the store was opened read-only for a check")

    create_file = write_file_atomic = unlink = fsync_dir = make_dirs = _refuse


READ_ONLY = ReadOnlyFileOps()


# ---- entry points ------------------------------------------------------------------------

def check(store_root, fix: bool = False, config: StoreConfig | None = None, progress=None) -> FsckReport:
    """Check the store at `store_root`; with `fix`, repair what recovery and a rebuild can.

    `progress(done_bytes, total_bytes)` is called during the scans. Raises NotAStoreError for a
    missing directory or one without `commitlog/`; with `fix`, StoreLockedError while a store runs.
    """
    cfg, notes = resolve_config(store_root, config)
    if not os.path.isdir(cfg.commitlog_dir):
        what = "has no commitlog/ directory" if os.path.isdir(cfg.store_path_root_dir) else "does not exist"
        raise NotAStoreError(f"no store at {cfg.store_path_root_dir}: the directory {what}")
    if not fix:
        return _check_once(cfg, notes, progress)
    with StoreLock(cfg.lock_path):
        before = _check_once(cfg, notes, progress)
    return before if before.ok else _repair(cfg, before, notes, progress)


def resolve_config(store_root, config: StoreConfig | None = None) -> tuple[StoreConfig, list[str]]:
    """`config` (or the defaults) rooted at `store_root`, with the format keys the store recorded;
    and notes on what was assumed."""
    root = os.path.abspath(os.path.expanduser(os.fspath(store_root)))
    cfg = config if config is not None else StoreConfig(store_path_root_dir=root)
    if cfg.store_path_root_dir != root:
        cfg = cfg.replace(store_path_root_dir=root)
    try:
        with open(cfg.store_format_path, "rb") as f:
            recorded = json.load(f)
        changed = {k: recorded[k] for k in FORMAT_KEYS if k in recorded and recorded[k] != getattr(cfg, k)}
    except FileNotFoundError:
        return cfg, ["no config/store_format.json: format settings taken from the configuration"]
    except (OSError, ValueError, TypeError) as exc:
        return cfg, [f"cannot read {cfg.store_format_path} ({exc}); the store refuses to open until "
                     "it is restored; format settings taken from the configuration"]
    asked = {k: v for k, v in changed.items() if config is not None and getattr(config, k) != _DEFAULTS[k]}
    notes = [f"the store was created with {', '.join(f'{k} = {v}' for k, v in asked.items())}; "
             "checked with those values"] if asked else []
    return (cfg.replace(**changed) if changed else cfg), notes


def run_recovery(config: StoreConfig, progress=None):
    """Recover the store as a start would, persist the result, close it; return its RecoveryReport.

    An abort file present before is removed, still under the lock, once load() has made the
    recovered state durable; none is ever created. Raises StoreLockedError while a store runs.
    """
    had_abort = os.path.exists(config.abort_path)
    store = MessageStore(config, progress=progress)
    store.load()
    try:
        if had_abort:
            store.abort_file.remove()
        return store.recovery_report
    finally:
        store.shutdown()


# ---- one pass ----------------------------------------------------------------------------

def _check_once(cfg: StoreConfig, notes: list, progress) -> FsckReport:
    report = FsckReport(cfg.store_path_root_dir, notes=list(notes))
    total = sum(os.path.getsize(os.path.join(parent, n))
                for d in (cfg.commitlog_dir, cfg.consumequeue_dir, cfg.index_dir)
                for parent, _, names in os.walk(d) for n in names if n.isdigit())
    prog = _Progress(progress, total)
    if os.path.exists(cfg.store_format_path):
        try:
            check_store_format(cfg, READ_ONLY)
        except StoreFormatError as exc:
            report.add("store_format", cfg.store_format_path, 0, str(exc))
    index_files, keys = _open_index(cfg, report) if cfg.message_index_enable else ([], None)
    if not cfg.message_index_enable:
        report.notes.append("message_index_enable is false: the index is not checked")
    try:
        log = _LogScan(cfg, report, prog, keys).run()
    finally:
        if keys is not None:
            report.stats["keys_checked"] = keys.checked
            keys.service.close()
    _check_queues(cfg, log, report, prog)
    for path in index_files:
        _check_index_entries(cfg, path, log, report, prog)
    _check_checkpoint(cfg, log, report)
    _note_abort(cfg, report)
    prog.at(prog.total)
    return report


class _Progress:
    def __init__(self, callback, total: int):
        self.callback, self.total, self.done = callback, max(total, 1), 0

    def at(self, done: int) -> None:
        if self.callback is not None:
            self.callback(min(done, self.total), self.total)

    def advance(self, n: int) -> None:
        self.done += n
        self.at(self.done)


def _numbered_files(directory: str, report) -> list[tuple[int, str]]:
    """(start offset, path) of the files named by a number, in order; leftovers become notes."""
    names = os.listdir(directory) if os.path.isdir(directory) else []
    report.notes += [f"leftover {os.path.join(directory, n)} (the next load deletes it)"
                     for n in names if n.endswith(TMP_SUFFIX)]
    return sorted((int(n), os.path.join(directory, n)) for n in names
                  if n.isdigit() and os.path.isfile(os.path.join(directory, n)))


def _usable_files(files, size: int, report, kind: str, unit: int) -> list[tuple[int, str]]:
    """The leading files of the right size with contiguous names; the first other one is reported."""
    good = []
    for off, path in files:
        actual = os.path.getsize(path)
        if actual != size or off % size or (good and off != good[-1][0] + size):
            expected = f"{good[-1][0] + size:020d}" if good else f"a multiple of {size}"
            report.add(kind, path, off // unit, f"{actual} bytes (files here are {size}), next file "
                       f"expected at {expected}; this file and later ones are not checked")
            break
        good.append((off, path))
    return good


def _first_nonzero(buf, lo: int, hi: int) -> int:
    for p in range(lo, hi, 1 << 20):
        chunk = buf[p:min(p + (1 << 20), hi)]
        rest = chunk.lstrip(b"\0")
        if rest:
            return p + len(chunk) - len(rest)
    return -1


# ---- CommitLog ---------------------------------------------------------------------------

class _LogScan:
    """One pass over the CommitLog: checks records, collects what queues are checked against."""

    def __init__(self, cfg, report, prog, keys):
        self.cfg, self.report, self.prog, self.keys = cfg, report, prog, keys
        self.size = cfg.mapped_file_size_commitlog
        self.cols = {c: array("q") for c in ("phys", "size", "tags", "qoff", "key")}
        self.key_ids: dict[tuple[str, int], int] = {}
        self.min = self.end = 0

    def run(self) -> "_LogScan":
        files = _numbered_files(self.cfg.commitlog_dir, self.report)
        good = _usable_files(files, self.size, self.report, "segment_file", 1)
        self.min = good[0][0] if good else 0
        ended = False
        for off, path in good:
            mapping = REAL_FILE_OPS.map_file(path, self.size, writable=False)
            try:
                end = self._after_end(mapping.buf, off, 0, path) if ended else self._walk(mapping.buf, off, path)
            finally:
                mapping.close()
            if not ended:
                ended, self.end = end is not None, off + self.size if end is None else end
            self.prog.advance(self.size)
        self._finish(len(files))
        return self

    def _walk(self, buf, base: int, path: str) -> int | None:
        """Check one segment; the end of the log if it is in here, None when the segment is full."""
        pos = mark = 0
        while True:
            req, length = check_record(buf, pos, self.size, True)
            if req is RecordCheck.CORRUPT:
                req = self._crc_failure(buf, base, pos, path)
                if req is None:
                    return base + pos
            if isinstance(req, DispatchRequest):
                self._record(req, base + pos, path)
                pos += length
                if pos - mark >= PROGRESS_STEP:
                    mark = pos
                    self.prog.at(self.prog.done + pos)
            elif req is RecordCheck.BLANK:
                if pos + length != self.size:
                    self.report.add("blank_size", path, base + pos,
                                    f"blank of {length} bytes with {self.size - pos} left in the segment")
                return None
            else:
                return self._after_end(buf, base, pos, path)

    def _after_end(self, buf, base: int, pos: int, path: str) -> int:
        at = _first_nonzero(buf, pos, self.size)
        if at >= 0:
            self.report.add("data_after_end", path, base + at, f"non-zero bytes after the end of the "
                            f"log ({self.end if pos == 0 else base + pos}); recovery drops them")
        return base + pos

    def _crc_failure(self, buf, base: int, pos: int, path: str):
        req, _ = check_record(buf, pos, self.size, False)
        if isinstance(req, DispatchRequest):
            self.report.add("record_crc", path, base + pos, f"{req.topic}-{req.queue_id} queue offset "
                            f"{req.consume_queue_offset}, {req.msg_size} bytes: body CRC mismatch")
            return req
        self.report.add("record_corrupt", path, base + pos, "a record is framed here but its fields "
                        "do not add up; for recovery the log ends here")
        return None

    def _record(self, req: DispatchRequest, at: int, path: str) -> None:
        if req.commit_log_offset != at:
            self.report.add("record_offset", path, at, f"PHYSICALOFFSET holds {req.commit_log_offset}")
        kid = -1
        if req.sys_flag & SYSFLAG_TRANSACTION_MASK in _CQ_TYPES:
            kid = self.key_ids.setdefault((req.topic, req.queue_id), len(self.key_ids))
        for col, value in zip(self.cols.values(), (at, req.msg_size, req.tags_code,
                                                   req.consume_queue_offset, kid)):
            col.append(value)
        if self.keys is not None:
            self.keys.verify(req, at, self.report)

    def _finish(self, segments: int) -> None:
        self.report.stats.update(segments=segments, records=len(self.cols["phys"]), log_min=self.min,
                                 bytes=self.end - self.min, log_end=self.end)
        for name, col in self.cols.items():          # a sentinel keeps every lookup in range
            col.append(LONG_MAX if name == "phys" else -2)
            setattr(self, name, np.frombuffer(col, np.int64))
        self.order = np.argsort(self.key, kind="stable")
        self.sorted_keys = self.key[self.order]
        self.names = {kid: f"{t}-{q}" for (t, q), kid in self.key_ids.items()}

    def records_of(self, kid: int) -> np.ndarray:
        lo, hi = np.searchsorted(self.sorted_keys, [kid, kid + 1])
        return self.order[lo:hi]


# ---- consume queues ----------------------------------------------------------------------

def _check_queues(cfg, log, report, prog) -> None:
    root, seen = cfg.consumequeue_dir, set()
    for topic in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        tdir = os.path.join(root, topic)
        for qid in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
            if qid.isdigit() and os.path.isdir(os.path.join(tdir, qid)):
                seen.add((topic, int(qid)))
                _Queue(cfg, os.path.join(tdir, qid), log.key_ids.get((topic, int(qid))), log, report).check(prog)
    for (topic, qid), kid in log.key_ids.items():
        if (topic, qid) not in seen:
            _Queue(cfg, os.path.join(root, topic, str(qid)), kid, log, report).check(prog)
    report.stats["queues"] = len(seen | set(log.key_ids))


class _Queue:
    """One queue's entries against the log, in both directions."""

    def __init__(self, cfg, qdir: str, kid, log, report):
        self.qdir, self.kid, self.log, self.report = qdir, kid, log, report
        self.fsize = cfg.mapped_file_size_consume_queue

    def check(self, prog) -> None:
        entries = self._load(prog)
        self.phys, self.size, self.tags = (entries[c].astype(np.int64) for c in ("phys", "size", "tags"))
        real = self.size != BLANK_SIZE
        first = np.flatnonzero(real & (self.phys >= self.log.min))
        self.min = int(first[0]) if len(first) else len(entries)   # index of the queue's min offset
        self.report.stats["queue_entries"] += len(entries) - self.min
        self._runs("cq_gap", self.base + np.flatnonzero(~real[self.min:]) + self.min,
                   lambda i: "filler entries where records belong")
        self._check_entries(np.flatnonzero(real[self.min:]) + self.min)
        if self.kid is not None:
            self._check_records()

    def _load(self, prog) -> np.ndarray:
        """The queue's entries up to the first invalid one (phys < 0 or size <= 0)."""
        files = _numbered_files(self.qdir, self.report)
        good = _usable_files(files, self.fsize, self.report, "cq_file", UNIT_SIZE)
        self.base = good[0][0] // UNIT_SIZE if good else 0
        raw = bytearray()
        for _, path in good:
            with open(path, "rb") as f:
                raw += f.read()
        prog.advance(sum(os.path.getsize(p) for _, p in files))
        entries = np.frombuffer(bytes(raw), ENTRY_DTYPE)
        bad = np.flatnonzero((entries["phys"] < 0) | (entries["size"] <= 0))
        n = int(bad[0]) if len(bad) else len(entries)
        at = _first_nonzero(raw, n * UNIT_SIZE, len(raw))
        if at >= 0:
            qoff = self.base + at // UNIT_SIZE
            self.report.add("cq_garbage", self._path(qoff), qoff,
                            f"the queue ends at queue offset {self.base + n} but non-zero bytes follow")
        return entries[:n]

    def _check_entries(self, idx: np.ndarray) -> None:
        log, kid = self.log, -3 if self.kid is None else self.kid
        p, s, t = self.phys[idx], self.size[idx], self.tags[idx]
        j = np.searchsorted(log.phys, p)
        past = p + s > log.end
        pointed = (log.phys[j] == p) & ~past
        wrong = pointed & ((log.key[j] != kid) | (log.qoff[j] != self.base + idx))
        bad_size = pointed & ~wrong & (log.size[j] != s)
        checks = (
            ("cq_past_end", past, lambda k: f"points at {p[k]} ({s[k]} bytes); the log ends at {log.end}"),
            ("cq_bad_pointer", ~pointed & ~past, lambda k: f"points at {p[k]}, where no record starts"),
            ("cq_wrong_record", wrong, lambda k: f"points at the record at {p[k]}: "
             f"{log.names.get(int(log.key[j[k]]), 'a transaction half')} queue offset {log.qoff[j[k]]}"),
            ("cq_size", bad_size, lambda k: f"size {s[k]}, the record at {p[k]} has {log.size[j[k]]}"),
            ("cq_tags", pointed & ~wrong & ~bad_size & (log.tags[j] != t),
             lambda k: f"tag code {t[k]}, the record at {p[k]} has {log.tags[j[k]]}"),
        )
        for kind, mask, describe in checks:
            sel = np.flatnonzero(mask)
            self._runs(kind, self.base + idx[sel], lambda a, sel=sel, d=describe: d(sel[a]))

    def _check_records(self) -> None:
        """Every record of this queue at or above its min offset has its entry."""
        log = self.log
        recs = log.records_of(self.kid)
        recs = recs[log.qoff[recs] >= self.base + self.min]
        q = log.qoff[recs]
        inside = q < self.base + len(self.phys)
        present = np.zeros(len(q), bool)
        present[inside] = self.phys[q[inside] - self.base] == log.phys[recs[inside]]
        miss = np.flatnonzero(~present)
        self._runs("cq_missing", q[miss],
                   lambda a: f"not in the queue; the first record is at {log.phys[recs[miss[a]]]}")

    def _runs(self, kind: str, qoffs: np.ndarray, describe) -> None:
        """Report each run of consecutive queue offsets once; describe(i) details qoffs[i]."""
        if not len(qoffs):
            return
        starts = np.flatnonzero(np.diff(qoffs, prepend=qoffs[0] - 2) != 1)
        for a, b in zip(starts, np.append(starts[1:], len(qoffs)) - 1):
            lo, hi = int(qoffs[a]), int(qoffs[b])
            span = f"queue offset {lo}" if lo == hi else f"queue offsets {lo} to {hi}"
            self.report.add(kind, self._path(lo), lo, f"{span}: {describe(a)}")

    def _path(self, qoff: int) -> str:
        at = qoff * UNIT_SIZE
        return os.path.join(self.qdir, f"{at - at % self.fsize:020d}")


# ---- index -------------------------------------------------------------------------------

class _KeyCheck:
    """Looks every record's keys up through `IndexService.query_offset`, as a query would."""

    def __init__(self, cfg):
        self.cfg, self.checked, self.known = cfg, 0, {}
        self.service = IndexService(cfg.index_dir, cfg.max_hash_slot_num, cfg.max_index_num,
                                    READ_ONLY, LONG_MAX)      # every match, not a client's batch
        self.service.load(True, 0)

    def verify(self, req: DispatchRequest, at: int, report) -> None:
        if req.sys_flag & SYSFLAG_TRANSACTION_MASK in _UNINDEXED:
            return
        keys = [k[len(req.topic) + 1:] for k in index_keys(req)]
        self.checked += len(keys)
        missing = [k for k in keys if not self._found(req.topic, k, at, req.store_timestamp)]
        if missing:
            report.add("index_missing", self.cfg.index_dir, at, f"{req.topic}-{req.queue_id} queue "
                       f"offset {req.consume_queue_offset}: no index entry for {', '.join(missing)}")

    def _found(self, topic: str, key: str, at: int, ts: int) -> bool:
        # An entry keeps whole seconds after its file's begin time, so a record stored at ts
        # reads back in (ts - 1 s, ts]. A chain is walked from its newest entry: a key seen often,
        # or a miss (a clock that went back), is fetched once whole and kept.
        full = build_key(topic, key)
        if full not in self.known:
            offsets = self.service.query_offset(topic, key, LONG_MAX, ts - 1000, ts)[0]
            if at in offsets and len(offsets) < HOT_KEY_MATCHES:
                return True
            self.known[full] = set(self.service.query_offset(topic, key, LONG_MAX, -LONG_MAX, LONG_MAX)[0])
        return at in self.known[full]


def _open_index(cfg, report):
    """The index files a store would load, and a key checker over them (None if it would refuse)."""
    names = sorted(os.listdir(cfg.index_dir)) if os.path.isdir(cfg.index_dir) else []
    expected, good = index_file_size(cfg.max_hash_slot_num, cfg.max_index_num), []
    for path in (os.path.join(cfg.index_dir, n) for n in names if not n.endswith(TMP_SUFFIX)):
        size = os.path.getsize(path)
        if re.fullmatch(r"\d{17}", os.path.basename(path)) and size == expected:
            good.append(path)
        else:
            report.add("index_file", path, 0, f"{size} bytes, expected {expected} and a name "
                       "yyyyMMddHHmmssSSS; index keys are not checked")
    report.stats["index_files"] = len(good)
    return good, (None if "index_file" in report.counts else _KeyCheck(cfg))


def _check_index_entries(cfg, path: str, log, report, prog) -> None:
    """No entry of the file (1..count-1) points at or past the end of the log."""
    slots, num = cfg.max_hash_slot_num, cfg.max_index_num
    mapping = REAL_FILE_OPS.map_file(path, index_file_size(slots, num), writable=False)
    try:
        count = min(max(struct.unpack_from(">i", mapping.buf, 36)[0], 1), num)
        view = np.frombuffer(mapping.buf, _INDEX_ENTRY, count - 1, HEADER_SIZE + slots * SLOT_SIZE + ENTRY_SIZE)
        phys = view["phys"].astype(np.int64)
        del view
    finally:
        mapping.close()
    prog.advance(os.path.getsize(path))
    report.stats["index_entries"] += len(phys)
    past = np.flatnonzero(phys >= log.end)
    if len(past):
        report.add("index_past_end", path, int(past[0]) + 1, f"{len(past)} entries point at or past "
                   f"the end of the log ({log.end}), the first at {phys[past[0]]}")


# ---- checkpoint, abort file --------------------------------------------------------------

def _check_checkpoint(cfg, log, report) -> None:
    path, stats = cfg.checkpoint_path, report.stats
    if not os.path.exists(path):
        stats["checkpoint"] = "missing"
        if stats["segments"]:
            report.add("checkpoint_missing", path, 0, "the store has segments but no checkpoint")
        return
    with open(path, "rb") as f:
        data = f.read(CHECKPOINT_SIZE + 1)
    stats["checkpoint"] = "torn"
    if len(data) != CHECKPOINT_SIZE:
        report.add("checkpoint_torn", path, 0, f"{len(data)} bytes, expected {CHECKPOINT_SIZE}")
    elif struct.unpack_from(">I", data, CRC_POS)[0] != checkpoint_crc(data):
        report.add("checkpoint_torn", path, CRC_POS, "the CRC of bytes 0..79 does not match; recovery "
                   "falls back to a scan from the oldest segment")
    else:
        values = {name: struct.unpack_from(">q", data, pos)[0] for name, pos in FIELDS}
        for name, pos in ((n, p) for n, p in FIELDS if n.endswith("phy_offset") and values[n] > log.end):
            report.add("checkpoint_ahead", path, pos, f"{name} = {values[name]}, the log ends at {log.end}")
        stats["checkpoint"] = "valid, flushed {flushed_phy_offset}, dispatched {dispatched_phy_offset}" \
                              ", confirm {confirm_phy_offset}".format(**values)


def _note_abort(cfg, report) -> None:
    if os.path.exists(cfg.abort_path):
        report.notes.append(f"abort file present (pid {read_pid(cfg.abort_path)}): a store is running here "
                            "(writes in flight can show as problems) or the last run did not stop cleanly "
                            "(the next start, or `mqstore recover`, runs the abnormal recovery)")


# ---- repair ------------------------------------------------------------------------------

def _repair(cfg, before: FsckReport, notes: list, progress) -> FsckReport:
    actions: list[str] = []
    _recover(cfg, progress, actions)
    after = _check_once(cfg, notes, progress)
    if any(kind.startswith(("cq_", "index_")) for kind in after.counts):
        _rebuild(cfg, progress, actions)
        after = _check_once(cfg, notes, progress)
    dropped = before.stats["records"] - after.stats["records"]
    if dropped > 0:
        actions.append(f"recovery cut the log at {after.stats['log_end']}: {dropped} records "
                       f"({before.stats['log_end'] - after.stats['log_end']} bytes) after it were dropped")
    after.actions = actions
    left = {(p.kind, p.path, p.offset) for p in after.problems}
    after.fixed = [p for p in before.problems if (p.kind, p.path, p.offset) not in left]
    return after


def _recover(cfg, progress, actions: list) -> bool:
    try:
        rec = run_recovery(cfg, progress)
    except (StoreLoadError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        actions.append(f"recovery failed: {exc}")
        return False
    actions.append(f"ran the {'abnormal' if rec.abnormal else 'normal'} recovery: scanned "
                   f"{rec.scanned_bytes} bytes from {rec.start_offset}; the log ends at {rec.end_offset}")
    return True


def _rebuild(cfg, progress, actions: list) -> None:
    """Move consume queues and index aside, re-dispatch the whole log, then delete the old ones."""
    dirs = (cfg.consumequeue_dir, cfg.index_dir)
    with StoreLock(cfg.lock_path):
        for d in dirs:
            shutil.rmtree(d + ASIDE_SUFFIX, ignore_errors=True)
            if os.path.exists(d):
                os.rename(d, d + ASIDE_SUFFIX)
        REAL_FILE_OPS.fsync_dir(cfg.store_path_root_dir)
        AbortFile(cfg.abort_path, REAL_FILE_OPS).remove()   # a full re-dispatch covers an abnormal one
    if _recover(cfg, progress, actions):
        for d in dirs:
            shutil.rmtree(d + ASIDE_SUFFIX, ignore_errors=True)
        actions.append("rebuilt the consume queues and the index from the CommitLog")
