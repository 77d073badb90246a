"""`mqstore consume --topic T --group G [--follow] [--from earliest|latest] [--tag-filter EXPR]
[--queues LIST] [--max N] [--json] [--no-commit] [--store DIR | --address A]`: read messages
of a topic as consumer group G.

With `--follow` (and no `--queues`) the command joins the group as a member (docs/CLIENTS.md):
the group's members share the topic's queues, so two of them in two terminals each read half
of them, and when one stops the other takes its queues over from the committed offsets.
Without `--follow` it reads every queue (or `--queues`) to its end without joining.

Each queue starts at the group's committed offset; a group that never committed starts at the
oldest message (`--from earliest`, the default) or after the newest (`--from latest`). Without
`--follow` the command stops once every queue has been read to its end; with it, it waits for
new messages until Ctrl-C or SIGTERM (within half a second; every message read is printed
first), and follows a store found through `--store` that restarts on other ports. `--max N`
stops after N messages. The group's offsets are committed when the command ends (and every 5 s
while it runs) unless `--no-commit`, so the next run continues where this one stopped; when the
output is closed early (`| head`), the messages of the batch being written are not committed and
are read again next time.

Output: one line per message, `QUEUE:OFFSET<TAB>TAGS<TAB>KEYS<TAB>BODY` (`-` for no tags or
keys, the body as UTF-8; in each field a backslash, control characters and bytes that are not
UTF-8 are escaped as `\\\\`, `\\t`, `\\n`, `\\r`, `\\xNN` (C1 controls `\\u0080`..`\\u009f`), so
that a message is one line); with `--json` one JSON object per line (topic, queue_id,
queue_offset, phys_offset, msg_id, tags, keys, properties, timestamps, hosts, and `body`, or
`body_base64` when the body is not UTF-8). A count goes to standard error at the end. Exit
status: 0 after reading, 1 when the store is not running or an error stopped the read, 2 for a
bad option value (a topic or group name the store would refuse, or `--queues` naming a queue the
topic does not have; a topic that does not exist yet is not checked).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from ipc.admin import Admin
from ipc.connection import MQError
from ipc.consumer import Consumer
from ipc.received import message_to_dict
from supervisor.cli import UsageError
from supervisor.printable import printable, printable_body
from supervisor.option_checks import check_name, check_queue_range, check_timeout
from supervisor.store_access import NotRunning, add_store_arguments, check_queue_ids, locate

POLL_MS = 500


def add_parser(subparsers):
    p = subparsers.add_parser("consume", help="read messages of a topic as a consumer group",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topic", required=True, metavar="T", help="topic to read")
    p.add_argument("--group", required=True, metavar="G",
                   help="consumer group: its committed offsets say where to continue; with "
                        "--follow this command joins it and reads the queues the group gives it")
    p.add_argument("--follow", action="store_true",
                   help="keep waiting for new messages instead of stopping at the end")
    p.add_argument("--from", dest="start", choices=("earliest", "latest"), default="earliest",
                   help="where a group without committed offsets starts (default earliest)")
    p.add_argument("--tag-filter", metavar="EXPR",
                   help="only messages whose tag matches: '*' or 'TagA || TagB'")
    p.add_argument("--queues", metavar="LIST", help="comma-separated queue ids (default: all)")
    p.add_argument("--max", type=int, metavar="N", help="stop after N messages")
    p.add_argument("--json", action="store_true", help="one JSON object per message")
    p.add_argument("--no-commit", action="store_true",
                   help="do not store the group's offsets (read without moving the group)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for each answer of the store (default 10)")
    add_store_arguments(p)
    return p


def _text(m) -> str:
    tags, keys = printable(m.tags) if m.tags else "-", printable(m.keys) if m.keys else "-"
    return f"{m.queue_id}:{m.queue_offset}\t{tags}\t{keys}\t{printable_body(m.body)}"


def _json(m) -> str:
    return json.dumps(message_to_dict(m), ensure_ascii=False)


def _queues(text: str | None) -> list | None:
    try:
        queues = [int(q) for q in text.split(",") if q.strip()] if text else None
    except ValueError:
        raise UsageError(f"--queues {text!r}: expected queue ids separated by commas") from None
    if queues is not None:
        check_queue_range("--queues", queues)
    return queues


def _every_queue(address: str, topic: str, timeout: float, keys: dict) -> list:
    """The topic's queue ids ([] when it does not exist yet)."""
    with Admin(address, timeout=timeout, **keys) as admin:
        info = admin.topic_info(topic)
    return list(range(info["queues"])) if info else []


def _print_batch(consumer: Consumer, msgs: list, fmt, out) -> None:
    """Print a poll's messages. When the output breaks (`| head`), part of the batch may be
    lost in the pipe: its queues are moved back to their first message of the batch, so that
    the group commits only what was surely written and the rest is read again next time."""
    try:
        for m in msgs:
            out.write(fmt(m) + "\n")
        out.flush()
    except BrokenPipeError:
        first: dict = {}
        for m in msgs:
            first.setdefault(m.queue_id, m.queue_offset)
        for qid, offset in first.items():
            consumer.seek(qid, offset)
        raise


def run(args) -> int:
    queues = _queues(args.queues)
    if args.max is not None and args.max < 0:
        raise UsageError("--max must be >= 0")
    check_name("--topic", args.topic)
    check_name("--group", args.group, "group")
    check_timeout(args.timeout)
    try:
        address, _pid, root = locate(args)
        if queues:
            check_queue_ids(address, args.topic, "--queues", queues, args.timeout, keys=args.curve_keys)
    except (NotRunning, ConnectionError, TimeoutError, MQError) as e:
        print(f"mqstore consume: {e}", file=sys.stderr)
        return 1
    fmt = _json if args.json else _text
    out = sys.stdout
    count = 0
    consumer = None
    stopping = threading.Event()          # Ctrl-C / SIGTERM: finish printing this batch, commit
    handlers = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # Without --follow an empty queue is the end: the reader answers at once instead of
        # holding the pull for a long poll.
        # Found through --store, the consumer follows a store restarted on other ports.
        if queues is None and not args.follow:
            queues = _every_queue(address, args.topic, args.timeout, args.curve_keys)   # a one-shot read: no member
        consumer = Consumer(None if root else address, args.group, args.topic, queues=queues,
                            tag_filter=args.tag_filter, store=root, start=args.start,
                            auto_commit=not args.no_commit, timeout=args.timeout, **args.curve_keys,
                            **({} if args.follow else {"long_poll_ms": 0}))
        while (args.max is None or count < args.max) and not stopping.is_set():
            left = None if args.max is None else args.max - count
            msgs = consumer.poll(POLL_MS, max_records=left)
            if msgs:
                _print_batch(consumer, msgs, fmt, out)
                count += len(msgs)
            elif not args.follow and consumer.caught_up:
                break
    except BrokenPipeError:
        sys.stdout = None                         # the reader went away (| head): stop quietly
    except (ConnectionError, TimeoutError, MQError, ValueError) as e:
        print(f"mqstore consume: {e}", file=sys.stderr)
        return 1
    finally:
        if consumer is not None:
            consumer.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    print(f"mqstore consume: {count} messages from {args.topic} as {args.group}", file=sys.stderr)
    return 0
