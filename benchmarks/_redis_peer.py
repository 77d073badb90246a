"""Redis Streams as the pipeline benchmark's peer: `redis-server` started on a free port in a
temporary directory with AOF on (`appendfsync everysec` or `always`), `redis-benchmark` driven
with the commands perf-anchors.md used, and the server stopped by its pid."""
from __future__ import annotations

import csv
import io
import os
import signal
import socket
import subprocess
import time


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

    def command(self, *args: str) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a.encode())
                                                         for a in args))
            s.recv(1024)

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
