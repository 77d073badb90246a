"""`mqstore query --topic T --key K [--max N] [--begin MS] [--end MS]`, `mqstore query --id
MSGID`, `mqstore query --offset PHYS` [--json] [--store DIR | --address A]: look messages up.

`--key` searches the index for messages of topic T whose KEYS (or UNIQ_KEY) include K, newest
first, at most `--max` (the store gives at most `max_msgs_num_batch`, 64 by default, as
RocketMQ), optionally only those stored between `--begin` and `--end` (milliseconds since the
epoch; the index keeps store times to the second, as RocketMQ's does, so a message is matched by
its store time with the milliseconds dropped). `--id` finds one message by its offset message id
(the `msgId` that produce prints); `--offset` reads the message stored at that CommitLog offset.

Prints each message as a block of fields (control characters escaped, as `mqstore consume` shows
them), or with `--json` one JSON object per line (as `mqstore consume --json`). Exit status: 0
when something was found, 1 when nothing was (or the store is not running), 2 for --key without
--topic, an empty --key, --topic, --max, --begin or --end with --id or --offset (they narrow a
search by key only), --begin after --end, or a value the store would refuse (a topic name it
does not allow, `--max` below 1, a negative offset or time).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from core.record.message import decode_message_id
from ipc.admin import Admin
from ipc.connection import MQError
from ipc.received import host_text, message_to_dict
from supervisor.cli import UsageError
from supervisor.printable import printable, printable_body
from supervisor.option_checks import check_name
from supervisor.store_access import NotRunning, add_store_arguments, locate

INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def add_parser(subparsers):
    p = subparsers.add_parser("query", help="look messages up by key, id or offset",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--key", metavar="K", help="a message key (KEYS or UNIQ_KEY); needs --topic")
    what.add_argument("--id", metavar="MSGID", help="an offset message id (32 hex digits)")
    what.add_argument("--offset", type=int, metavar="PHYS", help="a CommitLog (physical) offset")
    p.add_argument("--topic", metavar="T", help="topic to search by key")
    p.add_argument("--max", type=int, default=32, metavar="N", help="most messages by key (default 32; the store gives at most "
                   "max_msgs_num_batch, 64 by default)")
    p.add_argument("--begin", type=int, default=0, metavar="MS", help="stored at or after (ms since epoch)")
    p.add_argument("--end", type=int, metavar="MS", help="stored at or before (ms since epoch; default now)")
    p.add_argument("--json", action="store_true", help="one JSON object per message")
    add_store_arguments(p, key_alias=False)
    return p


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def describe(m) -> str:
    body = bytes(m.body)
    text = printable_body(body[:2000])
    props = printable(" ".join(f"{k}={v}" for k, v in sorted(m.properties.items()))) or "-"
    rows = [
        ("msgId", m.msg_id), ("topic", m.topic), ("queue", f"{m.queue_id} offset {m.queue_offset}"),
        ("phys offset", f"{m.commit_log_offset} ({m.store_size} bytes)"),
        ("tags", printable(m.tags) if m.tags else "-"), ("keys", printable(m.keys) if m.keys else "-"),
        ("properties", props),
        ("born", f"{_when(m.born_timestamp)} from {host_text(m.born_host)}"),
        ("stored", f"{_when(m.store_timestamp)} at {host_text(m.store_host)}"),
        ("body", f"{len(body)} bytes: {text}{'...' if len(body) > 2000 else ''}"),
    ]
    return "\n".join(f"{name + ':':<13}{value}" for name, value in rows)


def _check_range(option: str, value, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        raise UsageError(f"{option} {value}: must be within {low}..{high}")


def _check_options(args) -> None:
    if args.key is not None and not args.topic:
        raise UsageError("--key needs --topic")
    if args.key == "":
        raise UsageError("--key is empty: messages are indexed by non-empty keys")
    if args.key is None:                 # --id and --offset name one message: nothing to narrow
        for option, value, unset in (("--topic", args.topic, None), ("--max", args.max, 32),
                                     ("--begin", args.begin, 0), ("--end", args.end, None)):
            if value != unset:
                raise UsageError(f"{option} goes with --key only")
    if args.topic is not None:
        check_name("--topic", args.topic)
    if args.id is not None:
        try:
            decode_message_id(args.id)
        except ValueError:
            raise UsageError(f"--id {args.id!r}: not an offset message id (32 hex digits, "
                             "56 for an IPv6 store host)") from None
    _check_range("--max", args.max, 1, INT32_MAX)
    for option, value in (("--offset", args.offset), ("--begin", args.begin), ("--end", args.end)):
        _check_range(option, value, 0, INT64_MAX)
    if args.end is not None and args.begin > args.end:
        raise UsageError(f"--begin {args.begin} is after --end {args.end}")


def run(args) -> int:
    _check_options(args)
    try:
        address = locate(args)[0]
        with Admin(address, **args.curve_keys) as admin:
            if args.key is not None:
                found = admin.query_by_key(args.topic, args.key, args.max, args.begin, args.end)
            elif args.id is not None:
                found = [m for m in (admin.view_by_id(args.id),) if m is not None]
            else:
                found = [m for m in (admin.look_by_offset(args.offset),) if m is not None]
    except (NotRunning, ConnectionError, TimeoutError, MQError) as e:
        print(f"mqstore query: {e}", file=sys.stderr)
        return 1
    if args.json:
        for m in found:
            print(json.dumps(message_to_dict(m), ensure_ascii=False))
    elif found:
        print("\n\n".join(describe(m) for m in found))
    if not found:
        print("mqstore query: no message found", file=sys.stderr)
    return 0 if found else 1
