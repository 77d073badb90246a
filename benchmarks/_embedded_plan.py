"""The embedded benchmark's workload: run plans (full, quick, scaled) and the messages it puts,
shaped like a RocketMQ producer's (tags, a unique UNIQ_KEY each, four queues)."""
from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass

from core import Message
from _limits import size_name  # noqa: F401  (embedded.py takes it from here)

TOPIC = "BenchTopic"
TAGS = "TagA"
QUEUES = 4
BATCH = 32
THREADS = 8
MiB = 1 << 20


@dataclass(frozen=True)
class SizePlan:
    body: int
    segment: int                  # mapped_file_size_commitlog of the ASYNC store
    single: int                   # ASYNC single puts
    batched: int                  # ASYNC messages put in batches of 32
    sync_segment: int
    sync_single: int              # SYNC, one thread
    sync_threads: int             # SYNC, 8 threads
    sync_batched: int             # SYNC, batches of 32, one thread


@dataclass(frozen=True)
class Plan:
    sizes: tuple[SizePlan, ...]
    cpu_count: int                # records per CPU-floor repetition (1 KiB; 100 B does twice)
    cpu_mapping: int
    fsync_ops: int                # at most this many fdatasyncs per fsync-limit measurement
    min_free: int


# About 3 minutes: the 1 KiB ASYNC store ends at ~1.04 GB in 256 MiB segments.
FULL = Plan(
    sizes=(SizePlan(1024, 256 * MiB, 400_000, 480_000, 64 * MiB, 3_000, 24_000, 96_000),
           SizePlan(100, 64 * MiB, 400_000, 600_000, 16 * MiB, 3_000, 24_000, 96_000)),
    cpu_count=300_000, cpu_mapping=256 * MiB, fsync_ops=2_000, min_free=5 << 30)
# About 20 seconds; segments shrink with the data so that rolling still happens.
QUICK = Plan(
    sizes=(SizePlan(1024, 64 * MiB, 50_000, 64_000, 16 * MiB, 400, 3_200, 12_800),
           SizePlan(100, 16 * MiB, 50_000, 64_000, 4 * MiB, 400, 3_200, 12_800)),
    cpu_count=100_000, cpu_mapping=64 * MiB, fsync_ops=400, min_free=2 << 30)


def scaled(plan: Plan, x: float) -> Plan:
    if x == 1:
        return plan

    def n(v, step=1):
        return max(step, int(v * x) // step * step)
    sizes = tuple(SizePlan(s.body, s.segment, n(s.single), n(s.batched, BATCH), s.sync_segment,
                           n(s.sync_single), n(s.sync_threads, THREADS), n(s.sync_batched, BATCH))
                  for s in plan.sizes)
    return Plan(sizes, n(plan.cpu_count), plan.cpu_mapping, plan.fsync_ops, plan.min_free)


def say(msg: str) -> None:
    print(msg, flush=True)


# ---- messages --------------------------------------------------------------------------

class MessageFactory:
    """RocketMQ-shaped messages with unique UNIQ_KEYs, built ahead of the timed loops."""

    def __init__(self):
        # RocketMQ's uniq id is 16 bytes printed as 32 hex digits: address, pid, class
        # loader hash, then time and a counter. Ours: a fixed 24-digit prefix + 8-digit counter.
        self.prefix = (f"{0x7F000001:08X}{os.getpid() & 0xFFFF:04X}1B2C3D4E"
                       f"{int(time.time()) & 0xFFFF:04X}")
        assert len(self.prefix) == 24
        self.seq = 0
        self.bodies: dict[int, list[bytes]] = {}

    def bodies_of(self, size: int) -> list[bytes]:
        if size not in self.bodies:
            self.bodies[size] = [os.urandom(size) for _ in range(64)]
        return self.bodies[size]

    def build(self, body_size: int, count: int, queue_of) -> list[Message]:
        bodies = self.bodies_of(body_size)
        born = time.time_ns() // 1_000_000
        prefix, seq = self.prefix, self.seq
        out = [Message(topic=TOPIC, body=bodies[i & 63], queue_id=queue_of(i), tags=TAGS,
                       properties={"UNIQ_KEY": f"{prefix}{seq + i:08X}"}, born_timestamp=born)
               for i in range(count)]
        self.seq += count
        return out

    def singles(self, body_size: int, count: int) -> list[Message]:
        return self.build(body_size, count, lambda i: i % QUEUES)

    def batches(self, body_size: int, count: int) -> list[list[Message]]:
        msgs = self.build(body_size, count, lambda i: (i // BATCH) % QUEUES)
        return [msgs[i:i + BATCH] for i in range(0, count, BATCH)]


class Frozen:
    """Keep the cyclic GC from walking the prebuilt messages during a timed loop."""

    def __enter__(self):
        gc.collect()
        gc.freeze()

    def __exit__(self, *exc):
        gc.unfreeze()
