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
"""
from __future__ import annotations

import struct

import numpy as np

HEADER = struct.Struct(">qqqqii")      # begin ts, end ts, begin phys, end phys, slot count, count


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
    values = np.asarray(slots, np.int64)
    live = int(np.count_nonzero((values > 0) & (values < count)))
    capacity = len(table)
    for head in values[values >= count].tolist():
        while count <= head < capacity:
            prev = int(table[head]["prev"])
            head = prev if 0 <= prev < head else 0
        live += 0 < head < count
    return live
