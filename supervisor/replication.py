"""The supervisor's part in replication (DESIGN.md section 10, docs/OPERATIONS.md
"Replication"): a subscriber of the ha process's events, the role changes of a running store,
and the truncation of a diverged slave.

- `replication` events (once a second from the ha process) are kept for the front door's
  `status` (`report`) and the metrics.
- `promote` (slave -> master) and `follow` (master -> slave of another) are asked for by the
  front door and run from the supervisor's loop (`poll`): the appender and the ha process
  stop, run/config.json gets the new `broker_role` (and `ha_master_address`), the SLAVE word
  and the replication words are set, and both start again. A promoted ha process records a
  new epoch at the log's end (core.log.epochs); the restarted appender re-validates the log's tail
  and takes puts. The change lasts for this run: the configuration file decides the next
  start.
- A `truncate` event (a slave told by its master that its log diverged) stops every service,
  loads the store (the recovery of a crash: the abort file is there), cuts the log, consume
  queues and index at the offset durably (core.log.recovery.truncate_diverged), seeds the control
  block again and starts every service; the ha process then hand-shakes again from there.
  The front door does not answer while that runs (a few seconds for a small store).
"""
from __future__ import annotations

import logging

from core.log.recovery import truncate_diverged
from core.store import MessageStore
from ipc.control_block import Word
from supervisor.control_seed import clear_replication_words, reseed_control_block
from supervisor.run_dir import write_run_config
from supervisor.spawn import STOP_ORDER

log = logging.getLogger("mqstore.supervisor.replication")
MASTER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER")


class Replication:
    def __init__(self, supervisor):
        self.sup = supervisor
        self.latest: dict = {}
        self.pending: tuple | None = None

    # -- events --------------------------------------------------------------------------
    def handle(self, event: dict) -> None:
        if event.get("service") != "ha":
            return
        if event.get("event") == "replication":
            self.latest = event
        elif event.get("event") == "truncate" and isinstance(event.get("offset"), int):
            self.pending = ("truncate", event["offset"])

    # -- requests from the front door ----------------------------------------------------
    def request_promote(self, role: str) -> str | None:
        """Why the store cannot be promoted now, or None once the change is queued."""
        if role not in MASTER_ROLES:
            return f"role {role!r}: a promoted store is one of {', '.join(MASTER_ROLES)}"
        if not self.sup.run_ctx.cb.get(Word.SLAVE):
            return "this store is a master already"
        return self._queue(("role", role, ""))

    def request_follow(self, master: str) -> str | None:
        if self.sup.run_ctx.endpoints.get("ha", "").endswith(f"//{master}"):
            return f"{master} is this store's own replication address"
        if self.sup.run_ctx.cb.get(Word.POOL_ENABLED):
            return ("this store runs with the transient store pool, which a slave does not use: "
                    "stop it and start it with --role SLAVE --master HOST:PORT")
        return self._queue(("role", "SLAVE", master))

    def _queue(self, change: tuple) -> str | None:
        if self.sup.phase != "running" or self.pending is not None:
            return f"the store is busy ({self.pending[0] if self.pending else self.sup.phase}); try again"
        self.pending = change
        return None

    # -- the supervisor's loop -----------------------------------------------------------
    def poll(self) -> None:
        sup = self.sup
        if self.pending is None or sup.phase != "running" or sup.cycle is not None or sup.stop_requested:
            return
        change, self.pending = self.pending, None
        if change[0] == "truncate":
            self._truncate(change[1])
        else:
            self._change_role(change[1], change[2])

    def _change_role(self, role: str, master: str) -> None:
        sup = self.sup
        cb = sup.run_ctx.cb
        log.warning("role change: %s -> %s%s", "SLAVE" if cb.get(Word.SLAVE) else sup.config.broker_role,
                    role, f" of {master}" if master else "")
        names = [n for n in ("appender", "ha") if n in sup.services]
        sup.phase = "changing role"
        try:
            sup.stop_services(names)
            config = sup.config.replace(broker_role=role, ha_master_address=master)
            write_run_config(config)
            sup.config = config
            for svc in sup.services.values():
                svc.config = config
            cb.set(Word.SLAVE, int(role == "SLAVE"))
            clear_replication_words(cb)
            self.latest = {}
            self._start(names)
        finally:
            sup.phase = "running" if not sup.stop_requested else sup.phase

    def _truncate(self, offset: int) -> None:
        sup = self.sup
        cb = sup.run_ctx.cb
        if not cb.get(Word.SLAVE):
            log.error("a truncation to %d asked for on a master: ignored", offset)
            return
        log.warning("the log diverged from the master's: stopping every service to truncate it to %d", offset)
        sup.phase = "truncating"
        try:
            cb.set(Word.WRITABLE, 0)
            sup.stop_services([n for n in STOP_ORDER if n in sup.services]
                              + [n for n in sup.services if n not in STOP_ORDER])
            store = MessageStore(sup.config, lock=sup.lock)
            store.load()
            try:
                if offset < store.get_max_phy_offset():
                    truncate_diverged(store, offset)
                reseed_control_block(cb, sup.config, store)
            finally:
                store.shutdown()
            self._start(list(sup.services))
        finally:
            sup.phase = "running" if not sup.stop_requested else sup.phase

    def _start(self, names) -> None:
        sup = self.sup
        for name in names:
            pid = sup.services[name].spawn(restart=True)
            sup.publish({"service": name, "event": "spawned", "pid": pid})
            log.info("started %s (pid %d)", name, pid)
        for name in names:
            if not sup._wait_running(sup.services[name]):
                log.error("%s did not start after the change; the restart policy takes over", name)

    # -- status --------------------------------------------------------------------------
    def report(self) -> dict:
        """The `replication` map of the front door's `status`."""
        sup = self.sup
        cb = sup.run_ctx.cb
        slave = bool(cb.get(Word.SLAVE))
        out = {"role": sup.config.broker_role, "epoch": cb.get(Word.HA_EPOCH),
               "listen": sup.run_ctx.endpoints.get("ha")}
        if slave:
            out.update(master=sup.config.ha_master_address, connected=bool(cb.get(Word.HA_CONNECTED)),
                       master_max=cb.get(Word.HA_MASTER_MAX),
                       lag_bytes=max(0, cb.get(Word.HA_MASTER_MAX) - cb.get(Word.WROTE)))
        else:
            out.update(fenced=bool(cb.get(Word.HA_FENCED)), slaves_connected=cb.get(Word.HA_SLAVES),
                       acked=cb.get(Word.HA_ACKED), slaves=[])
        latest = self.latest
        if latest.get("role") == ("SLAVE" if slave else "MASTER"):
            for key in ("store_id", "slaves", "state", "reason", "lag_bytes", "bytes_sent",
                        "bytes_received", "last_heard_s", "configs_taken", "configs_refused"):
                if key in latest:
                    out[key] = latest[key]
        if self.pending is not None:
            out["pending"] = self.pending[0]
        return out
