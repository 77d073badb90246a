"""The scheduler job (RocketMQ's ScheduleMessageService): delivers the messages of the delay
levels when their time comes. Written once over core objects and callables; the embedded store
runs it as a thread (core.embedded_services.ScheduleService), the scheduler process hosts it
with read-only views and a put client of the appender (services/scheduler.py).

Each pass looks at every level in turn. A level's queue (SCHEDULE_TOPIC_XXXX, queue
level - 1) is followed from its offset in config/delayOffset.json (core.delay.offsets): while
the entry there is due (its record's store timestamp + the level's delay is not in the future)
the record is read and its delivery is built from the record's bytes
(core.delay.reput_record.Readdresser: the real topic and queue, DELAY removed, every other
property kept, UNIQ_KEY and REAL_TOPIC/REAL_QID too, as RocketMQ's messageTimeup), up to
`REPUT_BATCH` entries a pass; the due entries' records are read with one copy per span of
the log (`read_records`), and the batch goes to `put_all`, the normal put path, which stores
each real queue's share as one batch (`batch_groups`). The level's offset moves past the
entries acknowledged, in order, stopping at the first that is not, and the offsets file is
written once per pass at most (every `PERSIST_MS`). So:
- at least once, never lost: an offset passes a message only after its re-put was
  acknowledged; a crash re-delivers what was acknowledged but not yet persisted (the same
  UNIQ_KEY), and a refused re-put is tried again after `RETRY_MS`;
- in order within a level (entries are taken and acknowledged in queue order; after a refusal
  the rest of the batch is delivered again);
- levels do not block each other: a level takes at most one batch per pass, and a level whose
  re-puts fail waits on its own;
- a due time long past (the store was down) is delivered at once, oldest first.
The dispatcher's tag code of an entry is its delivery time (core.record.codec, with the store's
`message_delay_level`); the job takes it only to know how many records to read, and goes by each
record's store timestamp and the configured levels, so that entries dispatched with other
levels (a store whose levels changed) are delivered on time too.

Acknowledged means stored as durably as the store's own policy asks (`ACKED`: PUT_OK; on a
SYNC_MASTER also SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT, whose record is stored and
flushed locally); FLUSH_DISK_TIMEOUT and every refusal are not.

An entry whose record is gone (retention) or is not a delay record (no REAL_TOPIC), or whose
re-put is refused for good (`NEVER`: MESSAGE_ILLEGAL, PROPERTIES_SIZE_EXCEEDED), is skipped,
logged and counted (`skipped`); an offset outside its queue (a queue truncated by recovery, files
removed by retention) is moved inside it, as RocketMQ's correctDelayOffset does.
"""
from __future__ import annotations

import logging
import time

from core.record.codec import SCHEDULE_TOPIC
from core.log.consume_queue import ENTRY
from core.delay.reput_record import LEVEL_DROPS, Readdresser, ReputRules, parse
from core.record.layout import F_STORE_TS
from core.record.message import SYSFLAG_TRANSACTION_MASK
from core.status import PutMessageStatus

log = logging.getLogger(__name__)
REPUT_BATCH = 1024         # entries of one level re-put per pass
IDLE_MS = 100              # the longest wait between passes: new entries may have arrived
RETRY_MS = 1000            # a level whose re-put was refused tries again after this
PERSIST_MS = 1000          # the offsets file is written at most this often (and at stop)
SPAN_BYTES = 1 << 20       # records lying within this much of the log are read with one copy
S = PutMessageStatus
ACKED = frozenset((S.PUT_OK, S.SLAVE_NOT_AVAILABLE, S.FLUSH_SLAVE_TIMEOUT))
# Answers that no retry can change (the real topic's queue is gone, the message cannot be
# stored there): the entry is skipped and counted, so that it does not hold its level forever.
NEVER = frozenset((S.MESSAGE_ILLEGAL, S.PROPERTIES_SIZE_EXCEEDED))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def batch_groups(msgs: list, max_bytes: int) -> list[list[int]]:
    """The indices of `msgs` in groups that can each go as one batch put: messages of one
    topic, queue and born host, in their order, no transaction, bodies within `max_bytes`;
    groups in the order of their first message. Each real queue thus gets its messages in
    their schedule order. A host re-puts each group of two or more as one batch (one lock,
    one reply) and, should the batch be refused, its messages one by one, so that a message
    the store refuses holds up no other."""
    groups: list[list[int]] = []
    open_groups: dict = {}                  # (topic, queue, host) -> [group, its body bytes]
    for i, m in enumerate(msgs):
        key = (m.topic, m.queue_id, m.born_host)
        if m.sys_flag & SYSFLAG_TRANSACTION_MASK:      # never batched (RocketMQ's batch rule)
            open_groups.pop(key, None)                 # and what follows it in its queue after it
            groups.append([i])
            continue
        found = open_groups.get(key)
        if found is None or found[1] + len(m.body) > max_bytes:
            found = open_groups[key] = [[], 0]
            groups.append(found[0])
        found[0].append(i)
        found[1] += len(m.body)
    return groups


def read_records(read, entries) -> list:
    """(buffer, position) of each (phys, size, ...) entry's record, (None, 0) where it cannot
    be read: entries whose records lie in increasing order within `SPAN_BYTES` are read with
    one `read(phys, size)` (one copy, not one per record; a span that `read` refuses, across
    a segment's end, is read record by record)."""
    out: list = []
    i, n = 0, len(entries)
    while i < n:
        first, size = entries[i][0], entries[i][1]
        end, j = first + size, i + 1
        if size > 0:
            while j < n and entries[j][1] > 0 and end <= entries[j][0] \
                    and entries[j][0] + entries[j][1] - first <= SPAN_BYTES:
                end = entries[j][0] + entries[j][1]
                j += 1
        span = read(first, end - first) if size > 0 else None
        if span is None and j - i > 1:
            out += [((one, 0) if (one := read(e[0], e[1])) is not None else (None, 0))
                    for e in entries[i:j]]
        elif span is None:
            out.append((None, 0))
        else:
            out += [(span, e[0] - first) for e in entries[i:j]]
        i = j
    return out


