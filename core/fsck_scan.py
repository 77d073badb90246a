"""The scans behind `core.fsck.check`: the CommitLog, the consume queues and the index, read-only.

The CommitLog scan (`LogScan`) maps each segment PROT_READ and checks that every record from the
first segment parses, passes its CRC check (the record CRC, or the body CRC of a record without
one) and holds its position in PHYSICALOFFSET, that blanks reach their segment's end and that
only zeros follow the end of the log. A damaged record with intact records behind it is
reported (`record_damaged`: recovery quarantines it and keeps the rest, `core.log.quarantine`) and
the scan goes on at the next intact record, as recovery does; it keeps each record's
position, size, tag code, queue offset and queue, and looks its UNIQ_KEY and KEYS up through
`IndexService.query_offset` (opened through `READ_ONLY`, a FileOps that refuses every change).
`check_queues` checks every consume-queue entry from the queue's min to max offset against those
records (its topic and queue, that QUEUEOFFSET, size and tag code, never past the end, no fillers
inside) and that every non-transactional or committed record is in its queue. `open_index` finds
the index files a store would load; `check_index_entries` checks no entry points past the end and holds header, entries and
slots to the records (`core.fsck_index`: each record's key hashes are kept for that).

The scans add what they find to a `core.fsck.FsckReport` (`add`, `stats`, `notes`, `counts`)
and report progress through `Progress`; a run of consecutive bad queue offsets is reported once.
"""
from __future__ import annotations

import os
import re
from array import array

import numpy as np

from core.record.codec import DispatchRequest, RecordCheck, check_record
from core.log.quarantine import damage_reason_in, resync_in
from core.log.consume_queue import BLANK_SIZE, ENTRY_DTYPE, UNIT_SIZE
from core.files.fileops import REAL_FILE_OPS, TMP_SUFFIX, FileOps, FileReader
from core.fsck_index import HEADER, entry_problems, header_problems
from core.log.index_file import HEADER_SIZE, SLOT_SIZE, index_file_size
from core.record.hashing import index_key_hash
from core.log.index_service import IndexService, build_key, index_keys
from core.record.message import SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_ROLLBACK, SYSFLAG_TRANSACTION_UNQUEUED

PROGRESS_STEP = 4 << 20
HOT_KEY_MATCHES = 16              # a key with this many matches in a second is fetched whole
LONG_MAX = (1 << 63) - 1
_INDEX_ENTRY = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("diff", ">i4"), ("prev", ">i4")])


class ReadOnlyFileOps(FileOps):
    """The I/O seam for a check: maps read-only, keeps leftovers, refuses every change."""

    def map_file(self, path: str, size: int, writable: bool = True):
        return super().map_file(path, size, writable=False)

    def remove_leftovers(self, directory: str) -> list[str]:
        return []

    def _refuse(self, *args, **kwargs):
        raise PermissionError("the store was opened read-only for a check")

    create_file = write_file_atomic = unlink = unlink_soon = fsync_dir = make_dirs = _refuse


READ_ONLY = ReadOnlyFileOps()


# ---- progress, numbered files ------------------------------------------------------------

class Progress:
    """Calls `progress(done_bytes, total_bytes)` as the scans advance."""

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

