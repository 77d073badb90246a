"""Delayed delivery in the embedded store (`core.MessageStore`, the scheduler as a thread),
beside plain puts in the same run.

    .venv/bin/python benchmarks/delay.py [--quick] [--dir DIR] [--json FILE]

On a fresh store (ASYNC_FLUSH, 64 MiB segments, `message_delay_level` "3s 1h"):
1. plain puts: N `put_message` calls of 100-byte bodies to topic `Plain` (the reference rate);
2. scheduled puts: N `put_message` calls with DELAY 1 (3 s) to topic `Later`, timed the same way;
3. the level comes due while plain puts go on: a thread keeps putting to `Plain` while the
   scheduler re-puts the N scheduled messages into `Later`; deliveries/s is N over the time from
   the first delivery to the last (the scheduler's acknowledged count), plain puts/s the rate of
   the putting thread over the same span, and the delivery lag (acknowledged re-put minus due
   time) p50/p99/max from the scheduler's own record of it;
4. timer messages: N puts with TIMER_DELAY_MS 3000 and their deliveries, measured as in 3.
In 3 and 4 the messages come due as fast as they were put, so those deliveries/s cannot pass
the scheduled put rate: they show the lag of a scheduler that keeps up. What the scheduler can
deliver once a level is due is measured with the whole level due at once:
5. level backlog: N more DELAY 1 puts, the store shut down until they are all due, opened
   again (RocketMQ's case of a store that was down): the scheduler delivers them at once while
   the plain putter runs, measured as in 3;
6. timer backlog: N timers for one instant (TIMER_DELIVER_MS, set after the last of them is
   put), measured as in 3.
Target (issue 30): deliveries at least 0.5x the plain put rate (5 and 6: the scheduler's rate).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from core import Message, MessageStore, StoreConfig                          # noqa: E402

BODY = b"x" * 100
DUE_S = 3.0


def say(text: str) -> None:
    print(text, flush=True)


def put_rate(store, topic: str, n: int, props_of) -> float:
    msgs = [Message(topic, BODY, queue_id=i % 4, tags="TagA",
                    properties={"UNIQ_KEY": f"{topic}{i:012d}", **props_of(i)}) for i in range(n)]
    put = store.put_message
    t0 = time.perf_counter()
    for m in msgs:
        if not put(m).ok:
            raise SystemExit(f"put to {topic} refused")
    return n / (time.perf_counter() - t0)


class PlainPutter(threading.Thread):
    """Puts to `Plain` until stopped; counts them with their times."""

    def __init__(self, store):
        super().__init__(daemon=True)
        self.store, self.stop, self.times = store, False, []

    def run(self) -> None:
        i = 0
        while not self.stop:
            m = Message("Plain", BODY, queue_id=i % 4, tags="TagA",
                        properties={"UNIQ_KEY": f"P{i:012d}"})
            if self.store.put_message(m).ok:
                self.times.append(time.perf_counter())
            i += 1


def deliveries(store, job, n: int, timeout: float) -> dict:
    """Wait for `n` deliveries by `job` while a thread puts plain messages; the rates."""
    putter = PlainPutter(store)
    job.lag_ms.clear()                  # the scheduler keeps the first 100,000 from here
    base = job.delivered
    first = last = None
    deadline = time.monotonic() + timeout
    putter.start()
    while job.delivered - base < n and time.monotonic() < deadline:
        now = time.perf_counter()
        if first is None and job.delivered > base:
            first = now
        time.sleep(0.002)
    last = time.perf_counter()
    putter.stop = True
    putter.join()
    done = job.delivered - base
    if first is None or done < n:
        raise SystemExit(f"only {done} of {n} delivered in {timeout} s")
    span = max(last - first, 1e-6)
    plain = sum(1 for t in putter.times if first <= t <= last) / span
    lags = sorted(job.lag_ms)
    return {"deliveries_per_s": done / span, "plain_puts_per_s_beside": plain,
            "lag_p50_ms": lags[len(lags) // 2], "lag_p99_ms": lags[int(len(lags) * 0.99) - 1],
            "lag_max_ms": lags[-1]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20,000 messages instead of 200,000")
    ap.add_argument("--dir", help="parent directory of the temporary store (default: the system's)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    n = 20_000 if args.quick else 200_000
    root = tempfile.mkdtemp(prefix="mqstore-delay-bench-", dir=args.dir)
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=64 << 20,
                      message_delay_level="3s 1h")
    store = MessageStore(cfg)
    store.load()
    store.start()
    out = {"messages": n}
    try:
        out["plain_puts_per_s"] = plain = put_rate(store, "Plain", n, lambda i: {})
        t_sched = time.monotonic()
        out["scheduled_puts_per_s"] = put_rate(store, "Later", n, lambda i: {"DELAY": "1"})
        svc = store.schedule_service
        out["level"] = deliveries(store, svc.job, n, DUE_S + 120)
        out["level"]["waited_for_due_s"] = round(time.monotonic() - t_sched, 2)
        out["timer_puts_per_s"] = put_rate(store, "Timed", n, lambda i: {"TIMER_DELAY_MS": "3000"})
        out["timer"] = deliveries(store, svc.timers, n, DUE_S + 120)
        put_rate(store, "Backlog", n, lambda i: {"DELAY": "1"})
        store.shutdown()
        time.sleep(DUE_S + 0.2)                         # down while the level comes due
        store = MessageStore(cfg)
        store.load()
        store.start()
        out["level_backlog"] = deliveries(store, store.schedule_service.job, n, 120)
        at = time.time_ns() // 1_000_000 + int((DUE_S + 3 * n / plain) * 1000)
        put_rate(store, "Instant", n, lambda i: {"TIMER_DELIVER_MS": str(at)})
        out["timer_backlog"] = deliveries(store, store.schedule_service.timers, n,
                                          at / 1000 - time.time() + 120)
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    say(f"plain puts                    {plain:10,.0f} msg/s")
    say(f"scheduled puts                {out['scheduled_puts_per_s']:10,.0f} msg/s "
        f"({out['scheduled_puts_per_s'] / plain:.2f}x plain)")
    say(f"timer puts                    {out['timer_puts_per_s']:10,.0f} msg/s "
        f"({out['timer_puts_per_s'] / plain:.2f}x plain)")
    for name in ("level", "timer", "level_backlog", "timer_backlog"):
        r = out[name]
        say(f"{name.replace('_', ' ') + ' deliveries':30}{r['deliveries_per_s']:10,.0f} msg/s "
            f"({r['deliveries_per_s'] / plain:.2f}x plain; plain puts beside them "
            f"{r['plain_puts_per_s_beside']:,.0f}/s, "
            f"{r['deliveries_per_s'] / max(r['plain_puts_per_s_beside'], 1):.2f}x); lag p50 {r['lag_p50_ms']} ms, "
            f"p99 {r['lag_p99_ms']} ms, max {r['lag_max_ms']} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
