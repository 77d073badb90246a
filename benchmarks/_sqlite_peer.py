"""SQLite, the embedded durable store a Python user would otherwise pick, as the peer of the
embedded benchmark's put rows: WAL mode, a table with a topic, tag and key column and the body
as a blob; one autocommit INSERT per put, or one transaction of 32 INSERTs per batch.
`synchronous=NORMAL` stands beside the ASYNC_FLUSH rows (WAL fsyncs only at checkpoints) and
`synchronous=FULL` beside the SYNC_FLUSH rows (an fsync per commit), through Python's stdlib
`sqlite3` on the same disk as the store, in the same run."""
from __future__ import annotations

import os
import sqlite3
import tempfile
import time

import _limits as L
from _limits import Measure

MAX_OPS = 50_000                          # rows per measurement: enough for a steady rate


def sqlite_puts(directory: str, body_size: int, count: int, synchronous: str,
                batch: int = 1) -> Measure:
    """Insert `count` rows (capped at MAX_OPS) of `body_size`-byte blobs, `batch` per commit."""
    count = max(batch, min(count, MAX_OPS) // batch * batch)
    bodies = [os.urandom(body_size) for _ in range(64)]
    rows = [("BenchTopic", "TagA", f"key-{i}", bodies[i % 64]) for i in range(count)]
    folder = tempfile.mkdtemp(prefix="sqlite-peer-", dir=directory)
    path = os.path.join(folder, "peer.db")
    db = sqlite3.connect(path, isolation_level=None)   # autocommit unless BEGIN is given
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
        db.execute("CREATE TABLE msgs (id INTEGER PRIMARY KEY, topic TEXT, tag TEXT, "
                   "key TEXT, body BLOB)")
        sql = "INSERT INTO msgs (topic, tag, key, body) VALUES (?, ?, ?, ?)"
        t0 = time.perf_counter()
        if batch == 1:
            for row in rows:
                db.execute(sql, row)
        else:
            for i in range(0, count, batch):
                db.execute("BEGIN")
                db.executemany(sql, rows[i:i + batch])
                db.execute("COMMIT")
        seconds = time.perf_counter() - t0
    finally:
        db.close()
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)
    return Measure(count, count * body_size, seconds)


def sqlite_peer(bench, row, body: int, count: int, synchronous: str, batch: int,
                need: float) -> None:
    """SQLite doing `row`'s puts on the same disk right after them (one autocommit insert per
    put, or a transaction per batch): a row of `bench.peer_rows`, and a line on the console."""
    m = sqlite_puts(bench.root, body, count, synchronous, batch)
    what = "autocommit insert" if batch == 1 else f"transactions of {batch}"
    ratio = row.ops_per_s / m.ops_per_s
    row.notes["sqlite_msgs_per_s"] = m.ops_per_s
    bench.peer_rows.append((row.workload, row.ops_per_s, f"SQLite {synchronous} {what}",
                            m.ops_per_s, ratio, need))
    print(f"    SQLite {synchronous} {what}: {L.fmt_rate(m.ops_per_s)} rows/s (ours {ratio:.2f}x)",
          flush=True)


def print_peers(peer_rows: list) -> None:
    """The peer table: workload, ours, the peer and its rate, the ratio, the target, met."""
    print("peer: SQLite in WAL mode on the same disk, the same messages (topic, tag, key, "
          "body), measured right after each row:")
    body = [(w, L.fmt_rate(ours), peer, L.fmt_rate(theirs), L.fmt_ratio(ratio), f">={need}x",
             "met" if ratio >= need else "not met")
            for w, ours, peer, theirs, ratio, need in peer_rows]
    L.print_aligned(("workload", "msgs/s", "peer", "peer rows/s", "ratio", "target", "status"),
                    body, {1, 3, 4})
