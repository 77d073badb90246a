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

from _limits import MB, fmt_rate, median_by, size_name
from _pipeline_rows import say


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server on a free port in `directory`, AOF on with the given `appendfsync`."""

    def __init__(self, directory: str, appendfsync: str, extra: str = ""):
        """`extra`: more redis.conf lines (a replica's `replicaof 127.0.0.1 PORT`)."""
        self.dir = directory
        self.port = free_port()
        os.makedirs(directory)
        self.conf = os.path.join(directory, "redis.conf")
        with open(self.conf, "w") as f:
            f.write(f"bind 127.0.0.1\nport {self.port}\ndir {directory}\nsave \"\"\n"
                    f"appendonly yes\nappendfsync {appendfsync}\nauto-aof-rewrite-percentage 0\n"
                    f"daemonize no\nlogfile {directory}/redis.log\n{extra}")
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


class RespClient:
    """The few RESP requests the replication peer sends, pipelined over one socket."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    @staticmethod
    def command(*args: bytes) -> bytes:
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(1 << 16)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self) -> bytes:
        line = self._line()
        if line[:1] == b"$" and line != b"$-1":
            n = int(line[1:]) + 2
            while len(self.buf) < n:
                self.buf += self.sock.recv(1 << 16)
            value, self.buf = self.buf[:n - 2], self.buf[n:]
            return value
        if line[:1] == b"-":
            raise RuntimeError(f"redis: {line.decode()}")
        return line

    def close(self) -> None:
        self.sock.close()


def replica_wait_peer(root: str, size: int, batch: int, seconds: float, wait: bool) -> dict:
    """Redis with a replica (`replicaof`), AOF everysec on both: pipelined batches of `batch`
    XADDs of `size`-byte values, each batch followed by `WAIT 1 1000` when `wait` (the
    synchronous case: the batch is answered once the replica has it), for `seconds`, one
    client. Messages/s over the run and p50/p99 of a batch's round trip."""
    tag = "wait" if wait else "nowait"
    master = RedisServer(os.path.join(root, f"redis-master-{tag}"), "everysec")
    replica = None
    client = None
    try:
        replica = RedisServer(os.path.join(root, f"redis-replica-{tag}"), "everysec",
                              f"replicaof 127.0.0.1 {master.port}\n")
        client = RespClient(master.port)
        deadline = time.monotonic() + 30
        while True:                                    # until the replica is connected
            client.sock.sendall(RespClient.command(b"WAIT", b"1", b"100"))
            if client.reply() == b":1" or time.monotonic() > deadline:
                break
        request = RespClient.command(b"XADD", b"s", b"*", b"f", b"v" * size) * batch
        if wait:
            request += RespClient.command(b"WAIT", b"1", b"1000")
        replies = batch + (1 if wait else 0)
        lat, sent = [], 0
        start = time.monotonic()
        end = start + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            client.sock.sendall(request)
            for _ in range(replies):
                last = client.reply()
            if wait and last != b":1":
                raise RuntimeError(f"WAIT 1 answered {last!r}: the replica is not in sync")
            lat.append(time.monotonic() - t0)
            sent += batch
        elapsed = time.monotonic() - start
        lat.sort()
        return {"msgs_s": sent / elapsed, "mb_s": sent * size / elapsed / MB,
                "p50_ms": lat[len(lat) // 2] * 1000, "p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000}
    finally:
        if client is not None:
            client.close()
        for server in (replica, master):
            if server is not None:
                server.stop()


def redis_available() -> bool:
    return bool(shutil.which("redis-server") and shutil.which("redis-benchmark"))


def run_redis(root: str, plan, concurrent: int, read_repeats: int) -> dict:
    """{(size, appendfsync): {"xadd": ..., "xrange": ...}} for benchmarks/pipeline.py's `plan`:
    XADD for as long as our produce runs last (`timed_xadd`), then XRANGE on the stream it left
    (the median of `read_repeats`), and under everysec XADD from `concurrent` clients unbatched."""
    out = {}
    for fsync in ("everysec", "always"):
        for size in plan.sizes:
            server, xadd = timed_xadd(root, fsync, size, plan.redis_xadd[size], plan.produce_s)
            try:
                xrange = median_by([server.bench(plan.redis_xrange, 1, 1, "XRANGE", "s", "-", "+",
                                                 "COUNT", "100") for _ in range(read_repeats)],
                                   lambda r: r["rps"])
                if fsync == "everysec":           # unbatched XADDs from 50 clients, on the same server
                    unbatched = server.bench(plan.redis_xadd_unbatched, concurrent, 1, "XADD", "s", "*",
                                             "f", "v" * size)
            finally:
                server.stop()
                shutil.rmtree(server.dir, ignore_errors=True)
            out[(size, fsync)] = {"xadd": xadd, "xrange": xrange}
            if fsync == "everysec":
                out[(size, fsync)]["xadd_unbatched"] = unbatched
                say(f"  redis {fsync} {size_name(size)}: XADD -c {concurrent} -P 1 "
                    f"{fmt_rate(unbatched['rps'])}/s")
            say(f"  redis {fsync} {size_name(size)}: XADD {fmt_rate(xadd['rps'])}/s "
                f"({xadd['n']:,} in {xadd['n'] / xadd['rps']:.1f} s), "
                f"XRANGE COUNT 100 {fmt_rate(xrange['rps'] * 100)} msgs/s")
    return out
