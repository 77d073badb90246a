"""The rows of the Arrow record batches a reader yields, as dicts (properties as a dict)."""
from __future__ import annotations


def rows_of(batches) -> list[dict]:
    rows = [r for b in batches for r in b.to_pylist()]
    for r in rows:
        r["properties"] = dict(r["properties"])
    return rows


def record_batch(rows: list[dict]):
    """Rows (dicts) as the Arrow record batch Spark hands a writer; `properties` as a map."""
    import pyarrow as pa
    plain = [{k: v for k, v in r.items() if k != "properties"} for r in rows]
    batch = pa.RecordBatch.from_pylist(plain)
    if any("properties" in r for r in rows):
        props = pa.array([list((r.get("properties") or {}).items()) for r in rows], pa.map_(pa.string(), pa.string()))
        batch = batch.append_column("properties", props)
    return batch
