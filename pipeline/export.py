"""The export job: a store's messages (all topics, or some) written as Parquet by Spark.

    .venv/bin/python -m pipeline.export --store ./store-data --out ./orders.parquet --topic orders

It reads the CommitLog files with the `mqstore` data source (pipeline/batch_read.py; the store
may be running or stopped) and writes the columns of pipeline/rows.py, partitioned by topic
unless one topic is asked for. `--master` picks the Spark cluster (default `local[*]`, this
machine's cores). It prints how many messages it wrote and exits 0; 1 when Spark fails; 2 for
bad arguments (an --out that exists without --overwrite, no store at --store).
"""
from __future__ import annotations

import argparse
import os
import sys


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m pipeline.export",
        description="Write a store's messages to Parquet with Spark (one row per message: topic, "
                    "queue_id, queue_offset, phys_offset, msg_id, tags, keys, properties, body, "
                    "timestamps, hosts, flags).")
    ap.add_argument("--store", required=True, help="the store's root directory (running or stopped)")
    ap.add_argument("--out", required=True, help="the Parquet directory to write")
    ap.add_argument("--topic", action="append", default=[],
                    help="export this topic only; repeat for several (default: every topic)")
    ap.add_argument("--overwrite", action="store_true", help="replace --out when it exists")
    ap.add_argument("--master", default="local[*]", help="Spark master URL (default: local[*])")
    ap.add_argument("--check-crc", action="store_true",
                    help="check every body's CRC while reading (a mismatch fails the export)")
    args = ap.parse_args(argv)
    if not os.path.isdir(os.path.join(args.store, "commitlog")) and \
            not os.path.isfile(os.path.join(args.store, "config", "store_format.json")):
        ap.error(f"--store {args.store}: no store there (no commitlog/ directory)")
    if os.path.exists(args.out) and not args.overwrite:
        ap.error(f"--out {args.out} exists; pass --overwrite to replace it")
    return args


def session(master: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)      # workers run this Python
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master(master).appName("mqstore-export").getOrCreate()
    from pipeline import register
    register(spark)
    return spark


def export(spark, store: str, out: str, topics: list, overwrite: bool, check_crc: bool) -> int:
    """Write the messages; return how many."""
    reader = spark.read.format("mqstore").option("path", store).option("checkCrc", str(check_crc).lower())
    if topics:
        reader = reader.option("topic", ",".join(topics))
    writer = reader.load().write.mode("overwrite" if overwrite else "errorifexists")
    if len(topics) != 1:
        writer = writer.partitionBy("topic")
    writer.parquet(out)
    return spark.read.parquet(out).count()           # from the files' footers


def main(argv=None) -> int:
    args = parse_args(argv)
    spark = session(args.master)
    try:
        count = export(spark, os.path.abspath(args.store), args.out, args.topic, args.overwrite, args.check_crc)
    except Exception as e:                      # Spark's errors carry the worker's traceback
        print(f"export failed: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(f"exported {count:,} messages to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
