"""Where a batched put's CPU goes: per-thread CPU of every store service and of the producer.

Starts a fresh store (`mqstore start`, as `pipeline.py` does), runs one producer process that
sends batches of 100 bodies with 50 batches in flight (the `batch100 x1` row of
`pipeline.py`), and reads /proc/<pid>/task/<tid>/stat and schedstat of every thread of the
services and of the producer before and after a window in the middle of the run. It prints,
per thread, the cores it used, its CPU per batch (user and kernel), and the share of the
window it spent runnable but waiting for a CPU: the thread that waits most while using most is
the one a faster machine would speed up first. The last line adds it up and sets it beside
what the whole machine was busy with in the same window.

    .venv/bin/python benchmarks/cpu_per_batch.py [--flush ASYNC_FLUSH|SYNC_FLUSH] [--seconds 10]
        [--cache-window MIB]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _limits import machine_ticks  # noqa: E402
from _pipeline_side import (  # noqa: E402
    BATCH, BATCH_WINDOW_ONE, StoreProcess, produce_worker, worker_ready,
)

TICK = os.sysconf("SC_CLK_TCK")
LEAD_IN = 2.5                       # seconds of the run before the window opens


def thread_times(pid: int) -> dict:
    """(thread name, tid) -> (user s, kernel s, runnable-waiting s) of every thread of `pid`."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                waited = int(f.read().split()[1]) / 1e9
        except FileNotFoundError:          # the thread ended
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[(name, tid)] = (int(fields[11]) / TICK, int(fields[12]) / TICK, waited)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH",
                        help="the store's flush_disk_type (default ASYNC_FLUSH)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="length of the producer's run (default 10; the window is the run less 3.5 s)")
    parser.add_argument("--size", type=int, default=1024, help="body size in bytes (default 1024)")
    parser.add_argument("--cache-window", type=int, default=0, metavar="MIB",
                        help="the store's page_cache_window_commitlog in MiB (default 0: off)")
    args = parser.parse_args(argv)
    if args.seconds < 5:
        parser.error("--seconds must be at least 5 (the window opens 2.5 s into the run)")
    root = tempfile.mkdtemp(prefix="mqstore-cpu-")
    store = StoreProcess(os.path.join(root, "run"), args.flush, args.cache_window << 20).start()
    try:
        pids = store.pids()
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            pids["producer"] = pool.apply(worker_ready, (0,))       # the pool's one process
            start_at = time.monotonic() + 2.0
            job = pool.apply_async(produce_worker, (store.address, args.size, True, start_at,
                                                    args.seconds, False, BATCH_WINDOW_ONE))
            time.sleep(LEAD_IN)
            before = {name: thread_times(pid) for name, pid in pids.items()}
            busy0, all0 = machine_ticks()
            opened = time.monotonic()
            time.sleep(args.seconds - 1.0)
            window = time.monotonic() - opened
            after = {name: thread_times(pid) for name, pid in pids.items()}
            busy1, all1 = machine_ticks()
            result = job.get()
    finally:
        store.stop()
        shutil.rmtree(root, ignore_errors=True)
    rate = result["acked"] / args.seconds
    batches = rate / BATCH * window
    print(f"{args.flush}, {args.size} B bodies, batches of {BATCH}: {rate:,.0f} msgs/s acknowledged")
    if result["errors"]:
        print(f"  errors: {result['errors']}")
    total = 0.0
    for service, threads in after.items():
        for key, (user, kernel, waited) in threads.items():
            u0, k0, w0 = before[service].get(key, (0.0, 0.0, 0.0))
            used = user - u0 + kernel - k0
            if used < 0.01:
                continue
            total += used
            print(f"  {service:10s} {key[0]:16s} {used / window:4.2f} cores  {used / batches * 1e6:6.1f} us/batch "
                  f"(user {(user - u0) / batches * 1e6:5.1f}, kernel {(kernel - k0) / batches * 1e6:5.1f})  "
                  f"runnable, waiting for a CPU: {(waited - w0) / window:4.2f} of the time")
    cpus = os.cpu_count() or 1
    print(f"  all of these: {total / window:.2f} cores, {total / batches * 1e6:.0f} us per batch; the machine "
          f"was busy {(busy1 - busy0) / max(1, all1 - all0) * cpus:.2f} of {cpus} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
