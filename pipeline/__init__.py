"""Spark and mqstore: the `mqstore` PySpark data source (pipeline/source.py) and the jobs
built on it. Needs the `spark` extra (`pip install 'mqstore[spark]'`)."""
from __future__ import annotations


def __getattr__(name: str):
    """`from pipeline import MqstoreDataSource` (imported on first use: `import pipeline`
    alone does not start importing PySpark)."""
    if name == "MqstoreDataSource":
        from pipeline.source import MqstoreDataSource
        return MqstoreDataSource
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")


def register(spark) -> None:
    """Make `format("mqstore")` known to `spark` (a SparkSession); needed only where the
    `pyspark_mqstore` module is not importable by the session's Python workers."""
    from pipeline.source import MqstoreDataSource
    spark.dataSource.register(MqstoreDataSource)
