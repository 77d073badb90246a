"""Regression: every record of a batch carried the producer's PREPARED TRANSACTION OFFSET into
the CommitLog, where RocketMQ's batch encoder writes 0 for every record of a batch (reference
2.1, field 14: "0 for batches"; 2.11: "prepared offset 0"), so a batch put here was not byte
for byte the record RocketMQ writes. The single put keeps the field as given."""
import struct

import pytest

from core import Message, MessageStore

PREPARED_POS = 76          # IPv4 born and store hosts


def _prepared_offsets(store, result):
    ar = result.append_result
    out, phys = [], ar.wrote_offset
    for size in ar.record_sizes:
        rec = store.look_message_by_offset(phys)
        raw = store.commitlog.read(phys, size)
        out.append(struct.unpack_from(">q", raw, PREPARED_POS)[0])
        assert rec.commit_log_offset == phys
        phys += size
    return out


@pytest.mark.parametrize("shape", ["columns", "one", "each", "keyed"])
def test_batch_records_have_prepared_offset_zero(tiny_config, shape):
    store = MessageStore(tiny_config())
    store.load()
    store.start()
    try:
        if shape == "columns":
            msgs = [Message("T", b"b%d" % i, prepared_transaction_offset=77) for i in range(4)]
        elif shape == "one":
            msgs = [Message("T", b"b", prepared_transaction_offset=77)]
        elif shape == "each":
            msgs = [Message("T", b"b" * (i + 1), tags=f"t{i}", prepared_transaction_offset=77)
                    for i in range(3)]
        else:
            msgs = [Message("T", b"b%d" % i, prepared_transaction_offset=77,
                            properties={"UNIQ_KEY": "U" * (i + 1)}) for i in range(3)]
        r = store.put_messages(msgs)
        assert r.status.ok
        assert _prepared_offsets(store, r) == [0] * len(msgs)
        single = store.put_message(Message("T", b"s", prepared_transaction_offset=77))
        assert store.look_message_by_offset(single.append_result.wrote_offset) is not None
        raw = store.commitlog.read(single.append_result.wrote_offset, single.append_result.wrote_bytes)
        assert struct.unpack_from(">q", raw, PREPARED_POS)[0] == 77
    finally:
        store.shutdown()
