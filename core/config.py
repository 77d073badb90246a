"""Store configuration: the frozen `StoreConfig`, where it comes from, and the format check.

`StoreConfig` carries RocketMQ's MessageStoreConfig keys in snake_case with RocketMQ's
defaults (reference section 12), plus a few of ours (`store_host`, `max_mapped_files`,
`listen_port`). Every instance is validated when it is built; a bad value raises
`ConfigError` naming the key, the value and what is allowed.

Sources, later ones winning (`StoreConfig.from_sources`): the defaults, a TOML file (keys at
the top level or under `[store]`), `MQSTORE_<KEY>` environment variables, explicit overrides
(an override of None counts as not given, so a CLI can pass its unset options straight
through). Every `MQSTORE_*` variable must name a field: the prefix belongs to this module.

Where RocketMQ corrects a value, so does `StoreConfig`, and it logs a warning naming the key:
the disk ratios are clamped to RocketMQ's ranges (reference 11.2) and the consume-queue file
size is rounded up to a multiple of 20 (128 -> 140), so that the corrected value is the one
every reader of the config sees.

Decisions beyond RocketMQ:
- A CommitLog segment must hold the smallest record and a blank record (99 bytes); RocketMQ
  has no lower bound.
- `store_path_root_dir` accepts a path-like object, expands `~` and is made absolute, so
  that every process of a store resolves the same directory.
- `flush_disk_type` and `broker_role` are accepted in any letter case and kept upper-case.
- `delete_when` takes one or more hours 0-23 separated by `;` ("04", "4", "04;16"), as
  RocketMQ parses each as an integer.
- `enabled_append_prop_crc` (RocketMQ 5.2's whole-record `__CRC32#` property,
  `core.record.crc_property`) is on by default here, so that a flip anywhere in a record is caught;
  `force_verify_prop_crc` (default false, as RocketMQ) makes a record without it invalid.
- `use_transient_store_pool` is RocketMQ 4.x's effective switch: the pool is used only by
  an ASYNC_FLUSH master.

Format parameters (`FORMAT_KEYS`: the sizes that decide the byte layout of files already on
disk, and where the CommitLog is) are recorded by `core.log.store_format` at creation, and a store
opened with other values is refused.
"""
import dataclasses
import difflib
import logging
import os
import re
import tomllib
from dataclasses import dataclass

log = logging.getLogger(__name__)

from core.config_values import ConfigError, parse_delay_levels, parse_host_port  # noqa: F401

JAVA_INT_MAX = 2**31 - 1
MIN_SEGMENT_SIZE = 91 + 8       # core.record.codec's MIN_RECORD_SIZE + BLANK_SIZE (not imported: numpy)
CQ_STORE_UNIT_SIZE = 20
INDEX_HEADER_SIZE, INDEX_SLOT_SIZE, INDEX_ENTRY_SIZE = 40, 4, 20
ENV_PREFIX = "MQSTORE_"
NOT_CONFIG_ENV = ("MQSTORE_PURE_PYTHON",)   # core/record/accel.py's switch, not a store key
FLUSH_DISK_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
SECURITY_MODES = ("none", "curve")
FORMAT_KEYS = ("mapped_file_size_commitlog", "mapped_file_size_consume_queue",
               "max_hash_slot_num", "max_index_num", "store_path_commit_log")
STORE_FORMAT_FILE = "store_format.json"
_TRUE_WORDS, _FALSE_WORDS = ("true", "1", "yes"), ("false", "0", "no")
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELETE_WHEN = re.compile(r"^([01]?[0-9]|2[0-3])(;([01]?[0-9]|2[0-3]))*$")


class StoreFormatError(ConfigError):
    """The store on disk was created with different format parameters than configured now."""


# Integer keys must be at least 1 (loop intervals: 0 would spin; sizes and counts: 0 is
# meaningless) unless listed here. "Least pages", thorough intervals and pauses may be 0.
_ZERO_ALLOWED = (
    "flush_commitlog_least_pages", "flush_commitlog_thorough_interval",
    "commit_commitlog_least_pages", "commit_commitlog_thorough_interval",
    "flush_consume_queue_least_pages", "flush_consume_queue_thorough_interval",
    "delete_commit_log_files_interval", "delete_consume_queue_files_interval",
    "destroy_mapped_file_interval_forcibly", "page_cache_window_commitlog")
