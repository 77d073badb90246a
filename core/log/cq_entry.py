"""The consume-queue entry, RocketMQ's 20 bytes: CommitLog offset (8), record size (4), tag hash
code (8), big-endian; entry i of a queue at byte i*20 of its files (docs/FORMAT.md)."""
from __future__ import annotations

import struct

import numpy as np

UNIT_SIZE = 20
BLANK_SIZE = 0x7FFFFFFF            # size of a pre-blank filler entry (Integer.MAX_VALUE)
ENTRY = struct.Struct(">qiq")
ENTRY_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
