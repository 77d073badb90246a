"""What integrity costs in the embedded store (issue 33), measured side by side in one run:

- puts of 1 KiB bodies (`put_messages` x32 and `put_message`) with the whole-record CRC
  property (`enabled_append_prop_crc`, the default) and without it;
- gets of everything put (`get_message` x32, raw `.buffers`) with the read checks (every record
  checked against its consume-queue entry and its CRC, core.read.check) and without them. The
  store has no switch for the read checks (reads always check); for this row only they are
  replaced in this process by a check that passes everything.

Each pair runs on two fresh stores of the same shape, alternating. Every round runs twice:
in this process (the compiled accelerator, core.record.accel, where it is built) and in a child
process with MQSTORE_PURE_PYTHON=1 (the pure-Python reference), the two interleaved round by
round; best of `rounds` each, printed beside each other.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
for _p in (os.path.dirname(HERE), HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import core.read.store_reader as read_path                                  # noqa: E402
from core import MessageStore, StoreConfig                                   # noqa: E402
from core.record import accel                                                # noqa: E402
from _embedded_plan import BATCH, QUEUES, TOPIC, Frozen, MessageFactory      # noqa: E402

GROUP = "bench-group"
GET_PASSES = 3


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
    """(workload [implementation], msgs/s with, msgs/s without) for each pair above, for this
    process's implementation and (unless this one is already pure Python) the reference."""
    modes = [accel.mode()] + (["pure"] if accel.mode() != "pure" else [])
    best: dict = {}
    for r in range(rounds):
        for mode in modes:
            rows = _one_round(root, f"{r}", quick) if mode == accel.mode() else _pure_round(root, f"{r}", quick)
            for label, on, off in rows:
                was = best.get((label, mode), (0.0, 0.0))
                best[label, mode] = (max(was[0], on), max(was[1], off))
    return [(f"{label} [{mode}]", on, off) for (label, mode), (on, off) in best.items()]


def _pure_round(root: str, tag: str, quick: bool) -> list:
    """`_one_round` in a child process with MQSTORE_PURE_PYTHON=1."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), root, f"pure-{tag}", str(int(quick))],
                         env={**os.environ, "MQSTORE_PURE_PYTHON": "1"}, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the pure-Python round failed:\n{out.stderr}")
    return json.loads(out.stdout.splitlines()[-1])


def _one_round(root: str, tag: str, quick: bool) -> list[tuple[str, float, float]]:
    """One round of each pair on fresh stores (removed after)."""
    factory = MessageFactory()
    batches, singles = (20000, 4000) if quick else (100000, 20000)     # messages
    out = []
    stores = {crc: _store(root, f"integrity-{tag}-{crc}", crc) for crc in (True, False)}
    try:
        for label, batched, count in ((f"put_messages x{BATCH} 1 KiB", True, batches),
                                      ("put_message 1 KiB", False, singles)):
            rate = {}
            for crc in (True, False):
                items = factory.batches(1024, count) if batched else factory.singles(1024, count)
                rate[crc] = count / _puts(stores[crc], items, batched)
            out.append((f"{label}: record CRC on / off", rate[True], rate[False]))
        for store in stores.values():
            assert store.wait_for_dispatch()
        store = stores[True]
        names = [name for name in ("check_run",) if hasattr(read_path, name)]
        real = {name: getattr(read_path, name) for name in names}
        rate = {True: 0.0, False: 0.0}
        try:
            for _ in range(GET_PASSES):          # gets are short: the best of a few, alternating
                for checks in (True, False):
                    for name in names:
                        setattr(read_path, name, real[name] if checks else (lambda *a, **k: None))
                    n, seconds = _gets(store)
                    rate[checks] = max(rate[checks], n / seconds)
        finally:
            for name in names:
                setattr(read_path, name, real[name])
        out.append(("get x32 raw .buffers: read checks on / off", rate[True], rate[False]))
    finally:
        for crc, store in stores.items():
            store.shutdown()
            shutil.rmtree(os.path.join(root, f"integrity-{tag}-{crc}"), ignore_errors=True)
    return out


def print_rows(rows) -> None:
    print("integrity (issue 33): msgs/s with the checks, without, and the ratio (targets: puts "
          "batched >= 0.9x, pulls >= 0.8x)")
    for label, on, off in sorted(rows):
        print(f"  {label:58s} {on:>12,.0f} {off:>12,.0f}   {on / off:.2f}x")


if __name__ == "__main__":                # a pure-Python round: root, tag, quick
    print(json.dumps(_one_round(sys.argv[1], sys.argv[2], sys.argv[3] == "1")))
