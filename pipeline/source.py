"""The `mqstore` PySpark data source: the class Spark instantiates for every
`spark.read/readStream/write/writeStream.format("mqstore")`, handing each to its module.

    spark.read.format("mqstore").option("path", "./store-data").load()       # pipeline/batch_read.py
    spark.readStream.format("mqstore").option("path", ...).option("topic", "T").load()
                                                                              # pipeline/stream_read.py
    df.write.format("mqstore").mode("append").option("path", ...).save()     # pipeline/write.py
    df.writeStream.format("mqstore").option("path", ...).option("checkpointLocation", ...)

Reads give the columns of pipeline/rows.py. Installing mqstore with its `spark` extra makes the
format known to every Spark session (the `pyspark_mqstore` module, which PySpark looks for);
`pipeline.register(spark)` does it for one session.
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSource

from pipeline.rows import SCHEMA


class MqstoreDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "mqstore"

    def schema(self):
        return SCHEMA

    def reader(self, schema):
        from pipeline.batch_read import CommitLogReader
        return CommitLogReader(self.options, schema)

    def streamReader(self, schema):
        from pipeline.stream_read import QueueStreamReader
        return QueueStreamReader(self.options, schema)

    def writer(self, schema, overwrite: bool):
        from pipeline.write import ProducerWriter
        return ProducerWriter(self.options, overwrite)

    def streamWriter(self, schema, overwrite: bool):
        from pipeline.write import ProducerStreamWriter
        return ProducerStreamWriter(self.options)
