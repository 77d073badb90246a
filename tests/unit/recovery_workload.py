"""What tests/unit/test_recovery.py puts and remembers of it: a workload's messages put into a
store (`put_workload`) and a `Record` of each, where it sits in the CommitLog and which of its
bytes a check covers. Apart from the test module so that the child process that runs a
workload and then crashes (`run_workload_and_crash`) imports only the store, not Hypothesis,
pytest and fsck (about a third of a second for every example)."""
from __future__ import annotations

from dataclasses import dataclass

from core.record.message import Message
from core.store import MessageStore


@dataclass
class Record:
    phys: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    key: str
    v6_hosts: int

    @property
    def end(self) -> int:
        return self.phys + self.size

    def protected_ranges(self):
        """Byte ranges a corruption of which recovery must notice: sizes, magic, CRC, the
        physical offset, body length and body, topic and properties lengths."""
        h = 12 * self.v6_hosts
        body_end = self.phys + 88 + h + len(self.body)
        topic_len = len(self.topic.encode())
        return [(self.phys, self.phys + 12), (self.phys + 28, self.phys + 36),
                (self.phys + 84 + h, body_end + 1),
                (body_end + 1 + topic_len, body_end + 3 + topic_len)]


def open_store(cfg) -> MessageStore:
    st = MessageStore(cfg)
    st.load()
    st.start()
    return st


def put_workload(st: MessageStore, workload) -> list[Record]:
    """Put every operation of `workload` (a batch when it holds several messages)."""
    records: list[Record] = []
    n = 0
    for op in workload:
        msgs = []
        for topic, qid, size, v6 in op:
            body = (b"%06d|" % n + bytes(range(256)) * 10)[:max(size, 7)]
            host = ("::1", 5000 + n) if v6 else ("10.0.0.%d" % (n % 250), 5000)
            msgs.append(Message(topic, body, queue_id=qid, keys="key-%d" % n, born_host=host))
            n += 1
        r = st.put_message(msgs[0]) if len(msgs) == 1 else st.put_messages(msgs)
        assert r.ok, r.status
        phys = r.append_result.wrote_offset
        for i, m in enumerate(msgs):
            size = st.commitlog.prepare(m).size
            records.append(Record(phys, size, m.topic, m.queue_id,
                                  r.append_result.logics_offset + i, m.body, m.keys,
                                  1 if m.born_host[0] == "::1" else 0))
            phys += size
    return records
