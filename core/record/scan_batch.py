"""`ScanBatch`: the records `core.record.scan` found, in log order, as columns for the dispatcher.

A batch is a sequence of parts:

- `Rows`: records taken one by one, one value per record in plain lists;
- `Run`: a producer's batch taken whole: its header fields as numpy int64 arrays, and the
  topic, tag code and KEYS its records share; their UNIQ_KEY values either as a matrix of
  ASCII bytes (`units`, one key a row) or one value they all share (`uniq`).

The dispatcher reads numeric columns as numpy arrays (`column`) and asks for per-record
strings (`strings`) only when it must build index keys one by one, so a batch of runs costs
no Python object per record.
"""
from __future__ import annotations

import numpy as np

COLUMNS = ("phys", "size", "topic", "queue_id", "queue_offset", "tags", "store_ts", "keys",
           "uniq", "sys_flag")
NUMERIC = ("phys", "size", "queue_id", "queue_offset", "tags", "store_ts", "sys_flag")


class Rows:
    """Records as plain columns (lists), one value per record; KEYS and UNIQ_KEY are "" when
    absent."""
    __slots__ = COLUMNS

    def __init__(self):
        for name in COLUMNS:
            setattr(self, name, [])

    def __len__(self) -> int:
        return len(self.phys)

    def add(self, row: tuple) -> None:
        """Append one record given as a row (the columns' order)."""
        for name, value in zip(COLUMNS, row):
            getattr(self, name).append(value)

    def extend_header_fields(self, n: int, phys, size, queue_id, queue_offset, store_ts,
                             sys_flag) -> None:
        """Append the first `n` of each fixed-header column (the caller appended the other
        columns of those records)."""
        self.phys += phys[:n]
        self.size += size[:n]
        self.queue_id += queue_id[:n]
        self.queue_offset += queue_offset[:n]
        self.store_ts += store_ts[:n]
        self.sys_flag += sys_flag[:n]

    def column(self, name: str) -> np.ndarray:
        return np.array(getattr(self, name), np.int64)

    def strings(self) -> tuple[list, list, list]:
        return self.topic, self.keys, self.uniq


class Run:
    """Records that share topic, tag code and KEYS, with numeric columns as int64 arrays."""
    __slots__ = ("phys", "size", "queue_id", "queue_offset", "store_ts", "sys_flag", "topic",
                 "tags", "keys", "units", "uniq")

    def __init__(self, phys, size, queue_id, queue_offset, store_ts, sys_flag, topic: str,
                 tags: int, keys: str, units: np.ndarray | None, uniq: str):
        self.phys, self.size, self.queue_id = phys, size, queue_id
        self.queue_offset, self.store_ts, self.sys_flag = queue_offset, store_ts, sys_flag
        self.topic, self.tags, self.keys, self.units, self.uniq = topic, tags, keys, units, uniq

    def __len__(self) -> int:
        return len(self.phys)

    def column(self, name: str) -> np.ndarray:
        if name == "tags":
            return np.full(len(self.phys), self.tags, np.int64)
        return getattr(self, name)

    def uniq_values(self) -> list[str]:
        if self.units is None:
            return [self.uniq] * len(self.phys)
        joined = self.units.tobytes().decode("ascii")
        w = self.units.shape[1]
        return [joined[i:i + w] for i in range(0, len(joined), w)]

    def strings(self) -> tuple[list, list, list]:
        n = len(self.phys)
        return [self.topic] * n, [self.keys] * n, self.uniq_values()


class ScanBatch:
    """Scanned records in log order, as `Rows` and `Run` parts."""
    __slots__ = ("parts", "_before_last")

    def __init__(self):
        self.parts: list = []
        self._before_last = 0            # records in the parts before the last one

    def __len__(self) -> int:
        return self._before_last + len(self.parts[-1]) if self.parts else 0

    def _append(self, part) -> None:
        if self.parts:
            self._before_last += len(self.parts[-1])
        self.parts.append(part)

    def rows_part(self) -> Rows:
        """The trailing `Rows` part (the caller may append to its lists), added when the batch
        ends with a run or is empty."""
        if not self.parts or self.parts[-1].__class__ is not Rows:
            self._append(Rows())
        return self.parts[-1]

    def drop_empty_tail(self) -> None:
        """Remove a trailing `Rows` part that received no record."""
        if self.parts and not len(self.parts[-1]):
            self.parts.pop()
            if self.parts:
                self._before_last -= len(self.parts[-1])

    def add(self, row: tuple) -> None:
        """Append one record given as a row (in `COLUMNS` order)."""
        self.rows_part().add(row)

    def add_run(self, run: Run) -> None:
        self._append(run)

    def column(self, name: str) -> np.ndarray:
        """A numeric column (one of `NUMERIC`) over the whole batch, as int64."""
        parts = self.parts
        if len(parts) == 1:
            return parts[0].column(name)
        return np.concatenate([p.column(name) for p in parts])

    def strings(self) -> tuple[list, list, list]:
        """(topics, KEYS, UNIQ_KEYs), one string per record."""
        if len(self.parts) == 1:
            return self.parts[0].strings()
        out: tuple[list, list, list] = ([], [], [])
        for part in self.parts:
            for acc, values in zip(out, part.strings()):
                acc += values
        return out

    def topic_ids(self) -> tuple[list[str], np.ndarray | None]:
        """(topics, the topic number of each record): None instead of numbers when every
        record has the first topic."""
        first = self.parts[0]
        name = first.topic if first.__class__ is Run else first.topic[0]
        if all(p.topic == name if p.__class__ is Run else p.topic.count(name) == len(p)
               for p in self.parts):
            return [name], None
        ids: dict = {}
        numbers = [np.full(len(p), ids.setdefault(p.topic, len(ids)), np.int64)
                   if p.__class__ is Run else
                   np.array([ids.setdefault(t, len(ids)) for t in p.topic], np.int64)
                   for p in self.parts]
        return list(ids), np.concatenate(numbers)

    def uniq_matrix(self) -> tuple[str, np.ndarray] | None:
        """(topic, UNIQ_KEYs as rows of ASCII bytes) when every record is in a run of one topic
        without KEYS whose UNIQ_KEYs are a matrix, all of one width; None otherwise."""
        parts = self.parts
        first = parts[0]
        if first.__class__ is not Run or first.units is None:
            return None
        for p in parts:
            if p.__class__ is not Run or p.units is None or p.keys or p.topic != first.topic \
                    or p.units.shape[1] != first.units.shape[1]:
                return None
        units = first.units if len(parts) == 1 else np.concatenate([p.units for p in parts])
        return first.topic, units

    def rows(self) -> list[tuple]:
        """Every record as a row of Python values (in `COLUMNS` order)."""
        out: list[tuple] = []
        for p in self.parts:
            topics, keys, uniqs = p.strings()
            values = {"topic": topics, "keys": keys, "uniq": uniqs}
            for name in NUMERIC:
                values[name] = p.column(name).tolist() if p.__class__ is Run else getattr(p, name)
            out += zip(*(values[name] for name in COLUMNS))
        return out
