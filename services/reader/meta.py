"""Message metadata as docs/PROTOCOL.md defines it (the "fields" format of `pull` and every
reply that returns messages), built straight from stored records.

`MetaEncoder.encode(chunks)` walks runs of whole records (as `services.reader.pull` copies
them out of the CommitLog) and returns the list of metadata maps and one frame with the
bodies concatenated in the same order. Each record is read by the store's checking parser
(`core.record.codec.parse_record`, without the CRC), so bytes that are not a record raise
ValueError; host strings and their hex, which repeat between messages, are cached.
"""
from __future__ import annotations

from core.record.codec import parse_record
from core.record.message import PROPERTY_KEYS, PROPERTY_TAGS, bytes_to_host

_CACHE_LIMIT = 4096


class MetaEncoder:
    """Turns stored records into (metadata maps, bodies frame); keeps small caches."""

    def __init__(self):
        self._hosts: dict[bytes, str] = {}
        self._host_hex: dict[bytes, str] = {}

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

    def encode(self, chunks) -> tuple[list[dict], bytes]:
        metas: list[dict] = []
        bodies: list = []
        hosts, host_hex = self._hosts, self._host_hex
        for chunk in chunks:
            mv = memoryview(chunk)
            pos, n = 0, len(chunk)
            while pos < n:
                why, total, h, body_at, topic, props = parse_record(chunk, pos, n, False)
                if why is not None:
                    raise ValueError(f"no message record at {pos} ({why}) of a {n}-byte chunk")
                (_, _, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born,
                 store_ts, store, reconsume, _prepared, body_len) = h
                bodies.append(mv[body_at:body_at + body_len])
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
