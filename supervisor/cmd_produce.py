"""`mqstore produce --topic T [--body TEXT | --file F] [--tags TAGS] [--keys KEYS]
[--property NAME=VALUE ...] [--queue Q | --sharding-key K] [--count N] [--batch N]
[--in-flight W] [--delay-level N | --delay D] [--no-wait] [--quiet] [--store DIR | --address A]`:
put messages into a running store.

The message body is `--body TEXT` (UTF-8), or the whole content of `--file F`, sent `--count`
times; without either, every line read from standard input is one message (its newline removed;
empty lines are skipped and counted, as RocketMQ refuses an empty body). `--batch N` sends N
messages per `put_batch` request (one queue per batch, stored as one unit). `--count` without
`--batch` sends through the producer's auto-batching (docs/CLIENTS.md: messages gathered per
queue for up to `linger_ms`, 10 ms, or 32 KiB of bodies, each with its own result line);
otherwise one `put` per message, up to `--in-flight` requests in flight. Tags, keys and
properties apply to every message; each message also gets its own UNIQ_KEY. `--property` names
a user property: RocketMQ's system property names (TAGS, KEYS, UNIQ_KEY, DELAY, WAIT, ...) are
refused, as its putUserProperty refuses them.

Delayed delivery: `--delay-level N` stores every message at RocketMQ's delay level N (the store's
`message_delay_level`, 1s 5s 10s 30s 1m ... 2h by default; a level above the last is the last);
`--delay D` (a whole number and a unit ms, s, m, h or d: 1500ms, 30s, 2h) makes every message a
timer message delivered D after it is stored (at most the store's `timer_max_delay_sec`). The
reply names the message's place in the delay queue; consumers of the topic see it when it is
due. A batch takes no delay (RocketMQ's rule): neither goes with --batch above 1.

Prints one line per request (`STATUS msgId queue offset`; for a batch the first id and the
offset range; a refusal with its reason) unless `--quiet`, which prints only the first failure,
then a summary on standard error: messages stored (acknowledged), refused, unconfirmed (no
answer, in time or before the connection to the store broke: they may have been stored) and,
when the store went away, that the rest of the input was not sent. Exit status: 0 when every
message was stored (PUT_OK), 1 when any was refused or timed out, or the store is not running, 2
for options that do not go together or are out of range (a `--queue` that is not a queue of an
existing topic among them; a new topic gets the store's `default_topic_queue_nums`), a `--topic`
that is not a legal topic name, an empty `--body` or `--file`, or a `--file` that cannot be
read.
"""
from __future__ import annotations

import argparse
import collections
import itertools
import sys
import time

from core.record.message import SYSTEM_PROPERTIES, Message
from core.meta.topics import send_topic_problem
from ipc.connection import MQError
from ipc.producer import Producer
from supervisor.cli import UsageError
from supervisor.option_checks import check_name, check_queue_range, check_timeout
from supervisor.store_access import NotRunning, add_store_arguments, check_queue_ids, locate

AUTO_BACKLOG = 1 << 16          # messages awaiting their result under auto-batching


