"""The topic table: `config/topics.json`, which topics exist and how many queues each has.

One writer, the appender (it auto-creates a topic on its first put with
`default_topic_queue_nums` queues and serves `create_topic`); the reader and the supervisor
load it and call `reload_if_changed()` to pick up the appender's changes (the appender also
bumps TOPICS_VERSION in the control block, which readers may watch to call it less often).

The file keeps RocketMQ's TopicConfigManager shape, so that a broker's tooling recognises it:

    {"topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4,
                                "perm": 6}},
     "dataVersion": {"timestamp": <ms>, "counter": <n>}}

The queue count of a topic is its `writeQueueNums`. The file is replaced atomically
(`FileOps.write_file_atomic`: tmp, fsync, rename, fsync the directory), so a reader sees the
old table or the new one, never a torn one.

Names follow RocketMQ's rule: 1..127 UTF-8 bytes of `[%|a-zA-Z0-9_-]`. Queue counts are
1..1024. RocketMQ's system topics (its TopicValidator's) cannot be created by `create_topic`,
and the clients refuse to send to those no client may send to (the delay topic,
`core.record.codec.SCHEDULE_TOPIC`, and the transaction topics); a `put` on the wire is taken, as
RocketMQ's store takes it from the broker's own services.
"""
from __future__ import annotations

import json
import os
import re
import time

from core.record.codec import SCHEDULE_TOPIC
from core.files.fileops import REAL_FILE_OPS, FileOps

FILE_NAME = "topics.json"
MAX_TOPIC_BYTES = 127
MAX_QUEUES = 1024
PERM_READ_WRITE = 6
_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")


# RocketMQ's TopicValidator: topics no client sends to, and every system topic (the former,
# the auto-create template TBW102, trace, self-test, offset-moved, benchmark; any rmq_sys_*).
NOT_ALLOWED_SEND_TOPICS = frozenset((SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC",
                                     "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"))
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {"TBW102", "RMQ_SYS_TRACE_TOPIC", "SELF_TEST_TOPIC",
                                           "OFFSET_MOVED_EVENT", "BenchmarkTest"}
SYSTEM_TOPIC_PREFIX = "rmq_sys_"


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def send_topic_problem(topic: str) -> str | None:
    """Why a client may not send to `topic` (RocketMQ: isNotAllowedSendTopic), or None."""
    if topic in NOT_ALLOWED_SEND_TOPICS:
        return f"topic {topic} is a system topic of the store: clients may not send to it"
    return None


class TopicTableError(ValueError):
    """topics.json exists but cannot be read as a topic table; the message says why."""


def topic_name_problem(topic, what: str = "topic") -> str | None:
    """Why `topic` is not a legal topic name (or, by the same rule, `what` name: a consumer
    group's), or None when it is."""
    if not isinstance(topic, str):
        return f"{what} must be a string, got {type(topic).__name__}"
    if not topic:
        return f"{what} is empty"
    if len(topic.encode("utf-8")) > MAX_TOPIC_BYTES:
        return f"{what} is over {MAX_TOPIC_BYTES} UTF-8 bytes"
    if not _NAME.fullmatch(topic):
        return f"{what} {topic!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


def queue_count_problem(queues) -> str | None:
    """Why `queues` is not a legal queue count, or None when it is."""
    if not isinstance(queues, int) or isinstance(queues, bool):
        return f"queues must be an integer, got {type(queues).__name__}"
    if not 1 <= queues <= MAX_QUEUES:
        return f"queues must be between 1 and {MAX_QUEUES}, got {queues}"
    return None


