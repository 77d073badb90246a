"""The pipeline benchmark's own side: a store started with `mqstore start` as a subprocess,
the producer function its worker processes run, and the consumer it reads with."""
from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPIC = "BenchTopic"
QUEUES = 4
BATCH = 100
SINGLE_WINDOW = 32
# Batches in flight per producer. Redis is measured with 50 connections x 100 pipelined
# commands (5,000 in flight); one producer keeps as many: 50 x 100 = 5,000; each of 16
# producers 4 x 100 (6,400 in all). A SYNC_FLUSH reply waits for the fdatasync of its group,
# so the messages in flight bound what a closed loop can get through per flush.
BATCH_WINDOW_ONE = 50
BATCH_WINDOW_MANY = 4


def batch_window(producers: int) -> int:
    return BATCH_WINDOW_ONE if producers == 1 else BATCH_WINDOW_MANY
READY = "mqstore ready at "

from _client_rows import AUTO_WINDOW, aio_produce                             # noqa: E402


# ---- a store under its supervisor --------------------------------------------------------

class StoreProcess:
    """`mqstore start` on a fresh directory; stopped with SIGTERM (a clean stop) and waited for."""

    def __init__(self, root: str, flush: str, cache_window: int = 0, config: dict | None = None,
                 args: tuple = (), cpus: set | None = None):
        self.root = root
        self.cpus = cpus                            # run the whole process tree on these CPUs
        self.flush = flush
        self.cache_window = cache_window            # page_cache_window_commitlog, bytes
        self.config = config or {}                  # more TOML keys (string values quoted)
        self.args = tuple(args)                     # more `mqstore start` options
        self.proc = None
        self.address = None
        self.keys: dict = {}                        # a secure store: the clients' key files

    def start(self, timeout: float = 120.0) -> "StoreProcess":
        os.makedirs(self.root)
        toml = os.path.join(self.root, "store.toml")
        with open(toml, "w") as f:
            f.write(f'flush_disk_type = "{self.flush}"\n'
                    f'page_cache_window_commitlog = {self.cache_window}\n')
            f.writelines(f"{k} = {str(v).lower()}\n" if isinstance(v, bool)
                         else f"{k} = {v!r}\n" if isinstance(v, int) else f'{k} = "{v}"\n'
                         for k, v in self.config.items())
        exe = os.path.join(os.path.dirname(sys.executable), "mqstore")
        cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "supervisor.cli"]
        with open(os.path.join(self.root, "supervisor.stderr"), "w") as err:
            self.proc = subprocess.Popen(cmd + ["start", "--store", os.path.join(self.root, "store"),
                                               "--port", "0", "--config", toml, *self.args],
                                         cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=err, text=True,
                                         preexec_fn=None if self.cpus is None
                                         else lambda: os.sched_setaffinity(0, self.cpus))
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in self.proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise RuntimeError(f"mqstore start did not get ready in {timeout:.0f} s") from None
            if line is None:
                raise RuntimeError(f"mqstore start exited ({self.proc.wait()}); see "
                                   f"{self.root}/supervisor.stderr")
            if line.startswith(READY):
                self.address = line[len(READY):].strip()
                return self

    def pids(self) -> dict:
        from ipc import Admin
        with Admin(self.address) as admin:
            return {s["name"]: s["pid"] for s in admin.status()["services"]}

    def stop(self, timeout: float = 120.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def secure_keys(store_root: str, out_dir: str) -> dict:
    """An admin key registered with the secure store at `store_root` (its server pair exists
    once it started): the clients' key_file/server_key_file."""
    from ipc.keyring import KeyDirectory, make_pair, read_public, rights_for_role
    keys = KeyDirectory(store_root)
    public, secret = make_pair(out_dir, "bench")
    keys.register(rights_for_role("bench", read_public(public).decode(), "admin"))
    return {"key_file": secret, "server_key_file": keys.server_public_path}


# ---- producers (run in the pool's processes) ----------------------------------------------

def produce_worker(address: str, body_size: int, mode: str, start_at: float, seconds: float,
                   one_at_a_time: bool = False, window: int = BATCH_WINDOW_MANY,
                   single_window: int = SINGLE_WINDOW, keys: dict | None = None) -> dict:
    """Send from `start_at` (time.monotonic, system-wide) for `seconds`; counts and latencies.
    `mode`: "single" (send_async, auto-batching off: one put each, `single_window` in flight),
    "batch" (send_batch_async of BATCH), "auto" (send_async with the auto-batching defaults,
    AUTO_WINDOW messages awaiting their result), "aio" (the same through ipc.aio.Producer).
    `keys`: key_file/server_key_file of a secure store (`secure_keys`)."""
    from ipc import Producer
    if mode not in ("single", "batch", "auto", "aio"):
        raise ValueError(f"produce_worker: mode {mode!r}")
    if mode == "aio":
        return aio_produce(address, body_size, start_at, seconds)
    batched = mode == "batch"
    bodies = [os.urandom(body_size) for _ in range(64)]
    batches = [[bodies[(k + j) % 64] for j in range(BATCH)] for k in range(4)]
    lat: list = []
    errors = collections.Counter()
    sent = 0
    with Producer(address, timeout=30.0, window=1024, auto_batch=mode == "auto", **(keys or {})) as p:
        p.queue_count(TOPIC)                       # topic_info before the clock starts
        window = window if batched else AUTO_WINDOW if mode == "auto" else single_window
        pending: collections.deque = collections.deque()

        def done(fut, t0):
            t1 = time.monotonic()
            try:
                res = fut.result()
            except Exception as e:                 # a timeout or a lost connection
                errors[type(e).__name__] += 1
                return
            if res.ok:
                lat.append(t1 - t0)
            else:
                errors[res.status.name] += 1

        late = time.monotonic() - start_at
        while time.monotonic() < start_at:
            time.sleep(min(0.001, max(0.0, start_at - time.monotonic())))
        end = start_at + seconds
        i = 0
        while time.monotonic() < end:
            t0 = time.monotonic()
            if one_at_a_time:
                res = p.send(TOPIC, bodies[i & 63])
                if res.ok:
                    lat.append(time.monotonic() - t0)
                else:
                    errors[res.status.name] += 1
                sent += 1
                i += 1
                continue
            if batched:
                fut = p.send_batch_async(TOPIC, batches[i & 3], queue_id=i % QUEUES)
                sent += BATCH
            else:
                fut = p.send_async(TOPIC, bodies[i & 63])
                sent += 1
            fut.add_done_callback(lambda f, t0=t0: done(f, t0))
            pending.append(fut)
            if len(pending) >= window:
                pending.popleft().result()
            i += 1
        for fut in pending:
            fut.exception()
        last = time.monotonic()
    per_req = BATCH if batched and not one_at_a_time else 1
    return {"acked": len(lat) * per_req, "sent": sent, "bytes": len(lat) * per_req * body_size,
            "last": last, "latencies": lat, "errors": dict(errors), "late_s": max(0.0, late)}


def warm_worker() -> None:
    """Pool initializer: import the client before any run, so that no producer starts late."""
    import ipc.producer  # noqa: F401


def worker_ready(_i: int) -> int:
    """A warm-up task that keeps its worker busy a moment, so that every worker takes one."""
    time.sleep(0.2)
    return os.getpid()


def percentile(values: list, q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


# ---- consuming (in this process) ---------------------------------------------------------

def consume(address: str, seconds: float) -> dict:
    """One Consumer reads BenchTopic from the start for at most `seconds`, reading every body."""
    from ipc import Consumer
    n = nbytes = 0
    with Consumer(address, "bench", TOPIC, max_msgs=1024, long_poll_ms=200, auto_commit=False) as c:
        t0 = time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:
            msgs = c.poll(200)
            for m in msgs:
                nbytes += len(m.body)
            n += len(msgs)
            if c.caught_up:                    # every queue answered that it has no more
                break
        elapsed = time.monotonic() - t0
    return {"messages": n, "bytes": nbytes, "seconds": elapsed}
