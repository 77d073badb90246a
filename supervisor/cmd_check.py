"""`mqstore check`: the store's built-in check (`core.fsck.check`) for operators.

Prints the report grouped by kind of problem (or, with `--json`, the report as one JSON object
on stdout), with a progress bar on stderr for the scans. Exit 0 only when the store is clean,
1 when problems were found, 2 for a usage error (no store at --store, a bad --config, or --fix
while a store runs on the directory). `--fix` is `check(fix=True)`: the store's own recovery,
then, if consume queues or index are still wrong, a rebuild of both from the CommitLog. When
that cut records from the log (a damaged record with records behind it), a warning on stderr
says how many, since the exit status is then 0 (the store is clean again).
"""
from __future__ import annotations

import argparse
import json
import sys

from supervisor.cli import (
    EXIT_CODES_HELP, EXIT_OK, EXIT_PROBLEMS, UsageError, add_store_options, store_config,
)
from supervisor.progress import ProgressBar

DESCRIPTION = """\
Verify a store's files without changing them (read-only; the store lock is not taken, so it also
runs next to a running store, whose writes in flight may then show as problems):
  - every CommitLog record parses, passes its body CRC and holds its own position; blanks end
    their segments; only zeros follow the end of the log
  - every consume-queue entry points at a record of its topic and queue with that queue offset,
    size and tag code, never past the end of the log; no queue offset is missing; every
    non-transactional or committed record is in its queue
  - the index finds every record's UNIQ_KEY and KEYS, and no index entry points past the end
  - the checkpoint's CRC holds and its offsets do not run ahead of the data"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "check", help="verify CRCs, consume queues, index and checkpoint of a store",
        description=DESCRIPTION, epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_store_options(parser)
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON object on stdout instead of text")
    parser.add_argument("--fix", action="store_true",
                        help="repair: run the store's recovery (as a start would), then rebuild "
                             "consume queues and index from the CommitLog if still wrong; refused "
                             "while a store runs on the directory; a damaged record with intact "
                             "records behind it is quarantined (quarantine/), never a reason to cut "
                             "them; only a torn last record is cut")
    return parser


def run(args) -> int:
    from core import fsck                       # numpy: only for the commands that check
    cfg = store_config(args)
    bar = ProgressBar("checking")
    try:
        report = fsck.check(cfg.store_path_root_dir, fix=args.fix, config=cfg, progress=bar)
    except fsck.NotAStoreError as exc:
        raise UsageError(str(exc)) from None
    finally:
        bar.close()
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format_text())
    if report.dropped_records:              # "clean" afterwards: say plainly what was lost
        print(f"mqstore check: warning: recovery cut the log at {report.stats['log_end']}: "
              f"{report.dropped_records} records after it were dropped; those messages are gone "
              "from the store", file=sys.stderr)
    return EXIT_OK if report.ok else EXIT_PROBLEMS
