"""The CPU that other processes on the machine use while benchmarks/pipeline.py runs
(`ForeignLoad`), sampled in a thread and printed after the table (`print_foreign`): on a
shared machine a run's figures are read beside it. Moved here from pipeline.py unchanged."""
from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
import time


class ForeignLoad(threading.Thread):
    """Samples, twice a second, the CPU time used by processes that are not this one or its
    descendants (the stores, producers and Redis are descendants): on 2 CPUs a neighbour's test
    run or build moves every number, so the run reports how busy the rest of the machine was.

    A sample walks every process (about 7 ms of CPU here). That burst lands on the 1% tail a
    one-in-flight probe reports (p99 1.2-2.3 ms with it, 0.9-1.5 ms without, scratch runs),
    so probes run `paused()`: no sample is taken, and the next one counts the CPU time used
    meanwhile (the times are cumulative); only a process that starts and ends within the pause
    goes uncounted."""

    def __init__(self, interval: float = 0.5):
        super().__init__(name="foreign-load", daemon=True)
        import psutil
        self.psutil = psutil
        self.interval = interval
        self.stop_event = threading.Event()
        self.cpu_seconds = 0.0
        self.top: collections.Counter = collections.Counter()
        self.t0 = time.monotonic()
        self.seconds = 0.0
        self.pauses = 0                     # paused() blocks open: no sample while above 0

    def _sample(self) -> dict:
        ps = self.psutil
        me = ps.Process()
        ours = {me.pid} | {c.pid for c in me.children(recursive=True)}
        out = {}
        boot = ps.boot_time()              # create_time is boot_time + the start in ticks
        for p in ps.process_iter(["pid", "cpu_times", "cmdline", "create_time"]):
            if p.info["pid"] in ours or p.info["cpu_times"] is None:
                continue
            t = p.info["cpu_times"]
            out[p.info["pid"]] = (t.user + t.system, " ".join(p.info["cmdline"] or [])[:80],
                                  (p.info["create_time"] or boot) - boot)
        return out

    def run(self) -> None:
        """Add up each process's CPU time since the last sample; a process first seen now
        counts whole if it started after the sampler did (else only from now on). Start times
        are compared as seconds since boot (psutil's boot time is whole seconds) to within
        a clock tick."""
        started = time.clock_gettime(time.CLOCK_BOOTTIME) - 0.02
        before = self._sample()
        while not self.stop_event.wait(self.interval):
            if self.pauses:
                continue
            now = self._sample()
            for pid, (cpu, name, created) in now.items():
                prev = before.get(pid)
                delta = cpu - prev[0] if prev else (cpu if created >= started else 0.0)
                if delta > 0:
                    self.cpu_seconds += delta
                    self.top[name] += delta
            before = now

    @contextlib.contextmanager
    def paused(self):
        """No sample while the block runs (a latency probe)."""
        self.pauses += 1
        try:
            yield
        finally:
            self.pauses -= 1

    def finish(self) -> dict:
        self.stop_event.set()
        self.join()
        self.seconds = time.monotonic() - self.t0
        return {"foreign_cpus": self.cpu_seconds / self.seconds if self.seconds else 0.0,
                "wall_seconds": self.seconds,
                "top": [(name, round(cpu, 1)) for name, cpu in self.top.most_common(3)]}


def print_foreign(f: dict, file=sys.stdout) -> None:
    print(f"CPU used by processes outside this benchmark: {f['foreign_cpus']:.2f} of {os.cpu_count()} "
          f"CPUs on average over {f['wall_seconds']:.0f} s", file=file)
    if f["foreign_cpus"] > 0.2:
        print("WARNING: the machine was shared; rates are lower and noisier than on an idle machine. "
              "Busiest: " + "; ".join(f"{n} ({c} CPU-s)" for n, c in f["top"]), file=file)


# ---- the runs ------------------------------------------------------------------------------
