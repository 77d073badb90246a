"""The Spark source's writer and streaming reader, without Spark, against a real secure store
(`mqstore start --secure`): the `keyFile`/`serverKeyFile` options reach the producer of a
write task and the connections of the driver and of a read task; without them nothing
connects."""
from __future__ import annotations

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.streaming.datasource import ReadAllAvailable

from pipeline.stream_read import QueueStreamReader
from pipeline.write import ProducerWriter
from tests.integration.harness import wait_for
from tests.integration.secure_stores import SecureStore
from tests.pipeline.arrow_rows import record_batch, rows_of


@pytest.mark.slow
def test_a_secure_store_is_written_and_read_with_key_options(tmp_path):
    s = SecureStore(tmp_path, "spark-secure")
    writer_key, reader_key = s.new_key("spark-w", "producer"), s.new_key("spark-r", "admin")
    s.start()
    try:
        w = ProducerWriter(CaseInsensitiveDict({"path": s.root, "topic": "SparkSec", "keyFile": writer_key}), False)
        assert w.write(iter([record_batch([dict(body=b"s%d" % i) for i in range(30)])])).messages == 30
        r = QueueStreamReader(CaseInsensitiveDict({"address": s.store.address, "topic": "SparkSec",
                                                   "keyFile": reader_key, "serverKeyFile": s.server_key}))
        start = r.initialOffset()
        assert wait_for(lambda: sum(r.latestOffset(start, ReadAllAvailable())["queues"].values()) == 30, 20, 0.1)
        end = r.latestOffset(start, ReadAllAvailable())
        rows = rows_of(b for p in r.partitions(start, end) for b in r.read(p))
        assert sorted(row["body"] for row in rows) == sorted(b"s%d" % i for i in range(30))
        with pytest.raises(ValueError, match="serverKeyFile"):
            QueueStreamReader(CaseInsensitiveDict({"address": s.store.address, "topic": "SparkSec",
                                                   "keyFile": reader_key}))
        with pytest.raises(TimeoutError):              # no key: the store never answers
            ProducerWriter(CaseInsensitiveDict({"path": s.root, "topic": "SparkSec"}), False).write(
                iter([record_batch([dict(body=b"no")])]))
    finally:
        s.ensure_stopped()
