"""Scale in topics (issue 27): what tens of thousands of queues cost one store, beside the
same messages on 4 topics.

    .venv/bin/python benchmarks/scale.py [--quick] [--queues 1000,10000,80000] [--messages 1,100]
                                         [--queues-per-topic 4] [--dir DIR] [--json FILE]
                                         [--no-supervised]

For each number of queues N (N / queues-per-topic topics) and each count M of messages per
queue, on a fresh store with RocketMQ's default configuration (1 GiB CommitLog segments,
300,000-entry consume-queue files, the index on), 100-byte bodies put round robin over every
queue by the embedded store (`core.MessageStore`), each with a UNIQ_KEY as a RocketMQ producer
sets (so the index holds every message), built before the clock starts:

- disk: blocks used by consumequeue/ (files and directories), index/ and commitlog/ against
  the bytes of the records;
- first dispatch: seconds from the first put until every message is dispatched, and the put
  rate (messages/s) over the same puts;
- pull: every queue read once from offset 0 (`get_message`, 32 at a time, until a pull finds
  nothing), messages/s and pull requests/s (with one message a queue, every message is a pull
  of its own and one more finds the end, where 4 topics take 32 a pull);
- restart (embedded): `shutdown()`, then a new store's `load()` + `start()` in a new process
  (as an application restarts), seconds; RSS and open files of that process after the
  restart and after reading every queue once;
- restart (`mqstore start`, unless --no-supervised): seconds from the command to its ready
  line on the same store; RSS and open files of every process after the restart and after
  reading every queue once through the reader;
- the same N x M messages on 4 topics (16 queues): put and pull rates, and our ratio to them.

Targets (issue 27, for 80,000 queues with one message each): consume queues and index under
1 GB, ready in under 20 s, every process under 1 GB resident and 2,048 open files after
reading every queue, put and pull rates at least 0.7x the 4-topic ones. `--quick` runs
1,000 queues with 1 and 100 messages, the size for a loaded machine.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for p in (REPO, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import psutil                                                                  # noqa: E402

from core import Message, MessageStore, StoreConfig                            # noqa: E402
from tests.integration.harness import RawClient                                # noqa: E402

READY = "mqstore ready at "
BODY = b"x" * 100
PULL_BATCH = 32


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def blocks(path: str) -> int:
    """Bytes of disk blocks under `path`: its files and its directories (a queue is both)."""
    total = 0
    for root, dirs, names in os.walk(path):
        for name in names + dirs:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def proc_use(proc: psutil.Process) -> dict:
    return {"rss_mb": round(proc.memory_info().rss / 2**20, 1), "fds": proc.num_fds()}


def keys_for(queues: int, per_topic: int) -> list:
    return [(f"Scale{t}", q) for t in range(-(-queues // per_topic)) for q in range(per_topic)][:queues]


def put_all(store: MessageStore, keys: list, messages: int) -> tuple[float, float]:
    """Round robin over `keys`, `messages` rounds; (put seconds, seconds until dispatched)."""
    msgs = [[Message(topic=topic, body=BODY, queue_id=q,
                     properties={"UNIQ_KEY": os.urandom(16).hex().upper()})
             for topic, q in keys] for _ in range(messages)]
    t0 = time.perf_counter()
    for rnd in msgs:
        for msg in rnd:
            r = store.put_message(msg)
            if not r.ok:
                raise RuntimeError(f"put to {msg.topic}/{msg.queue_id}: {r.status}")
    t1 = time.perf_counter()
    if not store.wait_for_dispatch(1800):
        raise RuntimeError("dispatch did not catch up in 30 min")
    return t1 - t0, time.perf_counter() - t0


def pull_all(store: MessageStore, keys: list) -> tuple[int, int, float]:
    """Every queue read from 0 until a pull finds nothing: (messages, pulls, seconds)."""
    t0 = time.perf_counter()
    got = pulls = 0
    for topic, q in keys:
        offset = 0
        while True:
            r = store.get_message("scale", topic, q, offset, PULL_BATCH)
            pulls += 1
            if r is None or r.status.name != "FOUND":
                break
            got += len(r.messages)
            offset = r.next_begin_offset
    return got, pulls, time.perf_counter() - t0


class Supervised:
    """`mqstore start` on an existing store; stopped with SIGTERM."""

    def __init__(self, store_dir: str):
        self.store_dir = store_dir
        self.proc = None
        self.address = None

    def start(self, timeout: float = 600.0) -> float:
        exe = os.path.join(os.path.dirname(sys.executable), "mqstore")
        cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "supervisor.cli"]
        t0 = time.perf_counter()
        err = open(os.path.join(os.path.dirname(self.store_dir), "supervisor.stderr"), "w")
        self.proc = subprocess.Popen(cmd + ["start", "--store", self.store_dir, "--port", "0"], cwd=REPO,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        err.close()
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in self.proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if line is None:
                raise RuntimeError(f"mqstore start exited ({self.proc.wait()})")
            if line.startswith(READY):
                self.address = line[len(READY):].strip()
                return time.perf_counter() - t0

    def call(self, op: str, endpoint: str | None = None, **fields):
        client = RawClient(endpoint or self.address)
        try:
            return client.call(op, (), timeout=30.0, **fields)
        finally:
            client.close()

    def processes(self) -> dict:
        sup = psutil.Process(self.proc.pid)
        out = {"supervisor": proc_use(sup)}
        reply, _ = self.call("status")
        for s in reply["services"]:
            try:
                out[s["name"]] = proc_use(psutil.Process(s["pid"]))
            except (psutil.NoSuchProcess, KeyError, TypeError):
                pass
        return out

    def pull_all(self, keys: list) -> int:
        reader = self.call("hello")[0]["reader"]
        client = RawClient(reader)
        got = 0
        try:
            for topic, q in keys:
                offset = 0
                while True:
                    reply, _ = client.call("pull", (), timeout=30.0, group="scale", topic=topic,
                                           queue_id=q, offset=offset, max_msgs=PULL_BATCH)
                    if reply["status"] != "FOUND":
                        break
                    got += len(reply["messages"])
                    offset = reply["next_begin_offset"]
        finally:
            client.close()
        return got

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(300)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def restart_embedded(store_dir: str, queues: int, per_topic: int, total: int) -> dict:
    """`load()` + `start()` of the embedded store at `store_dir`, then every queue read once:
    seconds, and RSS and open files of this process after each."""
    me = psutil.Process()
    keys = keys_for(queues, per_topic)
    out = {}
    t0 = time.perf_counter()
    store = MessageStore(StoreConfig(store_path_root_dir=store_dir))
    store.load()
    store.start()
    out["restart_embedded_s"] = round(time.perf_counter() - t0, 2)
    out["embedded_after_restart"] = proc_use(me)
    got, _, _ = pull_all(store, keys)
    assert got == total, (got, total)
    out["embedded_after_reading_all"] = proc_use(me)
    store.shutdown()
    return out


def restart_in_child(store_dir: str, queues: int, per_topic: int, total: int) -> dict:
    """`restart_embedded` in a new process, as an application restarts: measured in the
    process that put the messages, RSS counted what the puts had left in its heap."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--restart-child", store_dir,
                          "--queues", str(queues), "--queues-per-topic", str(per_topic),
                          "--messages", str(total)], cwd=REPO, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_case(root: str, queues: int, messages: int, per_topic: int, supervised: bool) -> dict:
    keys = keys_for(queues, per_topic)
    case = {"queues": len(keys), "topics": -(-len(keys) // per_topic), "messages_per_queue": messages}
    cfg = StoreConfig(store_path_root_dir=os.path.join(root, "store"))
    store = MessageStore(cfg)
    store.load()
    store.start()
    put_s, dispatch_s = put_all(store, keys, messages)
    n = len(keys) * messages
    case["put_per_s"] = round(n / put_s)
    case["first_dispatch_s" if messages == 1 else "dispatch_s"] = round(dispatch_s, 2)
    got, pulls, pull_s = pull_all(store, keys)
    assert got == n, (got, n)
    case["pull_per_s"] = round(n / pull_s)
    case["pull_requests_per_s"] = round(pulls / pull_s)
    record_bytes = store.commitlog.get_max_offset()
    store.shutdown()
    case["record_mb"] = round(record_bytes / 1e6, 2)
    case["consumequeue_mb"] = round(blocks(cfg.consumequeue_dir) / 1e6, 2)
    case["index_mb"] = round(blocks(cfg.index_dir) / 1e6, 2)
    case["commitlog_mb"] = round(blocks(cfg.commitlog_dir) / 1e6, 2)

    case.update(restart_in_child(cfg.store_path_root_dir, len(keys), per_topic, n))

    if supervised:
        sup = Supervised(cfg.store_path_root_dir)
        try:
            case["restart_mqstore_start_s"] = round(sup.start(), 2)
            case["processes_after_restart"] = sup.processes()
            got = sup.pull_all(keys)
            assert got == n, (got, n)
            case["processes_after_reading_all"] = sup.processes()
        finally:
            sup.stop()

    base_root = os.path.join(root, "four-topics")
    base = MessageStore(StoreConfig(store_path_root_dir=base_root))
    base.load()
    base.start()
    four = keys_for(16, 4)
    put_s, _ = put_all(base, four, -(-n // 16))
    m = 16 * -(-n // 16)
    got, pulls, pull_s = pull_all(base, four)
    base.shutdown()
    case["four_topics_put_per_s"] = round(m / put_s)
    case["four_topics_pull_per_s"] = round(got / pull_s)
    case["four_topics_pull_requests_per_s"] = round(pulls / pull_s)
    case["put_ratio"] = round(case["put_per_s"] / case["four_topics_put_per_s"], 2)
    case["pull_ratio"] = round(case["pull_per_s"] / case["four_topics_pull_per_s"], 2)
    shutil.rmtree(root, ignore_errors=True)
    return case


def print_case(c: dict) -> None:
    print(f"\n{c['queues']:,} queues ({c['topics']:,} topics), {c['messages_per_queue']} message(s) each")
    print(f"  disk: consume queues {c['consumequeue_mb']} MB, index {c['index_mb']} MB, "
          f"CommitLog {c['commitlog_mb']} MB (preallocated segments) for {c['record_mb']} MB of records")
    key = "first_dispatch_s" if "first_dispatch_s" in c else "dispatch_s"
    print(f"  puts {c['put_per_s']:,}/s, all dispatched after {c[key]} s; pulls {c['pull_per_s']:,} "
          f"messages/s ({c['pull_requests_per_s']:,} pull requests/s)")
    print(f"  4 topics, same messages: puts {c['four_topics_put_per_s']:,}/s, pulls "
          f"{c['four_topics_pull_per_s']:,} messages/s ({c['four_topics_pull_requests_per_s']:,} "
          f"requests/s) -> ratios put {c['put_ratio']}x, pull {c['pull_ratio']}x (messages/s)")
    print(f"  restart embedded {c['restart_embedded_s']} s; process {c['embedded_after_restart']} after, "
          f"{c['embedded_after_reading_all']} after reading every queue")
    if "restart_mqstore_start_s" in c:
        print(f"  mqstore start to ready {c['restart_mqstore_start_s']} s")
        for when in ("processes_after_restart", "processes_after_reading_all"):
            procs = ", ".join(f"{k} {v['rss_mb']} MB/{v['fds']} fds" for k, v in c[when].items())
            print(f"    {when.replace('_', ' ')}: {procs}")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 queues only (a loaded machine)")
    ap.add_argument("--queues", default="1000,10000,80000", help="comma-separated queue counts")
    ap.add_argument("--messages", default="1,100", help="comma-separated messages per queue")
    ap.add_argument("--queues-per-topic", type=int, default=4)
    ap.add_argument("--dir", default=None, help="parent of the temporary stores (a real disk)")
    ap.add_argument("--json", default=None, help="write every figure to this file")
    ap.add_argument("--no-supervised", action="store_true", help="skip the `mqstore start` restart")
    ap.add_argument("--restart-child", default=None, help=argparse.SUPPRESS)   # restart_in_child
    args = ap.parse_args(argv)
    try:
        args.queue_counts = [int(x) for x in args.queues.split(",")]
        args.message_counts = [int(x) for x in args.messages.split(",")]
    except ValueError:
        ap.error(f"--queues {args.queues} / --messages {args.messages}: comma-separated integers")
    if args.quick:
        args.queue_counts = [1000]
    if min(args.queue_counts + args.message_counts) < 1 or args.queues_per_topic < 1:
        ap.error("queue counts, message counts and --queues-per-topic are at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.restart_child:
        print(json.dumps(restart_embedded(args.restart_child, args.queue_counts[0],
                                          args.queues_per_topic, args.message_counts[0])))
        return 0
    parent = tempfile.mkdtemp(prefix="mqstore-scale-", dir=args.dir)
    results = []
    try:
        for queues in args.queue_counts:
            for messages in args.message_counts:
                say(f"{queues:,} queues x {messages} message(s) ...")
                case = run_case(os.path.join(parent, f"q{queues}-m{messages}"), queues, messages,
                                args.queues_per_topic, not args.no_supervised)
                print_case(case)
                results.append(case)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
