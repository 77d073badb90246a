"""Queue selection of the producer (ipc.producer.QueueSelector, shard_queue): an explicit
queue wins, a sharding key always maps to one queue as RocketMQ's SelectMessageQueueByHash
does, otherwise round robin, or nil (the appender picks) while the topic is unknown."""
from __future__ import annotations

import collections
import math

import pytest

from core.record.hashing import java_hash
from ipc.producer import QueueSelector, shard_queue


def rocketmq_select_by_hash(key: str, n: int) -> int:
    """SelectMessageQueueByHash.select: `value = hashCode % size; if value < 0: value = abs(value)`
    with Java's truncating remainder."""
    value = int(math.fmod(java_hash(key), n))
    return abs(value)


@pytest.mark.parametrize("key", ["hello", "order-1", "polygenelubricants", "Aa", "BB", "", "日本", "z" * 40])
@pytest.mark.parametrize("n", [1, 3, 4, 8, 1024])
def test_shard_queue_is_rocketmq_select_by_hash(key, n):
    assert shard_queue(key, n) == rocketmq_select_by_hash(key, n)


def test_known_values():
    assert java_hash("hello") == 99162322 and shard_queue("hello", 4) == 2
    assert java_hash("polygenelubricants") == -(1 << 31) and shard_queue("polygenelubricants", 4) == 0


def test_sharding_keys_spread_over_queues():
    counts = collections.Counter(shard_queue(f"order-{i}", 8) for i in range(8000))
    assert set(counts) == set(range(8)) and min(counts.values()) > 700


def test_non_string_keys_hash_their_text():
    assert shard_queue(12345, 4) == shard_queue("12345", 4)


def test_zero_queues_is_an_error():
    with pytest.raises(ValueError):
        shard_queue("k", 0)


class Topics:
    """Queue counts by topic, as topic_info would answer; records the lookups."""

    def __init__(self, **counts):
        self.counts = counts
        self.calls = []

    def __call__(self, topic, create):
        self.calls.append((topic, create))
        if topic not in self.counts and create:
            self.counts[topic] = 4
        return self.counts.get(topic)


def test_explicit_queue_wins_without_lookup():
    topics = Topics(t=4)
    sel = QueueSelector(topics)
    assert sel.select("t", queue_id=7, sharding_key="k") == 7
    assert topics.calls == []


def test_sharding_key_is_stable_and_creates_unknown_topics():
    topics = Topics(t=8)
    sel = QueueSelector(topics)
    assert {sel.select("t", sharding_key="order-42") for _ in range(20)} == {shard_queue("order-42", 8)}
    assert sel.select("new", sharding_key="order-42") == shard_queue("order-42", 4)
    assert ("new", True) in topics.calls


def test_round_robin_cycles_through_every_queue():
    sel = QueueSelector(Topics(t=5))
    picks = [sel.select("t") for _ in range(15)]
    assert collections.Counter(picks) == {q: 3 for q in range(5)}
    assert all((b - a) % 5 == 1 for a, b in zip(picks, picks[1:]))


def test_round_robin_per_topic():
    sel = QueueSelector(Topics(a=2, b=3))
    a = [sel.select("a") for _ in range(4)]
    b = [sel.select("b") for _ in range(6)]
    assert sorted(a) == [0, 0, 1, 1] and sorted(b) == [0, 0, 1, 1, 2, 2]


def test_unknown_topic_lets_the_appender_pick():
    topics = Topics()
    assert QueueSelector(topics).select("nope") is None
    assert topics.calls == [("nope", False)]


def test_sharding_on_a_topic_that_cannot_exist_lets_the_appender_answer():
    assert QueueSelector(lambda topic, create: None).select("bad topic!", sharding_key="k") is None
