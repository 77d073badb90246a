"""The control block: one `multiprocessing.shared_memory` segment, created by the supervisor,
that every service maps. It holds the store's positions, health flags and a slot per service
(pid, heartbeat, state, recovery progress, restarts).

Every field has exactly one writing process (named beside it below) and positions only grow
once services run. Fields are whole 8-byte words read and written through a
`memoryview.cast("q")`, which another process never sees torn (DESIGN.md section 4).
"""
from __future__ import annotations

import enum
import os
import time
from multiprocessing import resource_tracker, shared_memory

MAGIC = 0x4D5153544F524531          # "MQSTORE1"
WORDS = 512
SIZE = WORDS * 8


class Word(enum.IntEnum):
    """Store-wide words; the comment names the only process that writes each."""
    MAGIC = 0                 # supervisor
    SUPERVISOR_PID = 1        # supervisor
    WROTE = 2                 # appender (HA replicator on a slave): end of the written log
    COMMITTED = 3             # committer with the transient pool, else the appender (= WROTE)
    FLUSHED = 4               # flusher: durable up to here
    DISPATCHED = 5            # reput: consume queues and index built up to here
    DISPATCHED_DURABLE = 6    # reput: consume queues and index flushed up to here
    MIN_PHY = 7               # supervisor (retention): first byte still in the log
    LAST_STORE_TS = 8         # appender: store timestamp of the newest record
    LOGICS_TS = 9             # reput: store timestamp of the newest record whose entry is durable
    INDEX_TS = 10             # reput: end timestamp of the newest full, flushed index file
    FLUSH_FAILED = 11         # flusher: 1 after a failed flush (never retried)
    DISK_FULL = 12            # allocator: 1 while segments cannot be created for lack of space
    WRITABLE = 13             # supervisor: 1 while puts may be taken
    SLAVE = 14                # supervisor: 1 on a slave
    SYNC_FLUSH = 15           # supervisor: 1 under SYNC_FLUSH
    DRAINING = 16             # supervisor: 1 once a clean stop has begun
    POOL_ENABLED = 17         # supervisor: 1 with the transient store pool
    PHYSIC_TS = 18            # flusher: store timestamp of the newest flushed record
    CONFIRM = 19              # flusher under SYNC_FLUSH, committer/appender under ASYNC: readers' end
    TOPICS_VERSION = 20       # appender: bumped whenever config/topics.json changes
    PULLS_HELD = 21           # reader: pulls held for long polling (reput publishes arrivals only then)
    SPACE_FULL = 22           # supervisor (retention): 1 while the disk is over disk_space_warning_level_ratio
    # 32..63: replication, every word written by the ha process (services/ha/service.py) only
    HA_EPOCH = 32             # ha: this store's epoch (a slave: its master's, once hand-shaken)
    HA_FENCED = 33            # ha (master): 1 once a peer showed a newer epoch; puts are refused
    HA_SLAVES = 34            # ha (master): slaves connected and hand-shaken
    HA_ACKED = 35             # ha (master): highest offset a slave acknowledged this epoch
    HA_MASTER_MAX = 36        # ha (slave): the master's max offset, as last heard
    HA_CONNECTED = 37         # ha (slave): 1 while following a master
    HA_SLAVE_ACK_BASE = 40    # ha (master): 40..63, the acknowledged offset of slave slot i
    POOL_BASE = 64            # 64..95: transient pool, two words per buffer (see pool_* below)
    SERVICE_BASE = 128        # 128..: a slot of SLOT_WORDS words per service


HA_SLAVE_SLOTS = 24
SERVICES = ("appender", "allocator", "committer", "flusher", "reput", "reader", "ha", "scheduler")
SLOT_WORDS = 16
POOL_BUFFERS = 16


