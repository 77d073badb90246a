"""The timer job against its promise, with hypothesis: over a real embedded store and a clock
the test moves, timers at arbitrary times, passes at arbitrary moments and crashes (a new job
from what is on disk, its memory lost; sometimes a torn tail on a window file, as a power cut
after an unsynced append leaves) - every timer is delivered, never before its time, and, when
nothing crashed, exactly once and in (time, arrival) order."""
import os
import shutil
import tempfile
import time

from hypothesis import HealthCheck, given, settings, strategies as st

from core import Message, MessageStore, StoreConfig
from core.delay.put import TIMER_TOPIC
from core.delay.reput_record import EncodedRun
from core.delay.timer_job import TimerScheduler
from core.delay.timer_wheel import WINDOW_MS

STEP = st.one_of(st.tuples(st.just("run"), st.integers(0, 50) | st.integers(0, 3 * WINDOW_MS)),
                 st.tuples(st.just("put"), st.integers(0, 4 * WINDOW_MS)),
                 st.tuples(st.just("crash"), st.booleans()))


class Clock:
    def __init__(self, t: int):
        self.t = t

    def __call__(self) -> int:
        return self.t


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(offsets=st.lists(st.integers(0, 4 * WINDOW_MS), min_size=1, max_size=30),
       steps=st.lists(STEP, max_size=12))
def test_every_timer_delivered_on_time(offsets, steps):
    root = tempfile.mkdtemp(prefix="mqstore-timer-model-")
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=1 << 20,
                      mapped_file_size_consume_queue=20 * 1000)
    store = MessageStore(cfg)
    store.load()
    store.start()
    store.schedule_service.stop()                # this test drives its own job
    try:
        base = time.time_ns() // 1_000_000 + 3_600_000
        due = {}

        def put(off):
            body = b"m%03d" % len(due)
            assert store.put_message(Message("t", body, properties={
                "TIMER_DELIVER_MS": str(base + off)})).ok
            due[body] = base + off
        for off in offsets:
            put(off)
        assert store.wait_for_dispatch()
        clock = Clock(base - 1000)
        delivered = []

        def put_all(msgs):
            out = []
            for m in msgs:
                r = store.put_encoded(EncodedRun([m]))
                if r.ok:
                    delivered.append((m.body, clock.t))
                out.append(r.status)
            return out

        def new_job():
            job = TimerScheduler(root, lambda: store.cq_store.find(TIMER_TOPIC, 0),
                                 store.commitlog.read, put_all, store.fileops, clock)
            job.load()
            return job
        job = new_job()
        crashed = False
        for kind, arg in steps:
            if kind == "run":
                clock.t += arg
                job.run_once()
            elif kind == "put":                          # an arrival while the job runs
                put(max(arg, clock.t - base))
                assert store.wait_for_dispatch()
            else:
                crashed = True
                if arg and job.wheel.windows:            # a torn, unsynced tail
                    with open(job.wheel.path(job.wheel.windows[-1]), "ab") as f:
                        f.write(b"\x01" * 13)
                job = new_job()
        clock.t = base + 5 * WINDOW_MS
        for _ in range(200):
            if {b for b, _ in delivered} >= set(due):
                break
            job.run_once()
            clock.t += 1000
        bodies = [b for b, _ in delivered]
        assert set(bodies) == set(due)                        # none lost
        for body, at in delivered:
            assert at >= due[body]                            # never early
        if not crashed:
            assert len(bodies) == len(due)                    # none twice
            assert bodies == sorted(bodies, key=lambda b: (due[b], b))
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step=st.sampled_from([1, 100, 250, 1000]),
       offsets=st.lists(st.integers(0, 2 * WINDOW_MS), min_size=1, max_size=25),
       lags=st.lists(st.integers(0, 40), min_size=1, max_size=8))
def test_timers_come_at_the_first_step_at_or_after_their_time(step, offsets, lags):
    """timer_precision_ms honoured: the job, woken when it asks (plus a little lateness), delivers
    each timer at the first multiple of the step at or after its time (never before, less than
    one step after it, a whole slot together)."""
    root = tempfile.mkdtemp(prefix="mqstore-timer-step-")
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=1 << 20,
                      mapped_file_size_consume_queue=20 * 1000, timer_precision_ms=step)
    store = MessageStore(cfg)
    store.load()
    store.start()
    store.schedule_service.stop()
    try:
        base = (time.time_ns() // 1_000_000 + 3_600_000) // 1000 * 1000 + 1   # not on a boundary
        due = {}
        for off in offsets:
            body = b"m%03d" % len(due)
            assert store.put_message(Message("t", body, properties={"TIMER_DELIVER_MS": str(base + off)})).ok
            due[body] = base + off
        assert store.wait_for_dispatch()
        clock = Clock(base - 500)
        delivered = {}

        def put_all(msgs):
            for m in msgs:
                delivered.setdefault(m.body, clock.t)
            return [store.put_encoded(EncodedRun([m])).status for m in msgs]
        job = TimerScheduler(root, lambda: store.cq_store.find(TIMER_TOPIC, 0), store.commitlog.read,
                             put_all, store.fileops, clock, precision_ms=step)
        job.load()
        i = 0
        while len(delivered) < len(due) and clock.t < base + 3 * WINDOW_MS:
            wait = job.run_once()
            late = lags[i % len(lags)] if wait else 0         # a thread wakes a little late
            clock.t += wait + late
            i += 1
        assert set(delivered) == set(due)
        for body, at in delivered.items():
            boundary = -(-due[body] // step) * step
            assert due[body] <= at                             # never early
            assert boundary <= at <= boundary + max(lags)      # at its step, but for lateness
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)
