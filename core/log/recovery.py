"""Recovery at load (DESIGN.md section 7).

Normal (no abort file): walk the last three segments record by record, CRC checked, to find
the end of the log. Abnormal (abort file present): start from the newest segment whose first
record is not later than the checkpoint's minimum timestamp (and not past the checkpoint's
dispatched offset; and not past where the index files `IndexService.load` dropped began),
re-dispatch every valid record from there, and stop at the first invalid one. Both then cut the CommitLog, the consume queues and the index at the end durably, and
rebuild the topic-queue table. A torn checkpoint falls back to a scan from the oldest segment.

Damage is not the end of the log (integrity, beyond RocketMQ): where the scan stops at a record
that fails its check, `core.log.quarantine.next_record` looks on for the next intact record that lies
where it says; when there is one, the damaged range is copied to `quarantine/` with a report
(`RecoveryReport.quarantined`, a WARNING each), left in place (reads refuse it) and the scan goes
on behind it, so that no intact record is cut away. Under abnormal recovery a damaged record
whose queue can still be read from it (the damage is elsewhere) gets its consume-queue entry,
so that a pull answers MESSAGE_DAMAGED there instead of skipping it silently. Only a damaged
record with nothing intact behind it (a torn tail, never acknowledged) is cut.

What the cut drops is counted first (records framed after the end: size and magic code in
place) and logged: an INFO line for a torn last record, a WARNING if more than one.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from core.record.codec import (
    MAGIC_BLANK, MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE, DispatchRequest, check_record, read_i32,
)
from core.log.dispatch import Dispatcher
from core.log.quarantine import Quarantined, damage_reason, keep, next_record
from core.record.crc_property import crc_mode

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    abnormal: bool
    start_offset: int = 0
    end_offset: int = 0
    scanned_bytes: int = 0
    checkpoint_valid: bool = True
    dropped_records: int = 0          # framed records at and after end_offset that were cut
    dropped_bytes: int = 0
    quarantined: list = field(default_factory=list)     # Quarantined ranges the scan went past
    queues_rewritten: list = field(default_factory=list)  # (topic, queue id) with a damaged entry


def recover_store(commitlog, cq_store, index_service, checkpoint, config, last_exit_ok: bool,
                  progress=None) -> RecoveryReport:
    """Bring CommitLog, consume queues and index to one consistent end; return what was done.

    `progress(scanned_bytes, total_bytes)` is called as the scan advances (every few thousand
    records and at each segment's end) and once at the end, with both at the bytes scanned:
    the log may end before the last segment does.
    """
    report = RecoveryReport(abnormal=not last_exit_ok, checkpoint_valid=checkpoint.valid)
    files = commitlog.queue.files
    redo = cq_store.recover(getattr(progress, "queues", None),   # ProgressBar.queues: counts queues
                            commitlog.get_max_offset() if files else None, commitlog)
    if not files:
        cq_store.destroy()
        if index_service is not None:
            index_service.truncate(0)
        commitlog.topic_queue_table = {}
        return report
    file_size = commitlog.file_size
    if last_exit_ok:
        start_idx = normal_start_index(files, commitlog.queue)
    else:
        start_idx = min(abnormal_start_index(files, commitlog.queue, checkpoint, config),
                        index_rebuild_start(files, index_service, checkpoint))
    start = files[start_idx].file_from_offset
    limit = files[-1].file_from_offset + file_size
    total = limit - start
    report.start_offset = start

    def on_progress(offset):
        if progress is not None:
            progress(offset - start, total)

    dispatcher = Dispatcher(commitlog, cq_store, index_service, delay_levels=config.delay_levels_ms)
    check_crc = crc_mode(config) if config.check_crc_on_recover else False
    durable = limit if last_exit_ok else (checkpoint.flushed_phy_offset if checkpoint.valid else 0)
    end = _dispatch_through(dispatcher, commitlog, start, limit, check_crc, on_progress,
                            not last_exit_ok, durable, lambda at, resume: report.quarantined.append(
                                _quarantine(commitlog, cq_store, config, at, resume, not last_exit_ok)))
    report.end_offset = end
    report.scanned_bytes = end - start
    if progress is not None:
        progress(end - start, end - start)
    report.dropped_records, report.dropped_bytes = framed_after(commitlog.queue, file_size, end)
    if report.dropped_records > 1:
        log.warning("recovery cut the log at %d: the record there fails its check (CRC or fields), "
                    "and %d records (%d bytes) stored after it are dropped with it; `mqstore check` "
                    "shows the problem", end, report.dropped_records - 1, report.dropped_bytes)
    elif report.dropped_records:
        log.info("recovery cut an incomplete last record at %d (%d bytes)", end, report.dropped_bytes)
    truncate_all(commitlog, cq_store, index_service, end)
    if redo:                                   # queues with a damaged entry: from the CommitLog
        _dispatch_through(dispatcher, commitlog, min(redo.values()), end, check_crc, None, True,
                          end, lambda at, resume: None)
        rebuild_topic_queue_table(commitlog, cq_store)
        report.queues_rewritten = sorted(redo)
    log.info("recovery (%s) scanned %d bytes from %d; log ends at %d",
             "abnormal" if report.abnormal else "normal", end - start, start, end)
    return report


def _dispatch_through(dispatcher, commitlog, start: int, limit: int, check_crc, progress,
                      apply: bool, durable: int, on_damage) -> int:
    """Dispatch (or, without `apply`, check) the log from `start`, going on past each damaged
    range below `durable` that has an intact record behind it (`on_damage(at, resume)` for
    each); return the log's end: where the last run stopped with nothing intact behind, or
    with damage at or past `durable`. Below `durable` (all of the log after a clean stop, the
    checkpoint's flushed offset after a crash) bytes were on disk: damage there is damage. Past
    it, a power cut can leave any page of the unflushed tail unwritten (zeros with written
    pages after them): that is the torn tail, cut as RocketMQ cuts it."""
    at = start
    while True:
        end, _ = dispatcher.run(at, limit, check_crc=check_crc, progress=progress, apply=apply)
        resume = next_record(commitlog.queue, commitlog.file_size, end, check_crc) \
            if end < min(limit, durable) else None
        if resume is None:
            return end
        on_damage(end, resume)
        at = resume


def _quarantine(commitlog, cq_store, config, start: int, resume: int, abnormal: bool) -> Quarantined:
    """Keep the damaged range [start, resume) aside (`core.log.quarantine.keep`): the scan goes on
    at `resume`. Under abnormal recovery the damaged record's consume-queue entry is written
    when its queue can be read from it and the entry is the queue's next."""
    queue, file_size = commitlog.queue, commitlog.file_size
    stop = min(resume, queue.find_mapped_file_by_offset(start).file_from_offset + file_size)
    reason = damage_reason(queue, start, file_size)
    kept = keep(queue, queue.fileops, config.quarantine_dir, start, stop, reason, file_size, resume)
    log.warning("recovery: the record at %d is damaged (%s); %d bytes quarantined in %s, the log "
                "goes on at %d", start, reason, stop - start, kept.path, resume)
    if abnormal:
        _enter_damaged(commitlog, cq_store, start, stop)
    return kept


def _enter_damaged(commitlog, cq_store, start: int, stop: int) -> None:
    """The consume-queue entry of the damaged record at `start`, when a parse without CRC
    gives its topic, queue and queue offset, and that offset is the queue's next."""
    mf = commitlog.queue.find_mapped_file_by_offset(start)
    buf = commitlog.queue.hold(mf)
    if buf is None:
        return
    try:
        req, size = check_record(buf, start - mf.file_from_offset, commitlog.file_size, False)
    finally:
        mf.release()
    if req.__class__ is not DispatchRequest or start + size > stop:
        return
    cq = cq_store.find(req.topic, req.queue_id)
    if cq is not None and cq.get_max_offset_in_queue() == req.consume_queue_offset:
        cq.put_message_position_info(start, size, req.tags_code, req.consume_queue_offset)


def framed_after(queue, file_size: int, end: int) -> tuple[int, int]:
    """(records, bytes) framed from `end` on: a plausible TOTALSIZE and a record magic code, to
    the first zeros or garbage; a segment's blank leads to the next segment."""
    mf = queue.find_mapped_file_by_offset(end)
    if mf is None:
        return 0, 0
    files = queue.files
    idx, pos, records, last = files.index(mf), end - mf.file_from_offset, 0, end
    while idx < len(files):
        mf = files[idx]
        buf = queue.hold(mf)
        if buf is None:
            break
        try:
            while pos + 8 <= file_size:
                size, magic = read_i32(buf, pos), read_i32(buf, pos + 4)
                if magic == MAGIC_BLANK:
                    break
                if magic not in (MAGIC_V1, MAGIC_V2) or size < MIN_RECORD_SIZE or pos + size > file_size:
                    return records, last - end
                records, pos = records + 1, pos + size
                last = mf.file_from_offset + pos
        finally:
            mf.release()
        idx, pos = idx + 1, 0
    return records, last - end


def _first_record_valid(mf, queue) -> bool:
    buf = queue.hold(mf)
    if buf is None:
        return False
    try:
        req, _ = check_record(buf, 0, mf.file_size, True)
    finally:
        mf.release()
    return isinstance(req, DispatchRequest) and req.commit_log_offset == mf.file_from_offset


def _never_written(mf, queue) -> bool:
    buf = queue.hold(mf)
    if buf is None:
        return False
    try:
        return read_i32(buf, 0) == 0
    finally:
        mf.release()


def normal_start_index(files, queue) -> int:
    """The third segment from the end (RocketMQ's rule), or an older one when that segment does
    not begin with a valid record: the damage may reach further back than three segments.
    Segments at the end that were never written to (made ahead of the writer by the allocator,
    which RocketMQ destroys at shutdown) do not count among the three."""
    last = len(files) - 1
    while last > 0 and _never_written(files[last], queue):
        last -= 1
    idx = max(0, last - 2)
    while idx > 0 and not _first_record_valid(files[idx], queue):
        idx -= 1
    return idx


def abnormal_start_index(files, queue, checkpoint, config) -> int:
    """The newest segment whose first record is valid, stored no later than the checkpoint's
    minimum timestamp and starting no later than its dispatched offset; 0 if none or torn."""
    if not checkpoint.valid:
        return 0
    min_ts = (checkpoint.get_min_timestamp_index() if config.message_index_enable
              else checkpoint.get_min_timestamp())
    for i in range(len(files) - 1, -1, -1):
        mf = files[i]
        if mf.file_from_offset > checkpoint.dispatched_phy_offset:
            continue
        buf = queue.hold(mf)
        if buf is None:
            continue
        try:
            req, _ = check_record(buf, 0, mf.file_size, False)
        finally:
            mf.release()
        if isinstance(req, DispatchRequest) and 0 < req.store_timestamp <= min_ts:
            return i
    return 0


def index_rebuild_start(files, index_service, checkpoint) -> int:
    """The newest segment holding where the index files that `IndexService.load` dropped after
    an abnormal exit began (their keys are dispatched again from there, not only from the
    checkpoint's timestamp: a file a flip made look newer was full and older than that); the
    last segment when none were dropped. The checkpoint's index timestamp is brought down to
    the service's durably first, so that a crash during the rebuild drops its files again."""
    at = index_service.rebuild_from if index_service is not None else None
    if at is None:
        return len(files) - 1
    if checkpoint.valid and checkpoint.index_msg_timestamp > index_service.last_flushed_index_timestamp:
        checkpoint.index_msg_timestamp = index_service.last_flushed_index_timestamp
        checkpoint.flush()
    log.info("recovery: index files from log offset %d on were dropped (they end after the "
                "checkpoint); their keys are indexed again from the CommitLog", at)
    for i in range(len(files) - 1, -1, -1):
        if files[i].file_from_offset <= at:
            return i
    return 0


def truncate_all(commitlog, cq_store, index_service, end: int) -> None:
    """Cut everything at `end`, durably, and rebuild the topic-queue table from the queues."""
    queue = commitlog.queue
    commitlog.reset_writer()
    queue.truncate_dirty_files(end)
    queue.flushed_where = queue.committed_where = end
    cq_store.truncate_dirty(end)
    if index_service is not None:
        index_service.truncate(end)
    rebuild_topic_queue_table(commitlog, cq_store)


def rebuild_topic_queue_table(commitlog, cq_store) -> None:
    commitlog.topic_queue_table = cq_store.topic_queue_table(max(commitlog.get_min_offset(), 0))


def truncate_diverged(store, offset: int) -> None:
    """Cut a loaded store's log at `offset` (a slave whose log diverged from its master's,
    DESIGN.md section 10) as recovery cuts it: CommitLog zeroed and flushed from there,
    consume queues and index truncated, topic-queue table rebuilt; and the checkpoint's
    offsets brought down to it."""
    truncate_all(store.commitlog, store.cq_store, store.index_service, offset)
    ckpt = store.checkpoint
    ckpt.flushed_phy_offset = min(ckpt.flushed_phy_offset, offset)
    ckpt.confirm_phy_offset = min(ckpt.confirm_phy_offset, offset)
    ckpt.dispatched_phy_offset = min(ckpt.dispatched_phy_offset, offset)
    ckpt.flush()
    log.warning("truncated the log to %d: it diverged from the master's", offset)
