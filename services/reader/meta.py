"""Message metadata as docs/PROTOCOL.md defines it (the "fields" format of `pull` and every
reply that returns messages), built straight from stored records.

`MetaEncoder.encode(chunks)` walks runs of whole records (as `services.reader.pull` copies
them out of the CommitLog) and returns the list of metadata maps and one frame with the
bodies concatenated in the same order. It reads the header with one struct unpack per
record and caches what repeats between messages (host strings, topic names), so the
per-message work is the unpack, the properties and the map itself. The record layout is
DESIGN.md section 3 (core.record.codec writes it); magic and TOTALSIZE are checked, so bytes that
are not a record raise ValueError.
"""
from __future__ import annotations

from core.record.crc_property import strip
from core.record.layout import (
    HEADER_V4 as _HEADER_V4, HEADERS as _HEADERS, I16 as _I16, MAGIC_V1, MAGIC_V2,
    V6_BITS as _V6_BITS, host_lengths,
)
from core.record.message import PROPERTY_KEYS, PROPERTY_TAGS, bytes_to_host, string_to_properties

_V4_SIZE = _HEADER_V4.size
_CACHE_LIMIT = 4096


class MetaEncoder:
    """Turns stored records into (metadata maps, bodies frame); keeps small caches."""

    def __init__(self):
        self._hosts: dict[bytes, str] = {}
        self._host_hex: dict[bytes, str] = {}
        self._topics: dict[bytes, str] = {}

    def host(self, raw: bytes) -> str:
        """"ip:port" ("[ip]:port" for IPv6) of a stored 8- or 20-byte host."""
        text = self._hosts.get(raw)
        if text is None:
            ip, port = bytes_to_host(raw)
            text = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
            if len(self._hosts) >= _CACHE_LIMIT:
                self._hosts.clear()
            self._hosts[raw] = text
        return text

    def _hex(self, raw: bytes) -> str:
        text = self._host_hex.get(raw)
        if text is None:
            text = raw.hex().upper()
            if len(self._host_hex) >= _CACHE_LIMIT:
                self._host_hex.clear()
            self._host_hex[raw] = text
        return text

    def _topic(self, raw: bytes) -> str:
        name = self._topics.get(raw)
        if name is None:
            name = raw.decode("utf-8")
            if len(self._topics) >= _CACHE_LIMIT:
                self._topics.clear()
            self._topics[raw] = name
        return name

    def encode(self, chunks) -> tuple[list[dict], bytes]:
        metas: list[dict] = []
        bodies: list = []
        hosts, host_hex, topics = self._hosts, self._host_hex, self._topics
        unpack_v4 = _HEADER_V4.unpack_from
        i16 = _I16.unpack_from
        for chunk in chunks:
            mv = memoryview(chunk)
            pos, n = 0, len(chunk)
            while pos < n:
                if n - pos < _V4_SIZE:
                    raise ValueError(f"{n - pos} bytes at {pos} are too short for a record")
                (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born,
                 store_ts, store, reconsume, _prepared, body_len) = unpack_v4(chunk, pos)
                p = pos + _V4_SIZE
                if sys_flag & _V6_BITS:
                    header = _HEADERS[host_lengths(sys_flag)]
                    (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born,
                     store_ts, store, reconsume, _prepared, body_len) = header.unpack_from(chunk, pos)
                    p = pos + header.size
                body_end = p + body_len
                if (magic != MAGIC_V1 and magic != MAGIC_V2) or body_len < 0 or body_end > pos + total:
                    raise ValueError(f"no message record at {pos}: magic {magic & 0xFFFFFFFF:#x}, "
                                     f"TOTALSIZE {total}, body length {body_len}")
                bodies.append(mv[p:body_end])
                if magic == MAGIC_V1:
                    p = body_end + 1
                    topic_raw = chunk[p:p + chunk[body_end]]
                else:
                    p = body_end + 2
                    topic_raw = chunk[p:p + i16(chunk, body_end)[0]]
                topic = topics.get(topic_raw) or self._topic(topic_raw)
                p += len(topic_raw)
                props_len = i16(chunk, p)[0]
                p += 2
                if props_len > 0:
                    props = string_to_properties(str(strip(chunk[p:p + props_len]), "utf-8"))
                    p += props_len
                else:
                    props = {}
                if p - pos != total:
                    raise ValueError(f"record at {pos}: TOTALSIZE {total} but fields add up to {p - pos}")
                metas.append({
                    "topic": topic, "queue_id": queue_id, "queue_offset": queue_offset,
                    "phys_offset": phys, "store_size": total, "body_size": body_len, "flag": flag,
                    "tags": props.pop(PROPERTY_TAGS, None), "keys": props.pop(PROPERTY_KEYS, None),
                    "properties": props,
                    "msg_id": (host_hex.get(store) or self._hex(store)) + format(phys, "016X"),
                    "born_timestamp": born_ts, "store_timestamp": store_ts,
                    "born_host": hosts.get(born) or self.host(born),
                    "store_host": hosts.get(store) or self.host(store),
                    "sys_flag": sys_flag, "reconsume_times": reconsume, "body_crc": crc,
                })
                pos += total
        return metas, b"".join(bodies)
