"""The store checkpoint: a 4 KiB file, `<root>/checkpoint`, of big-endian int64 fields.

Layout (RocketMQ's StoreCheckpoint, reference 7.1, plus ours from offset 64):

| offset | field |
|---|---|
| 0 | physic_msg_timestamp: store time of the last flushed CommitLog record |
| 8 | logics_msg_timestamp: store time of the last record in a flushed consume queue |
| 16 | index_msg_timestamp: end time of the last index file flushed whole |
| 24 | master_flushed_offset |
| 32 | confirm_phy_offset |
| 64 | flushed_phy_offset (ours) |
| 72 | dispatched_phy_offset (ours) |
| 80 | CRC32 of bytes 0..79, 4 bytes, unsigned |

Bytes 40..63 and 84..4095 stay zero. The CRC detects a torn write: when it does not match on
open, `valid` is False and every field reads as 0, so that recovery falls back to a full
scan. A RocketMQ-written checkpoint has no CRC and therefore opens as not valid.

So that no byte of the file can be damaged unseen, a checkpoint is valid only when, besides
its CRC, bytes 84..4095 are all zero (`checkpoint_valid`): the same as a CRC over every byte
but the CRC's own, with the format unchanged (RocketMQ reads bytes 0..39 only; checkpoints of
earlier versions of this store, which leave those bytes zero, stay valid).

Every field lives in memory on the attributes; `flush()` writes them all at once. Only one
process may own a writable `StoreCheckpoint` of a store (the one that persists positions;
other processes report theirs through the control block): two writers would overwrite each
other's fields and the CRC.
"""
from __future__ import annotations

import os
import struct

from core.record.crc import crc32

CHECKPOINT_SIZE = 4096
CRC_POS = 80
ROCKETMQ_FIELDS_END = 40         # RocketMQ writes bytes 0..39 only
MIN_TIMESTAMP_MARGIN_MS = 3000

# (attribute, byte offset); every field is a big-endian signed int64.
FIELDS = (
    ("physic_msg_timestamp", 0),
    ("logics_msg_timestamp", 8),
    ("index_msg_timestamp", 16),
    ("master_flushed_offset", 24),
    ("confirm_phy_offset", 32),
    ("flushed_phy_offset", 64),
    ("dispatched_phy_offset", 72),
)
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


def checkpoint_crc(buf) -> int:
    """CRC32 of the checkpoint's bytes 0..79."""
    return crc32(bytes(buf[0:CRC_POS])) & 0xFFFFFFFF


def checkpoint_valid(buf) -> bool:
    """Whether a 4 KiB checkpoint's CRC holds and the bytes after it are zero (module doc)."""
    return _UINT32.unpack_from(buf, CRC_POS)[0] == checkpoint_crc(buf) \
        and not any(bytes(buf[CRC_POS + 4:CHECKPOINT_SIZE]))


def is_rocketmq_checkpoint(buf) -> bool:
    """Whether a checkpoint is as RocketMQ writes it: its fields at 0..39 and the rest of the
    4 KiB zero, with no CRC (so it opens as not valid, as a torn one does)."""
    return len(buf) == CHECKPOINT_SIZE and not any(bytes(buf[ROCKETMQ_FIELDS_END:]))


class StoreCheckpoint:
    """The mapped checkpoint file; fields as attributes, `flush()` to persist them."""

    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int
    confirm_phy_offset: int
    flushed_phy_offset: int
    dispatched_phy_offset: int

    def __init__(self, path: str, fileops):
        self.path = path
        self._fileops = fileops
        for name, _ in FIELDS:
            setattr(self, name, 0)
        created = self._ensure_file()
        self._mapping = fileops.map_file(path, CHECKPOINT_SIZE)
        if created:
            self.valid = True
            self.flush()
        else:
            self.valid = checkpoint_valid(self._mapping.buf)
            if self.valid:
                for name, pos in FIELDS:
                    setattr(self, name, _INT64.unpack_from(self._mapping.buf, pos)[0])

    def _ensure_file(self) -> bool:
        """Create the file when missing; replace one of the wrong size. True if created."""
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            self._fileops.make_dirs(os.path.dirname(os.path.abspath(self.path)))
            self._fileops.create_file(self.path, CHECKPOINT_SIZE)
            return True
        if size != CHECKPOINT_SIZE:
            # Not a checkpoint we can map (cut short, or foreign): it counts as torn, so
            # the fields stay 0 and `valid` False; the file is replaced whole.
            self._fileops.create_file(self.path, CHECKPOINT_SIZE)
            return False
        return False

    def flush(self) -> None:
        """Write every field and the CRC into the mapping, then make the page durable."""
        if self._mapping is None:
            raise ValueError(f"checkpoint {self.path} is shut down")
        buf = self._mapping.buf
        for name, pos in FIELDS:
            _INT64.pack_into(buf, pos, getattr(self, name))
        _UINT32.pack_into(buf, CRC_POS, checkpoint_crc(buf))
        if any(bytes(buf[CRC_POS + 4:CHECKPOINT_SIZE])):     # damaged: written zero again
            buf[CRC_POS + 4:CHECKPOINT_SIZE] = bytes(CHECKPOINT_SIZE - CRC_POS - 4)
        self._mapping.flush(0, CHECKPOINT_SIZE)

    def get_min_timestamp(self) -> int:
        """The store time recovery may start from: min(physic, logics) less 3 s, not below 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp)
                   - MIN_TIMESTAMP_MARGIN_MS)

    def get_min_timestamp_index(self) -> int:
        """As `get_min_timestamp`, but no later than the last flushed index file."""
        return min(self.get_min_timestamp(), self.index_msg_timestamp)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name, _ in FIELDS}

    @property
    def closed(self) -> bool:
        return self._mapping is None

    def shutdown(self) -> None:
        """Flush and unmap. A second call does nothing."""
        if self._mapping is None:
            return
        try:
            self.flush()
        finally:
            self._mapping.close()
            self._mapping = None

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in self.to_dict().items())
        return f"StoreCheckpoint({self.path!r}, valid={self.valid}, {fields})"
