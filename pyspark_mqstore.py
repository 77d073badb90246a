"""PySpark finds data sources in top-level modules named `pyspark_*` that define
`DefaultSource`: this one makes `format("mqstore")` known to every Spark session."""
from pipeline.source import MqstoreDataSource as DefaultSource  # noqa: F401