class LogScan:
    """One pass over the CommitLog: checks records, collects what queues are checked against."""

    def __init__(self, cfg, report, prog, keys):
        self.cfg, self.report, self.prog, self.keys = cfg, report, prog, keys
        self.size = cfg.mapped_file_size_commitlog
        self.levels = cfg.delay_levels_ms          # delay records' tag codes
        self.cols = {c: array("q") for c in ("phys", "size", "tags", "qoff", "key", "ts")}
        self.key_ids: dict[tuple[str, int], int] = {}
        self.khash, self.kstart = array("q"), array("q")   # each record's index key hashes
        self.min = self.end = 0

    def run(self) -> "LogScan":
        files = _numbered_files(self.cfg.commitlog_dir, self.report)
        good = _usable_files(files, self.size, self.report, "segment_file", 1)
        self.min = good[0][0] if good else 0
        ended = False
        for i, (off, path) in enumerate(good):
            mapping = REAL_FILE_OPS.map_file(path, self.size, writable=False)
            try:
                if ended and self._starts_intact(mapping.buf, off):
                    self.report.add("record_damaged", good[i - 1][1], self.end,
                                    f"damaged to the end of its segment ({off - self.end} bytes); the log "
                                    f"goes on at {off}: recovery quarantines the damaged bytes")
                    ended = False
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
            req, length = check_record(buf, pos, self.size, True, self.levels)
            if req is RecordCheck.CORRUPT or req is RecordCheck.END:
                resume = resync_in(buf, pos + 1, base, self.size, True) if pos + 8 < self.size else None
                if resume is not None:
                    if req is RecordCheck.CORRUPT and self._crc_failure(buf, base, pos, path, resume):
                        pos = resume                 # reported as a record of its queue
                    else:
                        self.report.add("record_damaged", path, base + pos,
                                        f"{damage_reason_in(buf, pos, base, self.size)}, "
                                        f"{resume - pos} bytes; the log goes on at {base + resume}: "
                                        f"recovery quarantines the damaged bytes")
                        pos = resume
                    if pos >= self.size:
                        return None
                    continue
            if req is RecordCheck.CORRUPT:
                self._tail_damage(buf, base, pos, path)
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

    def _tail_damage(self, buf, base: int, pos: int, path: str) -> None:
        """Report the damaged last record of the log (nothing intact behind it)."""
        req, _ = check_record(buf, pos, self.size, False)
        what = f"{req.topic}-{req.queue_id} queue offset {req.consume_queue_offset}, " \
            f"{req.msg_size} bytes: CRC mismatch" if isinstance(req, DispatchRequest) else \
            "a record is framed here but its fields do not add up"
        self.report.add("record_crc" if isinstance(req, DispatchRequest) else "record_corrupt", path,
                        base + pos, f"{what}; nothing intact follows: recovery cuts the log here")

    def _starts_intact(self, buf, base: int) -> bool:
        """Whether the segment starts with an intact record (after a damaged end of the last)."""
        return resync_in(buf, 0, base, self.size, True) == 0

    def _crc_failure(self, buf, base: int, pos: int, path: str, resume: int) -> bool:
        """Report a framed record that fails its CRC as one of its queue (its entry is checked
        against it), when a parse without CRC gives its fields and it ends at `resume`."""
        req, length = check_record(buf, pos, self.size, False, self.levels)
        if isinstance(req, DispatchRequest) and pos + length == resume:
            self.report.add("record_crc", path, base + pos, f"{req.topic}-{req.queue_id} queue offset "
                            f"{req.consume_queue_offset}, {req.msg_size} bytes: CRC mismatch; reads "
                            f"refuse it, a recovery that scans it quarantines it")
            self._record(req, base + pos, path)
            return True
        return False

    def _record(self, req: DispatchRequest, at: int, path: str) -> None:
        if req.commit_log_offset != at:
            self.report.add("record_offset", path, at, f"PHYSICALOFFSET holds {req.commit_log_offset}")
        kid = -1
        if req.sys_flag & SYSFLAG_TRANSACTION_MASK not in SYSFLAG_TRANSACTION_UNQUEUED:
            kid = self.key_ids.setdefault((req.topic, req.queue_id), len(self.key_ids))
        for col, value in zip(self.cols.values(), (at, req.msg_size, req.tags_code,
                                                   req.consume_queue_offset, kid, req.store_timestamp)):
            col.append(value)
        if self.keys is not None:
            self.kstart.append(len(self.khash))
            self.khash.extend(index_key_hash(k) for k in self.keys.verify(req, at, self.report))

    def _finish(self, segments: int) -> None:
        self.report.stats.update(segments=segments, records=len(self.cols["phys"]), log_min=self.min,
                                 bytes=self.end - self.min, log_end=self.end)
        for name, col in self.cols.items():          # a sentinel keeps every lookup in range
            col.append(LONG_MAX if name == "phys" else -2)
            setattr(self, name, np.frombuffer(col, np.int64))
        self.kstart.append(len(self.khash))
        self.kstart, self.khash = (np.frombuffer(a, np.int64) for a in (self.kstart, self.khash))
        self.missing = self.keys.missing if self.keys is not None else set()
        self.order = np.argsort(self.key, kind="stable")
        self.sorted_keys = self.key[self.order]
        self.names = {kid: f"{t}-{q}" for (t, q), kid in self.key_ids.items()}

    def store_ts_at(self, phys: int) -> int | None:
        """The store timestamp of the record at `phys`; None when no record starts there."""
        i = int(np.searchsorted(self.phys, phys))
        return int(self.ts[i]) if self.phys[i] == phys else None

    def records_of(self, kid: int) -> np.ndarray:
        lo, hi = np.searchsorted(self.sorted_keys, [kid, kid + 1])
        return self.order[lo:hi]


# ---- consume queues ----------------------------------------------------------------------

def check_queues(cfg, log, report, prog) -> None:
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


