"""The fields of a put as the client builds them, each checked before anything is sent: the
topic (not one of RocketMQ's topics no client may send to), the body (bytes or str, not empty),
tags (a str), keys (a str or an iterable of str) and properties (str names; values sent as
`str(value)`), and the delayed-delivery arguments of a send (`delay_properties`). A wrong type
raises TypeError and a wrong value ValueError, naming the field.
"""
from __future__ import annotations

from collections.abc import Mapping

from core.meta.topics import send_topic_problem

EMPTY_BODY = "a message body cannot be empty (RocketMQ's client refuses it too)"


def check_send_topic(topic) -> None:
    problem = send_topic_problem(topic) if topic.__class__ is str else None
    if problem:
        raise ValueError(problem)


def check_tags(tags) -> None:
    if tags is not None and not isinstance(tags, str):
        raise TypeError(f"tags must be a str or None, not {type(tags).__name__}")


def keys_field(keys):
    """`keys` as a request carries them: a str as given, an iterable of str as a list."""
    if isinstance(keys, str):
        return keys
    what = "keys must be a str, an iterable of str or None"
    if isinstance(keys, (bytes, bytearray, memoryview)) or not hasattr(type(keys), "__iter__"):
        raise TypeError(f"{what}, not {type(keys).__name__}")
    out = list(keys)
    for k in out:
        if not isinstance(k, str):
            raise TypeError(f"{what}, not a {type(keys).__name__} holding {type(k).__name__}")
    return out


def properties_field(properties) -> dict:
    """`properties` as a request carries them: names str, values `str(value)`."""
    if properties is None:
        return {}
    if properties.__class__ is not dict and not isinstance(properties, Mapping):
        raise TypeError(f"properties must be a dict of str names to values, or None, "
                        f"not {type(properties).__name__}")
    props = {k: v if v.__class__ is str else str(v) for k, v in properties.items()}
    for k in props:
        if k.__class__ is not str and not isinstance(k, str):
            raise TypeError(f"properties must be a dict of str names to values, not one with "
                            f"a {type(k).__name__} name ({k!r})")
    return props


def delay_properties(properties, delay_level=None, deliver_at=None, delay_ms=None):
    """`properties` with the delay a send asks for (docs/PROTOCOL.md, delayed delivery):
    `delay_level` (an int from 1: the property DELAY), `deliver_at` (a datetime, or ms since
    the epoch: TIMER_DELIVER_MS) or `delay_ms` (ms from now: TIMER_DELAY_MS), at most one."""
    given = [(n, v) for n, v in (("delay_level", delay_level), ("deliver_at", deliver_at),
                                 ("delay_ms", delay_ms)) if v is not None]
    if not given:
        return properties
    if len(given) > 1:
        raise ValueError(f"give one of delay_level, deliver_at and delay_ms, not "
                         f"{' and '.join(n for n, _ in given)}")
    name, value = given[0]
    if name == "deliver_at" and hasattr(value, "timestamp"):
        value = int(value.timestamp() * 1000)
    if value.__class__ is not int:
        raise TypeError(f"{name} must be an int{' or a datetime' if name == 'deliver_at' else ''}, "
                        f"not {type(value).__name__}")
    if value < (1 if name == "delay_level" else 0):
        raise ValueError(f"{name} must be at least {1 if name == 'delay_level' else 0}, got {value}")
    prop = {"delay_level": "DELAY", "deliver_at": "TIMER_DELIVER_MS", "delay_ms": "TIMER_DELAY_MS"}[name]
    return {**(properties or {}), prop: str(value)}


def as_body(body) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)            # freeze a mutable body: a retry resends the same frame
    if isinstance(body, str):
        return body.encode("utf-8")
    raise TypeError(f"a message body must be bytes or str, not {type(body).__name__}")
