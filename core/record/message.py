"""The message model: `Message` as a producer builds it and `MessageExt` as the store returns it,
with RocketMQ's property string and offset message id.

Properties are stored as `name\\x01value\\x02` pairs with the trailing `\\x02` kept (RocketMQ 5.2+).
`tags` and `keys` are the TAGS and KEYS properties; they are kept in the properties map on
encode and lifted back out of it on decode.
"""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"                 # the delay level: RocketMQ refuses it in a batch
# The property names RocketMQ keeps for itself (MessageConst's system properties): its
# putUserProperty refuses them, and so does `mqstore produce --property`.
SYSTEM_PROPERTIES = frozenset((
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC",
    "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
    "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
    "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
    "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID",
    "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
    "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", "INNER_MULTI_DISPATCH", "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__SHARDINGKEY"))
KEY_SEPARATOR = " "

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_MASK = 0xC
SYSFLAG_TRANSACTION_NOT = 0x0
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
# Prepared and rolled-back transaction records take no queue offset, go into no consume
# queue and are not indexed; plain and committed ones are queued (RocketMQ's rule).
SYSFLAG_TRANSACTION_UNQUEUED = (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

DEFAULT_HOST = ("127.0.0.1", 10911)


@dataclass(slots=True)
class Message:
    """A message as a producer hands it to the store."""
    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    tags: str | None = None
    keys: str | list | None = None
    properties: dict = field(default_factory=dict)
    born_timestamp: int = 0
    born_host: tuple = DEFAULT_HOST
    store_host: tuple = DEFAULT_HOST
    sys_flag: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def keys_list(self) -> list:
        if not self.keys:
            return []
        if isinstance(self.keys, str):
            return [k for k in self.keys.split(KEY_SEPARATOR) if k]
        return [str(k) for k in self.keys if k]

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def wait_store_msg_ok(self) -> bool:
        return (self.properties or {}).get(PROPERTY_WAIT, "true") != "false"

    def all_properties(self) -> dict:
        """The property map as stored: user properties plus TAGS and KEYS."""
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            props[PROPERTY_KEYS] = self.keys if isinstance(self.keys, str) else KEY_SEPARATOR.join(self.keys_list)
        return props


@dataclass(slots=True)
class MessageExt(Message):
    """A stored message: the producer's fields plus what the store assigned at append."""
    queue_offset: int = 0
    commit_log_offset: int = 0
    store_size: int = 0
    store_timestamp: int = 0
    body_crc: int = 0
    msg_id: str = ""

    @property
    def phys_offset(self) -> int:
        """`commit_log_offset` under the name the clients' ReceivedMessage uses, so that a
        message from a query and one from a pull read alike."""
        return self.commit_log_offset


def properties_to_string(props: dict) -> str:
    """`name\\x01value\\x02` for each pair; None values are skipped."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}"
                   for k, v in props.items() if v is not None)


def string_to_properties(s: str) -> dict:
    """Parse a property string; malformed fragments (no separator, empty key/value) are dropped."""
    props = {}
    for item in s.split(PROPERTY_SEPARATOR):
        k, sep, v = item.partition(NAME_VALUE_SEPARATOR)
        if sep and k and v:
            props[k] = v
    return props


def host_to_bytes(host: tuple) -> tuple[bytes, bool]:
    """(address, port) as RocketMQ stores it: raw address bytes then int32 port; and whether IPv6.
    An IPv4-mapped IPv6 address is IPv4, as Java's InetAddress makes it."""
    addr = ipaddress.ip_address(host[0])
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.packed + struct.pack(">i", int(host[1])), addr.version == 6


_HOSTS_BY_BYTES: dict = {}


def bytes_to_host(raw: bytes) -> tuple:
    """(address, port) of a stored host; cached, since a store sees a handful of hosts."""
    raw = bytes(raw)
    host = _HOSTS_BY_BYTES.get(raw)
    if host is None:
        host = (str(ipaddress.ip_address(raw[:-4])), struct.unpack(">i", raw[-4:])[0])
        if len(_HOSTS_BY_BYTES) < 4096:
            _HOSTS_BY_BYTES[raw] = host
    return host


def create_message_id(store_host_bytes: bytes, phys_offset: int) -> str:
    """Offset message id: store address + port (int32) + physical offset (int64), upper-case hex."""
    return (store_host_bytes + struct.pack(">q", phys_offset)).hex().upper()


def message_ids(store_host_bytes: bytes, offsets: bytes) -> list[str]:
    """`create_message_id` of every record of a batch, from its offsets as big-endian int64s
    back to back: one hex call for the whole batch."""
    if not store_host_bytes or not offsets:
        return []
    host = store_host_bytes.hex().upper()
    return (host + offsets.hex(" ", 8).upper().replace(" ", " " + host)).split()


def decode_message_id(msg_id: str) -> tuple[tuple, int]:
    """((address, port), physical offset) from an offset message id (32 hex digits IPv4, 56 IPv6)."""
    raw = bytes.fromhex(msg_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"not an offset message id: {msg_id!r}")
    return bytes_to_host(raw[:-8]), struct.unpack(">q", raw[-8:])[0]


_TIMER_PROPERTY_NAMES = frozenset(("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"))


def has_delay_level(props) -> bool:
    """Whether properties ask for a delay level above 0 or a timer, which a batch may not
    (RocketMQ: MESSAGE_ILLEGAL); a DELAY that is not a number is refused as well."""
    if props and not _TIMER_PROPERTY_NAMES.isdisjoint(props):
        return True
    level = props.get(PROPERTY_DELAY) if props else None
    if level is None:
        return False
    try:
        return int(level) != 0
    except (TypeError, ValueError):
        return True
