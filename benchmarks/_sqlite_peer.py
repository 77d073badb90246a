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
