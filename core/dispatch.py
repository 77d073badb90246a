"""The reput logic as a function over a CommitLog range: read records from a physical offset
up to a limit (never past the confirm offset), and hand each valid one to the consume queues
and the index. Blanks jump to the next segment; the first invalid record stops the run.
"""
from __future__ import annotations

from core.codec import DispatchRequest, RecordCheck, check_record
from core.message import SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_NOT

_CQ_TYPES = (SYSFLAG_TRANSACTION_NOT, SYSFLAG_TRANSACTION_COMMIT)


class DispatchStop:
    DONE = "done"          # reached the limit
    PARTIAL = "partial"    # the next record is not wholly below the limit yet
    INVALID = "invalid"    # an invalid record: nothing valid follows here


class Dispatcher:
    """Builds consume queues and the index from CommitLog records."""

    def __init__(self, commitlog, cq_store, index_service=None, on_arrive=None):
        self.commitlog = commitlog
        self.cq_store = cq_store
        self.index_service = index_service
        self.on_arrive = on_arrive            # callable(DispatchRequest), e.g. long-poll wakeups
        self.last_store_timestamp = 0

    def dispatch(self, req: DispatchRequest) -> None:
        if (req.sys_flag & SYSFLAG_TRANSACTION_MASK) in _CQ_TYPES:
            self.cq_store.put(req)
        if self.index_service is not None:
            self.index_service.build_index(req)
        self.last_store_timestamp = req.store_timestamp
        if self.on_arrive is not None:
            self.on_arrive(req)

    def run(self, from_offset: int, limit: int, check_crc: bool = False, progress=None,
            apply: bool = True):
        """Dispatch every valid record in [from_offset, limit); return (offset reached, DispatchStop).

        With apply=False it only walks and checks the records (finding the end of the log)."""
        queue = self.commitlog.queue
        offset = from_offset
        while offset < limit:
            mf = queue.find_mapped_file_by_offset(offset)
            if mf is None:
                return offset, DispatchStop.INVALID
            buf = queue.hold(mf)
            if buf is None:
                return offset, DispatchStop.INVALID
            base = mf.file_from_offset
            try:
                pos = offset - base
                end = min(mf.read_position, limit - base)
                while pos < end:
                    req, size = check_record(buf, pos, end, check_crc)
                    if req is RecordCheck.BLANK:
                        pos = mf.file_size
                        break
                    if req is RecordCheck.CORRUPT:
                        return base + pos, DispatchStop.INVALID
                    if req is RecordCheck.END:
                        growing = end < mf.read_position or mf.read_position < mf.file_size
                        return base + pos, (DispatchStop.PARTIAL if growing else DispatchStop.INVALID)
                    if req.commit_log_offset != base + pos:
                        return base + pos, DispatchStop.INVALID
                    if apply:
                        self.dispatch(req)
                    pos += size
            finally:
                mf.release()
            offset = base + pos
            if progress is not None:
                progress(offset)
            if pos < mf.file_size:
                break
        return offset, (DispatchStop.DONE if offset >= limit else DispatchStop.PARTIAL)
