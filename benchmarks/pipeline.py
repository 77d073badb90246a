"""The whole system over ZeroMQ (`mqstore start` as a subprocess, the client library in
producer processes) beside Redis Streams measured in the same run on the same machine.

    .venv/bin/python benchmarks/pipeline.py [--quick] [--json FILE] [--dir DIR] [--cache-window MIB]

Produce runs, each on a fresh store started with `mqstore start --store DIR --port 0` (RocketMQ's
default configuration except `flush_disk_type`, and `page_cache_window_commitlog` with
--cache-window: docs/SERVICES.md, page cache window), topic `BenchTopic` with 4 queues:
for 100-byte and 1 KiB bodies, ASYNC_FLUSH and SYNC_FLUSH, single messages (`send_async`,
SINGLE_WINDOW requests in flight per producer, queues round robin) and batches of 100
(`send_batch_async`, 50 in flight for one producer, 4 each for 16: `batch_window`; one queue
per batch), with 1 and 16 producer
*processes* (one `Producer` each), every producer sending for the run's duration. A producer
process is taken from a pool spawned once; all start at one agreed instant and the rate is
all acknowledged messages / (last acknowledgement - start). Put latency is send to reply of
each request (a batch's latency is its request's), p50 and p99 over all producers.

After the 1-producer batched run of each size and flush type, once the store has dispatched and
flushed what the run left behind (as the Redis peer's XRANGE reads a Redis whose XADD run is
over; under ASYNC the flush of the run's last second otherwise competes with the reads), one
`Consumer` (in this process, raw format, 1024 messages per pull, reading every body) reads the
store from the start for at most the consume duration: messages/s and MB/s. After the 1-producer single-message run, a
latency probe sends one message at a time (one in flight) on the same store, once the store has
dispatched and flushed what that run left behind (`wait_quiet`; otherwise the probe would time
the tail of the earlier load rather than a put): the target on unbatched put p99 is checked on
that probe, the latency of the loaded single-message run is printed beside it. Right after the
probe, and with the store still running beside it, a bare pyzmq echo (benchmarks/_echo_floor:
the same request and reply sizes, one in flight, between two processes) gives the machine's
floor for a put, printed as its own row: on small shared VMs its p99 moves from run to run.

Redis (7.x, `redis-server` and `redis-benchmark` from the PATH) runs on a free port with a
temporary directory, `appendonly yes`, `save ""`, `auto-aof-rewrite-percentage 0` and
`appendfsync everysec` (the peer of ASYNC_FLUSH) or `always` (the peer of SYNC_FLUSH):
    redis-benchmark -h 127.0.0.1 -p PORT -n N -c 50 -P 100 --csv XADD s '*' f <V>
with V a literal value of the body size, run again and again on one server and stream (first
N = redis_xadd[size], then half a second's worth at the last rate) until Redis has written as
long as our produce runs last (_redis_peer.timed_xadd), then, on the stream it left,
    redis-benchmark -h 127.0.0.1 -p PORT -n M -c 1 -P 1 --csv XRANGE s - + COUNT 100
(messages/s = requests/s x 100). Both reads, ours and XRANGE, are run READ_REPEATS (3) times and
the median is printed: a single read of under a second moved 1.5x from run to run on a 2-core VM
(ours 401k-600k msgs/s, XRANGE 407k-633k). The server is stopped by its pid when done. Without
redis-server/redis-benchmark the script says how to install them and prints our rows alone.

The clients of issue 29 (benchmarks/_client_rows.py), in the same run: `auto` = `send_async`
of one message at a time with the auto-batching defaults (docs/CLIENTS.md), up to 4,096
awaiting their result per producer, from 1 and 16 producers (target >= 0.8x the batch100 row
beside it; `single` rows turn auto-batching off, as sends were before); `aio` = the same
through ipc.aio.Producer from one event loop (>= 0.8x batch100 x1). After the single consumer:
4 consumer-group member processes reading their shares (>= 1.5x one consumer), and the asyncio
consumer (>= 0.8x).

Issue 31's rows: right after the SYNC_FLUSH probe and its echo, FSYNC_OPS pwrite + fdatasync
of one body on the same disk (_limits.fsync_limit, each timed); after the ASYNC single runs, on
a fresh store, unbatched send_async with CONCURRENT (50) requests in flight from
CONCURRENT_PRODUCERS processes, then the bare echo at that concurrency, with Redis
`XADD -c 50 -P 1` (everysec) as the peer.

CURVE rows (issue 32, benchmarks/_curve_rows.py), for the last body size and the first flush
type on a `--secure` store, beside the rows without CURVE (target: batched >= 0.7x).

MB/s counts message bodies (10^6 bytes), for us and for Redis alike. Targets: batched
ASYNC_FLUSH produce >= 1.5x Redis everysec; batched SYNC_FLUSH produce >= 1.0x Redis always;
consumption >= 1.0x Redis XRANGE; unbatched ASYNC put p99 < 1 ms; SYNC put 1 in flight p50 <=
the fdatasync p50 + 2x the echo p50; unbatched c50 >= 0.5x the echo c50 and >= 0.5x Redis.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for _p in (REPO, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import _limits as L                                                           # noqa: E402
from _limits import median_by, size_name                                      # noqa: E402
from _pipeline_side import (                                                  # noqa: E402
    BATCH, BATCH_WINDOW_MANY, BATCH_WINDOW_ONE, QUEUES, SINGLE_WINDOW, TOPIC, StoreProcess,
    batch_window, consume, percentile, produce_worker, secure_keys, warm_worker, worker_ready,
)
from _echo_floor import EchoServer, echo_worker                               # noqa: E402
from _curve_rows import curve_rows                                            # noqa: E402
from _client_rows import aio_consume, group_consume                           # noqa: E402
from _foreign_load import ForeignLoad, print_foreign                          # noqa: E402
from _pipeline_integrity import integrity_rows, print_rows as print_integrity  # noqa: E402
from _pipeline_rows import FLUSH_SHORT, Row, print_table, say                # noqa: E402
from _redis_peer import print_redis, redis_available, run_redis              # noqa: E402

MANY = 16
CONCURRENT = 50                  # the unbatched concurrency row: requests in flight in all ...
CONCURRENT_PRODUCERS = 2         # ... from this many producer processes (25 each), ours and the echo's
FSYNC_OPS = 500                  # fdatasyncs timed beside the SYNC_FLUSH probe (its floor's fsync part)
GROUP_MEMBERS = 4
READ_REPEATS = 3                 # reads (ours and XRANGE) per case; the median is kept
INSTALL_HINT = ("redis-server/redis-benchmark not found on the PATH: Redis rows are skipped. "
                "On Debian: apt-get install -y redis-server redis-tools (its system service "
                "need not run; this script starts its own server).")
PEERS = {"ASYNC_FLUSH": "everysec", "SYNC_FLUSH": "always"}


def wait_quiet(address: str, timeout: float = 60.0, flush_slack: int = 1 << 20) -> tuple[bool, float]:
    """Wait until the store has dispatched everything written and flushed all but
    `flush_slack` bytes (ASYNC_FLUSH leaves less than flush_commitlog_least_pages behind);
    (whether it got there within `timeout`, the seconds waited)."""
    from ipc import Admin
    t0 = time.monotonic()
    with Admin(address) as admin:
        while True:
            lags = admin.status()["lags"]
            if lags["dispatch"] == 0 and lags["flush"] <= flush_slack:
                return True, time.monotonic() - t0
            if time.monotonic() - t0 >= timeout:
                return False, time.monotonic() - t0
            time.sleep(0.05)


@dataclass(frozen=True)
class Plan:
    sizes: tuple = (100, 1024)
    flushes: tuple = ("ASYNC_FLUSH", "SYNC_FLUSH")
    producers: tuple = (1, MANY)
    produce_s: float = 5.0
    consume_s: float = 5.0
    probe_s: float = 2.0
    redis_xadd: dict = field(default_factory=lambda: {100: 300_000, 1024: 100_000})  # first run
    redis_xrange: int = 20_000
    redis_xadd_unbatched: int = 100_000   # XADD -c 50 -P 1 (the unbatched concurrency row's peer)
    cache_window: int = 0           # the stores' page_cache_window_commitlog (bytes)


FULL = Plan()
QUICK = Plan(sizes=(1024,), produce_s=1.5, consume_s=2.0, probe_s=1.0,
             redis_xrange=5_000, redis_xadd_unbatched=50_000)


class PipelineBench:
    def __init__(self, root: str, plan: Plan, pool, foreign: ForeignLoad, echo_address: str):
        self.root, self.plan, self.pool, self.foreign = root, plan, pool, foreign
        self.echo_address = echo_address
        self.rows: list[Row] = []
        self.runs = 0

    def fresh_store(self, flush: str, secure: bool = False) -> StoreProcess:
        self.runs += 1
        store = StoreProcess(os.path.join(self.root, f"store-{self.runs}"), flush,
                             self.plan.cache_window, args=("--secure",) if secure else ()).start()
        store.keys = secure_keys(os.path.join(store.root, "store"), store.root) if secure else {}
        from ipc import Admin
        with Admin(store.address, **store.keys) as admin:
            admin.create_topic(TOPIC, QUEUES)
        return store

    def produce(self, store: StoreProcess, size: int, mode: str, producers: int,
                seconds: float, one_at_a_time: bool = False, single_window: int = SINGLE_WINDOW) -> tuple[float, dict]:
        start_at = time.monotonic() + 0.5 + 0.05 * producers
        jobs = [self.pool.apply_async(produce_worker, (store.address, size, mode, start_at, seconds,
                                                       one_at_a_time, batch_window(producers), single_window,
                                                       store.keys))
                for _ in range(producers)]
        results = [j.get(timeout=seconds + 300) for j in jobs]
        acked = sum(r["acked"] for r in results)
        elapsed = max(r["last"] for r in results) - start_at
        lat = [x for r in results for x in r["latencies"]]
        errors = collections.Counter()
        for r in results:
            errors.update(r["errors"])
        late = max(r["late_s"] for r in results)
        if late > 0.05:
            say(f"    note: a producer was ready {late:.2f} s after the common start")
        return elapsed, {"acked": acked, "sent": sum(r["sent"] for r in results), "late_s": late,
                         "bytes": sum(r["bytes"] for r in results), "seconds": elapsed,
                         "p50_ms": percentile(lat, 0.50) * 1e3, "p99_ms": percentile(lat, 0.99) * 1e3,
                         "requests": len(lat), "errors": dict(errors)}

    def run_case(self, size: int, flush: str, mode: str, producers: int) -> None:
        batched = mode == "batch"
        label = (f"produce {size_name(size)} {FLUSH_SHORT[flush]} "
                 f"{'batch' + str(BATCH) if batched else mode} x{producers}")
        store = self.fresh_store(flush)
        try:
            _, r = self.produce(store, size, mode, producers, self.plan.produce_s)
            row = Row(label, r["acked"] / r["seconds"], r["bytes"] / r["seconds"] / L.MB, r["p50_ms"],
                      r["p99_ms"], kind="produce", size=size, flush=flush, batched=batched,
                      producers=producers, notes=r, mode=mode)
            self.rows.append(row)
            say(f"  {label}: {L.fmt_rate(row.msgs_per_s)} msgs/s, p50 {row.p50_ms:.2f} ms, "
                f"p99 {row.p99_ms:.2f} ms" + (f", errors {r['errors']}" if r["errors"] else ""))
            if producers == 1 and mode == "single":
                quiet, settle = wait_quiet(store.address)
                say(f"    store quiet {settle:.1f} s after the run (dispatched and flushed)" if quiet else
                    f"    note: the store was still dispatching or flushing {settle:.0f} s after the run")
                with self.foreign.paused():
                    _, p = self.produce(store, size, "single", 1, self.plan.probe_s, one_at_a_time=True)
                    e = self.echo_floor(size)
                    if flush == "SYNC_FLUSH":         # the fsync part of a durable put's floor
                        f = L.fsync_limit(self.root, size, FSYNC_OPS)
                        self.rows.append(Row(f"fdatasync after pwrite {size_name(size)} (limit)", f.ops_per_s,
                                             f.mb_per_s, percentile(f.latencies, 0.5) * 1e3,
                                             percentile(f.latencies, 0.99) * 1e3, kind="fsync", size=size,
                                             flush=flush, producers=1))
                self.rows.append(Row(f"put {size_name(size)} {FLUSH_SHORT[flush]} 1 in flight",
                                     p["acked"] / p["seconds"], p["bytes"] / p["seconds"] / L.MB,
                                     p["p50_ms"], p["p99_ms"], kind="probe", size=size, flush=flush,
                                     producers=1, notes=p))
                self.rows.append(Row(f"pyzmq echo {size_name(size)} 1 in flight (floor)",
                                     e["round_trips"] / e["seconds"], e["round_trips"] * size / e["seconds"] / L.MB,
                                     e["p50_ms"], e["p99_ms"], kind="floor", size=size, flush=flush,
                                     producers=1, notes=e))
                say(f"    1 in flight: p50 {p['p50_ms']:.3f} ms, p99 {p['p99_ms']:.3f} ms; bare pyzmq echo "
                    f"right after: p50 {e['p50_ms']:.3f} ms, p99 {e['p99_ms']:.3f} ms")
            if producers == 1 and batched:
                quiet, settle = wait_quiet(store.address)     # as the Redis peer: idle when read
                say(f"    store quiet {settle:.1f} s after the run (dispatched and flushed)" if quiet else
                    f"    note: the store was still dispatching or flushing {settle:.0f} s after the run")
                c = median_by([consume(store.address, self.plan.consume_s) for _ in range(READ_REPEATS)],
                              lambda r: r["messages"] / r["seconds"])
                self.rows.append(Row(f"consume {size_name(size)} {FLUSH_SHORT[flush]} x1 consumer",
                                     c["messages"] / c["seconds"], c["bytes"] / c["seconds"] / L.MB,
                                     kind="consume", size=size, flush=flush, producers=1, notes=c))
                say(f"    consume: {c['messages']} msgs, {L.fmt_rate(c['messages'] / c['seconds'])} msgs/s")
                self.client_consume_rows(store, size, flush)
        finally:
            store.stop()
            shutil.rmtree(store.root, ignore_errors=True)

    def concurrent_case(self, size: int) -> None:
        """Unbatched puts (send_async, auto-batching off) with CONCURRENT requests in flight from
        CONCURRENT_PRODUCERS processes on a fresh ASYNC_FLUSH store, then the bare pyzmq echo at
        the same concurrency from as many pool processes: the floor for any Python ZeroMQ
        server here. Its Redis peer is XADD -c 50 -P 1 (attach_peers)."""
        per = CONCURRENT // CONCURRENT_PRODUCERS
        store = self.fresh_store("ASYNC_FLUSH")
        try:
            _, r = self.produce(store, size, "single", CONCURRENT_PRODUCERS, self.plan.produce_s, single_window=per)
        finally:
            store.stop()
            shutil.rmtree(store.root, ignore_errors=True)
        self.rows.append(Row(f"produce {size_name(size)} ASYNC single c{CONCURRENT}", r["acked"] / r["seconds"],
                             r["bytes"] / r["seconds"] / L.MB, r["p50_ms"], r["p99_ms"], kind="concurrent",
                             size=size, flush="ASYNC_FLUSH", producers=CONCURRENT_PRODUCERS, notes=r, mode="single"))
        start_at = time.monotonic() + 0.5
        jobs = [self.pool.apply_async(echo_worker, (self.echo_address, size, self.plan.produce_s, per, start_at))
                for _ in range(CONCURRENT_PRODUCERS)]
        es = [j.get(timeout=self.plan.produce_s + 120) for j in jobs]
        lat = [x for e in es for x in e["latencies"]]
        n, seconds = sum(e["round_trips"] for e in es), max(e["last"] for e in es) - start_at
        self.rows.append(Row(f"pyzmq echo {size_name(size)} c{CONCURRENT} (floor)", n / seconds,
                             n * size / seconds / L.MB, percentile(lat, 0.5) * 1e3, percentile(lat, 0.99) * 1e3,
                             kind="floor-c", size=size, flush="ASYNC_FLUSH", producers=CONCURRENT_PRODUCERS))
        say(f"  unbatched c{CONCURRENT}: {L.fmt_rate(r['acked'] / r['seconds'])} msgs/s; bare pyzmq echo "
            f"c{CONCURRENT}: {L.fmt_rate(n / seconds)}/s")

    def echo_floor(self, size: int) -> dict:
        """The transport floor beside a put probe (benchmarks/_echo_floor): round trips of a
        put's sizes to a bare pyzmq echo, one in flight, from a pool process as the probe's."""
        seconds = self.plan.probe_s
        r = self.pool.apply_async(echo_worker, (self.echo_address, size, seconds)).get(timeout=seconds + 120)
        lat = r["latencies"]
        return {"round_trips": r["round_trips"], "seconds": seconds,
                "p50_ms": percentile(lat, 0.50) * 1e3, "p99_ms": percentile(lat, 0.99) * 1e3}

    def client_consume_rows(self, store: StoreProcess, size: int, flush: str) -> None:
        """A group of GROUP_MEMBERS member processes, then the asyncio consumer, on the store
        the single consumer just read (benchmarks/_client_rows)."""
        start_at = time.monotonic() + 1.0
        jobs = [self.pool.apply_async(group_consume, (store.address, GROUP_MEMBERS, QUEUES, start_at,
                                                      self.plan.consume_s)) for _ in range(GROUP_MEMBERS)]
        rs = [j.get(timeout=self.plan.consume_s + 120) for j in jobs]
        g = {"messages": sum(r["messages"] for r in rs), "bytes": sum(r["bytes"] for r in rs),
             "seconds": max(r["last"] for r in rs) - min(r["t0"] for r in rs)}
        a = self.pool.apply_async(aio_consume, (store.address, self.plan.consume_s)).get(
            timeout=self.plan.consume_s + 120)
        for label, c in ((f"x{GROUP_MEMBERS} group members", g), ("aio x1 consumer", a)):
            self.rows.append(Row(f"consume {size_name(size)} {FLUSH_SHORT[flush]} {label}",
                                 c["messages"] / c["seconds"], c["bytes"] / c["seconds"] / L.MB,
                                 kind="consume+", size=size, flush=flush, producers=1, notes=c))
            say(f"    consume {label}: {c['messages']} msgs, {L.fmt_rate(c['messages'] / c['seconds'])} msgs/s")

    def run(self) -> None:
        for flush in self.plan.flushes:
            for size in self.plan.sizes:
                for mode in ("single", "batch", "auto"):
                    for producers in self.plan.producers:
                        self.run_case(size, flush, mode, producers)
                if flush == "ASYNC_FLUSH":
                    self.concurrent_case(size)
                self.run_case(size, flush, "aio", 1)
        curve_rows(self, self.plan.sizes[-1], self.plan.flushes[0])

    def client_targets(self) -> None:
        """Issue 29's targets: auto-batched (and asyncio) sends >= 0.8x the batch100 row of
        the same size, flush type and producers; a group >= 1.5x one consumer."""
        by = {(r.kind, r.size, r.flush, r.mode, r.producers): r for r in self.rows}
        for r in self.rows:
            base = None
            if r.kind == "produce" and r.mode in ("auto", "aio"):
                base, need = by.get(("produce", r.size, r.flush, "batch", r.producers)), 0.8
            elif r.kind == "consume+":
                base = next((b for b in self.rows if b.kind == "consume" and b.size == r.size
                             and b.flush == r.flush), None)
                need = 1.5 if "group" in r.workload else 0.8
            if base is not None:
                ratio = r.msgs_per_s / base.msgs_per_s if base.msgs_per_s else 0.0
                r.target = f"{ratio:.2f}x ours, >= {need:g}x"
                r.met = ratio >= need

    def attach_peers(self, redis: dict | None) -> None:
        for row in self.rows:
            fsync = PEERS[row.flush]
            peer = (redis or {}).get((row.size, fsync))
            if row.kind == "produce":
                row.peer = f"XADD c50 P100 {fsync}"
                if peer:
                    row.peer_msgs_per_s = peer["xadd"]["rps"]
                if row.batched:
                    need = 1.5 if row.flush == "ASYNC_FLUSH" else 1.0
                    row.target = f">= {need:g}x"
                    row.met = row.ratio >= need if row.ratio is not None else None
            elif row.kind == "consume":
                row.peer = f"XRANGE COUNT 100 c1 ({fsync})"
                if peer:
                    row.peer_msgs_per_s = peer["xrange"]["rps"] * 100
                row.target = ">= 1.0x"
                row.met = row.ratio >= 1.0 if row.ratio is not None else None
            elif row.kind == "probe" and row.flush == "ASYNC_FLUSH":
                row.target = "p99 < 1 ms"
                row.met = row.p99_ms < 1.0
            elif row.kind == "probe":                   # SYNC: one fdatasync + 2 echo round trips
                fs = self.row_of("fsync", row.size, row.flush)
                echo = self.row_of("floor", row.size, row.flush)
                if fs is not None and echo is not None:
                    bound = fs.p50_ms + 2 * echo.p50_ms
                    row.target = f"p50 {row.p50_ms / bound:.2f}x of fsync p50 + 2x echo p50, <= 1x"
                    row.met = row.p50_ms <= bound
            elif row.kind == "concurrent":              # >= 0.5x Redis XADD -c 50 -P 1 and the echo
                row.peer = f"XADD c{CONCURRENT} P1 {fsync}"
                if peer and "xadd_unbatched" in peer:
                    row.peer_msgs_per_s = peer["xadd_unbatched"]["rps"]
                echo = self.row_of("floor-c", row.size, row.flush)
                if echo is not None:
                    vs_echo = row.msgs_per_s / echo.msgs_per_s
                    row.target = f"{vs_echo:.2f}x echo c{CONCURRENT}; both >= 0.5x"
                    row.met = vs_echo >= 0.5 and (row.ratio is None or row.ratio >= 0.5)

    def row_of(self, kind: str, size: int, flush: str) -> Row | None:
        return next((r for r in self.rows if r.kind == kind and r.size == size and r.flush == flush), None)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Produce/consume throughput and put latency of a running mqstore (mqstore "
                    "start, client library over ZeroMQ) beside Redis Streams measured in the same run.")
    ap.add_argument("--quick", action="store_true",
                    help="1 KiB bodies only and shorter runs: about a minute instead of 3-6")
    ap.add_argument("--json", metavar="FILE", help="also write every result to FILE as JSON")
    ap.add_argument("--cache-window", type=int, default=0, metavar="MIB",
                    help="run the stores with page_cache_window_commitlog = MIB MiB (default 0: "
                         "RocketMQ's default, the kernel keeps the page cache)")
    ap.add_argument("--integrity-only", action="store_true",
                    help="only the integrity rows (issue 33: record CRC on beside off), no "
                         "Redis and no produce/consume table")
    ap.add_argument("--dir", default=None,
                    help="parent directory of the temporary stores (a real disk; default: the "
                         "system temp directory)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    plan = dataclasses.replace(QUICK if args.quick else FULL, cache_window=args.cache_window << 20)
    parent = os.path.abspath(args.dir or tempfile.gettempdir())
    os.makedirs(parent, exist_ok=True)
    machine, disk = L.machine_info(), L.disk_info(parent, REPO)
    L.print_machine(machine, disk)
    print("stores: RocketMQ's default configuration, flush_disk_type as each row says"
          + (f", page_cache_window_commitlog = {args.cache_window} MiB" if args.cache_window else ""))
    if disk["fs_type"] in ("tmpfs", "ramfs", "devtmpfs"):
        print(f"error: {parent} is on {disk['fs_type']}; use --dir on a real disk", file=sys.stderr)
        return 2
    have_redis = redis_available() and not args.integrity_only
    if not have_redis and not args.integrity_only:
        print(INSTALL_HINT)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = tempfile.mkdtemp(prefix="mqstore-pipeline-", dir=parent)
    started = time.perf_counter()
    foreign = ForeignLoad()
    foreign.start()
    redis = None
    ctx = multiprocessing.get_context("spawn")
    try:
        write = L.write_limit(root, 256 * L.MiB)
        say(f"disk write limit (256 MiB, os.write 1 MiB chunks + fdatasync): {write.mb_per_s:,.0f} MB/s")
        growth = L.page_growth(root, 2 * L.GROWTH_BYTES)   # every new byte the log keeps pays it
        if have_redis:
            say("Redis Streams ...")
            redis = run_redis(root, plan, CONCURRENT, READ_REPEATS)
        say(f"mqstore ({'quick' if args.quick else 'full'}) ...")
        with ctx.Pool(max(plan.producers), initializer=warm_worker) as pool, EchoServer() as echo:
            workers = set(pool.map(worker_ready, range(2 * max(plan.producers)), chunksize=1))
            say(f"{len(workers)} producer processes ready")
            bench = PipelineBench(root, plan, pool, foreign, echo.address)
            if not args.integrity_only:
                bench.run()
            integrity = integrity_rows(bench, wait_quiet)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    bench.attach_peers(redis)
    bench.client_targets()
    elapsed = time.perf_counter() - started
    cpu_use = foreign.finish()
    print()
    if redis:
        print_redis(redis)
        print()
    if bench.rows:
        print_table(bench.rows)
        print()
    print_integrity(integrity)
    print()
    print(f"MB/s = message bodies (10^6 B). single = send_async, {SINGLE_WINDOW} in flight per producer; "
          f"batch{BATCH} = send_batch_async of {BATCH}, {BATCH_WINDOW_ONE} in flight (x1) or "
          f"{BATCH_WINDOW_MANY} per producer (x{MANY}); xN = N producer "
          f"processes. p50/p99 = send to reply per request. '1 in flight' = one send() at a time, "
          f"on the store of the row above it; 'pyzmq echo ... (floor)' = right after it, the same "
          f"sizes to a bare pyzmq echo in another process (no store in it: the machine's floor "
          f"for a put). 'fdatasync after pwrite (limit)' = right after the SYNC probe, {FSYNC_OPS} x "
          f"(pwrite of one body + fdatasync) on the same disk: the SYNC probe's target is p50 <= that p50 "
          f"+ 2x the echo's p50. 'c{CONCURRENT}' = unbatched send_async, {CONCURRENT} in flight from "
          f"{CONCURRENT_PRODUCERS} producers, beside the echo at the same concurrency and Redis XADD "
          f"-c {CONCURRENT} -P 1. ratio = our msgs/s / Redis msgs/s.")
    print(f"disk write limit measured at the start: {write.mb_per_s:,.0f} MB/s")
    print(f"page cache growth measured at the start (a 1 GiB file): {min(growth):.2f} us of CPU per "
          f"new 4 KiB page while recently freed memory lasts, {max(growth):.2f} us after it = "
          f"{max(growth) * BATCH / 4:.0f} us per batch of {BATCH} x 1 KiB (a store keeps what it writes cached)")
    print()
    print_foreign(cpu_use)
    print(f"total {elapsed:.0f} s")
    if args.json:
        L.write_json(args.json, {
            "benchmark": "pipeline", "mode": "quick" if args.quick else "full", "machine": machine,
            "disk": disk, "write_limit_mb_per_s": write.mb_per_s, "page_growth_us_per_page": growth, "elapsed_seconds": elapsed,
            "cpu_use": cpu_use, "plan": {k: (v if not isinstance(v, dict) else {str(a): b for a, b in v.items()})
                                         for k, v in vars(plan).items()},
            "redis": {f"{size}/{fsync}": v for (size, fsync), v in (redis or {}).items()},
            "rows": [{**{k: v for k, v in vars(r).items() if k != "notes"}, "ratio": r.ratio,
                      "notes": {k: v for k, v in r.notes.items() if k != "latencies"}}
                     for r in bench.rows]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
