"""`walk_frames`: how far the whole records of one segment's written bytes reach, reading only
each frame's TOTALSIZE and MAGICCODE. The walk of a slave's ReplicaLog (core/log/replica_log.py)
over every chunk its master sends; the compiled accelerator runs the same loop
(core/record/_walk.c) and tests/unit/test_accel.py holds the two equal.
"""
from __future__ import annotations

import struct

from core.record.accel import native
from core.record.layout import BLANK_SIZE, MAGIC_BLANK, MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE

MORE, BLANK, BAD = 0, 1, 2     # why a walk stopped: the next record is not whole yet, a blank, not a record

_HEAD = struct.Struct(">ii")   # TOTALSIZE, MAGICCODE


def walk_frames_reference(buf, at: int, stop: int, size: int) -> tuple[int, int, int]:
    """Walk the frames of a segment of `size` bytes from `at` while whole records lie before
    `stop` (where the written bytes end in it): (where the walk stopped, where the last whole
    record starts or -1, MORE / BLANK / BAD). BLANK and BAD name the frame at the stop: a blank
    record's header, or a frame no record could have (a magic code neither a record's nor a
    blank's, a size below the smallest record or past the segment's end)."""
    head = _HEAD.unpack_from
    last = -1
    while at + BLANK_SIZE <= stop:
        total, magic = head(buf, at)
        if magic == MAGIC_BLANK:
            return at, last, BLANK
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or total < MIN_RECORD_SIZE or at + total > size:
            return at, last, BAD
        if at + total > stop:
            break
        last = at
        at += total
    return at, last, MORE


walk_frames = walk_frames_reference if native is None else native.walk_frames