class DelayScheduler:
    """`queue_of(queue_id)`: the schedule queue (a ConsumeQueue or view) or None while it does
    not exist; `read(phys, size)`: the record's bytes or None; `put_all(messages)`: their put
    statuses, in order (the deliveries are core.delay.reput_record.Delivery records, made
    by `rules`); `offsets`: a core.delay.offsets.DelayOffsetStore."""

    def __init__(self, levels_ms: tuple, offsets, queue_of, read, put_all, clock=now_ms,
                 rules: ReputRules = ReputRules()):
        self.levels_ms = tuple(levels_ms)
        self.readdress = Readdresser(rules, LEVEL_DROPS)
        self.offsets = offsets
        self.queue_of = queue_of
        self.read = read
        self.put_all = put_all
        self.clock = clock
        self.retry_at: dict[int, int] = {}
        self.delivered = 0
        self.skipped = 0
        self.refused = 0
        self.lag_ms: list[int] = []      # delivery time minus due time, for who takes them
        self._persisted_at = 0

    def load(self) -> None:
        self.offsets.load()

    def run_once(self) -> int:
        """Deliver what is due on every level; the ms until something may be due next."""
        now = self.clock()
        wait = IDLE_MS
        for level in range(1, len(self.levels_ms) + 1):
            wait = min(wait, self._level(level, now))
        if self.offsets.dirty:
            if now - self._persisted_at >= PERSIST_MS:
                self.offsets.persist()
                self._persisted_at = now
            else:
                wait = min(wait, PERSIST_MS)        # wake to write it
        return max(0, wait)

    def pending(self) -> dict[int, int]:
        """Entries not delivered yet, per level (levels whose queue exists)."""
        out = {}
        for level in range(1, len(self.levels_ms) + 1):
            cq = self.queue_of(level - 1)
            if cq is not None:
                hi = cq.get_max_offset_in_queue()
                off = min(max(self.offsets.get(level, 0), cq.get_min_offset_in_queue()), hi)
                out[level] = hi - off
        return out

    def _level(self, level: int, now: int) -> int:
        retry = self.retry_at.get(level, 0)
        if retry > now:
            return retry - now
        cq = self.queue_of(level - 1)
        if cq is None:
            return IDLE_MS
        lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        start = self.offsets.get(level, lo)
        if not lo <= start <= hi:
            log.warning("delay level %d: offset %d is outside its queue [%d, %d]; moved inside",
                        level, start, lo, hi)
            start = min(max(start, lo), hi)
        items, wait, k = self._due(cq, level, start, hi, now)
        done = self._deliver(level, items, start)
        self.offsets.set(level, done)
        if done < k:                                  # refused: this level waits
            self.retry_at[level] = now + RETRY_MS
            return RETRY_MS
        return 0 if k < hi and wait == IDLE_MS and items else wait

    def _due(self, cq, level: int, start: int, hi: int, now: int):
        """(items, wait, end): the due entries from `start` as (offset, delivery or None, due
        ms), the ms until the first entry not due, and the offset after the last item. The
        entries' tag codes (their delivery times, from dispatch) say how many to read; each
        record's own store time decides."""
        delay = self.levels_ms[level - 1]
        items = []
        wait = IDLE_MS
        k = start
        raw_entries = cq.get_entries(start, min(REPUT_BATCH, hi - start)) if start < hi else None
        entries = list(ENTRY.iter_unpack(raw_entries or b""))
        due_by_tag = next((i for i, e in enumerate(entries) if e[2] > now), len(entries))
        readdress = self.readdress
        for buf, pos in read_records(self.read, entries[:due_by_tag + 1]):
            delivery = due = None
            parsed = parse(buf, pos) if buf is not None else None
            if parsed is not None:
                due = parsed[0][F_STORE_TS] + delay
                if due > now:
                    wait = due - now
                    break
                delivery = readdress(buf, pos, parsed)
            items.append((k, delivery, due))
            k += 1
        return items, wait, k

    def _deliver(self, level: int, items: list, start: int) -> int:
        """Re-put the deliveries of `items`; the offset past the last one acknowledged in order."""
        msgs = [d for _, d, _ in items if d is not None]
        statuses = iter(self.put_all(msgs) if msgs else ())
        acked_at = self.clock()
        done = start
        for k, delivery, due in items:
            if delivery is None:
                self.skipped += 1
                log.warning("delay level %d: entry %d of %s is not a readable delay record; skipped",
                            level, k, SCHEDULE_TOPIC)
            else:
                status = next(statuses, None)
                if status in NEVER:
                    self.skipped += 1
                    log.error("delay level %d: re-put of entry %d to %s-%d answered %s; skipped",
                              level, k, delivery.topic, delivery.queue_id, status.name)
                elif status not in ACKED:
                    self.refused += 1
                    log.warning("delay level %d: re-put of entry %d answered %s; tried again in "
                                "%d ms", level, k, getattr(status, "name", status), RETRY_MS)
                    return done
                else:
                    self.delivered += 1
                    if len(self.lag_ms) < 100_000:
                        self.lag_ms.append(acked_at - due)
            done = k + 1
        return done
