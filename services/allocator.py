"""The allocator process: creates CommitLog segments whole and atomically
(`FileOps.create_file`: tmp, fallocate, fsync, rename, fsync the directory) for the appender
(docs/SERVICES.md, allocator).

ROUTER on ipc `allocator`. `{"op": "allocate", "rid", "path", "next_path"}`: `path` is
created at once (or found whole) and answered `{"rid", "status": "OK"}`; `next_path` is
created right after the answer, so that the appender's next roll finds its segment ready,
and with `warm_mapped_file_enable` it is prefaulted (MADV_POPULATE_WRITE), advised WILLNEED
and mlocked (a logged warning where mlock is refused). Paths must name a segment of this
store's `commitlog/` (20 digits, a multiple of the segment size); anything else is refused
with BAD_FIELD.

ENOSPC on `path` sets DISK_FULL = 1 and answers an error (code UNAVAILABLE, the errno text);
the appender then answers CREATE_MAPPED_FILE_FAILED and refuses puts while DISK_FULL is set.
Because nothing asks for a segment while puts are refused, the allocator retries the failed
path every second by itself; the first success (or any later successful `allocate`) clears
DISK_FULL. A failure to create `next_path` ahead is only logged: the appender asks for it
again when it needs it. This policy is core.jobs.AllocateJob, the job the embedded store's
allocate thread runs as well; this module is the socket, the path check and the word around it.
"""
from __future__ import annotations

import logging
import os

import zmq

from core.files.fileops import REAL_FILE_OPS
from core.jobs import AllocateJob
from ipc.control_block import Word
from ipc.protocol import OK, ErrorCode, Handlers, ProtocolError, error_reply, field, pack
from ipc.sockets import bind_ipc, ipc_endpoint, make_socket
from services.base import ServiceLoop, run_service

log = logging.getLogger("mqstore.allocator")


class Allocator(ServiceLoop):
    """Hosts core.jobs.AllocateJob behind the ROUTER socket; its positions: the DISK_FULL word."""
    name = "allocator"
    interval_ms = 100

    def __init__(self, config, cb):
        super().__init__(config, cb)
        self.directory = config.commitlog_dir
        self.file_size = config.mapped_file_size_commitlog
        self.job = AllocateJob(REAL_FILE_OPS, self.file_size, config.warm_mapped_file_enable, self)
        self.handlers = Handlers()
        self.handlers.op("allocate")(self._allocate)

    def setup(self) -> None:
        REAL_FILE_OPS.make_dirs(self.directory)
        self.sock = make_socket(self.ctx, zmq.ROUTER)
        bind_ipc(self.sock, ipc_endpoint(self.run_dir, "allocator"))
        self.poller.register(self.sock, zmq.POLLIN)

    def run_once(self) -> None:
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            out = self.handlers.handle(frames[1:], None, log)
            try:
                self.sock.send_multipart([frames[0], *out], zmq.NOBLOCK)
            except zmq.ZMQError as e:
                log.warning("answer dropped: %s", e)
        if not self.stopped:
            self.job.run_once()

    def disk_full(self, full: bool) -> None:
        if full:
            self.cb.set(Word.DISK_FULL, 1)
        elif self.cb.get(Word.DISK_FULL):
            log.info("segments can be created again: DISK_FULL cleared")
            self.cb.set(Word.DISK_FULL, 0)

    # -- the operation -------------------------------------------------------------------
    def _allocate(self, env, frames, peer):
        rid = env.get("rid", 0)
        path = self._segment_path(field(env, "path", str), "path")
        next_path = field(env, "next_path", str, None)
        if next_path is not None:
            next_path = self._segment_path(next_path, "next_path")
        try:
            self.job.allocate(path, next_path)
        except OSError as e:
            log.error("cannot create %s: %s", path, e)
            return error_reply(rid, ErrorCode.UNAVAILABLE,
                               f"cannot create {path}: {os.strerror(e.errno) if e.errno else e}")
        return [pack({"rid": rid, "status": OK})]

    def _segment_path(self, path: str, name: str) -> str:
        path = os.path.abspath(path)
        base = os.path.basename(path)
        if (os.path.dirname(path) != self.directory or len(base) != 20 or not base.isdigit()
                or int(base) % self.file_size):
            raise ProtocolError(ErrorCode.BAD_FIELD,
                                f"field '{name}' must name a segment in {self.directory}, got {path!r}")
        return path

    def close(self) -> None:
        self.job.discard_ahead()                 # RocketMQ drops its pre-allocated files
        self.sock.close(0)
        super().close()


if __name__ == "__main__":
    raise SystemExit(run_service(Allocator))
