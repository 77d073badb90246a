"""RocketMQ subscription expressions: `*` (everything) or `TagA || TagB`, matched by tag hash
code as the consume queue stores it (so a hash collision passes; clients re-check tags).

As RocketMQ's FilterAPI: only a whole expression of `*` means everything; inside a list `*`
is a tag like any other, and empty tags between `||` are dropped. A blank expression (None,
"", spaces) means everything too (RocketMQ's: None or ""; spaces would match nothing there)."""
from __future__ import annotations

from functools import lru_cache

from core.record.hashing import java_hash


def subscription_tags(expression: str | None) -> frozenset | None:
    """The tags an expression accepts, or None for "everything"."""
    if expression is None or expression.strip() in ("", "*"):
        return None
    return frozenset(t for t in map(str.strip, expression.split("||")) if t)


@lru_cache(maxsize=1024)
def subscription_codes(expression: str | None) -> frozenset | None:
    """The tag hash codes an expression accepts, or None for "everything"."""
    tags = subscription_tags(expression)
    return None if tags is None else frozenset(map(java_hash, tags))


def tags_match(expression: str | None, tags: str | None) -> bool:
    """Exact check on the tag string, for callers that re-check after the hash filter."""
    wanted = subscription_tags(expression)
    return wanted is None or (tags is not None and tags in wanted)
