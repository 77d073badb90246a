"""The embedded store (`core.MessageStore`, one process, services as threads) against the
physical limits of this machine, measured in the same run.

    .venv/bin/python benchmarks/embedded.py [--quick] [--dir DIR] [--json FILE] [--scale X]

Workloads, each on a fresh store in a temporary directory on a real disk (tmpfs is refused):

1. puts: 100-byte and 1 KiB bodies, `put_message` one at a time and `put_messages` in
   batches of 32, under ASYNC_FLUSH and SYNC_FLUSH; under SYNC_FLUSH also 8 threads putting
   one message at a time, so that group commit shows.
2. gets: `get_message(..., max_msgs=32)` over everything the ASYNC store holds, once
   decoding the messages (`.messages`) and once taking the raw records (`.buffers`).
3. recovery: the ASYNC store is shut down, the abort file written by hand with the store's
   `AbortFile` and the checkpoint deleted, so `load()` of a new `MessageStore` must scan and
   re-dispatch every segment from the first; bytes scanned / seconds in `load()`.
4. integrity (benchmarks/_integrity_rows.py): 1 KiB puts with the record CRC beside without,
   gets with the read checks beside without.

Messages look like a RocketMQ producer's: topic `BenchTopic`, 4 queues (round robin for single
puts, one queue per batch), TAGS `TagA`, a unique 32-hex-digit UNIQ_KEY (so the index
service indexes every message, as a broker does by default), born timestamp set. They are
built before each timed loop (not timed), and `gc.freeze()` keeps the collector from walking
them during it. Store configuration is RocketMQ's default except the segment size and the
flush type; the consume queue and the index keep their default sizes.

MB/s counts CommitLog bytes (whole records: header, body, topic, properties), 10^6 bytes per
MB. The limits and their exact definitions are in benchmarks/_limits.py; README.md in this
folder explains every row.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for p in (REPO, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import _limits as L                                                          # noqa: E402
from core import MessageStore, PutMessageStatus, StoreConfig                 # noqa: E402
from core.files.fileops import REAL_FILE_OPS                                       # noqa: E402
from core.files.store_files import AbortFile                                       # noqa: E402
from _embedded_report import print_report                                  # noqa: E402
from _sqlite_peer import sqlite_peer                                        # noqa: E402
from _integrity_rows import integrity_rows, print_rows                         # noqa: E402
from _embedded_plan import (                                                  # noqa: E402
    BATCH, FULL, QUICK, QUEUES, TAGS, THREADS, TOPIC, Frozen, MessageFactory, Plan, SizePlan, say,
    scaled, size_name,
)

GROUP = "bench-group"
PUT_OK = PutMessageStatus.PUT_OK
MiB = L.MiB
GET_TARGET = 500_000                      # messages/s
RECOVERY_TARGET = 300.0                   # MB/s
BATCH_TARGET = 0.5                        # x write limit, 1 KiB batches of 32 (ASYNC_FLUSH)
SINGLE_TARGET = 0.25                      # x write limit, 1 KiB single puts (ASYNC_FLUSH)
# SYNC_FLUSH rows: x the fdatasync limit, by threads (1 thread: a record per fdatasync; 8: eight)
SYNC_FSYNC_TARGET = {1: 0.7, THREADS: 0.4}
SQLITE_ASYNC_TARGET = 2.0                 # x SQLite synchronous=NORMAL, beside the ASYNC rows
SQLITE_SYNC_TARGET = 1.0                  # x SQLite synchronous=FULL, beside the SYNC rows


# ---- the benchmark ---------------------------------------------------------------------

class EmbeddedBench:
    def __init__(self, root: str, plan: Plan, quick: bool):
        self.root = root
        self.plan = plan
        self.quick = quick
        self.factory = MessageFactory()
        self.stores: list[MessageStore] = []
        self.rows: list[L.Row] = []
        self.notes: list[str] = []
        self.samples: dict[str, list] = {"write": [], "fsync": [], "slice_copy": [], "bulk_copy": [],
                                           "page_growth_us_per_page": []}
        self.cpu: dict = {}
        self.cpu_samples: list[dict] = []
        self.peer_rows: list[tuple] = []    # (workload, ours, peer, peer's rate, ratio, target)

    # -- stores --------------------------------------------------------------------------
    def open_store(self, name: str, segment: int, flush: str) -> MessageStore:
        cfg = StoreConfig(store_path_root_dir=os.path.join(self.root, name),
                          mapped_file_size_commitlog=segment, flush_disk_type=flush)
        store = MessageStore(cfg)
        self.stores.append(store)
        store.load()
        store.start()
        return store

    def close_all(self) -> None:
        for store in self.stores:
            try:
                store.shutdown()
            except Exception as e:                       # cleanup must go on
                print(f"warning: shutdown of {store.config.store_path_root_dir}: {e}", file=sys.stderr)
        self.stores = []

    @staticmethod
    def sync_store_files(store: MessageStore) -> None:
        """fdatasync every file of the store through our own descriptors, so that the kernel's
        writeback of one workload does not run into the next one's timing."""
        for dirpath, _, names in os.walk(store.config.store_path_root_dir):
            for name in names:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)

    def quiesce(self, store: MessageStore) -> tuple[float, float]:
        """Wait until the reput thread has dispatched everything, then sync the store's files;
        return (seconds until dispatched, seconds to sync)."""
        t0 = time.perf_counter()
        if not store.wait_for_dispatch(600):
            raise RuntimeError("dispatch did not catch up within 600 s")
        t1 = time.perf_counter()
        self.sync_store_files(store)
        return t1 - t0, time.perf_counter() - t1

    # -- limits --------------------------------------------------------------------------
    def write_limit(self, nbytes: int) -> float:
        """Best of two durable sequential writes of `nbytes` (64 MiB to 1 GiB): the disk's
        speed varies by 2-5x between runs on this VM (README), and a limit is what it can do."""
        nbytes = min(max(nbytes, 64 * MiB), 1 << 30)
        runs = [L.write_limit(self.root, nbytes) for _ in range(2)]
        self.samples["write"] += [m.mb_per_s for m in runs]
        return max(m.mb_per_s for m in runs)

    def fsync_limit(self, op_bytes: int, ops: int) -> L.Measure:
        """Best of two runs, as for the write limit."""
        ops = max(50, min(ops, self.plan.fsync_ops))
        runs = [L.fsync_limit(self.root, op_bytes, ops) for _ in range(2)]
        for m in runs:
            self.samples["fsync"].append({"op_bytes": op_bytes, "ops_per_s": m.ops_per_s})
        return max(runs, key=lambda m: m.ops_per_s)

    def measure_cpu(self, when: str) -> None:
        """CPU floors, best of 3; measured at the start and again at the end of the run, and
        the best of both kept (a neighbour's burst must not lower a floor)."""
        say(f"CPU floors at the {when} (bare Python record loops, best of 3) ...")
        refs = L.cpu_refs(self.root, [s.body for s in self.plan.sizes], self.plan.cpu_count,
                          mapping_bytes=self.plan.cpu_mapping)
        for size, m in refs.items():
            say(f"  {size_name(size)}: append {L.fmt_rate(m['append'].ops_per_s)} records/s, "
                f"scan {L.fmt_rate(m['scan'].ops_per_s)} records/s")
        self.cpu_samples.append(refs)
        self.cpu = refs if not self.cpu else L.merge_best(self.cpu, refs)

    # -- put loops -----------------------------------------------------------------------
    @staticmethod
    def _put_loop(put, items) -> tuple[int, object]:
        bad, first_bad = 0, None
        for item in items:
            r = put(item)
            if r.status is not PUT_OK:
                bad += 1
                first_bad = first_bad or r.status
        return bad, first_bad

    def timed_puts(self, store: MessageStore, items, batched: bool, threads: int = 1):
        """Put `items` (messages or batches); return (seconds, CommitLog bytes written)."""
        put = store.put_messages if batched else store.put_message
        start = store.get_max_phy_offset()
        with Frozen():
            if threads == 1:
                t0 = time.perf_counter()
                bad, first_bad = self._put_loop(put, items)
                seconds = time.perf_counter() - t0
            else:
                seconds, bad, first_bad = self._threaded(put, items, threads)
        if bad:
            raise RuntimeError(f"{bad} puts failed, first with {first_bad}")
        return seconds, store.get_max_phy_offset() - start

    def _threaded(self, put, items, threads: int):
        chunks = [items[i::threads] for i in range(threads)]
        results = [None] * threads
        gate = threading.Barrier(threads + 1)

        def work(i):
            gate.wait()
            results[i] = self._put_loop(put, chunks[i])
        workers = [threading.Thread(target=work, args=(i,), name=f"putter-{i}") for i in range(threads)]
        for w in workers:
            w.start()
        gate.wait()
        t0 = time.perf_counter()
        for w in workers:
            w.join()
        seconds = time.perf_counter() - t0
        bad = sum(r[0] for r in results)
        first_bad = next((r[1] for r in results if r[1]), None)
        return seconds, bad, first_bad

    # -- ASYNC_FLUSH: puts, gets, recovery --------------------------------------------------
    def run_async(self, sp: SizePlan) -> None:
        sz = size_name(sp.body)
        name = f"async-{sz}"
        say(f"ASYNC_FLUSH {sz}: store with {sp.segment // MiB} MiB segments")
        store = self.open_store(name, sp.segment, "ASYNC_FLUSH")
        floor = self.cpu[sp.body]["append"].ops_per_s

        for label, batched, count in (("put_message", False, sp.single),
                                      (f"put_messages x{BATCH}", True, sp.batched)):
            items = (self.factory.batches(sp.body, count) if batched
                     else self.factory.singles(sp.body, count))
            seconds, nbytes = self.timed_puts(store, items, batched)
            del items
            behind = store.dispatch_behind_bytes()
            catch_up, synced = self.quiesce(store)
            limit = self.write_limit(nbytes)
            row = L.Row(f"put {sz} {label}, async", count / seconds, nbytes / seconds / L.MB,
                        "write", limit, floor,
                        notes={"messages": count, "bytes": nbytes, "seconds": seconds,
                               "floor": "append", "body": sp.body,
                               "dispatch_behind_bytes_at_end": behind,
                               "dispatch_catch_up_seconds": catch_up, "sync_files_seconds": synced,
                               "until_dispatched_msgs_per_s": count / (seconds + catch_up)})
            if sp.body == 1024:
                need = BATCH_TARGET if batched else SINGLE_TARGET
                row.target = f">={need}x limit"
                row.met = row.ratio >= need
            self.rows.append(row)
            sqlite_peer(self, row, sp.body, count, "NORMAL", BATCH if batched else 1,
                             SQLITE_ASYNC_TARGET)
            self.notes.append(
                f"{row.workload}: the reput thread was {behind / L.MB:,.0f} MB "
                f"({behind / max(1, nbytes):.0%}) behind when the puts ended and caught up "
                f"{catch_up:.1f} s later: {L.fmt_rate(count / (seconds + catch_up))} msgs/s "
                f"put-to-dispatched")
            say(f"  {label}: {count} msgs, {L.fmt_rate(row.ops_per_s)} msgs/s, "
                f"{row.mb_per_s:,.0f} MB/s (write limit {limit:,.0f} MB/s)")

        total = sp.single + sp.batched
        self.run_gets(store, sp, total)
        self.run_recovery(store, sp, total)

    def run_gets(self, store: MessageStore, sp: SizePlan, total: int) -> None:
        sz = size_name(sp.body)
        view = L.SegmentView(self.segment_paths(store))
        try:
            if view.records != total:
                raise RuntimeError(f"segments hold {view.records} records, {total} were put")
            slice_m = L.best_of([L.slice_copy_limit(view) for _ in range(3)])
            bulk_m = L.best_of([L.bulk_copy_limit(view) for _ in range(3)])
        finally:
            view.close()
        self.samples["slice_copy"].append({"body": sp.body, "records_per_s": slice_m.ops_per_s,
                                           "mb_per_s": slice_m.mb_per_s})
        self.samples["bulk_copy"].append({"body": sp.body, "mb_per_s": bulk_m.mb_per_s})
        scan_floor = self.cpu[sp.body]["scan"].ops_per_s
        for decode in (True, False):
            n, nbytes, seconds = self.get_all(store, decode)
            if n != total:
                raise RuntimeError(f"get_message returned {n} messages, {total} were put")
            what = "decoded .messages" if decode else "raw .buffers"
            row = L.Row(f"get {sz} x32, {what}", n / seconds, nbytes / seconds / L.MB,
                        "slice copy", slice_m.mb_per_s, scan_floor if decode else slice_m.ops_per_s,
                        target=f">={GET_TARGET // 1000}k/s", target_ratio=n / seconds / GET_TARGET,
                        notes={"messages": n, "bytes": nbytes, "seconds": seconds,
                               "floor": "scan" if decode else None, "body": sp.body,
                               "bulk_copy_mb_per_s": bulk_m.mb_per_s,
                               "slice_copy_records_per_s": slice_m.ops_per_s})
            row.met = row.target_ratio >= 1
            self.rows.append(row)
            say(f"  get {what}: {L.fmt_rate(row.ops_per_s)} msgs/s (slice-copy limit "
                f"{L.fmt_rate(slice_m.ops_per_s)} records/s, {slice_m.mb_per_s:,.0f} MB/s; "
                f"bulk copy {bulk_m.mb_per_s:,.0f} MB/s)")
        self.check_sample(store, sp.body)

    def get_all(self, store: MessageStore, decode: bool):
        get = store.get_message
        n = nbytes = 0
        t0 = time.perf_counter()
        for q in range(QUEUES):
            offset = 0
            while True:
                r = get(GROUP, TOPIC, q, offset, 32)
                bufs = r.buffers
                if not bufs:
                    break
                n += len(r.messages) if decode else len(bufs)
                nbytes += sum(map(len, bufs))
                offset = r.next_begin_offset
        return n, nbytes, time.perf_counter() - t0

    def check_sample(self, store: MessageStore, body: int) -> None:
        """Untimed: the messages read back are the ones written."""
        bodies = set(self.factory.bodies_of(body))
        for q in range(QUEUES):
            r = store.get_message(GROUP, TOPIC, q, 0, 32)
            for m in r.messages:
                if (m.topic != TOPIC or m.tags != TAGS or m.body not in bodies
                        or not m.properties.get("UNIQ_KEY", "").startswith(self.factory.prefix)):
                    raise RuntimeError(f"read back a message that was not written: {m!r}"[:300])

    @staticmethod
    def segment_paths(store: MessageStore) -> list[str]:
        d = store.config.commitlog_dir
        return [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.isdigit()]

    def run_recovery(self, store: MessageStore, sp: SizePlan, total: int) -> None:
        sz = size_name(sp.body)
        cfg = store.config
        end = store.get_max_phy_offset()
        store.shutdown()
        self.stores.remove(store)
        AbortFile(cfg.abort_path, REAL_FILE_OPS).create()
        os.unlink(cfg.checkpoint_path)
        recovered = MessageStore(cfg)
        self.stores.append(recovered)
        t0 = time.perf_counter()
        recovered.load()
        seconds = time.perf_counter() - t0
        rep = recovered.recovery_report
        if not rep.abnormal or rep.start_offset != recovered.get_min_phy_offset():
            raise RuntimeError(f"recovery did not scan from the first segment: {rep}")
        if rep.end_offset != end or recovered.get_max_phy_offset() != end:
            raise RuntimeError(f"recovery ended at {rep.end_offset}, the log ended at {end}")
        queued = sum(recovered.commitlog.topic_queue_table.values())
        if queued != total:
            raise RuntimeError(f"after recovery the queues hold {queued} messages, {total} were put")
        view = L.SegmentView(self.segment_paths(recovered))
        try:
            bulk = L.best_of([L.bulk_copy_limit(view) for _ in range(3)]).mb_per_s
        finally:
            view.close()
        scan = self.cpu[sp.body]["scan"].ops_per_s
        mbps = rep.scanned_bytes / seconds / L.MB
        row = L.Row(f"recovery {sz}, abnormal, full scan", total / seconds, mbps, "bulk copy", bulk,
                    scan, target=f">={RECOVERY_TARGET:.0f} MB/s", target_ratio=mbps / RECOVERY_TARGET,
                    notes={"scanned_bytes": rep.scanned_bytes, "seconds": seconds,
                           "floor": "scan", "body": sp.body,
                           "segments": len(recovered.commitlog.queue.files), "records": total})
        row.met = mbps >= RECOVERY_TARGET
        self.rows.append(row)
        say(f"  recovery: {rep.scanned_bytes / L.MB:,.0f} MB in {seconds:.2f} s = {mbps:,.0f} MB/s "
            f"({L.fmt_rate(row.ops_per_s)} records/s)")
        recovered.shutdown()
        self.stores.remove(recovered)
        shutil.rmtree(cfg.store_path_root_dir)

    # -- SYNC_FLUSH ----------------------------------------------------------------------
    def run_sync(self, sp: SizePlan) -> None:
        sz = size_name(sp.body)
        say(f"SYNC_FLUSH {sz}: store with {sp.sync_segment // MiB} MiB segments")
        store = self.open_store(f"sync-{sz}", sp.sync_segment, "SYNC_FLUSH")
        floor = self.cpu[sp.body]["append"].ops_per_s
        cases = (("put_message, 1 thread", False, 1, sp.sync_single, 1),
                 (f"put_message, {THREADS} threads", False, THREADS, sp.sync_threads, THREADS),
                 (f"put_messages x{BATCH}, 1 thread", True, 1, sp.sync_batched, BATCH))
        for label, batched, threads, count, group in cases:
            items = (self.factory.batches(sp.body, count) if batched
                     else self.factory.singles(sp.body, count))
            seconds, nbytes = self.timed_puts(store, items, batched, threads)
            del items
            self.quiesce(store)
            record = nbytes // count
            lim = self.fsync_limit(record * group, count // group)
            limit_name = "fsync/record" if group == 1 else f"fsync/{group} rec"
            row = L.Row(f"put {sz} {label}, sync", count / seconds, nbytes / seconds / L.MB,
                        limit_name, lim.mb_per_s, floor,
                        notes={"messages": count, "bytes": nbytes, "seconds": seconds,
                               "floor": "append", "body": sp.body,
                               "limit_ops_per_s": lim.ops_per_s, "records_per_fsync_in_limit": group})
            if threads in SYNC_FSYNC_TARGET and not batched:
                need = SYNC_FSYNC_TARGET[threads]
                row.target, row.met = f">={need}x limit", row.ratio >= need
            self.rows.append(row)
            if threads == 1:
                sqlite_peer(self, row, sp.body, count, "FULL", group, SQLITE_SYNC_TARGET)
            say(f"  {label}: {count} msgs, {L.fmt_rate(row.ops_per_s)} msgs/s "
                f"(limit {L.fmt_rate(lim.ops_per_s * group)} msgs/s at {group} per fdatasync)")
        store.shutdown()
        self.stores.remove(store)
        shutil.rmtree(store.config.store_path_root_dir)

    def _floor_of(self, row: L.Row) -> float:
        kind = row.notes.get("floor")
        if kind is None:
            return row.floor_ops_per_s
        return self.cpu[row.notes["body"]][kind].ops_per_s

    # -- all -----------------------------------------------------------------------------
    def run(self) -> None:
        say("warming the disk (one discarded 256 MiB write-limit pass) ...")
        L.write_limit(self.root, 256 * MiB)
        say(f"page cache growth ({L.GROWTH_BYTES // MiB} MiB file, CPU per 4 KiB page by "
            f"{L.GROWTH_BLOCK // MiB} MiB block) ...")
        self.samples["page_growth_us_per_page"] = L.page_growth(self.root)
        self.measure_cpu("start")
        for sp in self.plan.sizes:
            self.run_async(sp)
        for sp in self.plan.sizes:
            self.run_sync(sp)
        self.measure_cpu("end")
        for row in self.rows:               # the floors may have risen at the end
            row.floor_ops_per_s = self._floor_of(row)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Benchmark the embedded core.MessageStore (puts, gets, recovery) against "
                    "physical limits measured in the same run; prints a ratio table.")
    ap.add_argument("--quick", action="store_true", help="small counts, about 20 s instead of 2-4 min")
    ap.add_argument("--dir", default=None,
                    help="parent directory for the temporary stores; must be on a real disk, not "
                         "tmpfs (default: the system temp directory)")
    ap.add_argument("--json", metavar="FILE", default=None, help="also write every result to FILE as JSON")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every message count by this factor (default 1)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    plan = scaled(QUICK if args.quick else FULL, args.scale)
    parent = os.path.abspath(args.dir or tempfile.gettempdir())
    os.makedirs(parent, exist_ok=True)
    machine = L.machine_info()
    disk = L.disk_info(parent, REPO)
    L.print_machine(machine, disk)
    if disk["fs_type"] in ("tmpfs", "ramfs", "devtmpfs"):
        print(f"error: {parent} is on {disk['fs_type']}; the benchmark needs a real disk (use --dir)",
              file=sys.stderr)
        return 2
    if not disk.get("same_device", True):
        print(f"warning: {parent} is not on the repository's disk", file=sys.stderr)
    if disk["free_bytes"] < plan.min_free:
        print(f"error: {parent} has {disk['free_bytes'] >> 20} MiB free, the run needs "
              f"{plan.min_free >> 20} MiB", file=sys.stderr)
        return 2
    say(f"mode: {'quick' if args.quick else 'full'}" + (f", scale {args.scale}" if args.scale != 1 else ""))

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = tempfile.mkdtemp(prefix="mqstore-bench-", dir=parent)
    bench = EmbeddedBench(root, plan, args.quick)
    started = time.perf_counter()
    contention = L.CpuContention().start()
    try:
        bench.run()
        integrity = integrity_rows(root, args.quick)
    finally:
        bench.close_all()
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    cpu_use = contention.stop()
    print_report(bench)
    print()
    print_rows(integrity)
    print()
    L.print_contention(cpu_use)
    print(f"\ntotal {elapsed:.0f} s; temporary stores removed from {root}")
    if args.json:
        L.write_json(args.json, {
            "benchmark": "embedded", "mode": "quick" if args.quick else "full", "scale": args.scale,
            "machine": machine, "disk": disk, "plan": [vars(s) for s in plan.sizes],
            "cpu_floor": {str(k): v for k, v in bench.cpu.items()},
            "cpu_floor_samples": [{str(k): v for k, v in r.items()} for r in bench.cpu_samples],
            "limit_samples": bench.samples,
            "rows": bench.rows, "sqlite_peer_rows": bench.peer_rows, "notes": bench.notes, "elapsed_seconds": elapsed,
            "cpu_use": cpu_use})
    return 0


if __name__ == "__main__":
    sys.exit(main())
