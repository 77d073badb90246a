"""Where a batched put's CPU goes: per-thread CPU of every store service and of the producer.

Starts a fresh store (`mqstore start`, as `pipeline.py` does), runs one producer process that
sends batches of 100 bodies with 50 batches in flight (the `batch100 x1` row of `pipeline.py`;
`--producers 16`: sixteen with 4 each, the `x16` row), and reads /proc/<pid>/task/<tid>/stat
and schedstat of every thread of the services and of the producer before and after a window in
the middle of the run. It prints, per thread, the cores it used, its CPU per batch (user and
kernel), and the share of the window it spent runnable but waiting for a CPU: the thread that
waits most while using most is the one a faster machine would speed up first. The last line
adds it up and sets it beside what the whole machine was busy with in the same window.

    .venv/bin/python benchmarks/cpu_per_batch.py [--flush ASYNC_FLUSH|SYNC_FLUSH] [--seconds 10]
        [--size BYTES] [--cache-window MIB] [--producers N]
"""
from __future__ import annotations

import argparse
import collections
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
    BATCH, StoreProcess, batch_window, produce_worker, worker_ready,
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


def by_thread(before: dict, after: dict, producers: int) -> dict:
    """(service, thread name, rank) -> (CPU s, user s, kernel s, runnable-waiting s) over the
    window, rank being the thread's place in its process by thread id; the producers'
    threads of one name and rank are added up (`producer0`, `producer1`, ... as one)."""
    out: dict = {}
    for service, threads in after.items():
        label = service
        if service.startswith("producer"):
            label = "producers" if producers > 1 else "producer"
        for rank, key in enumerate(sorted(threads, key=lambda k: int(k[1]))):
            user, kernel, waited = threads[key]
            u0, k0, w0 = before[service].get(key, (0.0, 0.0, 0.0))    # (0s: started since)
            row = (label, key[0], rank)
            sums = out.get(row, (0.0, 0.0, 0.0, 0.0))
            out[row] = (sums[0] + user - u0 + kernel - k0, sums[1] + user - u0, sums[2] + kernel - k0,
                        sums[3] + waited - w0)
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
    parser.add_argument("--producers", type=int, default=1, metavar="N",
                        help="producer processes (default 1; pipeline.py's rows are x1 and x16, "
                             "and with more than one each keeps 4 batches in flight, as there); "
                             "their threads are added up by name")
    args = parser.parse_args(argv)
    if args.seconds < 5:
        parser.error("--seconds must be at least 5 (the window opens 2.5 s into the run)")
    if not 1 <= args.producers <= 64:
        parser.error("--producers must be 1..64")
    root = tempfile.mkdtemp(prefix="mqstore-cpu-")
    store = StoreProcess(os.path.join(root, "run"), args.flush, args.cache_window << 20).start()
    n = args.producers
    try:
        pids = store.pids()
        with multiprocessing.get_context("spawn").Pool(n) as pool:
            for i, pid in enumerate(sorted(set(pool.map(worker_ready, range(n))))):
                pids[f"producer{i}"] = pid
            start_at = time.monotonic() + 2.0
            jobs = [pool.apply_async(produce_worker, (store.address, args.size, "batch", start_at,
                                                      args.seconds, False, batch_window(n)))
                    for _ in range(n)]
            time.sleep(LEAD_IN)
            before = {name: thread_times(pid) for name, pid in pids.items()}
            busy0, all0 = machine_ticks()
            opened = time.monotonic()
            time.sleep(args.seconds - 1.0)
            window = time.monotonic() - opened
            after = {name: thread_times(pid) for name, pid in pids.items()}
            busy1, all1 = machine_ticks()
            results = [job.get() for job in jobs]
    finally:
        store.stop()
        shutil.rmtree(root, ignore_errors=True)
    rate = sum(r["acked"] for r in results) / args.seconds
    batches = rate / BATCH * window
    print(f"{args.flush}, {args.size} B bodies, batches of {BATCH}, {n} producer{'s' * (n > 1)}: "
          f"{rate:,.0f} msgs/s acknowledged")
    errors = collections.Counter()
    for r in results:
        errors.update(r["errors"])
    if errors:
        print(f"  errors: {dict(errors)}")
    total = 0.0
    for (service, thread, _), (used, user, kernel, waited) in by_thread(before, after, n).items():
        if used < 0.01:
            continue
        total += used
        print(f"  {service:10s} {thread:16s} {used / window:4.2f} cores  {used / batches * 1e6:6.1f} us/batch "
              f"(user {user / batches * 1e6:5.1f}, kernel {kernel / batches * 1e6:5.1f})  "
              f"runnable, waiting for a CPU: {waited / window:4.2f} of the time")
    cpus = os.cpu_count() or 1
    print(f"  all of these: {total / window:.2f} cores, {total / batches * 1e6:.0f} us per batch; the machine "
          f"was busy {(busy1 - busy0) / max(1, all1 - all0) * cpus:.2f} of {cpus} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
