"""Checks of a CLI command's options before the store is asked: timeouts, topic and group
names (as the store checks them), queue ids (as any topic can have them). Each raises
`supervisor.cli.UsageError` saying which option is wrong and why.
"""
from __future__ import annotations

import math

from core.meta.topics import MAX_QUEUES, topic_name_problem
from supervisor.cli import UsageError


def check_queue_range(option: str, queue_ids) -> None:
    """UsageError unless every id is a queue id some topic can have (0..MAX_QUEUES-1)."""
    bad = [q for q in queue_ids if not 0 <= q < MAX_QUEUES]
    if bad:
        raise UsageError(f"{option} {','.join(map(str, bad))}: queue ids are 0..{MAX_QUEUES - 1}")


def check_timeout(seconds: float, option: str = "--timeout") -> None:
    """UsageError unless `seconds` is a finite number of seconds above 0."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"{option} {seconds:g}: must be a number of seconds above 0")


def check_name(option: str, name: str, what: str = "topic") -> None:
    """UsageError unless `name` is a legal topic (or group) name, as the store checks it."""
    problem = topic_name_problem(name, what)
    if problem:
        raise UsageError(f"{option} {name!r}: {problem}")
