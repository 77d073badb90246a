"""The words of a refused record: what the encoders (`core.record.codec`,
`core.record.batch_encode`) say beside MESSAGE_ILLEGAL or PROPERTIES_SIZE_EXCEEDED, so that a
client learns what to change. Each check calls one of these where it has found what is
wrong (with `core.status.refuse`), so the reason is the rule that was checked; they run only
for refused puts, so they may be slow and plain.
"""
from __future__ import annotations

from core.record.key_block import block_problem
from core.record.message import KEY_SEPARATOR, PROPERTY_UNIQ_KEY

SEPARATORS = ("\x01", "\x02")
FALLBACK = ("a field is out of its Java range (flag, sys_flag, reconsume_times, born_timestamp, "
            "prepared_transaction_offset) or a host is not ip:port")
BATCH_DELAY = "a batch takes no delay level (property DELAY) and no timer, as RocketMQ's"
BATCH_TRANSACTION = "a batch takes no transaction message, as RocketMQ's"
NOT_TEXT = "the tags, the keys or a property is not a string"
NOT_KEY = "the UNIQ_KEY is not a string"


def in_batch(i: int, reason: str) -> str:
    """`reason` of message `i` of a batch."""
    return f"message {i} of the batch: {reason}"


def batch_too_large(size: int, max_message_size: int) -> str:
    return f"a batch is one unit: its {size} bytes of bodies are over max_message_size {max_message_size}"


def over_segment(batch: bool, file_size: int) -> str:
    """The reason beside MESSAGE_SIZE_EXCEEDED (a put status MESSAGE_ILLEGAL): the CommitLog's
    check that a record, or a batch as one unit, fits in one segment."""
    return (f"{'the batch' if batch else 'the record'} would not fit in a CommitLog segment of "
            f"{file_size} bytes (mapped_file_size_commitlog)")


def body_too_large(size: int, max_message_size: int) -> str:
    return f"the body is {size} bytes, over max_message_size {max_message_size}"


def properties_too_large(size: int, limit: int) -> str:
    return f"the properties are {size} bytes, over {limit}"


def separator_in(what: str) -> str:
    return (f"{what} holds \\x01 or \\x02, the separators of RocketMQ's property string; "
            "they may not appear in tags, keys or properties")


def head_problem(msg, head: bytes, max_message_size: int, max_topic_bytes: int) -> str:
    """Why the body, topic or queue id of `msg` is refused (`prepare_record`'s first checks;
    `head` is the topic's encoded head, b"" for an illegal topic)."""
    body, topic, queue_id = msg.body, msg.topic, msg.queue_id
    if not isinstance(topic, str):
        return f"the topic is a {type(topic).__name__}, not a string"
    problem = _body_type_problem(body)
    if problem:
        return problem
    if not head:
        if not 0 < len(topic.encode("utf-8", "surrogatepass")) <= max_topic_bytes:
            return f"the topic must be 1 to {max_topic_bytes} UTF-8 bytes"
        return "the topic must be one directory name: no NUL, no '/', not '.' or '..'"
    if len(body) > max_message_size:
        return body_too_large(len(body), max_message_size)
    return f"the queue id {queue_id!r} is not an integer in [0, 2^31)"


def body_problem(body, max_message_size: int, fixed: int) -> str:
    """Why a batch's body is refused: its type, its size, or its record's (`fixed`: the
    record's bytes besides the body)."""
    problem = _body_type_problem(body)
    if problem:
        return problem
    if len(body) > max_message_size:
        return body_too_large(len(body), max_message_size)
    return record_too_large(fixed + len(body), max_message_size)


def _body_type_problem(body) -> str | None:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        return f"the body is a {type(body).__name__}, not bytes"
    if isinstance(body, memoryview) and (body.itemsize != 1 or not body.c_contiguous):
        return "the body is a memoryview that is not contiguous bytes"
    return None


def separator_problem(msg) -> str:
    """Which text of `msg` holds a property separator (the topic, tags, keys, a property's
    name or value)."""
    for what, text in texts(msg):
        if any(s in text for s in SEPARATORS):
            return separator_in(what)
    return separator_in("a property")


def record_too_large(size: int, max_message_size: int) -> str:
    return (f"the record would be {size} bytes, over max_message_size {max_message_size} "
            "and its header's slack")


def key_separator(uniq_keys) -> str:
    """The reason for UNIQ_KEYs (strings or a KeyBlock) of which one holds a separator,
    naming its message."""
    if hasattr(uniq_keys, "data"):                      # a KeyBlock: keys of one width
        width = len(uniq_keys.data) // max(uniq_keys.count, 1)
        at = min(i for i in (uniq_keys.data.find(b"\x01"), uniq_keys.data.find(b"\x02")) if i >= 0)
        return in_batch(at // max(width, 1), separator_in("the UNIQ_KEY"))
    for i, key in enumerate(uniq_keys):
        if isinstance(key, str) and any(s in key for s in SEPARATORS):
            return in_batch(i, separator_in("the UNIQ_KEY"))
    return separator_in("a UNIQ_KEY")


def keys_problem(msg, uniq_keys, n: int) -> str:
    """Why a batch's UNIQ_KEYs (one per body) are refused as a whole."""
    count = uniq_keys.count if hasattr(uniq_keys, "data") else len(uniq_keys)
    if count != n:
        return f"the batch has {count} UNIQ_KEYs for {n} bodies"
    if hasattr(uniq_keys, "data"):
        problem = block_problem(*uniq_keys)
        if problem:
            return f"the UNIQ_KEY block {problem}"
        if uniq_keys.has_separators():
            return key_separator(uniq_keys)
    elif any(isinstance(k, str) and any(s in k for s in SEPARATORS) for k in uniq_keys):
        return key_separator(uniq_keys)
    if PROPERTY_UNIQ_KEY in (msg.properties or {}):
        return "a batch with a UNIQ_KEY per body takes no UNIQ_KEY property of its own"
    return "the UNIQ_KEYs are not one string per body"


def texts(msg, uniq_key=None) -> list:
    """(what, text) of every string that goes into the record's topic and property string."""
    out = [("the topic", msg.topic)]
    if msg.tags:
        out.append(("the tags", str(msg.tags)))
    keys = msg.keys
    if keys:
        out.append(("the keys", keys if isinstance(keys, str) else KEY_SEPARATOR.join(map(str, keys))))
    for name, value in (msg.properties or {}).items():
        if value is not None and not (uniq_key is not None and name == PROPERTY_UNIQ_KEY):
            out += [(f"property name {name!r}", str(name)), (f"property {name!r}", str(value))]
    if uniq_key is not None:
        out.append(("the UNIQ_KEY", str(uniq_key)))
    return out
