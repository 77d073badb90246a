"""The timer job (RocketMQ 5's TimerMessageStore, in a design of our own): delivers timer
messages (core.delay.put: stored in `rmq_sys_wheel_timer` queue 0 with TIMER_OUT_MS) at their
time. Written once; the embedded store's schedule thread and the scheduler process run it
beside the delay-level job (core.delay.schedule), with the same callables.

Each pass has two steps:
- take in: the timer topic's consume queue is followed from `enqueued`; each new entry's record
  is read for its TIMER_OUT_MS and the entry goes to the window file of its delivery time
  (core.delay.timer_wheel), or to the current window when that one is later (a message already due);
- deliver: the current window (the earliest not finished) is read and sorted by (delivery
  time, arrival); the entries whose time has come are re-put, in that order, through
  `put_all` (the normal put path) with their real topic and queue and the timer properties
  removed (TIMER_OUT_MS stays, as in RocketMQ), up to `DELIVER_BATCH` a pass. Time goes in
  steps of `timer_precision_ms` (RocketMQ 5's slots): an entry is due at the first step boundary
  at or after its time, never before it and less than one step after it, and the job wakes
  only at boundaries where an entry is due, delivering the whole slot together (a step of 1 ms:
  at its ms). A window is finished once its time is over and every entry in it was
  acknowledged; then the next window with a file becomes current.

Progress is the checkpoint `timerqueue/checkpoint.json` (beside the window files it speaks
for, so that it never travels without them): `enqueued` (consume-queue offset taken
in), `window` (the current window's start), `cursor` ([delivery ms, arrival] of the last entry
delivered in it: every entry at or below it, among those taken in before `below`, is done) and
`below`. It is written atomically at most every `CHECKPOINT_MS`, after the window files are
synced, so it never claims more than is durable, and a delivery counts only once acknowledged:
a crash delivers again at most what was acknowledged since the last checkpoint (the same
UNIQ_KEY), never loses one. A missing or unreadable checkpoint rebuilds the wheel from the
timer topic's consume queue (every message it still holds is delivered again: duplicates).
"""
from __future__ import annotations

import json
import logging
import os

import numpy as np

from core.log.consume_queue import ENTRY_DTYPE as CQ_DTYPE
from core.delay.put import PROPERTY_TIMER_OUT_MS, TIMER_PROPERTIES, level_of
from core.delay.reput_record import Readdresser, ReputRules, drop_list, property_of
from core.files.fileops import REAL_FILE_OPS, FileOps
from core.record.message import PROPERTY_DELAY
from core.delay.schedule import ACKED, IDLE_MS, NEVER, RETRY_MS, now_ms, read_records
from core.delay.timer_wheel import ENTRY_DTYPE, WINDOW_MS, TimerWindows, window_of

log = logging.getLogger(__name__)
CHECKPOINT_FILE = "checkpoint.json"
ENQUEUE_BATCH = 4096
DELIVER_BATCH = 1024
CHECKPOINT_MS = 1000


# A timer's delivery leaves out the timer properties a producer set (TIMER_OUT_MS stays, as in
# RocketMQ) and DELAY.
TIMER_DROPS = drop_list(*(name for name, _ in TIMER_PROPERTIES), PROPERTY_DELAY)
_TIMER_OUT = drop_list(PROPERTY_TIMER_OUT_MS)[0]


