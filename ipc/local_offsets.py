"""Offsets a broadcasting consumer keeps itself (RocketMQ's LocalFileOffsetStore): one JSON
file per consumer, `{"group", "topic", "offsets": {queue id: next offset}}`, rewritten whole
through a temporary file and a rename, so that a crash leaves the old file or the new one."""
from __future__ import annotations

import json
import os


def load_offsets(path: str, group: str, topic: str) -> dict:
    """queue id -> offset from `path` ({} when there is no file yet); ValueError for a file of
    another group or topic, or one that is not such a file."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not an offset file: {e}") from None
    if not isinstance(data, dict) or (data.get("group"), data.get("topic")) != (group, topic):
        raise ValueError(f"{path} holds the offsets of another group or topic, not {group}/{topic}")
    return {int(q): int(o) for q, o in data.get("offsets", {}).items()}


def save_offsets(path: str, group: str, topic: str, offsets: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"group": group, "topic": topic,
                   "offsets": {str(q): o for q, o in sorted(offsets.items())}}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
