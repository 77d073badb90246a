"""Power-loss states of the embedded store's leader/follower group commit (SYNC_FLUSH): several
threads put at once, so some puts run the fdatasync themselves and others are answered by it
(core/embedded_services.py, FlushService.wait_flushed). Built on test_power_loss's workload and
checks."""
from __future__ import annotations

import itertools
import random
import threading

from core import PutMessageStatus
from tests.crash.test_power_loss import Workload, recover_and_check


def test_random_torn_states_while_threads_lead_and_follow_flushes(store_root, crash_dir):
    """Group commit by leader and followers: four threads put at once, so some puts run the
    fdatasync themselves and others are answered by it. Whatever a power cut leaves, every put
    answered before the cut survives."""
    w = Workload(store_root)
    numbers = itertools.count()
    stop = threading.Event()

    def producer():
        while not stop.is_set():
            i = next(numbers)
            if i >= 400:
                return
            w.put_one(i, wait=i % 9 != 4)

    threads = [threading.Thread(target=producer) for _ in range(4)]
    for t in threads:
        t.start()
    points = []
    try:
        while len(points) < 6 and any(t.is_alive() for t in threads):
            acked = list(w.acked)
            if len(acked) >= 40 * (len(points) + 1):
                points.append((acked, w.ops.snapshot()))
            stop.wait(0.002)
    finally:
        stop.set()
        for t in threads:
            t.join()
        w.close()
    assert points, "the producers finished before any crash point"
    assert set(w.statuses) == {PutMessageStatus.PUT_OK}
    rng = random.Random(11)
    for acked, snap in points:
        for _ in range(6):
            target = crash_dir()
            recover_and_check(target, acked, snap.materialize_random(target, rng, torn_probability=0.3))