def add_parser(subparsers):
    p = subparsers.add_parser("produce", help="put messages into a running store",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topic", required=True, metavar="T", help="topic to put into (created on first put)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--body", metavar="TEXT", help="message body (UTF-8 text)")
    src.add_argument("--file", metavar="F", help="read the message body from file F (bytes as they are)")
    p.add_argument("--tags", metavar="TAGS", help="the TAGS property of every message")
    p.add_argument("--keys", metavar="KEYS", help="the KEYS property: space-separated keys to query by")
    p.add_argument("--property", action="append", default=[], metavar="NAME=VALUE",
                   help="a user property (repeatable)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--queue", type=int, metavar="Q", help="queue id (default: round robin)")
    where.add_argument("--sharding-key", metavar="K",
                       help="pick the queue by hashing K, so equal keys keep their order in one queue")
    p.add_argument("--count", type=int, metavar="N",
                   help="send the --body/--file message N times (default 1; only with --body or --file)")
    p.add_argument("--batch", type=int, default=1, metavar="N",
                   help="messages per put_batch request (default 1: one put per message)")
    p.add_argument("--in-flight", type=int, default=8, metavar="W",
                   help="requests kept in flight at once (default 8)")
    delay = p.add_mutually_exclusive_group()
    delay.add_argument("--delay-level", type=int, metavar="N",
                       help="deliver at delay level N (1 = the first of message_delay_level)")
    delay.add_argument("--delay", metavar="D",
                       help="deliver D after storing, e.g. 1500ms, 30s, 2m, 1h, 1d (a timer message)")
    p.add_argument("--no-wait", action="store_true",
                   help="under SYNC_FLUSH, do not wait for the flush before the answer")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for each answer (default 10)")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    add_store_arguments(p)
    return p


def _properties(pairs: list) -> dict:
    props = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--property {pair!r}: expected NAME=VALUE")
        if name in SYSTEM_PROPERTIES:
            raise UsageError(f"--property {pair!r}: {name} is a system property, not a user "
                             "property (tags and keys have --tags and --keys)")
        props[name] = value
    return props


def _check_options(args) -> None:
    if args.count is not None and args.body is None and args.file is None:
        raise UsageError("--count repeats --body or --file; without them every line of "
                         "standard input is one message")
    if (args.count is not None and args.count < 0) or args.batch < 1 or args.in_flight < 1:
        raise UsageError("--count must be >= 0, --batch and --in-flight >= 1")
    if args.queue is not None:
        check_queue_range("--queue", [args.queue])
    check_name("--topic", args.topic)
    problem = send_topic_problem(args.topic)
    if problem:
        raise UsageError(f"--topic {args.topic}: {problem}")
    check_timeout(args.timeout)
    if (args.delay_level is not None or args.delay is not None) and args.batch > 1:
        raise UsageError("--delay-level and --delay do not go with --batch above 1: a batch "
                         "takes no delay, as RocketMQ's")
    if args.delay_level is not None and args.delay_level < 1:
        raise UsageError(f"--delay-level {args.delay_level}: must be 1 or more")
    args.delay_ms = _duration_ms(args.delay) if args.delay is not None else None


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(text: str) -> int:
    digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(digits):]
    if not digits.isdigit() or unit not in _UNITS_MS:
        raise UsageError(f"--delay {text!r}: expected a whole number and a unit ms, s, m, h or d "
                         "(1500ms, 30s, 2m)")
    return int(digits) * _UNITS_MS[unit]


def _bodies(args, skipped: list):
    """The bodies to send; empty lines of standard input are counted in `skipped[0]`."""
    count = 1 if args.count is None else args.count
    if args.body is not None:
        if not args.body:
            raise UsageError("--body '': a message body cannot be empty")
        return itertools.repeat(args.body.encode("utf-8"), count)
    if args.file is not None:
        try:
            with open(args.file, "rb") as f:
                data = f.read()
        except OSError as e:
            raise UsageError(f"--file {args.file}: {e.strerror or e}") from None
        if not data:
            raise UsageError(f"--file {args.file}: the file is empty; a message body cannot be")
        return itertools.repeat(data, count)
    return _lines(sys.stdin.buffer, skipped)


def _lines(stream, skipped: list):
    for line in stream:
        body = line.rstrip(b"\r\n")
        if body:
            yield body
        else:
            skipped[0] += 1


def _line(result) -> str:
    """One line per send: the status, then where the messages went (also for a status such as
    FLUSH_DISK_TIMEOUT, whose messages are stored) or, for a refusal, why."""
    if not result.msg_id:
        code = getattr(result.error_code, "name", result.error_code)
        return result.status.name + (f" ({code})" if code is not None else "") + \
            (f": {result.reason}" if result.reason else "")
    if result.count > 1:
        where = f"queue {result.queue_id} offsets {result.queue_offset}..{result.queue_offset + result.count - 1}"
        return f"{result.status.name} {result.msg_id} {where} ({result.count} messages)"
    return f"{result.status.name} {result.msg_id} queue {result.queue_id} offset {result.queue_offset}"


