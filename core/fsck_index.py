"""An index file's 40-byte header checked against what it describes (issue 33: a flip in an
index header is found, and `check --fix` rebuilds the index from the CommitLog).

RocketMQ's header has no checksum, but each of its six fields is implied by the rest of the
store, as `core.log.index_file` keeps them:
- the count is one past the last entry: that entry is written (not all zero), and the count
  is at most the capacity (a count <= 0, a header never written, reads as 1, as RocketMQ's);
- begin phys offset = the first entry's, end phys offset = the last entry's;
- begin timestamp = the store timestamp of the record at the begin phys offset (set by the
  first key put); end timestamp = that of the record at the end phys offset, or, after a
  truncation, the begin timestamp plus the last entry's time difference in whole seconds;
- the slot count = the slots whose chain holds a live entry (a slot left past the count by a
  writer killed before its header counts only through the live entry its chain leads to);
- an empty file holds a fresh or seeded header: begin = end for both values, no slot counted.

Each 20-byte entry (`entry_problems`) is held to the record it names, as `IndexFile` writes it
(its key hash, phys offset, time difference and previous entry are all implied):
- the phys offset is where a record of the log starts (entries below the log's first segment,
  whose segments expired, and past its end, `index_past_end`, are not checked here);
- the key hash is the hash of one of that record's keys (`index_keys`);
- the time difference is that record's store time minus the begin timestamp, in whole seconds
  (0 when the begin timestamp is not positive), clamped to [0, INT32_MAX];
- the previous entry is the entry before it in its slot (hash mod the slot count), 0 for the
  first of a slot; and each slot holds the last entry of its chain (a value past the count
  that a killed writer left counts through the live entry its chain leads back to).
A time difference flipped alone (10 of 55 index-entry flips of the soak) changes no answer of
an unbounded query; it moves the record in or out of a time-bounded one.
"""
from __future__ import annotations

import struct

import numpy as np

HEADER = struct.Struct(">qqqqii")      # begin ts, end ts, begin phys, end phys, slot count, count
INT32_MAX = (1 << 31) - 1


def header_problems(header: tuple, table, slots, store_ts_at) -> list[str]:
    """What is wrong with an index file's `header` (its six raw fields): `table` is its whole
    entry table (numpy, fields hash/phys/diff/prev; entry 0 unused), `slots` its slot table
    (int32), `store_ts_at(phys)` the store timestamp of the CommitLog record at `phys` (None
    when no record starts there). [] when the header is what the file's contents imply."""
    begin_ts, end_ts, begin_phy, end_phy, slot_count, count = header
    capacity = len(table)
    if count > capacity:
        return [f"the index count is {count}, over the file's {capacity}"]
    count = max(count, 1)                 # RocketMQ reads a count <= 0 (a header never written) as 1
    entries = table[1:count]
    if count == 1:
        out = []
        if begin_ts != end_ts or begin_phy != end_phy:
            out.append(f"an empty file's begin and end differ (timestamps {begin_ts}/{end_ts}, "
                       f"phys offsets {begin_phy}/{end_phy})")
        if slot_count:
            out.append(f"an empty file counts {slot_count} hash slots")
        return out
    first, last = entries[0], entries[-1]
    out = []
    if not (int(last["hash"]) or int(last["phys"]) or int(last["diff"]) or int(last["prev"])):
        out.append(f"the index count {count} is past the last entry written")
    if begin_phy != int(first["phys"]):
        out.append(f"begin phys offset {begin_phy}, the first entry's is {int(first['phys'])}")
    if end_phy != int(last["phys"]):
        out.append(f"end phys offset {end_phy}, the last entry's is {int(last['phys'])}")
    first_ts = store_ts_at(int(first["phys"]))
    if first_ts is not None and begin_ts != first_ts:
        out.append(f"begin timestamp {begin_ts}, its record's is {first_ts}")
    last_ts = store_ts_at(int(last["phys"]))
    truncated = begin_ts + int(last["diff"]) * 1000
    if last_ts is not None and end_ts not in (last_ts, truncated):
        out.append(f"end timestamp {end_ts}, its record's is {last_ts}")
    live = live_slots(slots, table, count)
    if slot_count != live:
        out.append(f"the slot count is {slot_count}, {live} slots hold entries")
    return out


def live_slots(slots, table, count: int) -> int:
    """The slots whose value is a live entry (1..count-1), or leads back to one through the
    previous-entry links of whole entries a killed writer left past the count (as
    `IndexFile._live_head` follows them)."""
    return int(np.count_nonzero(live_heads(slots, table, count) > 0))


def live_heads(slots, table, count: int) -> np.ndarray:
    """The live entry each slot stands for: its value, or for a value at or past the count the
    entry below the count its chain leads back to (0: none); -1 for a negative value."""
    values = np.asarray(slots).astype(np.int64)
    values[values < 0] = -1
    for s in np.flatnonzero(values >= count).tolist():
        value = int(values[s])
        while count <= value < len(table):
            prev = int(table[value]["prev"])
            value = prev if 0 <= prev < value else 0
        values[s] = value if value < count else 0
    return values


