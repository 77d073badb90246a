"""Three defects of batch preparation found in review:

- a cached batch shape kept the first record of the batch that made it, body included: in
  the appender a view of the producer's whole request frame, kept alive for as long as the
  shape stayed cached (up to 128 shapes);
- a batch whose first message shared a property valued None was taken as alike by
  `put_messages` with a message lacking that property but carrying another, which was then
  stored without it;
- a batch with a UNIQ_KEY holding a separator was refused MESSAGE_ILLEGAL by the column path
  where record-by-record preparation says PROPERTIES_SIZE_EXCEEDED first.
"""
import copy
import gc
import weakref

from core.record.batch_encode import prepare_batch_records
from core.record.codec import prepare_batch
from core.record.message import Message, host_to_bytes

STORE_HOST = host_to_bytes(("127.0.0.1", 10911))[0]


class Frame(bytearray):
    """A request frame that can be watched with a weak reference."""


def test_a_cached_shape_does_not_keep_the_request_frame():
    frame = Frame(b"x" * 4000)
    view = memoryview(frame)
    bodies = [view[i * 100:(i + 1) * 100] for i in range(40)]
    keys = ["%032X" % (0xABC000 + i) for i in range(40)]
    msg = Message("FrameTopic", b"", 3, properties={"p": "v"})
    batch = prepare_batch_records(msg, bodies, 4 << 20, STORE_HOST, keys)
    assert batch.first.topic == "FrameTopic"
    watch = weakref.ref(frame)
    del frame, view, bodies, batch
    gc.collect()
    assert watch() is None


def test_a_property_valued_none_does_not_make_messages_alike(tiny_config, open_store):
    store = open_store(tiny_config())
    msgs = [Message("T", b"a", properties={"UNIQ_KEY": "K1", "k": None}),
            Message("T", b"b", properties={"UNIQ_KEY": "K2", "j": "x"})]
    assert store.put_messages(msgs).ok
    store.wait_for_dispatch()
    got = store.get_message("g", "T", 0, 0, 10).messages
    assert [m.properties.get("j") for m in got] == [None, "x"]


def test_a_separator_in_a_key_gets_the_status_record_by_record_gives():
    msg = Message("T", b"", properties={"big": "v" * 33000})
    bodies = [b"x" * 10] * 4
    keys = ["%031X\x01" % i for i in range(4)]
    want = prepare_batch(copy.copy(msg), bodies, 4 << 20, STORE_HOST, keys)
    assert prepare_batch_records(msg, bodies, 4 << 20, STORE_HOST, keys) is want
