"""What the supervisor reports about a running store, read from the control block and the
disk: positions and the lags between them, health flags, disk use, and the topic list. The
front door's `status` and `topics`, `mqstore status` and the metrics all take it from here.

Lags (bytes), each the distance between two positions of docs/SERVICES.md:
commit = WROTE - COMMITTED (transient pool only), flush = WROTE - FLUSHED,
confirm = WROTE - CONFIRM (what readers cannot see yet), dispatch = CONFIRM - DISPATCHED,
dispatch_durable = DISPATCHED - DISPATCHED_DURABLE.
"""
from __future__ import annotations

import logging
import os
import shutil

from core.meta.topics import TopicTable, TopicTableError
from ipc.control_block import ControlBlock, Word
from supervisor.retention import disk_used_ratio

log = logging.getLogger("mqstore.supervisor")

POSITION_WORDS = {
    "wrote": Word.WROTE, "committed": Word.COMMITTED, "flushed": Word.FLUSHED,
    "dispatched": Word.DISPATCHED, "dispatched_durable": Word.DISPATCHED_DURABLE,
    "confirm": Word.CONFIRM, "min": Word.MIN_PHY,
}
FLAG_WORDS = {
    "writable": Word.WRITABLE, "disk_full": Word.DISK_FULL, "space_full": Word.SPACE_FULL,
    "flush_failed": Word.FLUSH_FAILED,
    "draining": Word.DRAINING, "slave": Word.SLAVE, "sync_flush": Word.SYNC_FLUSH,
    "transient_pool": Word.POOL_ENABLED, "fenced": Word.HA_FENCED,
}
LAGS = {
    "commit": ("wrote", "committed"), "flush": ("wrote", "flushed"),
    "confirm": ("wrote", "confirm"), "dispatch": ("confirm", "dispatched"),
    "dispatch_durable": ("dispatched", "dispatched_durable"),
}
STORE_PARTS = ("commitlog", "consumequeue", "index")    # each config.<part>_dir


def positions(cb: ControlBlock) -> dict:
    return {name: cb.get(word) for name, word in POSITION_WORDS.items()}


def flags(cb: ControlBlock) -> list[str]:
    return [name for name, word in FLAG_WORDS.items() if cb.get(word)]


def puts(flag_names) -> str:
    """Whether the appender takes puts, from the flags (its refusal rule, SERVICES.md): the
    WRITABLE word alone does not say it (a slave keeps it set and refuses every put)."""
    why = [name for name in ("slave", "fenced", "disk_full", "space_full", "flush_failed", "draining")
           if name in flag_names]
    if "writable" not in flag_names:
        why.insert(0, "not writable")
    return "refused (" + ", ".join(why) + ")" if why else "accepted"


def lags(pos: dict) -> dict:
    return {name: max(0, pos[a] - pos[b]) for name, (a, b) in LAGS.items()}


def clean_stop_possible(cb: ControlBlock) -> bool:
    """The condition for removing the abort file after every service stopped (SERVICES.md)."""
    return (cb.get(Word.FLUSHED) == cb.get(Word.WROTE)
            and cb.get(Word.DISPATCHED_DURABLE) == cb.get(Word.CONFIRM)
            and cb.get(Word.FLUSH_FAILED) == 0)


def _tree_bytes(path: str) -> int:
    """Bytes allocated on disk under `path` (st_blocks, so sparse files count what they hold)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def disk_usage(config) -> dict:
    """Bytes the store's parts take, and the file system's size, use and free space."""
    root = config.store_path_root_dir
    dirs = {part: getattr(config, f"{part}_dir") for part in STORE_PARTS}
    parts = {part: _tree_bytes(d) for part, d in dirs.items()}
    store = _tree_bytes(root) + sum(parts[p] for p, d in dirs.items()   # a part kept elsewhere
                                    if os.path.relpath(d, root).startswith(os.pardir))
    fs = shutil.disk_usage(root)
    return {"store_bytes": store, **{f"{k}_bytes": v for k, v in parts.items()},
            "fs_total": fs.total, "fs_used": fs.used, "fs_free": fs.free,
            "fs_used_ratio": max(0.0, disk_used_ratio(root))}


def read_topics(config, table: TopicTable | None = None) -> list[dict]:
    """`[{topic, queues}]` sorted by name: the appender's topic table (config/topics.json,
    `core.meta.topics`), and any topic that only has consume queues on disk (a store written by
    the embedded engine) with its highest queue id + 1. `table`, when given, is a loaded
    table that is reloaded only if the file changed."""
    found: dict[str, int] = {}
    try:
        if table is None:
            table = TopicTable.load(config.config_dir)
        else:
            table.reload_if_changed()
        found.update(table.topics)
    except (OSError, TopicTableError) as e:
        log.warning("topic table unreadable, listing topics from the consume queues: %s", e)
    try:
        topics_on_disk = os.listdir(config.consumequeue_dir)
    except OSError:
        topics_on_disk = []
    for topic in topics_on_disk:
        try:
            ids = [int(q) for q in os.listdir(os.path.join(config.consumequeue_dir, topic)) if q.isdigit()]
        except OSError:
            continue
        if ids:
            found[topic] = max(found.get(topic, 0), max(ids) + 1)
    return [{"topic": t, "queues": n} for t, n in sorted(found.items())]
