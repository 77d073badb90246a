"""The bit-flip campaign of issue 33: one bit of a stopped store's written bytes flipped, then
`check`, then the store opened with normal and with abnormal recovery and read back (pulls,
tag-filtered pulls, key queries, offset lookups) and compared with what the intact store
served, and whether the keys of intact records are still found. `build_store` makes the
store once; `run_flip` takes one flip and says what happened; `Tally` adds outcomes up into
the issue's table.

Written bytes: every CommitLog record and blank header, every consume-queue entry, every index
file's header, used slots and entries, and the checkpoint's fields and CRC (bytes 0..87).
"""
from __future__ import annotations

import os
import random
import shutil
import struct
import time
from dataclasses import dataclass, field

from core import Message, MessageStore, StoreConfig, fsck
from core.log.checkpoint import MIN_TIMESTAMP_MARGIN_MS
from core.log.consume_queue import UNIT_SIZE
from core.log.index_file import ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE
from core.status import GetMessageStatus

SEG = 4096 * 4
TOPICS = ("TA", "TB")
QUEUES = 2
TAGS = "ABC"
LONG_AGO, FAR_AHEAD = 0, 1 << 62


def config(root: str) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=SEG,
                       mapped_file_size_consume_queue=UNIT_SIZE * 100, max_hash_slot_num=64,
                       max_index_num=1024)


def view(m) -> tuple:
    """What a served message is compared by: every field a client sees."""
    return (m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, bytes(m.body), m.tags, m.keys,
            tuple(sorted((m.properties or {}).items())), m.born_timestamp, m.born_host,
            m.store_timestamp, m.store_host, m.flag, m.sys_flag, m.reconsume_times,
            m.prepared_transaction_offset, m.msg_id)


@dataclass
class Intact:
    """The stopped store and what it serves: by (topic, queue, offset), phys and key."""
    root: str
    by_entry: dict = field(default_factory=dict)      # (topic, qid, qoff) -> view
    by_phys: dict = field(default_factory=dict)       # phys -> (topic, qid, qoff)
    sizes: dict = field(default_factory=dict)         # phys -> record size
    keys: dict = field(default_factory=dict)          # (topic, key) -> set of phys
    targets: list = field(default_factory=list)       # (kind, path, lo, hi)


def build_store(root: str, count: int = 600, spread_at: int | None = None) -> Intact:
    """`count` messages over 2 topics x 2 queues in several segments, stopped cleanly. With
    `spread_at`, the messages from that one on are stored more than the checkpoint's 3 s
    margin after the ones before (as in a store that runs for a while), so that an abnormal
    recovery starts from the checkpoint's segment, not from the first."""
    st = MessageStore(config(root))
    st.load()
    st.start()
    for i in range(count):
        if i == spread_at:
            resume = time.time() + MIN_TIMESTAMP_MARGIN_MS / 1000 + 0.5
            while time.time() < resume:                     # the clock, not a process
                time.sleep(0.05)
        r = st.put_message(Message(TOPICS[i % 2], b"body-%05d-" % i + bytes([65 + i % 26]) * (i % 60),
                                   queue_id=i // 2 % QUEUES, tags=TAGS[i % 3], keys=f"k{i} all",
                                   properties={"user": f"v{i}"}, born_timestamp=1_700_000_000_000 + i,
                                   flag=i % 5))
        assert r.ok
    assert st.wait_for_dispatch()
    intact = Intact(root)
    for topic in TOPICS:
        for qid in range(QUEUES):
            for m in pull_all(st, topic, qid)[0]:
                intact.by_entry[topic, qid, m.queue_offset] = view(m)
                intact.by_phys[m.commit_log_offset] = (topic, qid, m.queue_offset)
                intact.sizes[m.commit_log_offset] = m.store_size
                for k in m.keys.split():
                    intact.keys.setdefault((topic, k), set()).add(m.commit_log_offset)
    assert len(intact.by_entry) == count
    st.shutdown()
    intact.targets = written_ranges(config(root), intact)
    return intact