_INT_BOUNDS = {  # key: (lowest, highest or None)
    "mapped_file_size_commitlog": (MIN_SEGMENT_SIZE, JAVA_INT_MAX),
    "mapped_file_size_consume_queue": (CQ_STORE_UNIT_SIZE, JAVA_INT_MAX),
    "max_message_size": (1, JAVA_INT_MAX),
    "max_hash_slot_num": (1, JAVA_INT_MAX),
    "max_index_num": (2, JAVA_INT_MAX),          # entry 0 is never used
    "access_message_in_memory_max_ratio": (0, 100),
    "max_mapped_files": (4, None),
    "ha_listen_port": (0, 65535),                # 0: any free port
    "listen_port": (0, 65535),
}
# RocketMQ switches whose True asks for what mqstore does not have: the reason why.
_UNSUPPORTED = {
    "read_uncommitted": "dispatch and pulls never pass the confirmed offset",
    "duplication_enable": "no DLedger/controller duplication",
    "enable_consume_queue_ext": "no consume-queue extension files",
}
_CLAMPED = {  # key: the range RocketMQ's getter clamps the value to (reference 11.2)
    "disk_max_used_space_ratio": (10, 95),
    "disk_space_warning_level_ratio": (35, 90),
    "disk_space_clean_forcibly_ratio": (30, 85),
}


def _under_root(*names: str) -> property:
    """A read-only property: the path `names` under the store root."""
    return property(lambda self: os.path.join(self.store_path_root_dir, *names),
                    doc=f"<store_path_root_dir>/{'/'.join(names)}")


_warned: set = set()


def _warn_once(msg: str, *args) -> None:
    """Log a correction once per process: a configuration is rebuilt (`replace`) several times
    at start, and each copy would repeat it."""
    text = msg % args
    if text not in _warned:
        _warned.add(text)
        log.warning(text)