class Slot(enum.IntEnum):
    PID = 0                   # the service
    HEARTBEAT_MS = 1          # the service, every loop
    STATE = 2                 # the service: a ServiceState
    PROGRESS_DONE = 3         # the service, during recovery or drain
    PROGRESS_TOTAL = 4        # the service
    RESTARTS = 5              # supervisor
    STARTED_MS = 6            # supervisor
    EXIT_CODE = 7             # supervisor: last exit code (negative: killed by that signal)


class ServiceState(enum.IntEnum):
    STOPPED = 0
    STARTING = 1
    RECOVERING = 2
    RUNNING = 3
    DRAINING = 4
    FAILED = 5
    BACKOFF = 6


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ControlBlock:
    """Create (supervisor) or attach to (services) the control block by name."""

    def __init__(self, name: str | None = None, create: bool = False):
        if create:
            self._shm = shared_memory.SharedMemory(name=name, create=True, size=SIZE)
            self._owner = True
        else:
            self._shm = shared_memory.SharedMemory(name=name, create=False)
            self._owner = False
            # Python 3.11 registers attached segments too, and would unlink ours when this
            # process exits; only the creating supervisor may do that.
            try:
                resource_tracker.unregister(self._shm._name, "shared_memory")
            except Exception:
                pass
        self.words = self._shm.buf.cast("q")
        if create:
            self.words[Word.MAGIC] = MAGIC
            self.words[Word.SUPERVISOR_PID] = os.getpid()
        elif self.words[Word.MAGIC] != MAGIC:
            raise RuntimeError(f"shared memory {name!r} is not an mqstore control block")

    @property
    def name(self) -> str:
        return self._shm.name

    def get(self, word: int) -> int:
        return self.words[word]

    def set(self, word: int, value: int) -> None:
        self.words[word] = value

    def raise_to(self, word: int, value: int) -> None:
        """Positions only grow: write `value` only if it is larger (single writer)."""
        if value > self.words[word]:
            self.words[word] = value

    # -- per-service slots ---------------------------------------------------------------
    @staticmethod
    def slot_word(service: str, field: Slot) -> int:
        return Word.SERVICE_BASE + SERVICES.index(service) * SLOT_WORDS + field

    def slot_get(self, service: str, field: Slot) -> int:
        return self.words[self.slot_word(service, field)]

    def slot_set(self, service: str, field: Slot, value: int) -> None:
        self.words[self.slot_word(service, field)] = value

    def heartbeat(self, service: str, state: ServiceState | None = None) -> None:
        self.words[self.slot_word(service, Slot.HEARTBEAT_MS)] = now_ms()
        if state is not None:
            self.words[self.slot_word(service, Slot.STATE)] = int(state)

    # -- transient pool ------------------------------------------------------------------
    # Buffer i has two words: LENT (appender: segment offset + 1 when it takes the buffer for
    # that segment) and RETURNED (committer: the same value once the segment is wholly in the
    # file). The buffer is free when both are equal.
    def pool_lent(self, index: int) -> int:
        return self.words[Word.POOL_BASE + 2 * index] - 1

    def pool_is_free(self, index: int) -> bool:
        return self.words[Word.POOL_BASE + 2 * index] == self.words[Word.POOL_BASE + 2 * index + 1]

    def pool_lend(self, index: int, segment_offset: int) -> None:
        self.words[Word.POOL_BASE + 2 * index] = segment_offset + 1

    def pool_return(self, index: int) -> None:
        self.words[Word.POOL_BASE + 2 * index + 1] = self.words[Word.POOL_BASE + 2 * index]

    def pool_buffer_for(self, segment_offset: int) -> int | None:
        """The buffer lent to `segment_offset` and not yet returned, if any."""
        for i in range(POOL_BUFFERS):
            if not self.pool_is_free(i) and self.pool_lent(i) == segment_offset:
                return i
        return None

    def close(self) -> None:
        self.words.release()
        self._shm.close()
        if self._owner:
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass


def read_control_name(run_dir: str) -> str:
    with open(os.path.join(run_dir, "control")) as f:
        return f.read().strip()
