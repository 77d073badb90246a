"""The `mqstore` data source in a real local Spark session (a JVM and PySpark's Python
workers): batch reads of the CommitLog files, writes through the client, and a streaming query
that stops and starts again from its checkpoint, against a real store."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ipc import Admin, Producer
from tests.integration.harness import wait_for
from tests.integration.supervised import SupervisedStore

pytestmark = pytest.mark.spark
SPARK_ENV = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    os.environ["PYSPARK_PYTHON"] = sys.executable        # the workers must run this venv's Python
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master("local[2]").appName("mqstore-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("sparkstore"), mapped_file_size_commitlog=64 * 1024).start()
    yield s
    s.ensure_stopped()


def produce(store, topic: str, bodies: list) -> None:
    with Producer(store.address) as p:
        for i in range(0, len(bodies), 50):
            assert p.send_batch(topic, bodies[i:i + 50], queue_id=(i // 50) % 4).ok
    with Admin(store.address) as admin:
        assert wait_for(lambda: sum(q["max_offset"] for q in admin.queue_offsets(topic)) >= len(bodies))


@pytest.mark.slow
def test_batch_read_of_the_commitlog_files_without_registering(spark, store):
    bodies = [f"r{i}".encode() * (1 + i % 40) for i in range(1500)]
    produce(store, "ReadMe", bodies)
    df = spark.read.format("mqstore").option("path", store.root).option("topic", "ReadMe").load()
    assert df.rdd.getNumPartitions() > 1                  # a partition per segment
    rows = df.select("body", "queue_id", "queue_offset", "store_timestamp").collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)
    per_queue = df.groupBy("queue_id").count().orderBy("queue_id").collect()
    assert [r["count"] for r in per_queue] == [400, 400, 350, 350]
    assert df.filter("queue_offset < 0 or store_timestamp is null").count() == 0


@pytest.mark.slow
def test_write_then_read_back(spark, store):
    df = spark.createDataFrame([(f"w{i}", "tagged" if i % 3 == 0 else None, f"key{i}") for i in range(600)],
                               "body string, tags string, keys string").repartition(3)
    df.write.format("mqstore").mode("append").option("address", store.address) \
        .option("topic", "Written").save()
    with Admin(store.address) as admin:
        assert wait_for(lambda: sum(q["max_offset"] for q in admin.queue_offsets("Written")) == 600)
        assert len(admin.query_by_key("Written", "key42")) == 1
    back = spark.read.format("mqstore").option("path", store.root).option("topic", "Written").load()
    assert back.count() == 600
    assert back.filter("tags = 'tagged'").count() == 200
    assert back.select("body").distinct().count() == 600


def test_overwrite_mode_is_refused_with_the_reason(spark, store):
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="appended to, never replaced"):
        df.write.format("mqstore").mode("overwrite").option("address", store.address) \
            .option("topic", "Nope").save()


def test_a_bad_option_surfaces_as_the_query_error(spark, store):
    with pytest.raises(Exception, match="option path is required"):
        spark.read.format("mqstore").load().collect()
    with pytest.raises(Exception, match="leave out .schema"):
        spark.read.format("mqstore").schema("body binary").option("path", store.root).load().collect()


@pytest.mark.slow
def test_stream_restarted_from_its_checkpoint_reads_each_message_once(spark, store, tmp_path):
    produce(store, "Streamed", [f"s{i}".encode() for i in range(700)])
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def run_once() -> None:
        q = (spark.readStream.format("mqstore").option("address", store.address)
             .option("topic", "Streamed").option("maxMessagesPerTrigger", "300").load()
             .select("queue_id", "queue_offset", "body")
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None

    run_once()
    assert spark.read.parquet(out).count() == 700
    produce(store, "Streamed", [f"s{i}".encode() for i in range(700, 950)])
    run_once()
    result = spark.read.parquet(out)
    assert result.count() == 950
    assert result.select("queue_id", "queue_offset").distinct().count() == 950
    assert sorted(bytes(r.body) for r in result.collect()) == sorted(f"s{i}".encode() for i in range(950))


@pytest.mark.slow
def test_stream_into_the_store(spark, store, tmp_path):
    produce(store, "Source", [f"c{i}".encode() for i in range(120)])
    q = (spark.readStream.format("mqstore").option("address", store.address).option("topic", "Source")
         .load().selectExpr("body", "'Copied' as topic", "tags")
         .writeStream.format("mqstore").option("address", store.address)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    with Admin(store.address) as admin:
        assert wait_for(lambda: sum(x["max_offset"] for x in admin.queue_offsets("Copied")) == 120)


def test_export_writes_one_topic_unpartitioned(spark, store, tmp_path):
    from pipeline.export import export
    produce(store, "ExportOne", [b"one%d" % i for i in range(70)])
    out = str(tmp_path / "one")
    assert export(spark, store.root, out, ["ExportOne"], overwrite=False, check_crc=True) == 70
    assert not [n for n in os.listdir(out) if n.startswith("topic=")]
    assert sorted(bytes(r.body) for r in spark.read.parquet(out).collect()) == \
        sorted(b"one%d" % i for i in range(70))


@pytest.mark.slow
def test_export_job_writes_parquet_partitioned_by_topic(store, tmp_path):
    """The job as a user runs it: its own process and Spark session."""
    produce(store, "ExportA", [b"a%d" % i for i in range(90)])
    produce(store, "ExportB", [b"b%d" % i for i in range(60)])
    out = tmp_path / "export"
    job = [sys.executable, "-m", "pipeline.export", "--store", store.root, "--out", str(out),
           "--topic", "ExportA", "--topic", "ExportB", "--master", "local[2]"]
    done = subprocess.run(job, capture_output=True, text=True, timeout=300, env=SPARK_ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exported 150 messages" in done.stdout
    assert sorted(os.listdir(out / "topic=ExportA"))                 # partitioned by topic
    import pyarrow.parquet as pq
    table = pq.read_table(str(out))
    assert sorted(table.column("body").to_pylist()) == sorted([b"a%d" % i for i in range(90)] +
                                                               [b"b%d" % i for i in range(60)])
    again = subprocess.run(job, capture_output=True, text=True, timeout=60, env=SPARK_ENV)
    assert again.returncode == 2 and "pass --overwrite" in again.stderr


@pytest.mark.slow
def test_a_users_script_elsewhere_reads_without_registering(store, tmp_path):
    produce(store, "Elsewhere", [b"e%d" % i for i in range(25)])
    script = tmp_path / "job.py"
    script.write_text(
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.master('local[1]').getOrCreate()\n"
        f"df = spark.read.format('mqstore').option('path', {store.root!r}).option('topic', 'Elsewhere').load()\n"
        "print('rows', df.count())\n"
        "spark.stop()\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=SPARK_ENV)
    assert "rows 25" in done.stdout, done.stderr[-3000:]
