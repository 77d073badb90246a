"""`Stop`: why a walk over records stopped, one vocabulary for every walk (the checking parser
`core.record.codec.check_record`, the dispatcher's scanner `core.record.scan.scan_segment`, the
dispatch loop `core.log.dispatch.Dispatcher.dispatch`, the Spark reader `pipeline.rows`).

The members are strings (as logs and tests print them) and compare by identity. Each walk
gives a subset of them; its docstring says which.
"""
from __future__ import annotations


class Stop:
    """Why a walk over records stopped."""
    # what is at the position reached
    BLANK = "blank"          # the segment's end-of-file filler: continue at the next segment
    END = "end"              # no record starts here (zeros, a foreign magic, a torn tail)
    CORRUPT = "corrupt"      # a framed record that fails its checks (CRC, lengths)
    MISPLACED = "misplaced"  # a valid record whose PHYSOFFSET is not where it lies
    # the walk's own limits
    LIMIT = "limit"          # the limit asked for: an end offset, a record count, a queue offset
    FULL = "full"            # the output is full (a batch of rows): call again from here
    DONE = "done"            # the whole range asked for was walked
    PARTIAL = "partial"      # the next record is not wholly below the limit yet (a log that grows)
    INVALID = "invalid"      # an invalid record: nothing valid follows here
