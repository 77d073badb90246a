"""What integrity costs in the embedded store (issue 33), measured side by side in one run:

- puts of 1 KiB bodies (`put_messages` x32 and `put_message`) with the whole-record CRC
  property (`enabled_append_prop_crc`, the default) and without it;
- gets of everything put (`get_message` x32, raw `.buffers`) with the read checks (every record
  checked against its consume-queue entry and its CRC, core.read.check) and without them. The
  store has no switch for the read checks (reads always check); for this row only they are
  replaced in this process by a check that passes everything.

Each pair runs on two fresh stores of the same shape, alternating, best of `rounds`.
"""
from __future__ import annotations

import os
import time

import core.read.store_reader as read_path
from core import MessageStore, StoreConfig
from _embedded_plan import BATCH, QUEUES, TOPIC, Frozen, MessageFactory

GROUP = "bench-group"


def _store(root: str, name: str, crc: bool) -> MessageStore:
    store = MessageStore(StoreConfig(store_path_root_dir=os.path.join(root, name),
                                     mapped_file_size_commitlog=64 << 20,
                                     enabled_append_prop_crc=crc))
    store.load()
    store.start()
    return store


def _puts(store, items, batched: bool) -> float:
    put = store.put_messages if batched else store.put_message
    with Frozen():
        t0 = time.perf_counter()
        for item in items:
            put(item)
        return time.perf_counter() - t0


def _gets(store) -> tuple[int, float]:
    n = 0
    t0 = time.perf_counter()
    for q in range(QUEUES):
        offset = 0
        while True:
            r = store.get_message(GROUP, TOPIC, q, offset, 32)
            if not r.buffers:
                break
            n += len(r.buffers)
            offset = r.next_begin_offset
    return n, time.perf_counter() - t0


def integrity_rows(root: str, quick: bool, rounds: int = 3) -> list[tuple[str, float, float]]:
    """(workload, msgs/s with, msgs/s without) for each pair above."""
    factory = MessageFactory()
    batches, singles = (20000, 4000) if quick else (100000, 20000)     # messages
    out = []
    stores = {crc: _store(root, f"integrity-{crc}", crc) for crc in (True, False)}
    try:
        for label, batched, count in ((f"put_messages x{BATCH} 1 KiB", True, batches),
                                      ("put_message 1 KiB", False, singles)):
            best = {True: 0.0, False: 0.0}
            for _ in range(rounds):
                for crc in (True, False):
                    items = factory.batches(1024, count) if batched else factory.singles(1024, count)
                    rate = count / _puts(stores[crc], items, batched)
                    best[crc] = max(best[crc], rate)
            out.append((f"{label}: record CRC on / off", best[True], best[False]))
        for store in stores.values():
            assert store.wait_for_dispatch()
        store = stores[True]
        real = read_path.check_run
        best = {True: 0.0, False: 0.0}
        try:
            for _ in range(rounds):
                for checks in (True, False):
                    read_path.check_run = real if checks else (lambda *a, **k: None)
                    n, seconds = _gets(store)
                    best[checks] = max(best[checks], n / seconds)
        finally:
            read_path.check_run = real
        out.append(("get x32 raw .buffers: read checks on / off", best[True], best[False]))
    finally:
        for store in stores.values():
            store.shutdown()
    return out


def print_rows(rows) -> None:
    print("integrity (issue 33): msgs/s with the checks, without, and the ratio (targets: puts "
          "batched >= 0.9x, pulls >= 0.8x)")
    for label, on, off in rows:
        print(f"  {label:48s} {on:>12,.0f} {off:>12,.0f}   {on / off:.2f}x")
