"""`check`: the store's built-in consistency check and repair (STYLE.md, "A built-in check").

Owns the report (`FsckReport`, `Problem`, the problem `KINDS`), the entry points (`check`,
`resolve_config`, `run_recovery`), one pass over a store, the checkpoint and abort-file checks,
and the repair. The CommitLog, consume-queue and index scans are in `core.fsck_scan`.

A check is read-only (segments mapped PROT_READ, the index opened through a FileOps that refuses
every change, the store lock not taken): it runs the scans of `core.fsck_scan`, then checks that
the checkpoint's CRC holds and its offsets are not past the end, and that the store format file
reads. On a running store a check sees writes in flight.

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
import shutil
import struct
from dataclasses import asdict, dataclass, field, fields

from core.log.checkpoint import CHECKPOINT_SIZE, CRC_POS, FIELDS, checkpoint_valid, is_rocketmq_checkpoint
from core.config import FORMAT_KEYS, ConfigError, StoreConfig, StoreFormatError
from core.log.store_format import check_store_format
from core.files.fileops import REAL_FILE_OPS
from core.fsck_scan import READ_ONLY, LogScan, Progress, check_index_entries, check_queues, open_index
from core.files.mapped_file_queue import StoreLoadError
from core.store import MessageStore
from core.files.store_files import AbortFile, StoreLock, read_pid

KINDS = {  # kind: what it means, in report order
    "store_format": "a store format file the store cannot read (it refuses to open)",
    "segment_file": "CommitLog segment files of the wrong size, misnamed or missing",
    "record_crc": "CommitLog records failing their CRC check (record CRC, or body CRC without one)",
    "record_damaged": "damaged CommitLog bytes with intact records behind them (recovery quarantines them)",
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
    "index_header": "index file headers that disagree with their entries, slots or records",
    "index_entry": "index files whose entries or hash slots disagree with the records they name",
    "checkpoint_missing": "no checkpoint file",
    "checkpoint_torn": "a checkpoint of the wrong size or whose CRC does not match",
    "checkpoint_ahead": "checkpoint offsets past the end of the log",
}
MAX_PER_KIND = 1000               # problems kept per kind; `counts` has them all
ASIDE_SUFFIX = ".fsck-old"
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
    dropped_records: int = 0                       # records a repair's recovery cut from the log

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
                "actions": self.actions, "fixed": [asdict(p) for p in self.fixed],
                "dropped_records": self.dropped_records}

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
    prog = Progress(progress, total)
    if os.path.exists(cfg.store_format_path):
        try:
            check_store_format(cfg, READ_ONLY)
        except StoreFormatError as exc:
            report.add("store_format", cfg.store_format_path, 0, str(exc))
    index_files, keys = open_index(cfg, report) if cfg.message_index_enable else ([], None)
    if not cfg.message_index_enable:
        report.notes.append("message_index_enable is false: the index is not checked")
    try:
        log = LogScan(cfg, report, prog, keys).run()
    finally:
        if keys is not None:
            report.stats["keys_checked"] = keys.checked
            keys.service.close()
    check_queues(cfg, log, report, prog)
    for path in index_files:
        check_index_entries(cfg, path, log, report, prog)
    _check_checkpoint(cfg, log, report)
    _note_abort(cfg, report)
    prog.at(prog.total)
    return report


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
    elif is_rocketmq_checkpoint(data):
        stats["checkpoint"] = "RocketMQ's (no CRC)"
        report.notes.append("the checkpoint is RocketMQ's (fields at 0..39, no CRC): recovery after an "
                            "abnormal exit scans from the oldest segment; the store writes its own at "
                            "its next start")
    elif not checkpoint_valid(data):
        report.add("checkpoint_torn", path, CRC_POS, "the CRC of bytes 0..79 does not match or bytes "
                   "84..4095 are not zero; recovery falls back to a scan from the oldest segment")
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
        after.dropped_records = dropped
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
    for q in rec.quarantined:
        actions.append(f"quarantined the damaged bytes at {q.start} ({q.length} bytes: {q.reason}) "
                       f"in {q.path}; the records after them are kept; reads refuse the damaged ones")
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
