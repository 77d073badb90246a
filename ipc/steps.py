"""Client logic written once for the blocking and the asyncio clients.

A client operation that talks to the store more than once (a consumer's discovery of its
queues, a group heartbeat and what follows from its answer, a commit, a poll's loop, a seek)
is a generator of *steps*: it yields what it must wait for and is sent back the outcome, or
has the error thrown in at the `yield`, as a call would raise it. The generator holds every
rule; `run` drives it with the blocking `ipc.connection.Connection` and `arun` with the
asyncio `ipc.aio.connection.AsyncConnection`, so that the blocking and the asyncio Consumer
are the same code (the sans-I/O shape of h11 and of aiokafka's coordinator).

A step is one of:
- `Call(service, op, fields, timeout)`: `conn.call`: the reply's envelope, or MQError;
- `Wait(predicate, timeout)`: `conn.wait`: until the predicate holds or the timeout passes;
- a reply future from `conn.request(...)`: its `(envelope, frames)`.
"""
from __future__ import annotations

from typing import Callable, NamedTuple


class Call(NamedTuple):
    service: str
    op: str
    fields: dict
    timeout: float | None = None


class Wait(NamedTuple):
    predicate: Callable[[], bool]
    timeout: float | None


def run(conn, steps):
    """Drive `steps` with a blocking connection; the generator's return value."""
    value, error = None, None
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value
        value, error = None, None
        try:
            if isinstance(step, Call):
                value = conn.call(step.service, step.op, timeout=step.timeout, **step.fields)
            elif isinstance(step, Wait):
                value = conn.wait(step.predicate, step.timeout)
            else:
                value = step.result()
        except Exception as e:
            error = e


async def arun(conn, steps):
    """Drive `steps` with an asyncio connection; the generator's return value."""
    value, error = None, None
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value
        value, error = None, None
        try:
            if isinstance(step, Call):
                value = await conn.call(step.service, step.op, timeout=step.timeout, **step.fields)
            elif isinstance(step, Wait):
                value = await conn.wait(step.predicate, step.timeout)
            else:
                value = await step
        except Exception as e:
            error = e
