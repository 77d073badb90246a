"""What integrity costs in the whole system (issue 33), quick form: 1 KiB batches of 100 from one
producer process under ASYNC_FLUSH into a store writing the whole-record CRC property
(`enabled_append_prop_crc = true`, the default) and into one without it, then one consumer
reading each store from the start. Reads always check every record in the reader process (no
switch turns that off there): the consume pair compares records checked by their record CRC
with records checked by their body CRC. benchmarks/embedded.py has the gets with the read
checks beside without them.
"""
from __future__ import annotations

import os
import shutil

from _pipeline_side import QUEUES, TOPIC, StoreProcess, consume


def integrity_rows(bench, wait_quiet, seconds: float = 3.0, rounds: int = 3) -> list[tuple[str, float, float]]:
    """(workload, msgs/s with the record CRC, msgs/s without), for produce and consume: the
    best of `rounds` rounds, each one store with and one without, alternating (a single pair
    of 3 s runs moved from 0.74x to 0.97x between runs on this shared machine)."""
    from ipc import Admin
    best = {True: (0.0, 0.0), False: (0.0, 0.0)}
    for r in range(rounds):
        for crc in (True, False):
            store = StoreProcess(os.path.join(bench.root, f"integrity-{crc}-{r}"), "ASYNC_FLUSH",
                                 bench.plan.cache_window,
                                 config={"enabled_append_prop_crc": crc}).start()
            try:
                with Admin(store.address) as admin:
                    admin.create_topic(TOPIC, QUEUES)
                _, p = bench.produce(store, 1024, "batch", 1, seconds)
                wait_quiet(store.address)
                c = consume(store.address, seconds)
                was = best[crc]
                best[crc] = (max(was[0], p["acked"] / p["seconds"]),
                             max(was[1], c["messages"] / c["seconds"]))
            finally:
                store.stop()
                shutil.rmtree(store.root, ignore_errors=True)
    return [("produce 1 KiB ASYNC batch100 x1: record CRC on / off", best[True][0], best[False][0]),
            ("consume 1 KiB x1 consumer: record CRC / body CRC checked", best[True][1], best[False][1])]


def print_rows(rows) -> None:
    print("integrity (issue 33): msgs/s with the record CRC, without, and the ratio (targets: "
          "batched puts >= 0.9x, pulls >= 0.8x)")
    for label, on, off in rows:
        print(f"  {label:58s} {on:>12,.0f} {off:>12,.0f}   {on / off:.2f}x")
