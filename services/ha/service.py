"""The ha process, RocketMQ's HA service (docs/SERVICES.md, ha; DESIGN.md section 10): on a
master it serves slaves (services/ha/master.py), on a slave it follows the master and is the
store's only CommitLog writer (services/ha/slave.py). The side is chosen at start from the
SLAVE word; `mqstore promote` and `mqstore follow` restart the process on the other side.

It owns `config/epochs.json` (core.log.epochs.EpochFile) and the replication words of the control
block (HA_*, 32..63). It also carries the master's metadata files (topics.json,
consumer_offsets.json, delayOffset.json: core.meta.config_sync) to the slaves, where it is their
writer. Every second it emits a `replication` event with what it knows (role,
epoch, the master or each slave's address, acknowledged offset and lag), which the supervisor
keeps for `status` and the metrics (supervisor/replication.py).

Usage (started by the supervisor): python -m services.ha --store ROOT
"""
from __future__ import annotations

import json
import os
import time

from core.log.epochs import EpochFile
from core.files.fileops import REAL_FILE_OPS
from ipc.control_block import Word
from services.base import ServiceLoop, run_service
from services.ha.master import MasterSide
from services.ha.slave import SlaveSide

STATUS_INTERVAL_S = 1.0


class Replicator(ServiceLoop):
    name = "ha"
    interval_ms = 10

    def setup(self) -> None:
        self.epochs = EpochFile(self.config.config_dir, REAL_FILE_OPS).load()
        with open(os.path.join(self.run_dir, "endpoints.json")) as f:
            self.endpoint = json.load(f)["ha"]
        self._next_status = 0.0
        self.side = SlaveSide(self) if self.cb.get(Word.SLAVE) else MasterSide(self)
        self.side.setup()

    def run_once(self) -> None:
        self.side.run_once()
        now = time.monotonic()
        if now >= self._next_status:
            self._next_status = now + STATUS_INTERVAL_S
            self.emit("replication", store_id=self.epochs.store_id, **self.side.describe())

    def status_now(self) -> None:
        """Emit the `replication` event at the next loop (a slave came or went)."""
        self._next_status = 0.0

    def close(self) -> None:
        self.side.close()
        super().close()

