"""The appender's topic operations (docs/PROTOCOL.md, `create_topic` and `topic_info`) and the
creation of a round's new topics with one save: over the appender's `TopicTable`
(config/topics.json, which the appender owns on a master; on a slave it is the master's copy,
written by the ha process: `create_topic` is refused there and `reload_topics` picks up each
copy)."""
from __future__ import annotations

import logging

from core.meta.topics import TopicTableError, is_system_topic, queue_count_problem, topic_name_problem
from ipc.protocol import OK, ErrorCode, ProtocolError, error_reply, field, pack, unpack

log = logging.getLogger("mqstore.appender")

log = logging.getLogger("mqstore.appender")


def reload_topics(app) -> None:
    """A slave's appender: take topics.json again when the ha process replaced it."""
    try:
        app.topics.reload_if_changed()
    except (OSError, TopicTableError) as e:
        log.error("topics.json not reloaded, keeping the previous table: %s", e)


def register_topic_ops(handlers, app) -> None:
    """Register `create_topic` and `topic_info` of appender `app` in `handlers`."""
    handlers.op("create_topic")(lambda env, frames, received: create_topic(app, env, frames, received))
    handlers.op("topic_info")(lambda env, frames, received: topic_info(app, env, frames, received))


def topic_name(env: dict) -> str:
    """The request's `topic`: BAD_FIELD when missing or not a string, BAD_TOPIC when not a
    legal name (core.meta.topics.topic_name_problem)."""
    topic = field(env, "topic", str)
    problem = topic_name_problem(topic)
    if problem:
        raise ProtocolError(ErrorCode.BAD_TOPIC, problem)
    return topic


def create_topic(app, env, frames, received):
    topic = topic_name(env)
    if app.is_slave:                      # a slave's topics.json is its master's copy
        raise ProtocolError(ErrorCode.UNAVAILABLE, "this store is a slave: create topics on its master")
    if is_system_topic(topic):
        raise ProtocolError(ErrorCode.BAD_TOPIC, f"topic {topic} is a system topic of RocketMQ; "
                                                 "it cannot be created")
    queues = field(env, "queues", int, None)
    if queues is None:                    # get or create: an existing topic is kept as it is
        queues = app.topics.get(topic) or app.config.default_topic_queue_nums
    problem = queue_count_problem(queues)
    if problem:
        raise ProtocolError(ErrorCode.BAD_FIELD, problem)
    if app.topics.set_queues(topic, queues):
        app._topics_changed()
    return [pack({"rid": env.get("rid", 0), "status": OK, "topic": topic, "queues": queues})]


def topic_info(app, env, frames, received):
    topic = topic_name(env)
    queues = app.topics.get(topic)
    if queues is None:
        return error_reply(env.get("rid", 0), ErrorCode.NOT_FOUND, f"unknown topic {topic!r}")
    return [pack({"rid": env.get("rid", 0), "status": OK, "topic": topic, "queues": queues})]


def create_new_topics(app, taken: list) -> None:
    """Puts of appender `app`'s round (`taken`: (head, frames, received) per request) to several
    new topics in one round create them with one save of topics.json
    (each save writes the whole table: with thousands of topics created at once, one save
    per topic kept the appender busy past its heartbeat, and it was killed). The topics
    are those `_queue_for` would create: legal names, a queue id below the default count
    or none. On an OSError nothing is kept, and each put then tries on its own and answers
    as a single one does (SERVICE_NOT_AVAILABLE on a full disk)."""
    if app._refusing():
        return
    default = app.config.default_topic_queue_nums
    new = {}
    for _, frames, _ in taken:
        try:
            env = unpack(frames[1].buffer)
        except Exception:                        # malformed: its handler answers it
            continue
        if not isinstance(env, dict) or env.get("op") not in ("put", "put_batch"):
            continue
        topic, qid = env.get("topic"), env.get("queue_id")
        if not isinstance(topic, str) or topic in app.topics or topic_name_problem(topic):
            continue
        if qid is not None and (qid.__class__ is not int or not 0 <= qid < default):
            continue
        new[topic] = 0
    if len(new) < 2:
        return
    try:
        app.topics.ensure_covers(new.items(), default)
    except OSError as e:
        for topic in new:
            app.topics.topics.pop(topic, None)
        log.error("cannot create %d new topics: %s", len(new), e)
        return
    app._topics_changed()