@dataclass(frozen=True)
class StoreConfig:
    """RocketMQ's MessageStoreConfig (snake_case, same defaults) plus mqstore's own keys."""

    store_path_root_dir: str = os.path.expanduser("~/store")
    # RocketMQ's storePathCommitLog: the CommitLog's directory ("": <root>/commitlog), for
    # example on a disk of its own. One directory; RocketMQ's comma-separated list is refused.
    store_path_commit_log: str = ""
    mapped_file_size_commitlog: int = 1073741824
    mapped_file_size_consume_queue: int = 6000000
    flush_disk_type: str = "ASYNC_FLUSH"
    broker_role: str = "ASYNC_MASTER"
    flush_interval_commitlog: int = 500
    flush_commitlog_least_pages: int = 4
    flush_commitlog_thorough_interval: int = 10000
    flush_commitlog_timed: bool = True
    commit_interval_commitlog: int = 200
    commit_commitlog_least_pages: int = 4
    commit_commitlog_thorough_interval: int = 200
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60000
    sync_flush_timeout: int = 5000
    slave_timeout: int = 3000
    max_message_size: int = 4194304
    check_crc_on_recover: bool = True
    enabled_append_prop_crc: bool = True       # RocketMQ 5.2's default is false (module doc)
    force_verify_prop_crc: bool = False
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    fast_fail_if_no_buffer_in_store_pool: bool = False
    warm_mapped_file_enable: bool = False
    flush_least_pages_when_warm_mapped_file: int = 4096
    os_page_cache_busy_timeout_ms: int = 1000
    message_index_enable: bool = True
    message_index_safe: bool = False
    max_hash_slot_num: int = 5000000
    max_index_num: int = 20000000
    max_msgs_num_batch: int = 64
    default_query_max_num: int = 32
    max_transfer_bytes_on_message_in_memory: int = 262144
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 65536
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    max_filter_message_size: int = 16000
    offset_check_in_slave: bool = False
    # RocketMQ keys accepted so that configurations setting them load (reference section 12).
    # The first five change nothing here: one consume-queue file is read per pull, one lock
    # guards appends, the flusher and committer keep their own pace, queues are written through
    # their mapping. Of the last three only the default is supported (`_UNSUPPORTED`).
    travel_cq_file_num_when_get_message: int = 1
    use_reentrant_lock_when_put_message: bool = True
    wake_flush_when_put_message: bool = False
    wake_commit_when_put_message: bool = True
    put_consume_queue_data_by_file_channel: bool = True
    read_uncommitted: bool = False
    duplication_enable: bool = False
    enable_consume_queue_ext: bool = False
    ha_listen_port: int = 10912
    ha_master_address: str = ""
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20000
    ha_transfer_batch_size: int = 32768
    ha_max_gap_not_in_sync: int = 268435456
    in_sync_replicas: int = 1
    clean_resource_interval: int = 10000
    delete_when: str = "04"
    file_reserved_time: int = 72
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    disk_space_clean_forcibly_ratio: int = 85
    # Accepted, without effect: segments are unlinked, and a process that still maps one
    # keeps its view (Linux), so there is nothing to pace, to destroy forcibly or to delete again.
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    destroy_mapped_file_interval_forcibly: int = 120000
    redelete_hanged_file_interval: int = 120000
    delete_file_batch_max: int = 10
    clean_file_forcibly_enable: bool = True
    default_topic_queue_nums: int = 4
    store_host: str = "127.0.0.1:10911"
    max_mapped_files: int = 16
    page_cache_window_commitlog: int = 0          # bytes; core/files/cache_window.py (0: the kernel's)
    listen_port: int = 10911
    # Delayed delivery (core/delay/put.py): RocketMQ's messageDelayLevel and RocketMQ 5's timer
    # limits; a timer is delivered at the first multiple of timer_precision_ms at or after its ms.
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    timer_max_delay_sec: int = 259200
    timer_precision_ms: int = 1000
    # Security (docs/OPERATIONS.md): "curve": CurveZMQ on every tcp socket; a slave of a secure
    # master connects with its replica key's NAME.key_secret and the master's server.key.
    security: str = "none"
    ha_key_file: str = ""
    ha_master_server_key_file: str = ""

    def __new__(cls, *args, **kwargs):
        for key in kwargs:                  # the generated __init__ would raise a TypeError
            _check_known(key, "StoreConfig(...)")
        return super().__new__(cls)

    def __post_init__(self):
        root = self.store_path_root_dir
        if isinstance(root, os.PathLike):
            object.__setattr__(self, "store_path_root_dir", root := os.fspath(root))
        for key, tp in _FIELD_TYPES.items():
            _check_type(key, getattr(self, key), tp)
        if not root:
            raise ConfigError("store_path_root_dir = '': must name a directory",
                              "store_path_root_dir")
        object.__setattr__(self, "store_path_root_dir", os.path.abspath(os.path.expanduser(root)))
        log_dir = self.store_path_commit_log
        if log_dir:
            if "," in log_dir:
                raise ConfigError(f"store_path_commit_log = {log_dir!r}: RocketMQ's list of CommitLog "
                                  "directories (comma-separated) is not supported; give one directory",
                                  "store_path_commit_log")
            object.__setattr__(self, "store_path_commit_log", os.path.abspath(os.path.expanduser(log_dir)))
        for key in ("flush_disk_type", "broker_role"):
            object.__setattr__(self, key, getattr(self, key).upper())
        object.__setattr__(self, "security", self.security.lower())
        for key in ("ha_key_file", "ha_master_server_key_file"):
            if value := getattr(self, key):
                object.__setattr__(self, key, os.path.abspath(os.path.expanduser(value)))
        self._correct_as_rocketmq()
        self._validate()

    def _correct_as_rocketmq(self) -> None:
        """Clamp the disk ratios and round the consume-queue file size up, as RocketMQ does; warn
        that a transient store pool asked for is not used (SYNC_FLUSH or a slave), that
        segments smaller than max_message_size refuse the messages that do not fit, and that
        in_sync_replicas above 1 is not counted."""
        for key, (lo, hi) in _CLAMPED.items():
            value = getattr(self, key)
            if not lo <= value <= hi:
                _warn_once("%s = %d is outside %d..%d: using %d, as RocketMQ does", key, value, lo, hi,
                            min(max(value, lo), hi))
                object.__setattr__(self, key, min(max(value, lo), hi))
        size = self.mapped_file_size_consume_queue
        if size > 0 and size % CQ_STORE_UNIT_SIZE:
            rounded = -(-size // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE
            _warn_once("mapped_file_size_consume_queue = %d is not a multiple of %d (the entry size): "
                        "using %d, as RocketMQ does", size, CQ_STORE_UNIT_SIZE, rounded)
            object.__setattr__(self, "mapped_file_size_consume_queue", rounded)
        if 0 < self.mapped_file_size_commitlog < self.max_message_size:
            _warn_once("mapped_file_size_commitlog = %d is below max_message_size = %d: a message or "
                       "batch that does not fit in one segment is refused (MESSAGE_ILLEGAL)",
                       self.mapped_file_size_commitlog, self.max_message_size)
        if self.in_sync_replicas > 1:
            _warn_once("in_sync_replicas = %d: a SYNC_MASTER waits for one slave's acknowledgement "
                       "(RocketMQ 4.x's rule); counting several is not supported",
                       self.in_sync_replicas)
        if self.transient_store_pool_enable and not self.use_transient_store_pool:
            _warn_once("transient_store_pool_enable = true has no effect with flush_disk_type = %s "
                        "and broker_role = %s: as RocketMQ, the pool serves only an ASYNC_FLUSH "
                        "master", self.flush_disk_type, self.broker_role)

    def _validate(self) -> None:
        for key, tp in _FIELD_TYPES.items():
            if tp is not int:
                continue
            lo, hi = _INT_BOUNDS.get(key, (0 if key in _ZERO_ALLOWED else 1, None))
            value = getattr(self, key)
            if value < lo or (hi is not None and value > hi):
                allowed = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
                raise ConfigError(f"{key} = {value!r}: must be an int {allowed}", key)
        for key, why in _UNSUPPORTED.items():
            if getattr(self, key):
                raise ConfigError(f"{key} = true: not supported by mqstore ({why}); leave it false", key)
        _check_choice("flush_disk_type", self.flush_disk_type, FLUSH_DISK_TYPES)
        _check_choice("broker_role", self.broker_role, BROKER_ROLES)
        _check_choice("security", self.security, SECURITY_MODES)
        if bool(self.ha_key_file) != bool(self.ha_master_server_key_file):
            raise ConfigError("ha_key_file, ha_master_server_key_file: give both or neither", "ha_key_file")
        if self.index_file_size > JAVA_INT_MAX:
            raise ConfigError(
                f"max_hash_slot_num = {self.max_hash_slot_num!r}, max_index_num = "
                f"{self.max_index_num!r}: an index file of 40 + 4 * slots + 20 * entries "
                f"= {self.index_file_size} bytes must not exceed {JAVA_INT_MAX}", "max_index_num")
        if not _DELETE_WHEN.match(self.delete_when):
            raise ConfigError(f"delete_when = {self.delete_when!r}: must be hours 0-23 "
                              "separated by ';', e.g. '04' or '04;16'", "delete_when")
        parse_delay_levels(self.message_delay_level)
        parse_host_port("store_host", self.store_host, ip_literal=True)
        if self.ha_master_address:
            parse_host_port("ha_master_address", self.ha_master_address, ip_literal=False)

    # ---------------------------------------------------------------- paths (DESIGN.md 2)
    @property
    def commitlog_dir(self) -> str:
        """`store_path_commit_log`, or <store_path_root_dir>/commitlog."""
        return self.store_path_commit_log or os.path.join(self.store_path_root_dir, "commitlog")

    consumequeue_dir = _under_root("consumequeue")
    index_dir = _under_root("index")
    checkpoint_path = _under_root("checkpoint")
    abort_path = _under_root("abort")
    lock_path = _under_root("lock")
    config_dir = _under_root("config")
    store_format_path = _under_root("config", STORE_FORMAT_FILE)
    run_dir = _under_root("run")
    logs_dir = _under_root("logs")
    quarantine_dir = _under_root("quarantine")

    # ---------------------------------------------------------------- derived values
    @property
    def is_sync_flush(self) -> bool:
        return self.flush_disk_type == "SYNC_FLUSH"

    @property
    def is_slave(self) -> bool:
        return self.broker_role == "SLAVE"

    @property
    def is_sync_master(self) -> bool:
        return self.broker_role == "SYNC_MASTER"

    @property
    def use_transient_store_pool(self) -> bool:
        """The pool is in effect only for an ASYNC_FLUSH master (RocketMQ 4.x's rule)."""
        return self.transient_store_pool_enable and not self.is_sync_flush and not self.is_slave

    @property
    def store_host_tuple(self) -> tuple[str, int]:
        """(address, port) of `store_host`, the form `core.record.message.host_to_bytes` takes."""
        return parse_host_port("store_host", self.store_host, ip_literal=True)

    @property
    def ha_master_tuple(self) -> tuple[str, int] | None:
        """(host, port) of `ha_master_address`, None when it is empty."""
        return parse_host_port("ha_master_address", self.ha_master_address,
                                ip_literal=False) if self.ha_master_address else None

    @property
    def delete_when_hours(self) -> tuple[int, ...]:
        return tuple(int(h) for h in self.delete_when.split(";"))

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """`message_delay_level` in ms: item i is the delay of level i + 1."""
        return parse_delay_levels(self.message_delay_level)

    @property
    def index_file_size(self) -> int:
        return (INDEX_HEADER_SIZE + INDEX_SLOT_SIZE * self.max_hash_slot_num
                + INDEX_ENTRY_SIZE * self.max_index_num)

    # ---------------------------------------------------------------- building
    def replace(self, **changes) -> "StoreConfig":
        """A validated copy with `changes` applied."""
        for key in changes:
            _check_known(key, "replace()")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_sources(cls, toml_path=None, env=os.environ, **overrides) -> "StoreConfig":
        """Defaults, then the TOML file, then `MQSTORE_<KEY>` variables, then `overrides`."""
        values: dict = {}
        origin: dict = {}
        if toml_path is not None:
            path = os.fspath(toml_path)
            for key, value in _read_toml(path).items():
                _check_known(key, f"config file {path}")
                values[key], origin[key] = value, f"config file {path}"
        for name, text in env.items():
            if name.startswith(ENV_PREFIX) and name not in NOT_CONFIG_ENV:
                key = name[len(ENV_PREFIX):].lower()
                _check_known(key, f"environment variable {name}")
                values[key] = _from_env_text(key, name, text)
                origin[key] = f"environment variable {name}"
        for key, value in overrides.items():
            if value is not None:
                _check_known(key, "overrides")
                values[key], origin[key] = value, "overrides"
        try:
            return cls(**values)
        except ConfigError as exc:
            where = origin.get(exc.key)
            if where is None:
                raise
            raise ConfigError(f"{exc} (set in {where})", exc.key) from None


_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(StoreConfig)}