class TopicTable:
    """Topic name -> queue count, loaded from and saved to `<config_dir>/topics.json`."""

    def __init__(self, path: str, topics: dict[str, int] | None = None,
                 fileops: FileOps | None = None, counter: int = 0):
        self.path = path
        self.fileops = fileops or REAL_FILE_OPS
        self.topics: dict[str, int] = dict(topics or {})
        self.counter = counter
        self._stamp = None

    # -- loading -------------------------------------------------------------------------
    @classmethod
    def load(cls, config_dir: str, fileops: FileOps | None = None) -> "TopicTable":
        """The table in `config_dir` (empty when the file does not exist yet)."""
        table = cls(os.path.join(config_dir, FILE_NAME), fileops=fileops)
        table.reload()
        return table

    def reload(self) -> None:
        stamp = self._file_stamp()
        if stamp is None:
            self.topics, self.counter = {}, 0
        else:
            self.topics, self.counter = parse_topic_file(self.path, self.fileops.read_file(self.path))
        self._stamp = stamp

    def reload_if_changed(self) -> bool:
        """Reload when the file was replaced since the last load or save; True if reloaded."""
        if self._file_stamp() == self._stamp:
            return False
        self.reload()
        return True

    def _file_stamp(self):
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    # -- reading -------------------------------------------------------------------------
    def get(self, topic: str) -> int | None:
        """The queue count of `topic`, or None when the topic does not exist."""
        return self.topics.get(topic)

    def __contains__(self, topic) -> bool:
        return topic in self.topics

    def __len__(self) -> int:
        return len(self.topics)

    def as_list(self) -> list[dict]:
        """`[{"topic": name, "queues": n}, ...]` in name order (the wire form of `topics`)."""
        return [{"topic": t, "queues": n} for t, n in sorted(self.topics.items())]

    # -- writing (the appender) ----------------------------------------------------------
    def set_queues(self, topic: str, queues: int) -> bool:
        """Create `topic` or change its queue count, saving the file; True if it changed.

        Raises ValueError for an illegal name or count."""
        problem = topic_name_problem(topic) or queue_count_problem(queues)
        if problem:
            raise ValueError(problem)
        if self.topics.get(topic) == queues:
            return False
        self.topics[topic] = queues
        self.save()
        return True

    def ensure(self, topic: str, queues: int) -> int:
        """The queue count of `topic`, creating it with `queues` queues when it is new."""
        have = self.topics.get(topic)
        if have is not None:
            return have
        self.set_queues(topic, queues)
        return queues

    def ensure_covers(self, pairs, default_queues: int) -> bool:
        """Make every (topic, queue_id) in `pairs` exist: unknown topics are created with
        max(default, highest queue id + 1) queues, known ones grown to hold their queue ids.
        Saves once; True if anything changed. Illegal names are skipped."""
        want: dict[str, int] = {}
        for topic, queue_id in pairs:
            if topic_name_problem(topic) is None and 0 <= queue_id < MAX_QUEUES:
                want[topic] = max(want.get(topic, 0), queue_id + 1)
        changed = False
        for topic, need in want.items():
            have = self.topics.get(topic)
            if have is None or have < need:
                self.topics[topic] = max(need, have or default_queues)
                changed = True
        if changed:
            self.save()
        return changed

    def save(self) -> None:
        self.counter += 1
        doc = {
            "topicConfigTable": {
                t: {"topicName": t, "readQueueNums": n, "writeQueueNums": n, "perm": PERM_READ_WRITE}
                for t, n in sorted(self.topics.items())},
            "dataVersion": {"timestamp": time.time_ns() // 1_000_000, "counter": self.counter},
        }
        self.fileops.make_dirs(os.path.dirname(self.path))
        self.fileops.write_file_atomic(self.path, (json.dumps(doc, indent=1) + "\n").encode())
        self._stamp = self._file_stamp()


def parse_topic_file(path: str, raw: bytes) -> tuple[dict[str, int], int]:
    """(topic -> queue count, dataVersion counter) of a topics.json's bytes; TopicTableError
    naming `path` when they are not a topic table."""
    try:
        doc = json.loads(raw)
        table = doc["topicConfigTable"]
        if not isinstance(table, dict):
            raise TypeError("topicConfigTable is not an object")
        topics = {}
        for name, entry in table.items():
            queues = entry.get("writeQueueNums", entry.get("readQueueNums"))
            problem = topic_name_problem(name) or queue_count_problem(queues)
            if problem:
                raise ValueError(f"topic {name!r}: {problem}")
            topics[name] = queues
        counter = doc.get("dataVersion", {}).get("counter", 0)
        return topics, counter if isinstance(counter, int) else 0
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise TopicTableError(f"{path} is not a topic table: {e}") from None
