"""core.status.AppendMessageResult's message ids (and offsets in hex): one per record, the same as
core.record.message.create_message_id of each record's offset, for IPv4 and IPv6 store hosts."""
from __future__ import annotations

import socket
import struct

from core.record.message import create_message_id
from core.status import AppendMessageResult, AppendMessageStatus

V4 = socket.inet_aton("192.168.0.1") + struct.pack(">i", 10911)
V6 = socket.inet_pton(socket.AF_INET6, "fe80::1") + struct.pack(">i", 10911)


def result(host, offset, sizes, wrote_bytes=None):
    return AppendMessageResult(AppendMessageStatus.PUT_OK, offset, sum(sizes) if wrote_bytes is None
                               else wrote_bytes, 1, 0, len(sizes), host, tuple(sizes))


def test_batch_ids_are_the_records_offsets():
    sizes = [158, 200, 1, 4096] * 30
    for host in (V4, V6):
        r = result(host, (1 << 40) + 7, sizes)
        offsets = [(1 << 40) + 7 + sum(sizes[:i]) for i in range(len(sizes))]
        assert r.msg_ids == [create_message_id(host, o) for o in offsets]
        assert r.msg_id == ",".join(r.msg_ids)


def test_single_record_and_no_host():
    r = AppendMessageResult(AppendMessageStatus.PUT_OK, 1580, 158, 1, 0, 1, V4)
    assert r.msg_ids == ["C0A8000100002A9F000000000000062C"] == [r.msg_id]
    assert AppendMessageResult(AppendMessageStatus.PUT_OK, 0, 158).msg_ids == []


def test_many_batch_lengths():
    for n in range(1, 40):
        r = result(V4, 5, [10] * n)
        assert r.msg_ids == [create_message_id(V4, 5 + 10 * i) for i in range(n)]


def test_offsets_hex():
    r = result(V4, 255, [1, 16])
    assert r.offsets_hex() == "00000000000000FF 0000000000000100"
    single = AppendMessageResult(AppendMessageStatus.PUT_OK, (1 << 40), 158, 1, 0, 1, V4)
    assert single.offsets_hex() == "0000010000000000"


def test_offsets_of_batches_of_other_sizes_in_turn():
    a, b = (10,) * 5, (7, 300, 2)                 # the kept offsets are of the last sizes seen
    for offset in (0, 1000, 1 << 41):
        for sizes in (a, b, a, tuple(b), (5,)):
            r = result(V4, offset, sizes)
            starts = [offset + sum(sizes[:i]) for i in range(len(sizes))]
            assert r.offsets_hex() == " ".join("%016X" % s for s in starts)
