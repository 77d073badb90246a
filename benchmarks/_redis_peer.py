"""Redis Streams as the pipeline benchmark's peer: `redis-server` started on a free port in a
temporary directory with AOF on (`appendfsync everysec` or `always`), `redis-benchmark` driven
with the commands perf-anchors.md used, and the server stopped by its pid."""
from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from _limits import MB, size_name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server on a free port in `directory`, AOF on with the given `appendfsync`."""

    def __init__(self, directory: str, appendfsync: str):
        self.dir = directory
        self.port = free_port()
        os.makedirs(directory)
        self.conf = os.path.join(directory, "redis.conf")
        with open(self.conf, "w") as f:
            f.write(f"bind 127.0.0.1\nport {self.port}\ndir {directory}\nsave \"\"\n"
                    f"appendonly yes\nappendfsync {appendfsync}\nauto-aof-rewrite-percentage 0\n"
                    f"daemonize no\nlogfile {directory}/redis.log\n")
        self.proc = subprocess.Popen(["redis-server", self.conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not self._ping():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start; see {directory}/redis.log")
            time.sleep(0.05)

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def bench(self, n: int, clients: int, pipeline: int, *command: str) -> dict:
        out = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.port), "-n", str(n),
                              "-c", str(clients), "-P", str(pipeline), "--csv", *command],
                             capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"redis-benchmark failed: {out.stderr.strip()}")
        rows = list(csv.reader(io.StringIO(out.stdout)))
        head, last = rows[0], rows[-1]
        vals = dict(zip(head, last))
        return {"rps": float(vals["rps"]), "p50_ms": float(vals.get("p50_latency_ms", "nan")),
                "p99_ms": float(vals.get("p99_latency_ms", "nan")), "n": n, "clients": clients,
                "pipeline": pipeline}

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def timed_xadd(root: str, fsync: str, size: int, chunk: int, seconds: float) -> tuple[RedisServer, dict]:
    """XADD of `size`-byte values for `seconds`, as long as our produce runs last.

    redis-benchmark takes a count, not a duration, and Redis slows down as its stream and
    AOF grow (each new page costs more once the memory this VM has at hand runs out:
    benchmarks/_limits.page_growth; 1.84M XADDs of 1 KiB planned for 5 s took 12 s). So one
    fresh server gets runs of `chunk` XADDs, then of what its last rate sends in half a
    second, one after another on the same stream, until their time adds up to `seconds`;
    the rate is all XADDs over that time (each run's own time, from its rate: the start-up
    of redis-benchmark between runs is not counted), p50 the median run's, p99 the worst.
    Returns the server (still running, holding the stream) and the result."""
    value = "v" * size
    server = RedisServer(os.path.join(root, f"redis-{fsync}-{size}"), fsync)
    try:
        runs, spent, n = [], 0.0, chunk
        while spent < seconds:
            r = server.bench(n, 50, 100, "XADD", "s", "*", "f", value)
            runs.append(r)
            spent += n / r["rps"]
            n = max(1000, int(r["rps"] * min(0.5, seconds - spent)) // 1000 * 1000)
        total = sum(r["n"] for r in runs)
        return server, {"rps": total / spent, "n": total, "runs": len(runs),
                        "p50_ms": sorted(r["p50_ms"] for r in runs)[len(runs) // 2],
                        "p99_ms": max(r["p99_ms"] for r in runs), "clients": 50, "pipeline": 100}
    except BaseException:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)
        raise


def print_redis(redis: dict, file=sys.stdout) -> None:
    """The Redis runs of a benchmark: {(size, appendfsync): {"xadd": ..., "xrange": ...}}."""
    print("Redis Streams, same run (redis-benchmark; latencies are per pipelined request):", file=file)
    for (size, fsync), r in sorted(redis.items()):
        x, g = r["xadd"], r["xrange"]
        print(f"  {size_name(size):>4} appendfsync {fsync:<8}  XADD -n {x['n']} ({x['runs']} runs) -c 50 -P 100: "
              f"{x['rps']:,.0f} msgs/s = {x['rps'] * size / MB:,.1f} MB/s (p50 {x['p50_ms']:.2f} / "
              f"p99 {x['p99_ms']:.2f} ms);  XRANGE - + COUNT 100 -n {g['n']} -c 1: "
              f"{g['rps']:,.0f} req/s = {g['rps'] * 100:,.0f} msgs/s", file=file)
