"""The Spark source's record parser (pipeline/rows.py) against the store's own decoder
(core.record.decode): for random records laid end to end, the rows are the messages a consumer is
given, field for field, and every stop (blank, end, corrupt, batch full, queue limit) comes at
the record it names."""
from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeline.rows as rows_module
from core.record.codec import check_record, encode_message, write_blank
from core.record.decode import decode_message
from core.record.message import SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_UNQUEUED
from ipc.received import host_text
from pipeline.rows import ARROW_SCHEMA, Columns, Stop, take_records
from tests.pipeline.arrow_rows import rows_of
from tests.unit.test_codec import build_v2_record
from tests.unit.test_codec_roundtrip import messages

UTC = datetime.timezone.utc


def expected_row(m) -> dict:
    keys = m.keys if m.keys is None or isinstance(m.keys, str) else " ".join(m.keys)
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "phys_offset": m.commit_log_offset, "msg_id": m.msg_id, "tags": m.tags, "keys": keys,
            "properties": dict(m.properties), "body": m.body,
            "born_timestamp": datetime.datetime(1970, 1, 1, tzinfo=UTC) + datetime.timedelta(milliseconds=m.born_timestamp),
            "store_timestamp": datetime.datetime(1970, 1, 1, tzinfo=UTC) + datetime.timedelta(milliseconds=m.store_timestamp),
            "born_host": host_text(m.born_host), "store_host": host_text(m.store_host),
            "flag": m.flag, "sys_flag": m.sys_flag, "reconsume_times": m.reconsume_times}


def in_range(msg) -> bool:
    """A born timestamp Python's datetime can hold (years 1 to 9999), to compare with."""
    return -62135596800000 <= msg.born_timestamp <= 253402300799999


@settings(max_examples=150, deadline=None)
@given(st.lists(messages().filter(in_range), min_size=1, max_size=12), st.integers(0, 1 << 40),
       st.booleans())
@pytest.mark.slow
def test_rows_equal_the_store_decoder_for_random_records(msgs, store_ts, v2_first):
    records = [encode_message(m, queue_offset=i, phys_offset=1000 + i, store_timestamp=store_ts)
               for i, m in enumerate(msgs)]
    if v2_first:
        records.insert(0, build_v2_record(b"TopicV2", b"v2 body", b"TAGS\x01red\x02a\x01b\x02", 7, 999))
    buf = b"".join(records)
    out = Columns()
    assert take_records(buf, 0, len(buf), out, check_crc=True) == (Stop.DONE, len(buf))
    want = [expected_row(decode_message(r)) for r in records
            if decode_message(r).sys_flag & SYSFLAG_TRANSACTION_MASK not in SYSFLAG_TRANSACTION_UNQUEUED]
    got = rows_of([out.batch()]) if len(out) else []
    assert got == want


def test_every_stop_names_the_record_it_stopped_at(monkeypatch):
    from core.record.message import Message
    recs = [encode_message(Message("T", b"%03d" % i), queue_offset=i) for i in range(6)]
    size = len(recs[0])
    buf = bytearray(b"".join(recs) + bytes(64))
    out = Columns()
    assert take_records(bytes(buf), 0, len(buf), out, queue_end=4) == (Stop.LIMIT, 4 * size)
    assert take_records(bytes(buf), 0, len(buf), Columns()) == (Stop.END, 6 * size)
    monkeypatch.setattr(rows_module, "BATCH_ROWS", 2)
    assert take_records(bytes(buf), 0, len(buf), Columns()) == (Stop.FULL, 2 * size)
    monkeypatch.undo()
    blanked = bytearray(buf)
    write_blank(blanked, 3 * size, 40)
    assert take_records(bytes(blanked), 0, len(blanked), Columns()) == (Stop.BLANK, 3 * size)
    torn = bytearray(buf)
    torn[2 * size + 84:2 * size + 88] = (1 << 20).to_bytes(4, "big")     # BODYLENGTH past the record
    assert take_records(bytes(torn), 0, len(torn), Columns()) == (Stop.CORRUPT, 2 * size)
    assert check_record(bytes(torn), 2 * size, len(torn), False)[0] == "corrupt"
    flipped = bytearray(buf)
    flipped[size + 88] ^= 1                                             # a body byte: CRC only
    assert take_records(bytes(flipped), 0, len(flipped), Columns())[0] == Stop.END
    assert take_records(bytes(flipped), 0, len(flipped), Columns(), check_crc=True) == (Stop.CORRUPT, size)


def test_a_batch_has_the_schema_spark_checks():
    from core.record.message import Message
    buf = encode_message(Message("T", b"x", tags="a", properties={"k": "v"}))
    out = Columns()
    take_records(buf, 0, len(buf), out)
    assert out.batch().schema.equals(ARROW_SCHEMA)


def test_a_schema_given_by_the_user_is_refused():
    from pyspark.sql.types import StringType, StructField, StructType
    from pipeline.rows import SCHEMA, check_schema
    check_schema(None)
    check_schema(SCHEMA)
    with pytest.raises(ValueError, match="leave out .schema"):
        check_schema(StructType([StructField("body", StringType())]))


def test_a_timestamp_beyond_microseconds_is_null_not_wrapped():
    from core.record.message import Message
    buf = b"".join(encode_message(Message("T", b"x", born_timestamp=t)) for t in (1 << 62, 1_700_000_000_000))
    out = Columns()
    take_records(buf, 0, len(buf), out)
    born = out.batch().column("born_timestamp").to_pylist()
    assert born == [None, datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)]