class Tally:
    """What became of the messages sent: acknowledged (PUT_OK), refused (another status) or
    unconfirmed (no answer: they may be stored or not)."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.sent = self.acked = self.refused = self.unconfirmed = self.failures = 0

    def settle(self, fut, n: int) -> None:
        try:
            result = fut.result()
        except (TimeoutError, ConnectionError) as e:
            self.unconfirmed += n
            self._failure(f"mqstore produce: {e}")
            return
        if result.ok:
            self.acked += n
            if not self.quiet:
                print(_line(result))
        else:
            self.refused += n
            self._failure(_line(result))

    def _failure(self, line: str) -> None:
        """Every failure without --quiet; with it, the first one (so that the reason is seen)."""
        self.failures += 1
        if not self.quiet or self.failures == 1:
            print(line, file=sys.stderr)
        elif self.failures == 2:
            print("mqstore produce: more failures; --quiet counts them in the summary", file=sys.stderr)

    def summary(self, took: float, skipped: int, stopped: str | None = None) -> str:
        rate = f", {self.sent / took:,.0f} msg/s" if took > 0 and self.sent else ""
        parts = [f"mqstore produce: {self.acked} of {self.sent} messages stored in {took:.2f} s{rate}"]
        if self.refused:
            parts.append(f"{self.refused} refused")
        if self.unconfirmed:
            parts.append(f"{self.unconfirmed} unconfirmed (no answer: they may have been "
                         "stored; consumers tell a resent copy by its UNIQ_KEY)")
        if skipped:
            parts.append(f"{skipped} empty line{'s' if skipped != 1 else ''} skipped")
        if stopped:
            parts.append(f"stopped early ({stopped}): the rest of the input was not sent")
        return "; ".join(parts)

    @property
    def failed(self) -> bool:
        return bool(self.refused or self.unconfirmed)


def run(args) -> int:
    _check_options(args)
    props = _properties(args.property)
    skipped = [0]
    bodies = _bodies(args, skipped)
    try:
        address = locate(args)[0]
        if args.queue is not None:
            check_queue_ids(address, args.topic, "--queue", [args.queue], args.timeout, write=True,
                            keys=args.curve_keys)
    except (ValueError, OSError, NotRunning, TimeoutError, MQError) as e:
        print(f"mqstore produce: {e}", file=sys.stderr)
        return 1
    plain = args.tags is None and args.keys is None and not props
    tally = Tally(args.quiet)
    start = time.monotonic()
    stopped = None
    inflight = collections.deque()
    auto = args.count is not None and args.batch == 1       # auto-batching (module docstring)
    backlog = AUTO_BACKLOG if auto else args.in_flight
    try:
        with Producer(address, timeout=args.timeout, auto_batch=auto, **args.curve_keys) as producer:
            wait = not args.no_wait
            for chunk in _chunks(bodies, args.batch):
                if len(chunk) > 1 or args.batch > 1:
                    items = chunk if plain else [Message(args.topic, b, tags=args.tags, keys=args.keys,
                                                         properties=dict(props)) for b in chunk]
                    fut = producer.send_batch_async(args.topic, items, args.queue,
                                                    sharding_key=args.sharding_key, wait=wait)
                else:
                    fut = producer.send_async(args.topic, chunk[0], args.tags, args.keys, props, args.queue,
                                              sharding_key=args.sharding_key, wait=wait,
                                              delay_level=args.delay_level, delay_ms=args.delay_ms)
                tally.sent += len(chunk)
                inflight.append((fut, len(chunk)))
                while len(inflight) >= backlog or (inflight and inflight[0][0].done()):
                    tally.settle(*inflight.popleft())
            while inflight:
                tally.settle(*inflight.popleft())
    except (ConnectionError, TimeoutError, MQError) as e:
        print(f"mqstore produce: {e}", file=sys.stderr)
        stopped = str(e)
        tally.unconfirmed += sum(n for _, n in inflight)
    except KeyboardInterrupt:
        stopped = "interrupted"
        print(tally.summary(time.monotonic() - start, skipped[0], stopped), file=sys.stderr)
        return 130
    print(tally.summary(time.monotonic() - start, skipped[0], stopped), file=sys.stderr)
    return 1 if tally.failed or stopped else 0


def _chunks(iterable, n: int):
    it = iter(iterable)
    while True:
        chunk = list(itertools.islice(it, n))
        if not chunk:
            return
        yield chunk
