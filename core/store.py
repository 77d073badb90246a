"""`MessageStore`: the storage engine in one process (RocketMQ's DefaultMessageStore).

`load()` takes the lock, opens CommitLog, consume queues, checkpoint and index, and recovers
(normal or abnormal by the abort file); `start()` creates the abort file and starts the
flush, commit, reput and allocate threads (and, on a master, the scheduler of delayed messages); `shutdown()` stops them in order, flushes
everything, writes the checkpoint and removes the abort file only when nothing is left
undispatched. Reads are delegated to `StoreReader`. Consumer group offsets
(`commit_offset`, `fetch_offset`) are kept in config/consumer_offsets.json, the file the
reader process keeps when the store runs as services (core.meta.consumer_offsets).
"""
from __future__ import annotations

import dataclasses
import errno
import logging
import time
from operator import attrgetter

from core.log.checkpoint import StoreCheckpoint
from core.record import refusal as why
from core.record.batch_encode import encode_batch
from core.log.commitlog import CommitLog, append_status_to_put
from core.config import ConfigError, StoreConfig
from core.log.store_format import check_store_format
from core.log.consume_queue_store import ConsumeQueueStore
from core.meta.consumer_offsets import ConsumerOffsetStore
from core.log.dispatch import Dispatcher
from core.delay.put import delay_rules, delayed_put
from core.embedded_services import AllocateService, CommitService, FlushService, ReputService, ScheduleService
from core.files.fileops import REAL_FILE_OPS, FileOps
from core.jobs import flush_whole
from core.log.index_service import IndexService
from core.read.store_reader import StoreReader
from core.log.recovery import rebuild_topic_queue_table, recover_store
from core.running_flags import DISK_FULL, RunningFlags
from core.status import AppendMessageStatus, PutMessageResult, PutMessageStatus, new_result, take_reason
from core.files.store_files import AbortFile, StoreLock
from core.meta.topics import topic_name_problem
from core.files.transient_pool import TransientStorePool

log = logging.getLogger(__name__)

# Configuration keys an open store takes at once (`MessageStore.config = ...`): each is read
# where it is used, on every put, pull or clean-up, as RocketMQ reads its MessageStoreConfig.
RUNTIME_KEYS = (
    "max_message_size", "os_page_cache_busy_timeout_ms", "sync_flush_timeout",
    "max_filter_message_size", "max_msgs_num_batch", "max_transfer_count_on_message_in_memory",
    "max_transfer_bytes_on_message_in_memory", "max_transfer_count_on_message_in_disk",
    "max_transfer_bytes_on_message_in_disk", "file_reserved_time", "delete_file_batch_max",
)
# RocketMQ's CommitLog.updateMaxMessageSize takes a changed maxMessageSize only from 10 up.
MIN_DYNAMIC_MAX_MESSAGE_SIZE = 10
S = PutMessageStatus
_PUT_OK = S.PUT_OK
_APPENDED = AppendMessageStatus.PUT_OK


_BODY = attrgetter("body")


def _bodies_size(bodies) -> int:
    """The bytes of a batch's bytes and bytearray bodies (others are refused later)."""
    if set(map(type, bodies)) == {bytes}:
        return sum(map(len, bodies))
    return sum(len(b) for b in bodies if isinstance(b, (bytes, bytearray)))


