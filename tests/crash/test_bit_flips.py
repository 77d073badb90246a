"""Issue 33's bit-flip campaign (tests/crash/flip_campaign.py): one bit of a stopped store's
written bytes flipped at a time. Whatever the flip, no read serves a wrong message, nothing
crashes, no intact record is lost to a CommitLog or consume-queue flip and nothing is lost
unreported, the keys of intact records are still found (but after an index entry or slot flip,
which `check` reports and `check --fix` rebuilds); every flip in a CommitLog record, a
consume-queue entry, an index header, entry or slot or the checkpoint is found by `check`.
The default suite runs a small seeded set; the slow soak runs hundreds and prints the table."""
from __future__ import annotations

import os
import random

import pytest

from core.log import queue_check
from core.log.consume_queue import UNIT_SIZE
from flip_campaign import Tally, build_store, pick_flips, run_damage, run_flip, touching

MUST_DETECT = ("commitlog", "checkpoint", "consumequeue", "index header", "index entry", "index slot")
REPAIRED_BY_FIX = ("index entry", "index slot")   # found by check; the keys they hide answer after --fix


@pytest.fixture(scope="module")
def intact(tmp_path_factory):
    return build_store(str(tmp_path_factory.mktemp("intact") / "store"), spread_at=400)


def campaign(intact, work, n: int, seed: int) -> Tally:
    tally = Tally()
    for kind, path, at, bit in pick_flips(intact, n, seed):
        o = run_flip(intact, str(work), kind, path, at, bit)
        tally.add(kind, o)
        where = f"{kind} {os.path.relpath(path, intact.root)} byte {at} bit {bit}"
        assert not o.crashed, f"{where}: {o.crashed}"
        assert not o.served_wrong, f"{where}: {o.notes[:5]}"
        assert not o.lost_silently, f"{where}: {o.lost} messages lost, nothing reported"
        if kind not in REPAIRED_BY_FIX:
            assert not o.keys_lost, f"{where}: {o.notes[:5]}"
        if kind in ("commitlog", "consumequeue"):
            assert not o.intact_lost, f"{where}: {o.intact_lost} intact records lost"
        if kind in MUST_DETECT:
            assert o.detected, f"{where}: check found nothing"
    return tally


def test_seeded_flips(intact, tmp_path):
    tally = campaign(intact, tmp_path, 10, seed=33)
    print("\n" + tally.table())


@pytest.mark.slow
def test_flip_soak(intact, tmp_path):
    tally = campaign(intact, tmp_path, 300, seed=3300)
    print("\n" + tally.table())
    total = tally.total()
    assert total["served wrong"] == total["crashes"] == total["lost silently"] == 0


@pytest.mark.slow
def test_flip_soak_at_the_issue_size(tmp_path_factory, tmp_path):
    """The issue's store: 3,000 messages in many segments, about 750 entries a queue, so most
    consume-queue entries are older than the load check's tail and left to the pulls."""
    big = build_store(str(tmp_path_factory.mktemp("big") / "store"), count=3000, spread_at=2000)
    tally = campaign(big, tmp_path, 120, seed=77)
    print("\n" + tally.table())


PAGE = 4096


def overwrite_page(page: int, source: int | None):
    """A damage: page `page` of a file overwritten with zeros (a torn write that never reached
    the disk) or with page `source`'s bytes (a misdirected write)."""
    def damage(path):
        with open(path, "r+b") as f:
            f.seek(source * PAGE if source is not None else 0)
            data = f.read(PAGE) if source is not None else bytes(PAGE)
            f.seek(page * PAGE)
            f.write(data)
    return damage


@pytest.mark.parametrize("page, source", [(1, None), (2, 0), (0, 3)])
def test_a_torn_or_misdirected_page_of_a_sealed_segment(intact, tmp_path, page, source):
    """A 4 KiB page of the first (sealed) segment zeroed or overwritten with another page of it:
    found by check, never served, every record it does not touch kept."""
    segment = os.path.join(intact.root, "commitlog", "%020d" % 0)
    o = run_damage(intact, str(tmp_path), segment, overwrite_page(page, source),
                   touching(intact, segment, page * PAGE, (page + 1) * PAGE))
    assert not o.crashed, o.crashed
    assert o.detected and not o.served_wrong, o.notes[:5]
    assert o.lost and not o.intact_lost and not o.lost_silently


@pytest.mark.parametrize("at, bit", [(7, 4), (10, 5), (11, 6)])      # phys +-16, size +8192, +-64
@pytest.mark.parametrize("entry", [1, 50, 99])
def test_a_damaged_queue_entry_is_written_again_from_the_commitlog(intact, tmp_path, at, bit, entry):
    """A consume-queue entry whose offset or size a flip changed without breaking the queue's
    order was kept by recovery (or the restart was put past it), and its intact record was
    never served again: recovery compares each entry it reads with its record's header and
    writes the queue again from the CommitLog from the last entry that is right."""
    path = os.path.join(intact.root, "consumequeue", "TA", "0", "%020d" % 0)
    o = run_flip(intact, str(tmp_path), "consumequeue", path, entry * UNIT_SIZE + at, bit)
    assert o.detected and not o.crashed and not o.served_wrong, (o.crashed, o.notes[:3])
    assert o.lost == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_flips_in_entries_older_than_the_tail_are_made_right_by_the_pulls(intact, tmp_path,
                                                                          monkeypatch, seed):
    """With the load check holding only each queue's last 8 entries to their records, a flip in
    an older consume-queue entry is left for the pull that reads it (core.read.rederive): no
    intact record is lost, nothing is served wrong, nothing crashes."""
    monkeypatch.setattr(queue_check, "TAIL_ENTRIES", 8)
    rng = random.Random(seed)
    queues = [t for t in intact.targets if t[0] == "consumequeue"]
    for _ in range(10):
        kind, path, lo, hi = rng.choice(queues)
        at, bit = rng.randrange(lo, max(lo + 1, hi - 8 * UNIT_SIZE)), rng.randrange(8)
        o = run_flip(intact, str(tmp_path), kind, path, at, bit)
        where = f"{os.path.relpath(path, intact.root)} byte {at} bit {bit}"
        assert o.detected and not o.crashed and not o.served_wrong, (where, o.crashed, o.notes[:3])
        assert o.lost == 0, (where, o.notes[:3])