def _type_name(tp) -> str:
    return {int: "an int", bool: "a bool (true or false)", str: "a string"}[tp]


def _check_type(key: str, value, tp) -> None:
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, tp)
    if not ok:
        raise ConfigError(f"{key} = {value!r}: must be {_type_name(tp)}, "
                          f"not {type(value).__name__}", key)


def _check_choice(key: str, value: str, choices: tuple) -> None:
    if value not in choices:
        raise ConfigError(f"{key} = {value!r}: must be one of {', '.join(choices)}", key)


def _check_known(key: str, where: str) -> None:
    if key in _FIELD_TYPES:
        return
    squashed = {name.replace("_", ""): name for name in _FIELD_TYPES}
    guess = squashed.get(key.replace("_", "").lower())
    if guess is None:
        close = difflib.get_close_matches(key.lower(), list(_FIELD_TYPES), n=1, cutoff=0.6)
        guess = close[0] if close else None
    hint = f"; did you mean {guess!r}?" if guess else ""
    raise ConfigError(f"unknown configuration key {key!r} in {where}{hint}", key)


def _from_env_text(key: str, name: str, text: str):
    tp = _FIELD_TYPES[key]
    if tp is str:
        return text
    word = text.strip().lower()
    if tp is bool:
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
        raise ConfigError(f"{key} = {text!r} (environment variable {name}): must be one of "
                          f"{', '.join(_TRUE_WORDS + _FALSE_WORDS)}", key)
    try:
        return int(word)
    except ValueError:
        raise ConfigError(f"{key} = {text!r} (environment variable {name}): must be an int",
                          key) from None


def _read_toml(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    values = {k: v for k, v in data.items() if k != "store"}
    section = data.get("store", {})
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: 'store' must be a table ([store]), "
                          f"not {type(section).__name__}", "store")
    for key, value in section.items():
        if key in values:
            raise ConfigError(f"config file {path}: key {key!r} is set both at the top level "
                              "and under [store]", key)
        values[key] = value
    return values
