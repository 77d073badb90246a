"""The `mqstore` Spark data source beside Spark's own Parquet source, measured in the same run
and the same local session.

    .venv/bin/python benchmarks/spark.py [--messages N] [--size BYTES] [--master local[2]]

1. A store is written with the embedded core.MessageStore: N messages (400,000) of SIZE bytes
   (100), topic `BenchTopic`, 4 queues, batches of 100, 16 MiB CommitLog segments (a Spark
   partition per segment).
2. batch read: `spark.read.format("mqstore").option("path", store)` with
   `selectExpr("sum(hash(*))")`, which needs every column of every row; beside it the same rows
   written once to Parquet and read with the same expression (Parquet: C++ decoding of columns,
   the best a Spark source does on this machine).
3. stream read: the store started as services (`mqstore start`), `readStream` of the topic
   with `trigger(availableNow=True)` into the `noop` sink, beside a Parquet file stream of the
   same rows into the same sink.
4. write: a DataFrame of N rows of SIZE-byte bodies `write.format("mqstore")` into that store
   (ASYNC_FLUSH, acknowledged), beside `write.parquet` of the same DataFrame.

Each timed step runs 3 times after a warm-up and the median is printed, with the ratio
ours / Parquet (higher is better).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

TOPIC = "BenchTopic"
REPEATS = 3
SEGMENT = 16 << 20              # CommitLog segment size: a Spark partition each


def write_store(root: str, n: int, size: int) -> int:
    """An embedded store of n messages; returns its CommitLog bytes."""
    from core.record.message import Message
    from core.store import MessageStore
    from core.config import StoreConfig
    store = MessageStore(StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=SEGMENT))
    store.load()
    store.start()
    body = os.urandom(size)
    for i in range(0, n, 100):
        batch = [Message(TOPIC, body, queue_id=(i // 100) % 4, tags="TagA",
                         properties={"UNIQ_KEY": f"{i + j:032X}"}) for j in range(min(100, n - i))]
        assert store.put_messages(batch).status.ok
    assert store.wait_for_dispatch(60)
    end = store.get_max_phy_offset()
    store.shutdown()
    return end


def timed(fn) -> float:
    fn()                                             # warm-up: workers forked, files cached
    runs = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def session(master: str):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(master).appName("mqstore-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "2g")
             .config("spark.sql.legacy.allowHashOnMapType", "true")          # hash(*) takes properties
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_store(root: str) -> tuple[subprocess.Popen, str]:
    """`mqstore start` on the store write_store made (its segment size in a config file)."""
    config = os.path.join(os.path.dirname(root), "store.toml")
    with open(config, "w") as f:
        f.write(f"mapped_file_size_commitlog = {SEGMENT}\n")
    proc = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "start", "--store", root, "--port", "0",
                             "--config", config],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if line.startswith("mqstore ready at "):
            return proc, line.split()[-1]
    raise RuntimeError("the store did not start")


def row(name: str, n: int, nbytes: int, seconds: float, peer: float | None) -> None:
    rate = n / seconds
    ratio = f"{(peer / seconds):5.2f}" if peer else "    -"
    print(f"  {name:<34} {rate:>11,.0f} msgs/s {nbytes / seconds / 1e6:8.1f} MB/s   ratio {ratio}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)
    n, size = args.messages, args.size
    work = tempfile.mkdtemp(prefix="mqstore-spark-bench-")
    proc = None
    try:
        root = os.path.join(work, "store")
        print(f"writing {n:,} messages of {size} B ...", flush=True)
        log_bytes = write_store(root, n, size)
        spark = session(args.master)
        from pipeline import register
        register(spark)
        ours = spark.read.format("mqstore").option("path", root).load()
        parquet_dir = os.path.join(work, "parquet")
        ours.write.parquet(parquet_dir)
        theirs = spark.read.parquet(parquet_dir)
        print(f"{n:,} messages of {size} B, {log_bytes / 1e6:.0f} MB of CommitLog in "
              f"{ours.rdd.getNumPartitions()} segments; Spark {spark.version}, master {args.master}")
        body_bytes = n * size
        peer = timed(lambda: theirs.selectExpr("sum(hash(*))").collect())
        row("batch read: parquet (peer)", n, body_bytes, peer, None)
        row("batch read: mqstore files", n, body_bytes,
            timed(lambda: ours.selectExpr("sum(hash(*))").collect()), peer)

        proc, address = start_store(root)
        checkpoints = iter(range(1_000))

        def stream(df) -> None:
            q = (df.writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", os.path.join(work, f"ck{next(checkpoints)}")).start())
            q.awaitTermination()
        peer = timed(lambda: stream(spark.readStream.schema(theirs.schema).parquet(parquet_dir)))
        row("stream read: parquet files (peer)", n, body_bytes, peer, None)
        row("stream read: mqstore queues", n, body_bytes, timed(lambda: stream(
            spark.readStream.format("mqstore").option("address", address).option("topic", TOPIC).load())), peer)

        source = spark.range(n).selectExpr(f"cast(repeat('x', {size}) as binary) as body").cache()
        source.count()
        out_dirs = iter(range(1_000))
        pq = timed(lambda: source.write.parquet(os.path.join(work, f"w{next(out_dirs)}")))
        row("write: parquet (peer)", n, body_bytes, pq, None)
        row("write: mqstore (producer, ASYNC)", n, body_bytes, timed(
            lambda: source.write.format("mqstore").mode("append").option("address", address)
            .option("topic", "Written").save()), pq)
        print("ratio = Parquet's seconds / ours for the same rows (higher is better); MB/s counts bodies")
        spark.stop()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
