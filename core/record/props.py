"""The property string (PROPERTIES, `name\\x01value\\x02` pairs): its one builder
(`properties_string`), and the parts of a record's tail that dispatch reads, through bounded
caches: topics per topic bytes and (tag code, KEYS, UNIQ_KEY) per property string with the
UNIQ_KEY value cut out (`properties`). A producer's property strings differ only in UNIQ_KEY,
so most records cost two `find`s and a dict lookup.

A property is found the way `core.record.message.string_to_properties` reads it: `name\\x01value`
between `\\x02` separators, the last occurrence winning, an empty value counting as absent.
"""
from __future__ import annotations

import re

from core.record.crc_property import strip
from core.record.hashing import tags_code
from core.record.message import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, properties_to_string

# -- building ------------------------------------------------------------------------------
_ENDS: dict = {}           # (TAGS, KEYS) -> _end_of(TAGS, KEYS)


def _end_of(tags, keys):
    """(the end of a property string after the message's own pairs: "\\x02", then the TAGS and
    KEYS pairs; the number of those pairs) for TAGS and KEYS that are str (or empty), cached;
    None for any other (a list of keys, a tag that is not a str)."""
    if (tags and tags.__class__ is not str) or (keys and keys.__class__ is not str):
        return None
    end = ("\x02" + (f"{PROPERTY_TAGS}\x01{tags}\x02" if tags else "")
           + (f"{PROPERTY_KEYS}\x01{keys}\x02" if keys else ""), bool(tags) + bool(keys))
    if len(_ENDS) < 4096:
        _ENDS[tags, keys] = end
    return end


def properties_string(msg) -> tuple[str, int, str | None, str]:
    """(property string, number of pairs written, TAGS, KEYS) of a message: the one builder of
    PROPERTIES (the encoders and `core.put_refusal` take it).

    The common message (string properties without TAGS or KEYS among them, TAGS and KEYS str)
    is joined in C, its TAGS/KEYS end cached; anything else goes through
    `properties_string_general`, which gives the same string (a differential test holds them)."""
    props = msg.properties
    if not props:
        return properties_string_general(msg)
    tags = msg.tags or None                 # empty TAGS or KEYS (even []) write no pair
    keys = msg.keys or None
    try:
        end = _ENDS[tags, keys]
    except (KeyError, TypeError):            # TypeError: unhashable KEYS (a list)
        end = _end_of(tags, keys)
    if end is None or PROPERTY_TAGS in props or PROPERTY_KEYS in props:
        return properties_string_general(msg)
    try:
        s = "\x02".join(map("\x01".join, props.items())) + end[0]
    except TypeError:                       # a value that is not a str (or None): format it
        return properties_string_general(msg)
    return s, len(props) + end[1], tags or None, keys or ""


def properties_string_general(msg) -> tuple[str, int, str | None, str]:
    """`properties_string` for any message: KEYS a str as given (RocketMQ's setKeys(String)) or
    a list joined by single spaces, empty ones dropped; TAGS and KEYS set over the properties of
    those names, None values left out."""
    tags = msg.tags
    keys = msg.keys
    if keys is not None and not isinstance(keys, str):
        keys = KEY_SEPARATOR.join(str(k) for k in keys if k)
    if msg.properties:
        props = dict(msg.properties)
        if tags:
            props[PROPERTY_TAGS] = tags
        if keys:
            props[PROPERTY_KEYS] = keys
        s = properties_to_string(props)
        return s, sum(v is not None for v in props.values()), props.get(PROPERTY_TAGS), \
            props.get(PROPERTY_KEYS) or ""
    s = ""
    n = 0
    if tags:
        s = "TAGS\x01" + tags + "\x02"
        n = 1
    if keys:
        s += "KEYS\x01" + keys + "\x02"
        n += 1
    return s, n, tags, keys or ""


# -- reading (dispatch) ------------------------------------------------------------------------
# The properties dispatch reads, each "\x02NAME\x01value" with a non-empty value; taken into
# a dict in order, so the last one wins, as in core.record.message.string_to_properties.
_WANTED = re.compile("\x02(TAGS|KEYS|UNIQ_KEY)\x01([^\x02]+)")
_UNIQ = b"UNIQ_KEY\x01"
_CACHE_MAX = 65536
_MISSING = object()

TOPICS: dict[bytes, str | None] = {}
PROPS: dict[bytes, tuple | None] = {}


def _memo(cache: dict, key, compute):
    """cache[key], computed and stored on a miss; the cache is emptied when it is full."""
    value = cache.get(key, _MISSING)
    if value is _MISSING:
        value = compute(key)
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[key] = value
    return value


def _decode(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def topic_of(raw: bytes) -> str | None:
    """The topic of `raw` (None when it is not UTF-8), cached in TOPICS."""
    return _memo(TOPICS, raw, _decode)


def _parse_properties(raw: bytes) -> tuple | None:
    """(tag code, KEYS, UNIQ_KEY) of a property string; None when it is not UTF-8."""
    try:
        found = dict(_WANTED.findall("\x02" + raw.decode("utf-8")))
    except UnicodeDecodeError:
        return None
    tags = found.get("TAGS")
    return tags_code(tags), found.get("KEYS", ""), \
        found.get("UNIQ_KEY", "")


def _cut(raw: bytes) -> tuple[int, int, tuple | None] | None:
    """(start, end, parsed template) of the first UNIQ_KEY value of `raw` when it starts a
    property and the template (raw without that value) alone decides the other fields; None
    when `raw` must be read whole (no UNIQ_KEY, one inside a value, an empty value, a
    template that is not UTF-8 or holds a later non-empty UNIQ_KEY)."""
    i = raw.find(_UNIQ)
    if i < 0 or (i and raw[i - 1] != 2):
        return None
    j = raw.find(b"\x02", i)
    j = len(raw) if j < 0 else j
    parsed = _memo(PROPS, raw[:i] + raw[j:], _parse_properties)
    if parsed is None or parsed[2] or j == i + len(_UNIQ):
        return None
    return i + len(_UNIQ), j, parsed


def uniq_span(raw: bytes) -> tuple[int, int]:
    """Where `properties` takes the UNIQ_KEY value of `raw` from, as [a, b); (0, 0) when it
    reads `raw` without cutting a value out (no UNIQ_KEY, or one it parses whole)."""
    cut = _cut(strip(raw))
    return (0, 0) if cut is None else cut[:2]


def properties(raw: bytes) -> tuple | None:
    """(tag code, KEYS, UNIQ_KEY) of a property string (None when it is not UTF-8), through
    the cache: the first UNIQ_KEY value (when it starts a property) is cut out and the rest,
    the template, is parsed once. Its value stands unless the template holds a later non-empty
    UNIQ_KEY, which would win (then `raw` is parsed whole). The cuts fall on ASCII bytes, so
    `raw` is UTF-8 exactly when the template and value are. The CRC property at the end (its
    digits differ in every record) is left out first."""
    raw = strip(raw)
    cut = _cut(raw)
    if cut is None:
        return _memo(PROPS, raw, _parse_properties) if raw.find(_UNIQ) < 0 else _parse_properties(raw)
    a, b, parsed = cut
    value = _decode(raw[a:b])
    return None if value is None else (parsed[0], parsed[1], value)
