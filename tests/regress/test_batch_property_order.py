"""Regression: `MessageStore.put_messages` wrote a batch's properties in another order than the
messages gave them whenever the batch was encoded once for all (`_batch_template`: messages
alike but for body and UNIQ_KEY). The UNIQ_KEY went after the other properties, and with no
UNIQ_KEY the first message's order was used for every message, since dict equality ignores
order. The appender encodes a `put_batch` with per-message fields record by record
(`prepare_each`), as the single put does, in the order given: the same batch thus gave other
CommitLog bytes embedded than through the services (a "raw" pull answered differently), and
other bytes than the same messages put one by one. RocketMQ writes each message's own
properties string."""
import struct

from core.record.crc_property import strip

import pytest

from core import Message, MessageStore

BODY_LEN_POS = 84          # IPv4 born and store hosts


def _properties(raw: bytes) -> bytes:
    """The PROPERTIES bytes of one stored v1 record, as written, but for the record CRC
    property at their end (its digits differ from record to record)."""
    p = BODY_LEN_POS + 4 + struct.unpack_from(">i", raw, BODY_LEN_POS)[0]
    p += 1 + raw[p]
    n = struct.unpack_from(">h", raw, p)[0]
    props = bytes(raw[p + 2:p + 2 + n])
    assert props[-20:-11] == b"__CRC32#\x01"
    return strip(props)


def _stored(store, result) -> list:
    ar = result.append_result
    out, phys = [], ar.wrote_offset
    for size in ar.record_sizes or (ar.wrote_bytes,):
        out.append(_properties(store.commitlog.read(phys, size)))
        phys += size
    return out


SHAPES = {
    "uniq key first": [{"UNIQ_KEY": "A" * 32, "p": "v"}],
    "uniq key first, several": [{"UNIQ_KEY": "%032X" % i, "p": "v", "q": "w"} for i in range(3)],
    "uniq key between": [{"p": "v", "UNIQ_KEY": "%032X" % i, "q": "w"} for i in range(3)],
    "orders differ": [{"a": "1", "b": "2"}, {"b": "2", "a": "1"}],
    "orders differ, keyed": [{"UNIQ_KEY": "%032X" % 1, "p": "v"}, {"p": "v", "UNIQ_KEY": "%032X" % 2}],
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_batch_keeps_each_messages_property_order(tiny_config, shape):
    store = MessageStore(tiny_config())
    store.load()
    store.start()
    try:
        props = SHAPES[shape]
        batch = store.put_messages([Message("T", b"b%d" % i, tags="t", properties=dict(p))
                                    for i, p in enumerate(props)])
        assert batch.status.ok
        singles = [store.put_message(Message("T", b"b%d" % i, tags="t", properties=dict(p)))
                   for i, p in enumerate(props)]
        assert all(r.status.ok for r in singles)
        expected = [_stored(store, r)[0] for r in singles]
        assert _stored(store, batch) == expected
        assert expected[0].startswith(("%s\x01" % next(iter(props[0]))).encode())
    finally:
        store.shutdown()