def written_ranges(cfg, intact: Intact) -> list:
    out = []
    phys = sorted(intact.sizes)
    for p in phys:
        out.append(("commitlog", _segment(cfg, p), p % SEG, p % SEG + intact.sizes[p]))
    for a, b in zip(phys, phys[1:]):
        if b // SEG != a // SEG:                          # a blank header ends a's segment
            at = (a + intact.sizes[a]) % SEG
            out.append(("commitlog", _segment(cfg, a), at, at + 8))
    for parent, _, names in os.walk(cfg.consumequeue_dir):
        for n in names:
            path = os.path.join(parent, n)
            data = open(path, "rb").read()
            used = len(data.rstrip(b"\0"))
            out.append(("consumequeue", path, 0, -(-used // UNIT_SIZE) * UNIT_SIZE))
    for n in sorted(os.listdir(cfg.index_dir)):
        path = os.path.join(cfg.index_dir, n)
        data = open(path, "rb").read()
        out.append(("index header", path, 0, HEADER_SIZE))
        for s in range(cfg.max_hash_slot_num):
            at = HEADER_SIZE + s * SLOT_SIZE
            if data[at:at + SLOT_SIZE] != bytes(SLOT_SIZE):
                out.append(("index slot", path, at, at + SLOT_SIZE))
        count = struct.unpack_from(">i", data, 36)[0]
        first = HEADER_SIZE + cfg.max_hash_slot_num * SLOT_SIZE
        out.append(("index entry", path, first + ENTRY_SIZE, first + count * ENTRY_SIZE))
    out.append(("checkpoint", cfg.checkpoint_path, 0, 88))
    return [t for t in out if t[3] > t[2]]


def _segment(cfg, phys: int) -> str:
    return os.path.join(cfg.commitlog_dir, "%020d" % (phys - phys % SEG))


def pick_flips(intact: Intact, n: int, seed: int) -> list:
    """`n` flips (kind, path, byte, bit), chosen uniformly over the written bytes, and at least
    one of each kind."""
    rng = random.Random(seed)
    weights = [hi - lo for _, _, lo, hi in intact.targets]
    chosen = []
    kinds = sorted({t[0] for t in intact.targets})
    for kind in kinds:                                    # one of each kind first
        ts = [t for t in intact.targets if t[0] == kind]
        chosen.append(rng.choices(ts, [t[3] - t[2] for t in ts])[0])
    chosen += rng.choices(intact.targets, weights, k=max(0, n - len(kinds)))
    return [(k, p, rng.randrange(lo, hi), rng.randrange(8)) for k, p, lo, hi in chosen]


def pull_all(st, topic, qid, tag_filter=None) -> tuple[list, list]:
    """Every message a consumer following next_begin_offset gets, and the offsets at which a
    pull said MESSAGE_DAMAGED."""
    got, damaged, offset = [], [], 0
    for _ in range(10_000):
        r = st.get_message("g", topic, qid, offset, 32, tag_filter)
        if r.status is GetMessageStatus.MESSAGE_DAMAGED:
            damaged.append(offset)
        elif r.status is not GetMessageStatus.FOUND and r.next_begin_offset <= offset:
            break
        got += r.messages
        if r.next_begin_offset <= offset:
            break
        offset = r.next_begin_offset
    return got, damaged


@dataclass
class Outcome:
    detected: bool = False
    served_wrong: int = 0
    lost: int = 0               # messages a consumer no longer gets (normal or abnormal recovery)
    lost_silently: int = 0      # of those, ones nothing reported
    intact_lost: int = 0        # of those, ones whose record bytes were not the flipped ones
    keys_lost: int = 0          # keys of intact records (a sample) a query no longer finds
    tag_hidden: int = 0         # messages a pull serves that a pull filtered by their tag skips
    crashed: str = ""
    notes: list = field(default_factory=list)


def flip(path: str, at: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ (1 << bit)]))


def run_flip(intact: Intact, work: str, kind: str, path: str, at: int, bit: int) -> Outcome:
    damaged = touching(intact, path, at, at + 1) if kind == "commitlog" else set()
    return run_damage(intact, work, path, lambda p: flip(p, at, bit), damaged)


def touching(intact: Intact, segment: str, lo: int, hi: int) -> set:
    """The physical offsets of the records with a byte in [lo, hi) of `segment`."""
    seg = int(os.path.basename(segment))
    return {p for p, n in intact.sizes.items() if p < seg + hi and seg + lo < p + n}


def run_damage(intact: Intact, work: str, path: str, damage, damaged: set) -> Outcome:
    """`damage(path)` done to a copy of the store's file `path`, then checked and read back;
    the records at `damaged` are the ones whose bytes it touched."""
    out = Outcome()
    rel = os.path.relpath(path, intact.root)
    flipped = os.path.join(work, "flipped")
    shutil.rmtree(flipped, ignore_errors=True)
    shutil.copytree(intact.root, flipped)
    damage(os.path.join(flipped, rel))
    try:
        out.detected = not fsck.check(flipped).ok
    except Exception as exc:                              # a crash of the check itself
        out.crashed = f"check: {exc!r}"
        return out
    for abnormal in (False, True):
        run = os.path.join(work, "abnormal" if abnormal else "normal")
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(flipped, run)
        if abnormal:
            open(os.path.join(run, "abort"), "w").close()
        try:
            _read_back(intact, run, damaged, out)
        except Exception as exc:
            out.crashed = f"{'abnormal' if abnormal else 'normal'}: {exc!r}"
    return out


def _read_back(intact: Intact, root: str, damaged: set, out: Outcome) -> None:
    st = MessageStore(config(root))
    st.load()
    try:
        st.start()
        assert st.wait_for_dispatch()
        reported = bool(st.recovery_report.quarantined) or out.detected
        served, tag_served = set(), set()
        for topic in TOPICS:
            for qid in range(QUEUES):
                msgs, said_damaged = pull_all(st, topic, qid)
                reported |= bool(said_damaged)
                for m in msgs:
                    key = (topic, qid, m.queue_offset)
                    if intact.by_entry.get(key) != view(m):
                        out.served_wrong += 1
                        out.notes.append(f"pull served {key} wrong")
                    served.add(key)
                for m in pull_all(st, topic, qid, "A")[0]:
                    if intact.by_entry.get((topic, qid, m.queue_offset)) != view(m) or m.tags != "A":
                        out.served_wrong += 1
                        out.notes.append(f"tag pull served {(topic, qid, m.queue_offset)} wrong")
                    tag_served.add((topic, qid, m.queue_offset))
        lost = [k for k in intact.by_entry if k not in served]
        out.lost = max(out.lost, len(lost))
        if lost and not reported:
            out.lost_silently = max(out.lost_silently, len(lost))
        victims = {intact.by_phys[p] for p in damaged}
        out.intact_lost = max(out.intact_lost, sum(1 for k in lost if k not in victims))
        hidden = [k for k, v in intact.by_entry.items() if v[5] == "A" and k in served and k not in tag_served]
        out.tag_hidden = max(out.tag_hidden, len(hidden))
        keys_lost = 0
        for (topic, key), where in list(intact.keys.items())[::7]:
            found = set()
            for m in st.query_message(topic, key, 64, LONG_AGO, FAR_AHEAD).messages:
                entry = intact.by_phys.get(m.commit_log_offset)
                if entry is None or intact.by_entry[entry] != view(m) or key not in m.keys.split():
                    out.served_wrong += 1
                    out.notes.append(f"query {topic}#{key} served {m.commit_log_offset} wrong")
                found.add(m.commit_log_offset)
            if len(where) == 1 and not where <= found | damaged:      # `all` names 300 records
                keys_lost += 1
                out.notes.append(f"query {topic}#{key} found nothing")
        out.keys_lost = max(out.keys_lost, keys_lost)
        for phys, entry in intact.by_phys.items():
            m = st.look_message_by_offset(phys)
            if m is not None and intact.by_entry[entry] != view(m):
                out.served_wrong += 1
                out.notes.append(f"lookup at {phys} served wrong")
    finally:
        st.shutdown()


@dataclass
class Tally:
    rows: dict = field(default_factory=dict)     # kind -> counts

    def add(self, kind: str, o: Outcome) -> None:
        row = self.rows.setdefault(kind, dict.fromkeys(COLUMNS, 0))
        row["flips"] += 1
        row["detected"] += o.detected
        row["served wrong"] += bool(o.served_wrong)
        row["lost"] += bool(o.lost)
        row["lost silently"] += bool(o.lost_silently)
        row["intact records lost"] += o.intact_lost
        row["keys lost"] += bool(o.keys_lost)
        row["hidden from tag pulls"] += bool(o.tag_hidden)
        row["crashes"] += bool(o.crashed)

    def total(self) -> dict:
        return {c: sum(r[c] for r in self.rows.values()) for c in COLUMNS}

    def table(self) -> str:
        lines = ["| where | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
        for kind in sorted(self.rows):
            lines.append(f"| {kind} | " + " | ".join(str(self.rows[kind][c]) for c in COLUMNS) + " |")
        lines.append("| all | " + " | ".join(str(v) for v in self.total().values()) + " |")
        return "\n".join(lines)


COLUMNS = ("flips", "detected", "served wrong", "lost", "lost silently", "intact records lost",
           "keys lost", "hidden from tag pulls", "crashes")
