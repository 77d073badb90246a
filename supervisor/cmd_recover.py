"""`mqstore recover`: the store's recovery run on its own, then the built-in check.

Runs the recovery a start would run (abnormal when the abort file is there, normal otherwise:
`core.fsck.run_recovery`, which loads the store, persists what recovery did, removes an abort
file that was there and closes the store), with a progress bar on stderr; prints what recovery
did, then checks the store. Exit 0 when the store is clean afterwards, 1 when problems remain
(or the store cannot be opened), 2 when the store is locked by a running process or the
options are wrong.
"""
from __future__ import annotations

import argparse
import os
import sys

from core.config import ConfigError
from core.files.mapped_file_queue import StoreLoadError
from core.files.store_files import StoreLockedError
from supervisor.cli import (
    EXIT_CODES_HELP, EXIT_OK, EXIT_PROBLEMS, UsageError, add_store_options, store_config,
)
from supervisor.progress import ProgressBar

DESCRIPTION = """\
Recover a stopped store as a start would, without starting it: after an abnormal exit (the abort
file is there) re-dispatch the log from the checkpoint and cut it at the first invalid record;
after a clean stop check the last segments. The result is made durable, the abort file is
removed, and the store is then checked (see `mqstore check --help`). Refused while a store runs
on the directory. Format settings (segment sizes, index sizes) are the ones the store recorded
when it was created."""
FIX_HINT = "`mqstore check --fix` rebuilds consume queues and index from the CommitLog"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "recover", help="run the store's crash recovery now, then check the store",
        description=DESCRIPTION, epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_store_options(parser)
    return parser


def run(args) -> int:
    from core import fsck                       # numpy: only for the commands that check
    given = store_config(args)
    cfg, notes = fsck.resolve_config(given.store_path_root_dir, given)
    if not os.path.isdir(cfg.commitlog_dir):
        raise UsageError(f"no store at {cfg.store_path_root_dir}: it has no commitlog/ directory")
    for note in notes:
        print(f"note: {note}")
    abnormal = os.path.exists(cfg.abort_path)
    bar = ProgressBar("recovering")
    try:
        report = fsck.run_recovery(cfg, progress=bar)
    except StoreLockedError as exc:
        raise UsageError(f"the store is in use; stop it first ({exc})") from None
    except (StoreLoadError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        print(f"recovery failed, the store cannot be opened: {exc}\n{FIX_HINT}", file=sys.stderr)
        return EXIT_PROBLEMS
    finally:
        bar.close()
    print(describe(report, abnormal))
    from supervisor.run_dir import clear_run   # what a dead supervisor left: `status` named it
    clear_run(cfg)
    bar = ProgressBar("checking")
    try:
        checked = fsck.check(cfg.store_path_root_dir, config=cfg, progress=bar)
    finally:
        bar.close()
    print(checked.format_text())
    if not checked.ok:
        print(FIX_HINT, file=sys.stderr)
    return EXIT_OK if checked.ok else EXIT_PROBLEMS


def describe(report, had_abort: bool) -> str:
    """What a RecoveryReport says, in words."""
    how = ("abnormal (the abort file was there: the last run did not stop cleanly)" if report.abnormal
           else "normal (the last run stopped cleanly)")
    ckpt = "valid" if report.checkpoint_valid else "torn; rewritten" + (
        ", so the scan started at the oldest segment" if report.abnormal else "")
    lines = [f"recovery: {how}", f"  checkpoint {ckpt}",
             f"  scanned {report.scanned_bytes} bytes of the CommitLog from offset {report.start_offset}; "
             f"the log ends at {report.end_offset}"]
    for q in report.quarantined:
        lines.append(f"  damaged bytes at {q.start} ({q.length} bytes: {q.reason}) quarantined in "
                     f"{q.path}; the records after them are kept")
    if report.dropped_records > 1:
        lines.append(f"  the record at {report.end_offset} fails its check: it and "
                     f"{report.dropped_records - 1} records after it ({report.dropped_bytes} bytes) "
                     "were cut")
    elif report.dropped_records:
        lines.append(f"  an incomplete last record ({report.dropped_bytes} bytes) was cut")
    if had_abort:
        lines.append("  abort file removed: the next start is a normal one")
    return "\n".join(lines)
