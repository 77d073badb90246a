"""`RunningFlags`: the store's health bits, with RocketMQ's values (reference 11.4)."""
from __future__ import annotations

NOT_READABLE = 1
NOT_WRITEABLE = 2
WRITE_LOGICS_QUEUE_ERROR = 4
WRITE_INDEX_FILE_ERROR = 8
DISK_FULL = 16
FLUSH_FAILED = 32                 # ours: a flush failed; the store stays unwritable until recovery

_WRITE_BLOCKERS = NOT_WRITEABLE | WRITE_LOGICS_QUEUE_ERROR | WRITE_INDEX_FILE_ERROR | DISK_FULL | FLUSH_FAILED


class RunningFlags:
    def __init__(self, bits: int = 0):
        self.bits = bits

    def set(self, flag: int) -> bool:
        """Set `flag`; True if it was clear before."""
        was_clear = not self.bits & flag
        self.bits |= flag
        return was_clear

    def clear(self, flag: int) -> bool:
        """Clear `flag`; True if it was set before."""
        was_set = bool(self.bits & flag)
        self.bits &= ~flag
        return was_set

    def is_set(self, flag: int) -> bool:
        return bool(self.bits & flag)

    @property
    def is_writeable(self) -> bool:
        return not self.bits & _WRITE_BLOCKERS

    @property
    def only_disk_full_blocks_writes(self) -> bool:
        return self.bits & _WRITE_BLOCKERS == DISK_FULL

    @property
    def is_readable(self) -> bool:
        return not self.bits & NOT_READABLE

    @property
    def is_cq_writeable(self) -> bool:
        return not self.bits & (_WRITE_BLOCKERS & ~DISK_FULL)

    def names(self) -> list[str]:
        table = {NOT_READABLE: "NOT_READABLE", NOT_WRITEABLE: "NOT_WRITEABLE",
                 WRITE_LOGICS_QUEUE_ERROR: "WRITE_LOGICS_QUEUE_ERROR",
                 WRITE_INDEX_FILE_ERROR: "WRITE_INDEX_FILE_ERROR", DISK_FULL: "DISK_FULL",
                 FLUSH_FAILED: "FLUSH_FAILED"}
        return [name for bit, name in table.items() if self.bits & bit]