class MessageStore:
    DISK_RETRY_S = 1.0       # after ENOSPC, puts are refused this long before one tries again

    def __init__(self, config: StoreConfig, fileops: FileOps | None = None, progress=None,
                 lock: StoreLock | None = None):
        """`lock`: a StoreLock the caller already holds (the supervisor); it is left held."""
        self._config = config
        self.fileops = fileops or REAL_FILE_OPS
        self.progress = progress                 # callable(scanned, total) during recovery
        self.flags = RunningFlags()
        self._disk_retry_at = None          # after an ENOSPC: when a put may try the disk again
        self._own_lock = lock is None
        self.lock = lock or StoreLock(config.lock_path)
        self.abort_file = AbortFile(config.abort_path, self.fileops)
        self.allocate_service = AllocateService(self.fileops, config.mapped_file_size_commitlog,
                                                config.warm_mapped_file_enable, self.flags)
        pool = (TransientStorePool(config.transient_store_pool_size, config.mapped_file_size_commitlog)
                if config.use_transient_store_pool else None)
        self.commitlog = CommitLog(config, self.fileops, self.allocate_service.allocate, pool)
        self.cq_store = ConsumeQueueStore(config.consumequeue_dir, config.mapped_file_size_consume_queue,
                                          self.fileops)
        self.index_service = (IndexService(config.index_dir, config.max_hash_slot_num, config.max_index_num,
                                           self.fileops, config.max_msgs_num_batch)
                              if config.message_index_enable else None)
        self.checkpoint: StoreCheckpoint | None = None
        self.dispatcher = Dispatcher(self.commitlog, self.cq_store, self.index_service,
                                     delay_levels=config.delay_levels_ms)
        self.reader = StoreReader(config, self.commitlog, self.cq_store, self.index_service)
        self.consumer_offsets = ConsumerOffsetStore(config.config_dir, self.fileops)
        self.flush_service: FlushService | None = None
        self.commit_service: CommitService | None = None
        self.reput_service: ReputService | None = None
        self.schedule_service: ScheduleService | None = None
        self._delay_rules = delay_rules(config)
        self.recovery_report = None
        self._sync_flush = config.is_sync_flush
        self._is_slave = config.is_slave
        # A stored put that waits for the store's answer: a SYNC_MASTER also waits for a slave,
        # and the embedded store is a single node (replication is services/ha/service.py, processes
        # only): it answers SLAVE_NOT_AVAILABLE, as RocketMQ's master with no slave.
        self._acked = S.SLAVE_NOT_AVAILABLE if config.is_sync_master else _PUT_OK
        self.loaded = False
        self.running = False
        self.shut_down = False

    # -- configuration -------------------------------------------------------------------
    @property
    def config(self) -> StoreConfig:
        return self._config

    @config.setter
    def config(self, new: StoreConfig) -> None:
        """Change the configuration of an open store: `store.config = store.config.replace(...)`.
        The keys RocketMQ reads on every put, pull or clean-up (`RUNTIME_KEYS`: the message size
        limit, the page-cache busy timeout, the sync flush timeout, the pull limits, retention)
        take effect at once; a change to any other key raises ConfigError, since the store's
        files, threads and modes were set up with it. As RocketMQ's CommitLog, a new message
        size limit below `MIN_DYNAMIC_MAX_MESSAGE_SIZE` is ignored: the previous one stays."""
        fixed = [f.name for f in dataclasses.fields(StoreConfig)
                 if f.name not in RUNTIME_KEYS and getattr(new, f.name) != getattr(self._config, f.name)]
        if fixed:
            raise ConfigError(f"{', '.join(fixed)} cannot change while the store is open (only "
                              f"{', '.join(RUNTIME_KEYS)} can); close it and open it again", fixed[0])
        self._config = self.commitlog.config = self.reader.config = new
        if new.max_message_size >= MIN_DYNAMIC_MAX_MESSAGE_SIZE:
            self.commitlog.max_message_size = new.max_message_size

    # -- lifecycle -----------------------------------------------------------------------
    def load(self) -> bool:
        """Open and recover the store. Raises ConfigError/StoreLoadError/StoreLockedError with
        the reason when the store cannot be opened safely."""
        cfg = self.config
        for d in (cfg.store_path_root_dir, cfg.commitlog_dir, cfg.consumequeue_dir, cfg.config_dir):
            self.fileops.make_dirs(d)
        if self._own_lock:
            self.lock.acquire()
        try:
            check_store_format(cfg, self.fileops)
            last_exit_ok = not self.abort_file.exists()
            self.commitlog.queue.load()         # the consume queues: in recovery's one walk
            self.checkpoint = StoreCheckpoint(cfg.checkpoint_path, self.fileops)
            if self.index_service is not None:
                self.index_service.load(last_exit_ok, self.checkpoint.index_msg_timestamp)
            self.recovery_report = recover_store(self.commitlog, self.cq_store, self.index_service,
                                                 self.checkpoint, cfg, last_exit_ok, self.progress)
            self._catch_up_dispatch()
            self.consumer_offsets.load()
        except BaseException:
            if self._own_lock:
                self.lock.release()
            raise
        self.loaded = True
        return True

    def _catch_up_dispatch(self) -> None:
        """Dispatch what the consume queues on disk do not cover yet, then persist the result."""
        end = self.commitlog.get_max_offset()
        start = max(self.cq_store.max_physic_offset(), self.commitlog.get_min_offset(), 0)
        if start < end:                          # else recovery's table stands
            self.dispatcher.run(start, end)
            rebuild_topic_queue_table(self.commitlog, self.cq_store)
        self.persist_dispatched(end)

    def start(self) -> None:
        if not self.loaded:
            raise RuntimeError("MessageStore.start() before load()")
        if self.running or self.shut_down:
            raise RuntimeError("MessageStore.start(): the store was started already"
                               + (" and shut down; open a new MessageStore" if self.shut_down else ""))
        self.abort_file.create()
        self.flush_service = FlushService(self)
        self.reput_service = ReputService(self, self.commitlog.get_max_offset())
        services = [self.allocate_service, self.flush_service, self.reput_service]
        if self.commitlog.pool is not None:
            self.commit_service = CommitService(self)
            services.insert(1, self.commit_service)
        for svc in services:
            svc.start()
        self.running = True
        if not self._is_slave:                 # a slave delivers nothing (DESIGN.md 11)
            self.schedule_service = ScheduleService(self)
            self.schedule_service.start()

    def shutdown(self) -> None:
        """Stop taking puts, drain every service, flush, checkpoint, and remove the abort file
        only when nothing is left undispatched."""
        if self.shut_down:
            return
        if self.schedule_service is not None:
            self.schedule_service.stop()          # its re-puts first, while puts are taken
        self.shut_down = True
        self.running = False
        with self.commitlog.put_lock:
            pass                                              # let an append in progress finish
        for svc in (self.commit_service, self.flush_service, self.reput_service, self.allocate_service):
            if svc is not None:
                svc.stop()
        self.allocate_service.discard_ahead()
        clean = False
        if self.loaded:
            clean = self.flags.is_writeable and (self.reput_service is None or self.reput_service.behind() <= 0)
            self._persist_offsets()
            self.checkpoint.shutdown()
            if self.index_service is not None:
                self.index_service.shutdown()
            self.commitlog.shutdown()
            self.cq_store.shutdown()
            if clean and self.reput_service is not None:
                self.abort_file.remove()
            elif self.reput_service is not None:
                log.warning("shutdown abnormally: abort file kept for recovery at next start")
            if self._own_lock:
                self.lock.release()

    def persist_dispatched(self, dispatched: int) -> None:
        """Flush consume queues and index, then record in the checkpoint how far they are durable."""
        ts = self.dispatcher.last_store_timestamp
        flush_whole(self.cq_store, self.index_service)
        index_ts = self.index_service.last_flushed_index_timestamp if self.index_service else 0
        self.record_dispatched(dispatched, ts, index_ts)

    def record_dispatched(self, dispatched: int, logics_ts: int, index_ts: int) -> None:
        """Write into the checkpoint that queues and index are durable up to `dispatched`."""
        ckpt = self.checkpoint
        if self.index_service is not None:
            ckpt.index_msg_timestamp = index_ts
        if logics_ts:
            ckpt.logics_msg_timestamp = logics_ts
        ckpt.dispatched_phy_offset = dispatched
        ckpt.flushed_phy_offset = self.commitlog.queue.flushed_where
        ckpt.confirm_phy_offset = self.commitlog.get_confirm_offset()
        if self.commitlog.queue.store_timestamp:
            ckpt.physic_msg_timestamp = self.commitlog.queue.store_timestamp
        ckpt.flush()

    # -- puts ----------------------------------------------------------------------------
    def _check_store_status(self):
        if not self.running or self._is_slave:
            return S.SERVICE_NOT_AVAILABLE
        if not self.flags.is_writeable:
            retry = self._disk_retry_at
            if retry is None or time.monotonic() < retry or not self.flags.only_disk_full_blocks_writes:
                return S.SERVICE_NOT_AVAILABLE
            self._disk_retry_at = None
            self.flags.clear(DISK_FULL)     # this put tries again; ENOSPC sets it back
            log.info("trying the disk again after DISK_FULL")
        return None

    def put_message(self, msg) -> PutMessageResult:
        if not self.running or self.flags.bits or self._is_slave:
            status = self._check_store_status()            # some flags (NOT_READABLE) allow puts
            if status is not None:
                return PutMessageResult(status)
        if msg.properties:
            msg = delayed_put(msg, self._delay_rules)         # DELAY or a timer: core.delay.put
            if msg.__class__ is PutMessageStatus:
                return PutMessageResult(msg, None, take_reason())
        result = self.commitlog.append_message(msg)
        if result.__class__ is PutMessageStatus:            # refused before the append
            return PutMessageResult(result, None, take_reason())
        if result[0] is not _APPENDED:                     # .status
            return self._append_failed(result)
        if self.reput_service.idle:
            self.reput_service.wakeup()                    # the first put after a quiet second
        if self._sync_flush and msg.wait_store_msg_ok:
            return self._wait_flush(result)
        return new_result(PutMessageResult, (self._acked if msg.wait_store_msg_ok else _PUT_OK, result, ""))

    def put_messages(self, msgs) -> PutMessageResult:
        """Append a batch (one topic and queue) as one unit: all of it or none."""
        if not self.running or self.flags.bits or self._is_slave:
            status = self._check_store_status()
            if status is not None:
                return PutMessageResult(status)
        if not msgs:
            return PutMessageResult(S.MESSAGE_ILLEGAL, None, "a batch of no messages")
        first = msgs[0]
        bodies = list(map(_BODY, msgs))
        max_size = self.commitlog.max_message_size        # the limit in force (see `config`)
        if _bodies_size(bodies) > max_size:
            return PutMessageResult(S.MESSAGE_ILLEGAL, None,
                                    why.batch_too_large(_bodies_size(bodies), max_size))
        recs = encode_batch(msgs, max_size, self.commitlog.store_host_bytes, self.commitlog.prop_crc)
        if recs.__class__ is PutMessageStatus:
            return PutMessageResult(recs, None, take_reason())
        return self._append(recs, first)

    def put_encoded(self, run) -> PutMessageResult:
        """Append records encoded already, of one topic and queue, as one unit: the scheduler's
        deliveries (core.delay.reput_record.EncodedRun), with the store checks of a put."""
        if not self.running or self.flags.bits or self._is_slave:
            status = self._check_store_status()
            if status is not None:
                return PutMessageResult(status)
        return self._append(run, run.first)

    def _append(self, recs, first) -> PutMessageResult:
        """Append a prepared batch; under SYNC_FLUSH wait as its first message asks."""
        commitlog = self.commitlog
        if commitlog.begin_time_in_lock and commitlog.is_os_page_cache_busy():
            return PutMessageResult(S.OS_PAGECACHE_BUSY)
        result = commitlog.append_batch(recs)
        if result[0] is not _APPENDED:                     # .status
            return self._append_failed(result, True)
        if self.reput_service.idle:
            self.reput_service.wakeup()
        if self._sync_flush and first.wait_store_msg_ok:
            return self._wait_flush(result)
        return new_result(PutMessageResult, (self._acked if first.wait_store_msg_ok else _PUT_OK, result, ""))

    def _append_failed(self, result, batch: bool = False) -> PutMessageResult:
        if result.status is AppendMessageStatus.UNKNOWN_ERROR:
            self._note_create_failure()
        reason = why.over_segment(batch, self.commitlog.file_size) \
            if result.status is AppendMessageStatus.MESSAGE_SIZE_EXCEEDED else ""
        return PutMessageResult(append_status_to_put(result.status), result, reason)

    def _wait_flush(self, result) -> PutMessageResult:
        """SYNC_FLUSH: answer once the flushed position passes the record (group commit)."""
        if not self.flush_service.wait_flushed(result.next_offset, self.config.sync_flush_timeout):
            return PutMessageResult(S.FLUSH_DISK_TIMEOUT, result)
        return PutMessageResult(self._acked, result)

    def _note_create_failure(self) -> None:
        err = self.allocate_service.last_error
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            self.flags.set(DISK_FULL)
            self._disk_retry_at = time.monotonic() + self.DISK_RETRY_S

    # -- reads (delegated) ---------------------------------------------------------------
    def get_message(self, group, topic, queue_id, offset, max_msgs, tag_filter=None):
        if self.shut_down or not self.flags.is_readable:
            return None
        return self.reader.get_message(group, topic, queue_id, offset, max_msgs, tag_filter)

    def query_message(self, topic, key, max_num, begin_ts, end_ts):
        return self.reader.query_message(topic, key, max_num, begin_ts, end_ts)

    def look_message_by_offset(self, phys_offset, size=None):
        return self.reader.look_message_by_offset(phys_offset, size)

    def view_message_by_id(self, msg_id):
        return self.reader.view_message_by_id(msg_id)

    def get_offset_in_queue_by_time(self, topic, queue_id, ts):
        return self.reader.get_offset_in_queue_by_time(topic, queue_id, ts)

    def get_max_offset_in_queue(self, topic, queue_id):
        return self.reader.get_max_offset_in_queue(topic, queue_id)

    def get_min_offset_in_queue(self, topic, queue_id):
        return self.reader.get_min_offset_in_queue(topic, queue_id)

    def get_commit_log_offset_in_queue(self, topic, queue_id, cq_offset):
        return self.reader.get_commit_log_offset_in_queue(topic, queue_id, cq_offset)

    def get_message_store_timestamp(self, topic, queue_id, cq_offset):
        return self.reader.get_message_store_timestamp(topic, queue_id, cq_offset)

    def get_earliest_message_time(self, topic=None, queue_id=None):
        return self.reader.get_earliest_message_time(topic, queue_id)

    def get_max_phy_offset(self) -> int:
        return self.commitlog.get_max_offset()

    def get_min_phy_offset(self) -> int:
        return self.commitlog.get_min_offset()

    def get_confirm_offset(self) -> int:
        return self.commitlog.get_confirm_offset()

    # -- consumer group offsets (RocketMQ's ConsumerOffsetManager) -----------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record `offset` as the next message `group` will consume from the queue; kept in
        config/consumer_offsets.json (written at most every 100 ms, by `flush` and at
        shutdown). A bad name or number raises ValueError (TypeError for a wrong type)."""
        _check_group_queue(group, topic, queue_id)
        if offset.__class__ is not int or not 0 <= offset < 1 << 63:
            raise (TypeError if offset.__class__ is not int else ValueError)(
                f"offset must be an int in 0..2**63-1, got {offset!r}")
        self.consumer_offsets.commit(group, topic, queue_id, offset)
        self.consumer_offsets.persist_if_due()

    def fetch_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The offset `group` committed for the queue, -1 when it never committed one."""
        _check_group_queue(group, topic, queue_id)
        return self.consumer_offsets.fetch(group, topic, queue_id)

    query_offset = fetch_offset          # RocketMQ's name (ConsumerOffsetManager.queryOffset)

    def _persist_offsets(self) -> None:
        try:
            self.consumer_offsets.persist()
        except OSError as e:                 # a full disk: the offsets are kept in memory
            log.error("cannot write %s: %s", self.consumer_offsets.path, e)

    # -- maintenance ---------------------------------------------------------------------
    def flush(self) -> int:
        """Commit and flush everything written (and the consumer offsets committed); return
        the flushed position."""
        self._persist_offsets()
        queue = self.commitlog.queue
        while not self.commitlog.commit(0):
            pass
        while queue.flushed_where < self.commitlog.get_max_offset():
            if self.commitlog.flush(0):
                break
        return queue.flushed_where

    def dispatch_behind_bytes(self) -> int:
        return self.reput_service.behind() if self.reput_service else 0

    def wait_for_dispatch(self, timeout: float = 10.0) -> bool:
        """Wait until everything confirmed is in the consume queues and the index."""
        deadline = time.monotonic() + timeout
        while self.dispatch_behind_bytes() > 0:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def delete_expired_files(self, clean_immediately: bool = False) -> int:
        """Delete CommitLog segments older than `file_reserved_time` hours, then the consume-queue
        and index files that only point into them."""
        deleted = self.commitlog.queue.delete_expired_file_by_time(
            self.config.file_reserved_time * 3600 * 1000, 0, clean_immediately,
            self.config.delete_file_batch_max)
        if deleted:
            min_offset = self.commitlog.get_min_offset()
            self.cq_store.delete_expired(min_offset)
            if self.index_service is not None:
                self.index_service.delete_expired_file(min_offset)
        return deleted


def _check_group_queue(group, topic, queue_id) -> None:
    for what, name in (("group", group), ("topic", topic)):
        problem = topic_name_problem(name, what)
        if problem:
            raise (TypeError if not isinstance(name, str) else ValueError)(problem)
    if queue_id.__class__ is not int or not 0 <= queue_id < 1 << 31:
        raise (TypeError if queue_id.__class__ is not int else ValueError)(
            f"queue_id must be an int in 0..2**31-1, got {queue_id!r}")
