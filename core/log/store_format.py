"""The store's format parameters on disk: `config/store_format.json`.

Format parameters (`core.config.FORMAT_KEYS`: segment and file sizes) decide the byte layout
of files already written. `check_store_format` records them when a store is created and
refuses to open the store later with different values. A store that has files but no format
file (lost, or written by RocketMQ) is refused when its files' sizes disagree with the
configuration, rather than recorded with the wrong values.
"""
import json
import os
import re

from core.config import FORMAT_KEYS, STORE_FORMAT_FILE, StoreConfig, StoreFormatError

STORE_FORMAT_VERSION = 1
# Format keys added after stores were created: the value a format file without them means.
ADDED_LATER = {"store_path_commit_log": ""}


def check_store_format(config: StoreConfig, fileops) -> dict:
    """Record the format parameters at creation; refuse a store created with other values.

    Returns the recorded parameters. Raises `StoreFormatError` on a mismatch, on a format file
    that cannot be parsed, and on one written by a newer format version.
    """
    path = config.store_format_path
    current = {key: getattr(config, key) for key in FORMAT_KEYS}
    if not os.path.exists(path):
        _check_files_on_disk(config)         # a store made elsewhere, or its format file lost
        fileops.make_dirs(config.config_dir)
        record = {"version": STORE_FORMAT_VERSION, **current}
        fileops.write_file_atomic(path, (json.dumps(record, indent=2) + "\n").encode())
        return current
    try:
        record = json.loads(fileops.read_file(path))
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise StoreFormatError(f"store format file {path} cannot be read ({exc}); restore it or "
                               "recreate it with the values the store was created with") from None
    if not isinstance(version := record.get("version"), int) or version > STORE_FORMAT_VERSION:
        raise StoreFormatError(f"store format file {path} has version {version!r}; this mqstore "
                               f"reads version {STORE_FORMAT_VERSION} and older", "version")
    recorded = {key: record.get(key, ADDED_LATER.get(key)) for key in FORMAT_KEYS}
    for key in FORMAT_KEYS:
        created = recorded[key]
        if created != current[key]:
            what = ("its CommitLog is in that directory" if key == "store_path_commit_log" else
                    "this parameter fixes the layout of files already written")
            raise StoreFormatError(
                f"{key}: the store at {config.store_path_root_dir} was created with {created!r} "
                f"and is configured now with {current[key]!r}; {what}, so the store must be opened "
                f"with {key} = {created!r} (recorded in {path})", key)
    return recorded


def _first_file_size(directory: str, name_re: str) -> tuple[str, int] | None:
    """(path, size) of the first non-empty file of `directory` named by `name_re`, or None."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None
    for name in names:
        path = os.path.join(directory, name)
        if re.fullmatch(name_re, name) and os.path.isfile(path) and os.path.getsize(path) > 0:
            return path, os.path.getsize(path)
    return None


def _subdirs(directory: str) -> list[str]:
    """The paths of `directory`'s subdirectories, sorted by name ([] when it does not exist)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [p for p in (os.path.join(directory, n) for n in names) if os.path.isdir(p)]


def _first_queue_dir(consumequeue_dir: str) -> str | None:
    """consumequeue/<topic>/<queue id> of the first topic and queue, or None."""
    for topic_dir in _subdirs(consumequeue_dir):
        for queue_dir in _subdirs(topic_dir):
            if os.path.basename(queue_dir).isdigit():
                return queue_dir
    return None


def _check_files_on_disk(config: StoreConfig) -> None:
    """Before recording the format of a store that has no format file: refuse when files
    already written have other sizes than configured, so that a wrong configuration is not
    recorded as the store's format (after which the right one would be refused)."""
    queue = _first_queue_dir(config.consumequeue_dir)
    checks = [("mapped_file_size_commitlog", config.commitlog_dir, r"\d{20}",
               config.mapped_file_size_commitlog, "CommitLog segments")]
    if queue is not None:
        checks.append(("mapped_file_size_consume_queue", queue, r"\d{20}",
                       config.mapped_file_size_consume_queue, "consume-queue files"))
    checks.append(("max_hash_slot_num, max_index_num", config.index_dir, r"\d{17}",
                   config.index_file_size, "index files"))
    for key, directory, name_re, expected, what in checks:
        found = _first_file_size(directory, name_re)
        if found is not None and found[1] != expected:
            raise StoreFormatError(
                f"{key}: the store at {config.store_path_root_dir} has no {STORE_FORMAT_FILE} and "
                f"its {what} are {found[1]} bytes ({found[0]}), but the configuration makes them "
                f"{expected} bytes; open it with the values it was written with (they are then "
                f"recorded in {config.store_format_path})", key.split(",")[0])
