"""The control block's positions and the store's, both ways: seeded from the recovered store
before the services start (and seeded again after a recovery while running), the replication
words cleared at a role change, and the checkpoint written from the control block at a stop.
"""
from __future__ import annotations

from core.files.fileops import REAL_FILE_OPS
from core.log.checkpoint import StoreCheckpoint
from ipc.control_block import POOL_BUFFERS, ControlBlock, Word


def seed_control_block(cb: ControlBlock, config, store) -> None:
    end = store.get_max_phy_offset()
    for w in (Word.WROTE, Word.COMMITTED, Word.FLUSHED, Word.CONFIRM, Word.DISPATCHED,
              Word.DISPATCHED_DURABLE):
        cb.set(w, end)
    cb.set(Word.MIN_PHY, max(store.get_min_phy_offset(), 0))
    ckpt = store.checkpoint
    cb.set(Word.LAST_STORE_TS, ckpt.physic_msg_timestamp)
    cb.set(Word.PHYSIC_TS, ckpt.physic_msg_timestamp)
    cb.set(Word.LOGICS_TS, ckpt.logics_msg_timestamp)
    cb.set(Word.INDEX_TS, ckpt.index_msg_timestamp)
    cb.set(Word.SYNC_FLUSH, int(config.is_sync_flush))
    cb.set(Word.SLAVE, int(config.is_slave))
    cb.set(Word.POOL_ENABLED, int(config.use_transient_store_pool))
    cb.set(Word.WRITABLE, 1)
    clear_replication_words(cb)


def clear_replication_words(cb: ControlBlock) -> None:
    """The ha process's words back to zero, with it stopped: at a seed and at a role change
    (a new master's acknowledged offsets start from nothing)."""
    for w in range(Word.HA_EPOCH, Word.POOL_BASE):
        cb.set(w, 0)


def reseed_control_block(cb: ControlBlock, config, store) -> None:
    """Seed the control block again from a store recovered while the supervisor runs (after a
    failed flush), with every service stopped: the flags the services own go back to their
    initial values and every pool buffer is free, then `seed_control_block`."""
    for w in (Word.FLUSH_FAILED, Word.DISK_FULL, Word.SPACE_FULL, Word.DRAINING):
        cb.set(w, 0)
    for i in range(2 * POOL_BUFFERS):
        cb.set(Word.POOL_BASE + i, 0)
    seed_control_block(cb, config, store)


def write_final_checkpoint(config, cb: ControlBlock) -> None:
    """The checkpoint at a stop, from the control block: the flusher that owned the file while
    services ran has exited, and each word is a position its writer made durable."""
    ckpt = StoreCheckpoint(config.checkpoint_path, REAL_FILE_OPS)
    try:
        ckpt.physic_msg_timestamp = cb.get(Word.PHYSIC_TS)
        ckpt.logics_msg_timestamp = cb.get(Word.LOGICS_TS)
        ckpt.index_msg_timestamp = cb.get(Word.INDEX_TS)
        ckpt.flushed_phy_offset = cb.get(Word.FLUSHED)
        ckpt.confirm_phy_offset = cb.get(Word.CONFIRM)
        ckpt.dispatched_phy_offset = cb.get(Word.DISPATCHED_DURABLE)
    finally:
        ckpt.shutdown()