class TimerScheduler:
    """`arrivals()`: the timer topic's consume queue (or view), None while it does not exist;
    `read`, `put_all`, `rules`: as core.delay.schedule.DelayScheduler's; `precision_ms`: the
    step (timer_precision_ms): an entry is due at the first multiple of it at or after its time."""

    def __init__(self, store_root: str, arrivals, read, put_all,
                 fileops: FileOps = REAL_FILE_OPS, clock=now_ms, rules: ReputRules = ReputRules(),
                 precision_ms: int = 1):
        self.readdress = Readdresser(rules, TIMER_DROPS)
        self.precision_ms = precision_ms
        self.fileops = fileops
        self.wheel = TimerWindows(store_root, fileops)
        self.path = os.path.join(self.wheel.dir, CHECKPOINT_FILE)
        self.arrivals = arrivals
        self.read = read
        self.put_all = put_all
        self.clock = clock
        self.enqueued = 0
        self.window: int | None = None
        self.cursor = (-1, -1)
        self.below = 0
        self._todo = None            # the current window's entries not done, sorted
        self._pos = 0                # how many of them are delivered
        self._late = 0               # how many of them were taken in before `below` moved
        self._stale = True           # the current window is to be read from its file
        self._fresh: list = []       # entries appended to the loaded current window since
        self._saved = None
        self._saved_at = 0
        self.retry_at = 0
        self.delivered = self.skipped = self.refused = 0
        self.lag_ms: list[int] = []

    # -- checkpoint ----------------------------------------------------------------------
    def load(self) -> None:
        try:
            state = json.loads(self.fileops.read_file(self.path))
            self.enqueued = int(state["enqueued"])
            self.window = None if state["window"] is None else int(state["window"])
            self.cursor = tuple(int(x) for x in state["cursor"])
            self.below = int(state["below"])
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as e:
            log.error("%s cannot be read (%s): the timer wheel is built again from the timer "
                      "topic's consume queue", self.path, e)
            self.enqueued, self.window, self.cursor, self.below = 0, None, (-1, -1), 0
        self.wheel.load(self.enqueued)
        self._saved = self._state()

    def _state(self) -> dict:
        return {"enqueued": self.enqueued, "window": self.window, "cursor": list(self.cursor),
                "below": self.below}

    def persist(self, force: bool = False) -> None:
        state = self._state()
        now = self.clock()
        if state == self._saved or (not force and now - self._saved_at < CHECKPOINT_MS):
            return
        self.wheel.sync()
        self.fileops.make_dirs(os.path.dirname(self.path))
        self.fileops.write_file_atomic(self.path, json.dumps(state).encode())
        self._saved, self._saved_at = state, now
        while self.wheel.windows and self.window is not None and self.wheel.windows[0] < self.window:
            self.wheel.remove(self.wheel.windows[0])        # finished, and the checkpoint says so

    # -- the pass ------------------------------------------------------------------------
    def run_once(self) -> int:
        now = self.clock()
        more = self._take_in()
        wait = self._deliver(now)
        self.persist()
        if more:
            return 0
        if self._state() != self._saved:              # wake to write the checkpoint
            wait = min(wait, CHECKPOINT_MS)
        return max(0, wait)

    def pending(self) -> int:
        """Timer messages not delivered yet, taken in or not (an entry appended again after a
        crash counts twice)."""
        cq = self.arrivals()
        waiting = max(0, cq.get_max_offset_in_queue() - self.enqueued) if cq is not None else 0
        done = 0
        if self._todo is not None and self.window is not None:
            try:
                in_file = os.path.getsize(self.wheel.path(self.window)) // ENTRY_DTYPE.itemsize
            except FileNotFoundError:
                in_file = 0
            loaded = len(self._todo) + sum(map(len, self._fresh))
            done = max(0, in_file - loaded + self._pos)
        return waiting + max(0, self.wheel.entry_count() - done)

    def _take_in(self) -> bool:
        """Append the next arrivals to their windows; whether more are waiting."""
        cq = self.arrivals()
        if cq is None:
            return False
        lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        self.enqueued = max(self.enqueued, lo)
        if self.enqueued >= hi:
            return False
        raw = cq.get_entries(self.enqueued, min(ENQUEUE_BATCH, hi - self.enqueued))
        if raw is None:
            return False
        cq_entries = np.frombuffer(raw, CQ_DTYPE)
        out = np.empty(len(cq_entries), ENTRY_DTYPE)
        out["arrival"] = np.arange(self.enqueued, self.enqueued + len(cq_entries))
        out["phys"], out["size"] = cq_entries["phys"], cq_entries["size"]
        delivers = out["deliver"]
        keep = np.ones(len(out), bool)
        places = read_records(self.read, list(zip(cq_entries["phys"].tolist(), cq_entries["size"].tolist())))
        for i, (buf, pos) in enumerate(places):
            deliver = self._deliver_ms(buf, pos)
            if deliver is None:
                keep[i] = False
                self.skipped += 1
            else:
                delivers[i] = deliver
        out = out[keep]
        windows = np.array([window_of(int(d)) for d in out["deliver"].tolist()], np.int64)
        if self.window is not None:
            windows = np.maximum(windows, self.window)
        for window in np.unique(windows).tolist():
            entries = out[windows == window]
            self.wheel.append(window, entries)
            if window == self.window and not self._stale:
                self._fresh.append(entries)           # merged into the loaded window: _deliver
        self.enqueued += len(cq_entries)
        return self.enqueued < hi

    @staticmethod
    def _deliver_ms(buf, pos: int) -> int | None:
        raw = property_of(buf, pos, _TIMER_OUT) if buf is not None else None
        value = level_of(raw) if raw is not None else None
        return value if value is not None and value >= 0 else None

    def _deliver(self, now: int) -> int:
        if now < self.retry_at:
            return self.retry_at - now
        if self.window is None:
            self.window = self.wheel.next_after(None)
            if self.window is None:
                return IDLE_MS
            self._stale = True
        if self._stale:
            self._read_window()
        elif self._fresh:
            self._merge_fresh()
        todo, step = self._todo, self.precision_ms
        due = int(np.searchsorted(self._todo_deliver, now // step * step, "right"))  # slots begun
        end = min(due, self._pos + DELIVER_BATCH)
        if end > self._pos:
            self._put(todo[self._pos:end])
            if now < self.retry_at:
                return RETRY_MS
        if self._pos < len(todo):
            return 0 if self._pos < due else -(-int(self._todo_deliver[self._pos]) // step) * step - now
        if now >= self.window + WINDOW_MS:                   # finished: the next window
            nxt = self.wheel.next_after(self.window)
            self.window = nxt if nxt is not None else window_of(now)
            self.cursor, self.below, self._stale, self._fresh = (-1, -1), self.enqueued, True, []
            return 0
        return min(IDLE_MS, self.window + WINDOW_MS - now)

    def _read_window(self) -> None:
        """The current window's entries not done yet, from its file."""
        entries = self.wheel.read(self.window)
        deliver, arrival = entries["deliver"].astype(np.int64), entries["arrival"].astype(np.int64)
        cd, ca = self.cursor
        done = ((deliver < cd) | ((deliver == cd) & (arrival <= ca))) & (arrival < self.below)
        self._fresh = []
        self._set_todo(entries[~done])

    def _merge_fresh(self) -> None:
        """The entries appended to the current window since it was read, merged into what is
        left of it (without reading the file again)."""
        rest = np.concatenate([self._todo[self._pos:], *self._fresh])
        self._fresh = []
        self._set_todo(rest)

    def _set_todo(self, todo: np.ndarray) -> None:
        """`todo` (entries not done) sorted by (delivery time, arrival); how many of them are
        at or below the cursor (taken in late: `below` moves on once they are delivered)."""
        todo = todo[np.lexsort((todo["arrival"], todo["deliver"]))]
        t_deliver, t_arrival = todo["deliver"].astype(np.int64), todo["arrival"].astype(np.int64)
        cd, ca = self.cursor
        self._late = int(np.count_nonzero((t_deliver < cd) | ((t_deliver == cd) & (t_arrival <= ca))))
        self._todo, self._pos, self._stale = todo, 0, False
        self._todo_deliver = t_deliver
        self._below_next = self.enqueued
        if self._late == 0:
            self.below = self.enqueued

    def _put(self, batch: np.ndarray) -> None:
        readdress = self.readdress
        items = [readdress(buf, pos) if buf is not None else None
                 for buf, pos in read_records(self.read, list(zip(batch["phys"].tolist(),
                                                                   batch["size"].tolist())))]
        msgs = [m for m in items if m is not None]
        statuses = iter(self.put_all(msgs) if msgs else ())
        acked_at = self.clock()
        delivers, arrivals = batch["deliver"].tolist(), batch["arrival"].tolist()
        for i, msg in enumerate(items):
            status = next(statuses, None) if msg is not None else None
            if msg is None or status in NEVER:
                self.skipped += 1
                if msg is not None:
                    log.error("timer re-put to %s-%d answered %s; skipped", msg.topic,
                              msg.queue_id, status.name)
            elif status not in ACKED:
                self.refused += 1
                self.retry_at = acked_at + RETRY_MS
                log.warning("timer re-put refused; tried again in %d ms", RETRY_MS)
                return
            else:
                self.delivered += 1
                if len(self.lag_ms) < 100_000:
                    self.lag_ms.append(acked_at - delivers[i])
            self._advance(delivers[i], arrivals[i])

    def _advance(self, deliver: int, arrival: int) -> None:
        self._pos += 1
        key = (deliver, arrival)
        if key > self.cursor:
            self.cursor = key
        if self._pos >= self._late:
            self.below = self._below_next
