"""Recovery inside the supervisor: the one at start (`recover_store`) and the cycle after a
failed flush (`RecoveryCycle`).

A failed flush is never retried (DESIGN.md section 4): the flusher sets FLUSH_FAILED and exits
with code 3. The supervisor then stops every other service, waits the restart policy's delay
for the flusher (a flusher that keeps failing ends in BACKOFF and the store stays down,
reported by `status`), runs the abnormal recovery with `core.MessageStore.load()` (the abort
file is still there) in a thread so that the front door keeps answering `status` with the
progress, seeds the control block again from the recovered store, and starts every service
again. Positions may go down here: that is the one moment they may, with no service running.
"""
from __future__ import annotations

import logging
import threading

from core.store import MessageStore
from ipc.control_block import ServiceState, Word
from supervisor.control_seed import reseed_control_block
from supervisor.spawn import STOP_ORDER

log = logging.getLogger("mqstore.supervisor.recovery")


def recover_store(config, lock, progress=None) -> MessageStore:
    """A `MessageStore` loaded and recovered (normal or abnormal by the abort file) under the
    supervisor's `lock`; the caller shuts it down once the control block is seeded."""
    store = MessageStore(config, lock=lock, progress=progress)
    store.load()
    return store


class RecoveryCycle:
    def __init__(self, supervisor):
        self.sup = supervisor
        self.thread: threading.Thread | None = None
        self.store: MessageStore | None = None
        self.error: BaseException | None = None
        self.progress = (0, 0)
        self._gave_up = False

    def owns(self, service: str) -> bool:
        """While the cycle runs it decides every (re)start, not the restart loop."""
        return True

    def begin(self) -> None:
        sup = self.sup
        log.error("the flusher reported a failed flush (exit code 3): stopping every service "
                  "and running the abnormal recovery")
        sup.phase = "recovering"
        sup.run_ctx.cb.set(Word.WRITABLE, 0)
        sup.stop_services([n for n in STOP_ORDER if n in sup.services and n != "flusher"]
                          + [n for n in sup.services if n not in STOP_ORDER])

    def poll(self) -> None:
        """Called from the supervisor's loop: start the recovery when the policy allows it,
        finish the cycle when the recovery is done."""
        sup = self.sup
        if self.thread is None:
            if sup.policy.in_backoff("flusher"):
                if not self._gave_up:
                    self._gave_up = True
                    sup.phase = "failed"
                    sup.errors.append("the flusher failed to flush repeatedly; the store stays "
                                      "down (not writable) until it is stopped and the disk "
                                      "checked")
                    log.error("%s", sup.errors[-1])
                return
            if "flusher" in sup.policy.due():
                self.thread = threading.Thread(target=self._recover, name="recovery", daemon=True)
                self.thread.start()
            return
        if self.thread.is_alive():
            return
        self.thread.join()
        if self.error is not None:
            sup.fatal = f"recovery after a failed flush failed: {self.error}"
            sup.errors.append(sup.fatal)
            log.error("%s", sup.fatal)
            sup.request_stop()
            return
        try:
            reseed_control_block(sup.run_ctx.cb, sup.config, self.store)
        finally:
            self.store.shutdown()
            self.store = None
        log.info("abnormal recovery done; starting the services again")
        sup.recovery_mode = "abnormal (after a failed flush)"
        sup.cycle = None
        sup.phase = "starting"
        sup.start_services(restart=True, keep_going=True)
        if not sup.stop_requested:
            sup.phase = "running"

    def _recover(self) -> None:
        try:
            self.store = recover_store(self.sup.config, self.sup.lock, self._on_progress)
        except BaseException as e:               # reported by poll() in the main thread
            log.exception("recovery failed")
            self.error = e

    def _on_progress(self, done: int, total: int) -> None:
        self.progress = (done, total)

    def abandon(self) -> bool:
        """The store is stopping during the cycle: wait for a running recovery (it cannot be
        cut short safely) and close its store. True when a recovery ran, in which case the
        recovered store wrote the checkpoint and the control block is stale."""
        if self.thread is None:
            return False
        log.info("waiting for the recovery to finish before stopping")
        self.thread.join()
        if self.store is not None:
            self.store.shutdown()
            self.store = None
        for svc in self.sup.services.values():
            svc.set_down_state(ServiceState.STOPPED)
        return True
