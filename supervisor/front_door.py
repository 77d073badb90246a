"""The supervisor's front door: the ROUTER socket clients reach first (docs/PROTOCOL.md), with
the operations `hello`, `status`, `topics`, `stop`, `promote` and `follow` registered in a `Handlers` table.

Beyond the fields PROTOCOL.md requires, `hello` names the supervisor's pid and `status` adds
`lags`, `disk`, `errors` (why a service is in BACKOFF, why the store is down) and a
`supervisor` map (pid, phase, uptime, address, how the last start recovered); clients that do
not know them ignore them.
"""
from __future__ import annotations

import logging
import os
import time

import zmq

from core.meta.topics import TopicTable
from core.config import ConfigError, StoreConfig
from ipc.protocol import OK, PROTOCOL_VERSION, ErrorCode, Handlers, ProtocolError, field, reply
from supervisor import status_report

log = logging.getLogger("mqstore.supervisor.front")


class FrontDoor:
    def __init__(self, supervisor, sock: zmq.Socket):
        self.sup = supervisor
        self.sock = sock
        self.handlers = Handlers()
        self.handlers.op("hello")(self.hello)
        self.handlers.op("status")(self.status)
        self.handlers.op("topics")(self.topics)
        self.handlers.op("stop")(self.stop)
        self.handlers.op("promote")(self.promote)
        self.handlers.op("follow")(self.follow)
        self._table = TopicTable(os.path.join(supervisor.config.config_dir, "topics.json"))

    def serve(self) -> None:
        """Answer every request waiting on the socket."""
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if len(frames) < 2:
                continue
            user = frames[0].get("User-Id") if self.handlers.guard is not None else None
            peer, request = frames[0].bytes, [f.bytes for f in frames[1:]]
            reply = self.handlers.handle(request, peer, log, user)
            if reply is None:
                continue
            try:
                self.sock.send_multipart([peer, *reply], zmq.NOBLOCK)
            except zmq.ZMQError as e:        # the client went away (ROUTER_MANDATORY)
                log.info("reply to a departed client dropped: %s", e)

    # -- operations ----------------------------------------------------------------------
    def hello(self, env, frames, peer):
        eps = self.sup.endpoints
        return _reply(env, {"version": PROTOCOL_VERSION, "appender": eps["appender"],
                            "reader": eps["reader"], "store": self.sup.config.store_path_root_dir,
                            "pid": os.getpid(),
                            # the limits a batching client keeps its batches under
                            "max_message_size": self.sup.config.max_message_size,
                            "mapped_file_size_commitlog": self.sup.config.mapped_file_size_commitlog})

    def status(self, env, frames, peer):
        return _reply(env, self.report())

    def report(self) -> dict:
        """The `status` reply's fields."""
        sup = self.sup
        cb = sup.run_ctx.cb
        pos = status_report.positions(cb)
        info = {"services": [svc.describe() for svc in sup.services.values()],
                "positions": pos, "lags": status_report.lags(pos),
                "flags": (names := status_report.flags(cb)), "puts": status_report.puts(names),
                "disk": status_report.disk_usage(sup.config),
                "errors": list(sup.errors),
                "supervisor": {"pid": os.getpid(), "phase": sup.phase,
                               "uptime_s": round(time.monotonic() - sup.started, 3),
                               "address": sup.run_ctx.endpoints["front"],
                               "store": sup.config.store_path_root_dir,
                               "recovery": sup.recovery_mode},
                "replication": sup.replication.report()}
        for entry in info["services"]:
            wait = sup.policy.restart_in(entry["name"])
            if wait is not None:
                entry["restart_in_s"] = round(wait, 3)
        delayed = sup.delayed.snapshot()
        if delayed:
            info["delayed"] = delayed
        if sup.metrics is not None:
            info["supervisor"]["metrics"] = sup.metrics.url
        if sup.cycle is not None:
            info["supervisor"]["recovery_progress"] = list(sup.cycle.progress)
        return info

    def topics(self, env, frames, peer):
        return _reply(env, {"topics": status_report.read_topics(self.sup.config, self._table)})

    def promote(self, env, frames, peer):
        """A slave becomes a master (`role`, default ASYNC_MASTER); run from the loop."""
        role = field(env, "role", str, "ASYNC_MASTER").upper()
        why = self.sup.replication.request_promote(role)
        if why:
            raise ProtocolError(ErrorCode.UNAVAILABLE, why)
        return _reply(env, {"accepted": True})

    def follow(self, env, frames, peer):
        """This store becomes a slave of `master` (HOST:PORT, its ha_listen_port)."""
        master = field(env, "master", str)
        try:
            StoreConfig(store_path_root_dir=self.sup.config.store_path_root_dir, ha_master_address=master)
        except ConfigError as e:
            raise ProtocolError(ErrorCode.BAD_FIELD, str(e)) from None
        why = self.sup.replication.request_follow(master)
        if why:
            raise ProtocolError(ErrorCode.UNAVAILABLE, why)
        return _reply(env, {"accepted": True})

    def stop(self, env, frames, peer):
        log.info("stop requested by a client")
        self.sup.request_stop()
        return _reply(env, {})


def _reply(env: dict, fields: dict) -> list:
    return reply(env.get("rid", 0), OK, fields)
