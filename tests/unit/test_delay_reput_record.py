"""The re-put record built from a stored delay record's bytes (core.delay.reput_record) against
the reference: the message decoded, its delivery made as RocketMQ's messageTimeup makes it, and
encoded by core.record.codec. Hypothesis over the fields, properties, hosts and CRC modes; and
core.delay.schedule.read_records (one copy per span) against one read per record."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from core import Message
from core.delay.put import delayed_put
from core.delay.reput_record import LEVEL_DROPS, EncodedRun, Readdresser, ReputRules, readdress
from core.delay.schedule import read_records
from core.delay.timer_job import TIMER_DROPS
from core.record.codec import encode_message, parse_record
from core.record.decode import decode_message
from core.record.message import host_to_bytes

LEVELS = (1000, 2000, 3000)
NAME = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
               min_size=1, max_size=6).map(lambda s: "u" + s)
VALUE = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
                max_size=12)
HOST = st.sampled_from([("127.0.0.1", 10911), ("10.1.2.3", 1), ("::1", 9876), ("fe80::1", 2)])


def _stored(msg, prop_crc: bool) -> bytes:
    return encode_message(msg, queue_offset=3, phys_offset=12345, store_timestamp=1_700_000_000_000,
                          prop_crc=prop_crc)


@settings(max_examples=200, deadline=None)
@given(topic=st.sampled_from(["orders", "T-1", "主题"]), body=st.binary(max_size=64),
       queue_id=st.integers(0, 1000), flag=st.integers(-2**31, 2**31 - 1),
       tags=st.none() | VALUE.filter(bool), keys=st.none() | VALUE.filter(bool),
       props=st.dictionaries(NAME, VALUE, max_size=5), born=HOST, store=HOST,
       level=st.integers(1, 5), stored_crc=st.booleans(), store_crc=st.booleans(),
       reconsume=st.integers(0, 16), timer=st.booleans(), wait=st.sampled_from([None, "true"]),
       no_wait=st.booleans())
def test_readdress_is_the_reference_delivery(topic, body, queue_id, flag, tags, keys, props, born,
                                             store, level, stored_crc, store_crc, reconsume, timer,
                                             wait, no_wait):
    props = dict(props, UNIQ_KEY="U%d" % queue_id)
    if wait:
        props["WAIT"] = wait
    if timer:
        props["TIMER_DELAY_SEC"] = "30"
    else:
        props["DELAY"] = str(level)
    msg = Message(topic, body, queue_id, flag, tags, keys, props, born_timestamp=1_600_000_000_000,
                  born_host=born, reconsume_times=reconsume)
    delayed = delayed_put(msg, (LEVELS, 3 * 86400 * 1000))
    stored = _stored(delayed, stored_crc)
    store_host = host_to_bytes(store)[0]
    rules = ReputRules(store_host, store_crc, 4 << 20, no_wait)
    d = readdress(b"junk" + stored, 4, TIMER_DROPS if timer else LEVEL_DROPS, rules)
    assert d is not None and d.topic == topic and d.queue_id == queue_id and d.body == body
    buf = bytearray(len(d.data) + 7)
    assert EncodedRun([d]).write(buf, 7, 41, 5000, 1_700_000_000_999) == len(buf)
    outcome, total, _, _, _, _ = parse_record(buf, 7, len(buf), True)
    assert outcome is None and total == len(d.data)          # a valid record, its CRCs right
    got = decode_message(bytes(buf[7:]), check_crc=True)
    want_props = dict(delayed.properties)
    for name in ("DELAY", "TIMER_DELAY_SEC"):
        want_props.pop(name, None)
    if no_wait:
        want_props["WAIT"] = "false"
    want = Message(topic, body, queue_id, flag, tags, keys, want_props, delayed.born_timestamp,
                   born, store, msg.sys_flag, reconsume)
    ref = encode_message(want, 41, 5000, 1_700_000_000_999, prop_crc=store_crc)
    assert len(ref) == len(d.data)                           # the same fields, the same bytes
    ref_msg = decode_message(ref)
    for field in ("topic", "queue_id", "flag", "tags", "keys", "body", "born_timestamp",
                  "born_host", "store_host", "store_timestamp", "queue_offset",
                  "commit_log_offset", "sys_flag", "reconsume_times", "body_crc", "properties"):
        assert getattr(got, field) == getattr(ref_msg, field), field
    assert got.properties["REAL_TOPIC"] == topic and got.properties["REAL_QID"] == str(queue_id)
    warm = Readdresser(rules, TIMER_DROPS if timer else LEVEL_DROPS)     # its templates kept
    for key in ("U%d" % queue_id, "another-key", "U%d" % queue_id):
        other = delayed_put(Message(topic, body + b"!", queue_id, flag, tags, keys,
                                    dict(props, UNIQ_KEY=key), 1_600_000_000_000, born,
                                    reconsume_times=reconsume), (LEVELS, 3 * 86400 * 1000))
        raw = _stored(other, stored_crc)
        again = warm(raw, 0)
        assert again.data == readdress(raw, 0, TIMER_DROPS if timer else LEVEL_DROPS, rules).data
        assert decode_message(again.data).properties["UNIQ_KEY"] == key
    assert len(warm._templates) == 1                  # one shape: made once


def test_readdress_refuses_what_is_no_delay_record():
    plain = encode_message(Message("t", b"x", properties={"a": "1"}))
    assert readdress(plain, 0, LEVEL_DROPS, ReputRules()) is None           # no REAL_TOPIC
    bad_qid = encode_message(Message("t", b"x", properties={"REAL_TOPIC": "t", "REAL_QID": "q"}))
    assert readdress(bad_qid, 0, LEVEL_DROPS, ReputRules()) is None
    bad_topic = encode_message(Message("t", b"x", properties={"REAL_TOPIC": "a/b", "REAL_QID": "1"}))
    assert readdress(bad_topic, 0, LEVEL_DROPS, ReputRules()) is None
    big = encode_message(Message("t", b"x" * 100, properties={"REAL_TOPIC": "a", "REAL_QID": "1"}))
    assert readdress(big, 0, LEVEL_DROPS, ReputRules(max_message_size=99)) is None
    assert readdress(big[:-3], 0, LEVEL_DROPS, ReputRules()) is None         # cut short


def test_a_run_writes_each_record_at_its_place():
    msgs = [delayed_put(Message("r", b"b%d" % i * (i + 1), 2, properties={"DELAY": "1"}),
                        (LEVELS, 1 << 40)) for i in range(5)]
    ds = [readdress(_stored(m, True), 0, LEVEL_DROPS, ReputRules(None, True)) for m in msgs]
    run = EncodedRun(ds)
    buf = bytearray(run.total + 3)
    run.write(buf, 3, 10, 900, 77)
    pos = 3
    for i, size in enumerate(run.record_sizes):
        got = decode_message(bytes(buf[pos:pos + size]), check_crc=True)
        assert (got.queue_offset, got.commit_log_offset, got.store_timestamp) == (10 + i, 900 + pos - 3, 77)
        assert got.body == msgs[i].body and parse_record(buf, pos, pos + size, True)[0] is None
        pos += size


def test_read_records_spans_match_one_read_each(tiny_config, open_store):
    store = open_store(tiny_config(message_delay_level="1h"))
    entries = []
    for i in range(300):
        r = store.put_message(Message("s", b"z" * (i * 7 % 90), properties={"k": "v" * (i % 5)}))
        assert r.ok
        entries.append((r.append_result.wrote_offset, r.append_result.wrote_bytes))
    entries.insert(10, (entries[3][0], 0))                      # an empty entry
    entries.insert(20, entries[2])                              # an earlier record again
    entries.append((store.commitlog.get_max_offset() + 100, 120))  # nothing there
    read = store.commitlog.read
    files = {mf.file_from_offset for mf in store.commitlog.queue.files}
    assert len(files) > 2                                       # the spans cross segments
    spans = 0
    for chosen in (entries, entries[:30], entries[40:80], entries[-5:]):   # across files, in one
        places = read_records(read, chosen)
        assert len(places) == len(chosen)
        spans += len({id(buf) for buf, _ in places if buf is not None}) < len(chosen) - 2
        for (phys, size), (buf, pos) in zip(chosen, places):
            one = read(phys, size) if size > 0 else None
            assert (buf is None) == (one is None)
            if one is not None:
                assert bytes(buf[pos:pos + size]) == one
    assert spans >= 2                                           # records shared one read
