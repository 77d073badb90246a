"""`ipc.aio.Admin`: ipc.admin.Admin's operations as coroutines on an AsyncConnection, each one
request with the blocking Admin's arguments, results and errors (MQError for an error reply;
None for a topic or message that is not there)."""
from __future__ import annotations

import time

from ipc.admin import Admin as _BlockingAdmin
from ipc.aio.connection import AsyncConnection
from ipc.client_common import MQError
from ipc.protocol import ErrorCode
from ipc.received import messages_from_reply

_strip = _BlockingAdmin._strip


class Admin:
    def __init__(self, address: str | None = None, *, store: str | None = None, timeout: float = 10.0,
                 key_file: str | None = None, server_key_file: str | None = None):
        self._conn = AsyncConnection(address, store=store, timeout=timeout, key_file=key_file,
                                     server_key_file=server_key_file)

    async def open(self) -> "Admin":
        await self._conn.open()
        return self

    async def __aenter__(self) -> "Admin":
        return await self.open()

    async def __aexit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    async def hello(self) -> dict:
        return await self._conn.call("front", "hello")

    async def status(self) -> dict:
        return _strip(await self._conn.call("front", "status"))

    async def topics(self) -> dict:
        env = await self._conn.call("front", "topics")
        return {t["topic"]: t["queues"] for t in sorted(env.get("topics", []), key=lambda t: t["topic"])}

    async def create_topic(self, topic: str, queues: int | None = None) -> dict:
        return _strip(await self._conn.call("appender", "create_topic", topic=topic, queues=queues))

    async def topic_info(self, topic: str) -> dict | None:
        try:
            return _strip(await self._conn.call("reader", "topic_info", topic=topic))
        except MQError as e:
            if e.code == ErrorCode.NOT_FOUND:
                return None
            raise

    async def queue_offsets(self, topic: str, queue_id: int | None = None) -> list:
        fields = {"topic": topic} if queue_id is None else {"topic": topic, "queue_id": queue_id}
        return (await self._conn.call("reader", "queue_offsets", **fields)).get("queues", [])

    async def fetch_offset(self, group: str, topic: str, queue_id: int) -> int:
        return (await self._conn.call("reader", "fetch_offset", group=group, topic=topic,
                                      queue_id=queue_id))["offset"]

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        await self._conn.call("reader", "commit_offset", group=group, topic=topic, queue_id=queue_id,
                              offset=int(offset))

    async def consumer_lag(self, group: str, topic: str) -> dict:
        return _strip(await self._conn.call("reader", "consumer_lag", group=group, topic=topic))

    async def groups(self) -> list:
        return (await self._conn.call("reader", "groups")).get("groups", [])

    async def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0,
                           end_ts: int | None = None) -> list:
        env, frames = await self._conn.call_with_frames(
            "reader", "query_by_key", topic=topic, key=key, max_num=max_num, begin_ts=begin_ts,
            end_ts=int(time.time() * 1000) + 1000 if end_ts is None else end_ts)
        return messages_from_reply(env, frames)
