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


def timed_xadd(root: str, fsync: str, size: int, probe_n: int, seconds: float) -> tuple[RedisServer, dict]:
    """XADD of `size`-byte values for about `seconds`, as long as our produce runs last.

    redis-benchmark takes a count, not a duration, so a first run of `probe_n` XADDs on a
    server of its own gives the rate and the measured run, on a fresh server, sends
    rate x `seconds` (at least `probe_n`): both sides then write for the same time, and grow
    their memory and page cache as long (each new page costs more once the memory this VM
    has at hand runs out: benchmarks/_limits.page_growth). Returns the server (still running,
    holding the stream) and the measured run."""
    value = "v" * size
    probe = RedisServer(os.path.join(root, f"redis-{fsync}-{size}-probe"), fsync)
    try:
        rate = probe.bench(probe_n, 50, 100, "XADD", "s", "*", "f", value)["rps"]
    finally:
        probe.stop()
        shutil.rmtree(probe.dir, ignore_errors=True)
    n = max(probe_n, int(rate * seconds) // 1000 * 1000)
    server = RedisServer(os.path.join(root, f"redis-{fsync}-{size}"), fsync)
    try:
        return server, server.bench(n, 50, 100, "XADD", "s", "*", "f", value)
    except BaseException:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)
        raise


def print_redis(redis: dict, file=sys.stdout) -> None:
    """The Redis runs of a benchmark: {(size, appendfsync): {"xadd": ..., "xrange": ...}}."""
    print("Redis Streams, same run (redis-benchmark; latencies are per pipelined request):", file=file)
    for (size, fsync), r in sorted(redis.items()):
        x, g = r["xadd"], r["xrange"]
        print(f"  {size_name(size):>4} appendfsync {fsync:<8}  XADD -n {x['n']} -c 50 -P 100: "
              f"{x['rps']:,.0f} msgs/s = {x['rps'] * size / MB:,.1f} MB/s (p50 {x['p50_ms']:.2f} / "
              f"p99 {x['p99_ms']:.2f} ms);  XRANGE - + COUNT 100 -n {g['n']} -c 1: "
              f"{g['rps']:,.0f} req/s = {g['rps'] * 100:,.0f} msgs/s", file=file)
