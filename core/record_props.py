"""The parts of a record's tail that dispatch reads, through bounded caches: topics per topic
bytes, tag codes per TAGS value, and (tag code, KEYS, UNIQ_KEY) per property string with the
UNIQ_KEY value cut out (`properties`). A producer's property strings differ only in UNIQ_KEY,
so most records cost two `find`s and a dict lookup.

A property is found the way `core.message.string_to_properties` reads it: `name\\x01value`
between `\\x02` separators, the last occurrence winning, an empty value counting as absent.
"""
from __future__ import annotations

import re

from core.hashing import tags_code

# The properties dispatch reads, each "\x02NAME\x01value" with a non-empty value; taken into
# a dict in order, so the last one wins, as in core.message.string_to_properties.
_WANTED = re.compile("\x02(TAGS|KEYS|UNIQ_KEY)\x01([^\x02]+)")
_UNIQ = b"UNIQ_KEY\x01"
_CACHE_MAX = 65536

TOPICS: dict[bytes, str | None] = {}
PROPS: dict[bytes, tuple | None] = {}
_TAG_CODES: dict[str, int] = {}


def topic_of(raw: bytes) -> str | None:
    """The topic of `raw` (None when it is not UTF-8), cached in TOPICS."""
    try:
        topic = raw.decode("utf-8")
    except UnicodeDecodeError:
        topic = None
    if len(TOPICS) >= _CACHE_MAX:
        TOPICS.clear()
    TOPICS[raw] = topic
    return topic


def _tags_code(tags: str) -> int:
    code = _TAG_CODES.get(tags)
    if code is None:
        code = tags_code(tags)
        if len(_TAG_CODES) >= _CACHE_MAX:
            _TAG_CODES.clear()
        _TAG_CODES[tags] = code
    return code


def _parse_properties(raw: bytes) -> tuple | None:
    """(tag code, KEYS, UNIQ_KEY) of a property string; None when it is not UTF-8."""
    try:
        found = dict(_WANTED.findall("\x02" + raw.decode("utf-8")))
    except UnicodeDecodeError:
        return None
    tags = found.get("TAGS")
    return _tags_code(tags) if tags else 0, found.get("KEYS", ""), found.get("UNIQ_KEY", "")


def _cached(template: bytes) -> tuple | None:
    parsed = PROPS.get(template, False)
    if parsed is False:
        parsed = _parse_properties(template)
        if len(PROPS) >= _CACHE_MAX:
            PROPS.clear()
        PROPS[template] = parsed
    return parsed


def uniq_span(raw: bytes) -> tuple[int, int]:
    """Where `properties` takes the UNIQ_KEY value of `raw` from, as [a, b); (0, 0) when it
    reads `raw` without cutting a value out (no UNIQ_KEY, or one it parses whole)."""
    i = raw.find(_UNIQ)
    if i < 0 or (i and raw[i - 1] != 2):
        return 0, 0
    j = raw.find(b"\x02", i)
    j = len(raw) if j < 0 else j
    parsed = _cached(raw[:i] + raw[j:])
    if parsed is None or parsed[2] or j == i + len(_UNIQ):
        return 0, 0
    return i + len(_UNIQ), j


def properties(raw: bytes) -> tuple | None:
    """(tag code, KEYS, UNIQ_KEY) of a property string (None when it is not UTF-8), through
    the cache: the first UNIQ_KEY value (when it starts a property) is cut out and the rest,
    the template, is parsed once. Its value stands unless the template holds a later non-empty
    UNIQ_KEY, which would win (then `raw` is parsed whole). The cuts fall on ASCII bytes, so
    `raw` is UTF-8 exactly when the template and value are."""
    i = raw.find(_UNIQ)
    if i < 0 or (i and raw[i - 1] != 2):
        return _cached(raw) if i < 0 else _parse_properties(raw)
    j = raw.find(b"\x02", i)
    if j < 0:
        j = len(raw)
    parsed = _cached(raw[:i] + raw[j:])
    if parsed is None or parsed[2] or j == i + len(_UNIQ):
        return parsed if parsed is None else _parse_properties(raw)
    try:
        return parsed[0], parsed[1], raw[i + len(_UNIQ):j].decode("utf-8")
    except UnicodeDecodeError:
        return None