def entry_problems(begin_ts: int, table, slots, count: int, log) -> list[str]:
    """What is wrong with the entries 1..count-1 of an index file and its slots (one line per
    field, naming how many and the first): `table`, `slots` and the header's `begin_ts` as for
    `header_problems`, `count` the valid count; `log` the records of the CommitLog scan
    (`core.fsck_scan.LogScan`: sorted `phys` and their `ts`, a sentinel last; each record's
    key hashes `khash[kstart[j]:kstart[j + 1]]`; `min`, `end`; `missing`, the records a key
    of which the index does not find). A damaged entry is reported once: one whose hash is
    wrong hides its record's key (`index_missing`), and its chain is judged by the hash of the
    record's key nearest to the stored one (the one a flip came from). The entries are taken
    `CHUNK` at a time (a full file of RocketMQ's 20 million would take a gigabyte at once)."""
    found: dict[str, list] = {}          # what -> [how many, the first entry, its detail]
    last = np.zeros(len(slots), np.int64)
    for lo in range(1, count, CHUNK):
        _check_entries(begin_ts, table[lo:min(count, lo + CHUNK)], lo, last, log, found)
    out = [f"{n} entries {what}, the first entry {first} ({detail})"
           for what, (n, first, detail) in found.items()]
    bad = np.flatnonzero(live_heads(slots, table, count) != last)
    if len(bad):
        s = int(bad[0])
        out.append(f"{len(bad)} hash slots do not hold the last entry of their chain, the first "
                   f"slot {s} (holds {int(slots[s])}, its last entry is {int(last[s])})")
    return out


CHUNK = 1 << 20


def _check_entries(begin_ts: int, entries, number: int, last, log, found: dict) -> None:
    """`entry_problems` for `entries`, numbered from `number`; `last` holds the last entry of
    each slot before them and is brought past them."""
    key_hash, phys, diff, prev = (entries[c].astype(np.int64) for c in ("hash", "phys", "diff", "prev"))

    def note(mask, what, describe) -> None:
        sel = np.flatnonzero(mask)
        if len(sel):
            row = found.setdefault(what, [0, int(sel[0]) + number, describe(int(sel[0]))])
            row[0] += len(sel)

    checked = (phys >= log.min) & (phys < log.end)
    j = np.searchsorted(log.phys, phys)
    at_record = checked & (log.phys[j] == phys)
    note(checked & ~at_record, "point where no record starts", lambda k: f"at {phys[k]}")
    wrong_hash = _wrong_hashes(key_hash, phys, j, at_record, log)
    note(wrong_hash & ~np.isin(phys, list(log.missing)), "hold a hash none of their record's "
         "keys has", lambda k: f"record at {phys[k]}")
    ts = log.ts[j]
    expected = np.zeros(len(phys), np.int64) if begin_ts <= 0 else \
        np.clip((ts - begin_ts) // 1000, 0, INT32_MAX)
    note(at_record & (diff != expected), "hold a time difference that is not their record's store "
         "time", lambda k: f"{diff[k]} s after the begin timestamp, the record's is {expected[k]} s")
    expected_prev = chains(key_hash, last, number)
    note(prev != expected_prev, "link to another entry than the one before them in their slot",
         lambda k: f"previous {prev[k]}, expected {expected_prev[k]}")


def _wrong_hashes(key_hash, phys, j, at_record, log) -> np.ndarray:
    """Which entries at a record (`at_record`, the record `j`) hold a hash none of its keys
    has; the hash of each such entry is replaced in `key_hash` by the record's key hash
    nearest to it. None is when the scan kept no key hashes (the index was not opened)."""
    wrong = np.zeros(len(phys), bool)
    if len(log.kstart) != len(log.phys):
        return wrong
    at = np.flatnonzero(at_record)
    first, n_keys = log.kstart[j[at]], log.kstart[j[at] + 1] - log.kstart[j[at]]
    matched = np.zeros(len(at), bool)
    for k in range(int(n_keys.max()) if len(at) else 0):
        pos = np.minimum(first + k, len(log.khash) - 1)
        matched |= (n_keys > k) & (log.khash[pos] == key_hash[at])
    wrong[at[~matched]] = True
    for k in at[~matched].tolist():
        own = log.khash[log.kstart[j[k]]:log.kstart[j[k] + 1]].tolist()
        if own:
            key_hash[k] = min(own, key=lambda h: bin(h ^ int(key_hash[k])).count("1"))
    return wrong


def chains(key_hash, last, number: int = 1) -> np.ndarray:
    """The previous entry each of the entries numbered from `number` (with the hashes
    `key_hash`) links to as `IndexFile` builds them in order: the one before it in its slot
    (hash mod the slot count), the slot's last entry before them (`last`) for the first;
    `last` is brought past them."""
    slot = key_hash % len(last)
    order = np.argsort(slot, kind="stable")
    in_order = slot[order]
    same = in_order[1:] == in_order[:-1]
    prev_sorted = last[in_order]
    prev_sorted[1:][same] = order[:-1][same] + number
    expected_prev = np.empty(len(slot), np.int64)
    expected_prev[order] = prev_sorted
    ends = np.flatnonzero(np.append(~same, True)) if len(slot) else np.zeros(0, np.int64)
    last[in_order[ends]] = order[ends] + number
    return expected_prev
