"""`mqstore topics [--offsets] [--json]` and `mqstore topics --create NAME [--queues N]`
[--store DIR | --address A]: list or create topics.

The list shows each topic with its queue count and the number of messages its queues hold
(max offset - min offset summed); `--offsets` adds every queue's first and last offset (both
included, as `produce` prints them), `--json` prints one JSON object per topic instead, with
each queue's `min_offset` and `max_offset` (the next offset to be written), as the protocol
has them. `--create NAME --queues N` creates a topic with N queues (1..1024), or changes the
queue count of an existing one; `--create NAME` alone creates it with the store's
`default_topic_queue_nums` queues and leaves an existing topic as it is (so it can be run again
as a set-up step). Topics are also created by the first put, with the store's
`default_topic_queue_nums` queues.

Exit status: 0 on success, 1 when the store is not running or refused the request, 2 for a
`--queues` value outside 1..1024 or a `--create` name that is not a legal topic name (found
before the store is looked for).
"""
from __future__ import annotations

import argparse
import json
import sys

from core.meta.topics import MAX_QUEUES, is_system_topic, queue_count_problem
from ipc.admin import Admin
from ipc.connection import MQError
from supervisor.cli import UsageError
from supervisor.option_checks import check_name
from supervisor.store_access import NotRunning, add_store_arguments, locate


def add_parser(subparsers):
    p = subparsers.add_parser("topics", help="list or create topics",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--create", metavar="NAME",
                   help="create topic NAME (characters a-z A-Z 0-9 _ - %% |, at most 127 bytes)")
    p.add_argument("--queues", type=int, metavar="N",
                   help=f"queues of the topic to create (1..{MAX_QUEUES}); without it a new topic "
                        "gets the store's default_topic_queue_nums and an existing one keeps its "
                        "count")
    p.add_argument("--offsets", action="store_true", help="list every queue's min and max offset")
    p.add_argument("--json", action="store_true", help="one JSON object per topic")
    add_store_arguments(p)
    return p


def _listing(admin: Admin, with_offsets: bool) -> list:
    rows = []
    for topic, count in admin.topics().items():
        try:
            queues = admin.queue_offsets(topic)
        except MQError:
            queues = []
        row = {"topic": topic, "queues": count,
               "messages": sum(q["max_offset"] - q["min_offset"] for q in queues)}
        if with_offsets:
            row["offsets"] = queues
        rows.append(row)
    return rows


def _print(rows: list, with_offsets: bool) -> None:
    if not rows:
        print("no topics")
        return
    width = max(len("TOPIC"), *(len(r["topic"]) for r in rows))
    print(f"{'TOPIC':<{width}}  {'QUEUES':>6}  {'MESSAGES':>10}")
    for r in rows:
        print(f"{r['topic']:<{width}}  {r['queues']:>6}  {r['messages']:>10}")
        for q in r.get("offsets", ()):
            print(f"{'':<{width}}    queue {q['queue_id']}: {_span(q['min_offset'], q['max_offset'])}")


def _span(low: int, high: int) -> str:
    """A queue's messages as `produce` prints offsets: first..last, both included."""
    if high <= low:
        return f"empty (next offset {high})"
    return f"offsets {low}..{high - 1} ({high - low} message{'s' if high - low != 1 else ''})"


def run(args) -> int:
    if args.queues is not None and args.create is None:
        raise UsageError(f"--queues {args.queues}: --queues needs --create")
    if args.queues is not None and queue_count_problem(args.queues):
        raise UsageError(f"--queues {args.queues}: a topic has 1..{MAX_QUEUES} queues")
    if args.create is not None:
        check_name("--create", args.create)
        if is_system_topic(args.create):
            raise UsageError(f"--create {args.create}: a system topic of RocketMQ; it cannot be created")
    try:
        address = locate(args)[0]
        with Admin(address, **args.curve_keys) as admin:
            if args.create:
                made = admin.create_topic(args.create, args.queues)
                print(f"topic {made['topic']} has {made['queues']} queues")
                return 0
            rows = _listing(admin, args.offsets)
    except (NotRunning, ConnectionError, TimeoutError, MQError) as e:
        print(f"mqstore topics: {e}", file=sys.stderr)
        return 1
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        _print(rows, args.offsets)
    return 0
