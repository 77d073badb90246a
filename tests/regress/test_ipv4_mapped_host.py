"""An IPv4-mapped IPv6 address (`::ffff:1.2.3.4`, as a dual-stack socket reports an IPv4 peer)
was stored as a 20-byte IPv6 host with the IPv6 SYSFLAG bit. Java's InetAddress makes such an
address an Inet4Address, so RocketMQ stores it as 4 address bytes: so do we now."""
from core.record.codec import prepare_record
from core.record.message import Message, SYSFLAG_BORNHOST_V6, host_to_bytes


def test_mapped_address_is_stored_as_ipv4():
    assert host_to_bytes(("::ffff:1.2.3.4", 7)) == (bytes([1, 2, 3, 4]) + (7).to_bytes(4, "big"), False)
    rec = prepare_record(Message("T", b"x", born_host=("::ffff:10.0.0.9", 5)), 1024, bytes(8))
    assert len(rec.born_host) == 8 and not rec.sys_flag & SYSFLAG_BORNHOST_V6


def test_plain_ipv6_stays_ipv6():
    raw, v6 = host_to_bytes(("::1", 7))
    assert v6 and len(raw) == 20