def _read_data(path: str, size: int, pad: bool) -> bytes:
    """A consume-queue file's bytes up to the end of its data: its holes past the last data
    (a sparse file, RocketMQ's and ours) are zeros and are not read, which made `check` read
    6 MB per queue (100 ms each, 30 minutes for 20,000 queues). With `pad`, zeros up to
    `size`, for a file another one follows."""
    with FileReader(path) as reader:
        ranges = reader.data_ranges(0, size)
        end = ranges[-1][1] if ranges else 0
        data = reader.read(0, end) if end else b""
    upto = size if pad else min(size, -(-len(data) // UNIT_SIZE) * UNIT_SIZE)
    return data + bytes(upto - len(data))


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
        for i, (_, path) in enumerate(good):
            raw += _read_data(path, self.fsize, pad=i < len(good) - 1)
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
        """Every record of this queue still in the log has its entry. Below the queue's min
        offset only records whose log segments were deleted may be missing: a consume-queue
        file goes only once every entry in it points below the log's min offset."""
        log = self.log
        recs = log.records_of(self.kid)
        q = log.qoff[recs]
        inside = (q >= self.base) & (q < self.base + len(self.phys))
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
        self.missing: set[int] = set()           # records with a key the index does not find
        self.service = IndexService(cfg.index_dir, cfg.max_hash_slot_num, cfg.max_index_num,
                                    READ_ONLY, LONG_MAX)      # every match, not a client's batch
        self.service.load(True, 0)

    def verify(self, req: DispatchRequest, at: int, report) -> list[str]:
        """Report the keys of the record at `at` the index does not find; return the keys it
        is indexed under (`index_keys`)."""
        if req.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_ROLLBACK:
            return []                            # the one kind the index leaves out
        full = index_keys(req)
        keys = [k[len(req.topic) + 1:] for k in full]
        self.checked += len(keys)
        missing = [k for k in keys if not self._found(req.topic, k, at, req.store_timestamp)]
        if missing:
            self.missing.add(at)
            report.add("index_missing", self.cfg.index_dir, at, f"{req.topic}-{req.queue_id} queue "
                       f"offset {req.consume_queue_offset}: no index entry for {', '.join(missing)}")
        return full

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


def open_index(cfg, report):
    """The index files a store would load, and a key checker over them (None if it would refuse)."""
    names = sorted(os.listdir(cfg.index_dir)) if os.path.isdir(cfg.index_dir) else []
    expected, good = index_file_size(cfg.max_hash_slot_num, cfg.max_index_num), []
    report.notes += [f"leftover {os.path.join(cfg.index_dir, n)} (the next load deletes it)"
                     for n in names if n.endswith(TMP_SUFFIX)]
    for path in (os.path.join(cfg.index_dir, n) for n in names if not n.endswith(TMP_SUFFIX)):
        size = os.path.getsize(path)
        if re.fullmatch(r"\d{17}", os.path.basename(path)) and size == expected:
            good.append(path)
        else:
            report.add("index_file", path, 0, f"{size} bytes, expected {expected} and a name "
                       "yyyyMMddHHmmssSSS; index keys are not checked")
    report.stats["index_files"] = len(good)
    return good, (None if "index_file" in report.counts else _KeyCheck(cfg))


def check_index_entries(cfg, path: str, log, report, prog) -> None:
    """No entry of the file (1..count-1) points at or past the end of the log, and its header,
    entries and slots are what the records they name imply (core.fsck_index)."""
    slots, num = cfg.max_hash_slot_num, cfg.max_index_num
    mapping = REAL_FILE_OPS.map_file(path, index_file_size(slots, num), writable=False)
    try:
        header = HEADER.unpack_from(mapping.buf, 0)
        count = min(max(header[5], 1), num)
        table = np.frombuffer(mapping.buf, _INDEX_ENTRY, num, HEADER_SIZE + slots * SLOT_SIZE)
        slot_table = np.frombuffer(mapping.buf, ">i4", slots, HEADER_SIZE)
        phys = table["phys"][1:count].astype(np.int64)
        wrong = header_problems(header, table, slot_table, log.store_ts_at)
        entries_wrong = entry_problems(header[0], table, slot_table, count, log)
        del table, slot_table
    finally:
        mapping.close()
    prog.advance(os.path.getsize(path))
    report.stats["index_entries"] += len(phys)
    if wrong:
        report.add("index_header", path, 0, "; ".join(wrong))
    if entries_wrong:
        report.add("index_entry", path, 0, "; ".join(entries_wrong))
    past = np.flatnonzero(phys >= log.end)
    if len(past):
        report.add("index_past_end", path, int(past[0]) + 1, f"{len(past)} entries point at or past "
                   f"the end of the log ({log.end}), the first at {phys[past[0]]}")

