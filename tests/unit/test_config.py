"""StoreConfig: defaults, validation, sources (TOML, MQSTORE_* variables, overrides) and the
store format check."""
import dataclasses
import json
import os

import pytest
from hypothesis import given, strategies as st

import core.config
from core.config import FORMAT_KEYS, ConfigError, StoreConfig, StoreFormatError
from core.log.store_format import check_store_format
from core.files.fileops import FileOps


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Corrections are warned once per process; each test starts with none said yet."""
    monkeypatch.setattr(core.config, "_warned", set())

ROCKETMQ_DEFAULTS = {
    "mapped_file_size_commitlog": 1073741824, "mapped_file_size_consume_queue": 6000000,
    "flush_disk_type": "ASYNC_FLUSH", "broker_role": "ASYNC_MASTER",
    "flush_interval_commitlog": 500, "flush_commitlog_least_pages": 4,
    "flush_commitlog_thorough_interval": 10000, "flush_commitlog_timed": True,
    "commit_interval_commitlog": 200, "commit_commitlog_least_pages": 4,
    "commit_commitlog_thorough_interval": 200, "flush_interval_consume_queue": 1000,
    "flush_consume_queue_least_pages": 2, "flush_consume_queue_thorough_interval": 60000,
    "sync_flush_timeout": 5000, "slave_timeout": 3000, "max_message_size": 4194304,
    "check_crc_on_recover": True, "transient_store_pool_enable": False,
    "transient_store_pool_size": 5, "fast_fail_if_no_buffer_in_store_pool": False,
    "warm_mapped_file_enable": False, "flush_least_pages_when_warm_mapped_file": 4096,
    "os_page_cache_busy_timeout_ms": 1000, "message_index_enable": True,
    "message_index_safe": False, "max_hash_slot_num": 5000000, "max_index_num": 20000000,
    "max_msgs_num_batch": 64, "default_query_max_num": 32,
    "max_transfer_bytes_on_message_in_memory": 262144,
    "max_transfer_count_on_message_in_memory": 32,
    "max_transfer_bytes_on_message_in_disk": 65536, "max_transfer_count_on_message_in_disk": 8,
    "access_message_in_memory_max_ratio": 40, "max_filter_message_size": 16000,
    "ha_listen_port": 10912, "ha_master_address": "", "ha_send_heartbeat_interval": 5000,
    "ha_housekeeping_interval": 20000, "ha_transfer_batch_size": 32768,
    "ha_max_gap_not_in_sync": 268435456, "in_sync_replicas": 1,
    "clean_resource_interval": 10000, "delete_when": "04", "file_reserved_time": 72,
    "disk_max_used_space_ratio": 75, "disk_space_warning_level_ratio": 90,
    "disk_space_clean_forcibly_ratio": 85, "delete_commit_log_files_interval": 100,
    "delete_consume_queue_files_interval": 100, "destroy_mapped_file_interval_forcibly": 120000,
    "clean_file_forcibly_enable": True, "default_topic_queue_nums": 4,
    "store_host": "127.0.0.1:10911", "max_mapped_files": 16, "listen_port": 10911,
    "travel_cq_file_num_when_get_message": 1, "use_reentrant_lock_when_put_message": True,
    "wake_flush_when_put_message": False, "wake_commit_when_put_message": True,
    "put_consume_queue_data_by_file_channel": True, "read_uncommitted": False,
    "duplication_enable": False, "enable_consume_queue_ext": False,
}


def test_defaults_are_rocketmqs():
    cfg = StoreConfig()
    for key, value in ROCKETMQ_DEFAULTS.items():
        assert getattr(cfg, key) == value, key
    assert cfg.store_path_root_dir == os.path.expanduser("~/store")
    assert dataclasses.is_dataclass(cfg)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.flush_disk_type = "SYNC_FLUSH"


def test_paths_and_derived_properties(tmp_path):
    cfg = StoreConfig(store_path_root_dir=tmp_path, flush_disk_type="SYNC_FLUSH",
                      broker_role="SLAVE", store_host="10.1.2.3:9876", delete_when="04;16")
    root = str(tmp_path)
    assert cfg.store_path_root_dir == root
    assert cfg.commitlog_dir == os.path.join(root, "commitlog")
    assert cfg.consumequeue_dir == os.path.join(root, "consumequeue")
    assert cfg.index_dir == os.path.join(root, "index")
    assert cfg.checkpoint_path == os.path.join(root, "checkpoint")
    assert cfg.abort_path == os.path.join(root, "abort")
    assert cfg.lock_path == os.path.join(root, "lock")
    assert cfg.config_dir == os.path.join(root, "config")
    assert cfg.run_dir == os.path.join(root, "run")
    assert cfg.logs_dir == os.path.join(root, "logs")
    assert cfg.is_sync_flush and cfg.is_slave and not cfg.is_sync_master
    assert cfg.store_host_tuple == ("10.1.2.3", 9876)
    assert cfg.delete_when_hours == (4, 16)
    assert not StoreConfig().is_sync_flush and not StoreConfig().is_slave
    assert StoreConfig(store_host="[::1]:10911").store_host_tuple == ("::1", 10911)


def test_root_dir_expanded_and_absolute():
    assert StoreConfig(store_path_root_dir="~/x").store_path_root_dir == \
        os.path.join(os.path.expanduser("~"), "x")
    assert os.path.isabs(StoreConfig(store_path_root_dir="rel/dir").store_path_root_dir)


def test_transient_pool_only_for_async_master():
    assert StoreConfig(transient_store_pool_enable=True).use_transient_store_pool
    assert not StoreConfig(transient_store_pool_enable=True,
                           flush_disk_type="SYNC_FLUSH").use_transient_store_pool
    assert not StoreConfig(transient_store_pool_enable=True,
                           broker_role="SLAVE").use_transient_store_pool


def test_enums_accept_any_case():
    cfg = StoreConfig(flush_disk_type="sync_flush", broker_role="sync_master")
    assert cfg.flush_disk_type == "SYNC_FLUSH" and cfg.is_sync_master


@pytest.mark.parametrize("key, value, words", [
    ("mapped_file_size_commitlog", True, "int"),
    ("mapped_file_size_commitlog", "1g", "int"),
    ("mapped_file_size_commitlog", 1.5, "int"),
    ("flush_commitlog_timed", 1, "bool"),
    ("flush_disk_type", 1, "string"),
    ("store_host", 10911, "string"),
    ("store_path_root_dir", 5, "string"),
    ("store_path_root_dir", "", "directory"),
    ("mapped_file_size_commitlog", 0, "between 99 and 2147483647"),
    ("mapped_file_size_commitlog", 98, "between 99"),
    ("mapped_file_size_commitlog", 2**31, "2147483647"),
    ("mapped_file_size_consume_queue", 0, "between 20"),
    ("flush_disk_type", "LAZY_FLUSH", "ASYNC_FLUSH, SYNC_FLUSH"),
    ("broker_role", "MASTER", "ASYNC_MASTER, SYNC_MASTER, SLAVE"),
    ("flush_interval_commitlog", 0, "at least 1"),
    ("flush_commitlog_least_pages", -1, "at least 0"),
    ("page_cache_window_commitlog", -1, "at least 0"),
    ("sync_flush_timeout", -5, "at least 1"),
    ("max_mapped_files", 3, "at least 4"),
    ("max_index_num", 1, "between 2"),
    ("max_hash_slot_num", 0, "between 1"),
    ("access_message_in_memory_max_ratio", 101, "between 0 and 100"),
    ("delete_when", "24", "hours 0-23"),
    ("delete_when", "04;", "hours 0-23"),
    ("delete_when", "04,05", "hours 0-23"),
    ("store_host", "localhost:10911", "IP address and port"),
    ("store_host", "127.0.0.1", "IP address and port"),
    ("store_host", "127.0.0.1:0", "IP address and port"),
    ("ha_master_address", "master", "host:port"),
    ("ha_master_address", "master:99999", "host:port"),
    ("ha_listen_port", 70000, "between 0 and 65535"),
    ("file_reserved_time", 0, "at least 1"),
])
def test_bad_values_rejected_with_key_value_and_allowed(key, value, words):
    with pytest.raises(ConfigError) as info:
        StoreConfig(**{key: value})
    message = str(info.value)
    assert key in message and repr(value) in message and words in message
    assert info.value.key == key


@pytest.mark.parametrize("key, value, used", [
    ("mapped_file_size_consume_queue", 128, 140),        # reference 13.14: 7 entries a file
    ("mapped_file_size_consume_queue", 6000001, 6000020),
    ("mapped_file_size_consume_queue", 1, 20),
    ("disk_max_used_space_ratio", 1, 10),                # reference 11.2: the getters clamp
    ("disk_max_used_space_ratio", 99, 95),
    ("disk_space_warning_level_ratio", 95, 90),
    ("disk_space_warning_level_ratio", 0, 35),
    ("disk_space_clean_forcibly_ratio", 29, 30),
    ("disk_space_clean_forcibly_ratio", 100, 85),
])
def test_values_rocketmq_corrects_are_corrected_with_a_warning(key, value, used, caplog):
    cfg = StoreConfig(**{key: value})
    assert getattr(cfg, key) == used
    assert key in caplog.text and str(used) in caplog.text


@pytest.mark.parametrize("settings, warned", [
    ({"flush_disk_type": "SYNC_FLUSH"}, True),
    ({"broker_role": "SLAVE"}, True),
    ({}, False),
])
def test_a_transient_pool_that_is_not_used_is_warned_about(settings, warned, caplog):
    # Regression: with SYNC_FLUSH the pool was dropped without a word (no committer, no flag)
    # while run/config.json still said true.
    cfg = StoreConfig(transient_store_pool_enable=True, **settings)
    assert cfg.use_transient_store_pool is not warned
    assert ("transient_store_pool_enable" in caplog.text) is warned


def test_segments_smaller_than_the_largest_message_are_warned_about(caplog):
    StoreConfig(mapped_file_size_commitlog=4096, max_message_size=8192)
    assert "mapped_file_size_commitlog = 4096 is below max_message_size = 8192" in caplog.text
    caplog.clear()
    StoreConfig(mapped_file_size_commitlog=8192, max_message_size=8192)
    assert "mapped_file_size_commitlog" not in caplog.text


def test_replication_roles_start_without_a_warning_and_in_sync_replicas_is_warned(caplog):
    # Replication exists now (services/ha/service.py): a role or a master address is no cause for a
    # warning; in_sync_replicas above 1 still is (one slave's acknowledgement is waited for).
    for settings in ({"broker_role": "SYNC_MASTER"}, {"ha_master_address": "10.0.0.1:10912"},
                     {"broker_role": "SLAVE"}):
        StoreConfig(**settings)
    assert "replication" not in caplog.text and not caplog.records
    StoreConfig(in_sync_replicas=2)
    assert "in_sync_replicas = 2" in caplog.text


def test_a_correction_is_warned_once_however_often_the_config_is_rebuilt(caplog):
    # Regression: start built the configuration twice (the file, then --port) and printed the
    # transient pool warning twice.
    cfg = StoreConfig(transient_store_pool_enable=True, flush_disk_type="SYNC_FLUSH",
                      disk_max_used_space_ratio=99)
    cfg.replace(listen_port=1234).replace(listen_port=1235)
    assert caplog.text.count("transient_store_pool_enable") == 1
    assert caplog.text.count("disk_max_used_space_ratio") == 1


def test_the_smallest_segment_holds_the_smallest_record_and_a_blank():
    from core.record.codec import BLANK_SIZE, MIN_RECORD_SIZE
    from core.config import MIN_SEGMENT_SIZE
    assert MIN_SEGMENT_SIZE == MIN_RECORD_SIZE + BLANK_SIZE


@pytest.mark.parametrize("key", ["read_uncommitted", "duplication_enable", "enable_consume_queue_ext"])
def test_rocketmq_switches_without_a_feature_here_accept_only_their_default(key):
    assert getattr(StoreConfig(**{key: False}), key) is False
    with pytest.raises(ConfigError, match=f"{key} = true: not supported by mqstore"):
        StoreConfig(**{key: True})


def test_unknown_key_to_the_constructor_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="unknown configuration key 'flush_disk_typ'.*'flush_disk_type'") as info:
        StoreConfig(flush_disk_typ="SYNC_FLUSH")
    assert info.value.key == "flush_disk_typ"
    with pytest.raises(ConfigError, match="'bogus'"):
        dataclasses.replace(StoreConfig(), bogus=1)


def test_accepted_edge_values():
    cfg = StoreConfig(mapped_file_size_commitlog=4096, mapped_file_size_consume_queue=20,
                      max_mapped_files=4, disk_max_used_space_ratio=95,
                      disk_space_warning_level_ratio=35, disk_space_clean_forcibly_ratio=30,
                      delete_when="00;23", ha_master_address="master.example:10912",
                      flush_commitlog_least_pages=0, listen_port=0)
    assert cfg.delete_when_hours == (0, 23)
    assert StoreConfig(delete_when="4;16").delete_when_hours == (4, 16)      # RocketMQ parses ints
    assert cfg.ha_master_tuple == ("master.example", 10912)


def test_index_file_size_bounded():
    with pytest.raises(ConfigError, match="index file"):
        StoreConfig(max_hash_slot_num=100_000_000, max_index_num=100_000_000)


def test_replace_validates_and_rejects_unknown(tmp_path):
    cfg = StoreConfig(store_path_root_dir=tmp_path)
    other = cfg.replace(flush_disk_type="SYNC_FLUSH")
    assert other.is_sync_flush and not cfg.is_sync_flush
    assert other.store_path_root_dir == cfg.store_path_root_dir
    with pytest.raises(ConfigError, match="max_mapped_files"):
        cfg.replace(max_mapped_files=1)
    with pytest.raises(ConfigError, match="did you mean 'flush_disk_type'"):
        cfg.replace(flush_disk_typ="SYNC_FLUSH")


def test_to_dict_round_trips(tmp_path):
    cfg = StoreConfig(store_path_root_dir=tmp_path, max_index_num=400)
    data = cfg.to_dict()
    assert data["max_index_num"] == 400 and data["store_path_root_dir"] == str(tmp_path)
    assert StoreConfig(**data) == cfg


# ------------------------------------------------------------------------ from_sources
def write(path, text):
    path.write_text(text)
    return path


def test_from_sources_defaults_without_anything():
    assert StoreConfig.from_sources(env={}) == StoreConfig()


def test_toml_top_level_and_store_table(tmp_path):
    top = write(tmp_path / "a.toml", 'flush_disk_type = "SYNC_FLUSH"\nmax_index_num = 400\n')
    cfg = StoreConfig.from_sources(top, env={})
    assert cfg.is_sync_flush and cfg.max_index_num == 400
    table = write(tmp_path / "b.toml", '[store]\nmessage_index_enable = false\n'
                                       f'store_path_root_dir = "{tmp_path}"\n')
    cfg = StoreConfig.from_sources(str(table), env={})
    assert cfg.message_index_enable is False and cfg.store_path_root_dir == str(tmp_path)


def test_precedence_file_env_overrides(tmp_path):
    path = write(tmp_path / "c.toml", "max_index_num = 400\nmax_hash_slot_num = 100\n"
                                      "sync_flush_timeout = 1\n")
    env = {"MQSTORE_MAX_INDEX_NUM": "800", "MQSTORE_SYNC_FLUSH_TIMEOUT": "2",
           "MQSTORE_CHECK_CRC_ON_RECOVER": "no", "MQSTORE_BROKER_ROLE": "SLAVE",
           "PATH": "/bin", "OTHER_MQSTORE_X": "1"}
    cfg = StoreConfig.from_sources(path, env=env, sync_flush_timeout=3, listen_port=None)
    assert cfg.max_hash_slot_num == 100            # file
    assert cfg.max_index_num == 800                # env beats file
    assert cfg.sync_flush_timeout == 3             # override beats env
    assert cfg.check_crc_on_recover is False and cfg.is_slave
    assert cfg.listen_port == 10911                # None override ignored


@pytest.mark.parametrize("text, expected", [
    ("true", True), ("TRUE", True), ("1", True), ("yes", True), (" Yes ", True),
    ("false", False), ("0", False), ("no", False), ("NO", False)])
def test_env_bools(text, expected):
    cfg = StoreConfig.from_sources(env={"MQSTORE_MESSAGE_INDEX_SAFE": text})
    assert cfg.message_index_safe is expected


@pytest.mark.parametrize("name, text, words", [
    ("MQSTORE_MESSAGE_INDEX_SAFE", "maybe", "true, 1, yes, false, 0, no"),
    ("MQSTORE_MAX_INDEX_NUM", "lots", "must be an int"),
    ("MQSTORE_MAX_INDEX_NUM", "1", "between 2"),
])
def test_env_bad_values_name_variable(name, text, words):
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_sources(env={name: text})
    assert name in str(info.value) and words in str(info.value)


@given(st.integers(min_value=2, max_value=(2**31 - 1 - 44) // 20), st.booleans())
def test_env_int_round_trip(n, padded):
    text = f"  {n}\n" if padded else str(n)
    cfg = StoreConfig.from_sources(env={"MQSTORE_MAX_INDEX_NUM": text}, max_hash_slot_num=1)
    assert cfg.max_index_num == n


def test_unknown_keys_rejected_with_suggestion(tmp_path):
    path = write(tmp_path / "d.toml", "flush_interval_commitlg = 5\n")
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_sources(path, env={})
    assert "flush_interval_commitlg" in str(info.value)
    assert "did you mean 'flush_interval_commitlog'" in str(info.value)
    with pytest.raises(ConfigError, match="MQSTORE_MAX_MESAGE_SIZE.*max_message_size"):
        StoreConfig.from_sources(env={"MQSTORE_MAX_MESAGE_SIZE": "10"})
    with pytest.raises(ConfigError, match="'bogus'"):
        StoreConfig.from_sources(env={}, bogus=1)


def test_rocketmq_camel_case_names_get_suggested(tmp_path):
    path = write(tmp_path / "e.toml", "mappedFileSizeCommitLog = 4096\n")
    with pytest.raises(ConfigError, match="did you mean 'mapped_file_size_commitlog'"):
        StoreConfig.from_sources(path, env={})
    path = write(tmp_path / "f.toml", "warmMapedFileEnable = true\n")
    with pytest.raises(ConfigError, match="did you mean 'warm_mapped_file_enable'"):
        StoreConfig.from_sources(path, env={})


def test_bad_value_in_file_names_file(tmp_path):
    path = write(tmp_path / "g.toml", '[store]\nflush_disk_type = "FAST"\n')
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_sources(path, env={})
    assert "flush_disk_type" in str(info.value) and str(path) in str(info.value)
    path = write(tmp_path / "h.toml", 'mapped_file_size_commitlog = "1g"\n')
    with pytest.raises(ConfigError, match="must be an int"):
        StoreConfig.from_sources(path, env={})


def test_missing_or_broken_toml_names_path(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=str(missing)):
        StoreConfig.from_sources(missing, env={})
    broken = write(tmp_path / "broken.toml", "flush_disk_type = \n")
    with pytest.raises(ConfigError, match="broken.toml.*not valid TOML"):
        StoreConfig.from_sources(broken, env={})
    both = write(tmp_path / "both.toml", "max_index_num = 4\n[store]\nmax_index_num = 5\n")
    with pytest.raises(ConfigError, match="both at the top level"):
        StoreConfig.from_sources(both, env={})
    other_table = write(tmp_path / "other.toml", "[supervisor]\nx = 1\n")
    with pytest.raises(ConfigError, match="'supervisor'"):
        StoreConfig.from_sources(other_table, env={})


# ------------------------------------------------------------------------ store format
def test_store_format_written_then_checked(tmp_path):
    cfg = StoreConfig(store_path_root_dir=tmp_path, mapped_file_size_commitlog=8192,
                      mapped_file_size_consume_queue=200, max_hash_slot_num=100, max_index_num=400)
    recorded = check_store_format(cfg, FileOps())
    assert recorded == {k: getattr(cfg, k) for k in FORMAT_KEYS}
    on_disk = json.loads((tmp_path / "config" / "store_format.json").read_text())
    assert on_disk["version"] == 1 and on_disk["max_index_num"] == 400
    assert check_store_format(cfg, FileOps()) == recorded
    # a parameter that is not a format key may change freely
    check_store_format(cfg.replace(flush_disk_type="SYNC_FLUSH", max_message_size=10), FileOps())


def test_store_path_commit_log(tmp_path, monkeypatch):
    root = StoreConfig(store_path_root_dir=tmp_path)
    assert root.store_path_commit_log == "" and root.commitlog_dir == str(tmp_path / "commitlog")
    monkeypatch.chdir(tmp_path)
    elsewhere = StoreConfig(store_path_root_dir=tmp_path / "r", store_path_commit_log="logs/cl")
    assert elsewhere.commitlog_dir == elsewhere.store_path_commit_log == str(tmp_path / "logs" / "cl")
    home = StoreConfig(store_path_root_dir=tmp_path, store_path_commit_log="~/cl")
    assert home.commitlog_dir == os.path.expanduser("~/cl")
    with pytest.raises(ConfigError, match="comma-separated"):
        StoreConfig(store_path_root_dir=tmp_path, store_path_commit_log="/a,/b")
    env = StoreConfig.from_sources(env={"MQSTORE_STORE_PATH_COMMIT_LOG": str(tmp_path / "e")},
                                   store_path_root_dir=str(tmp_path))
    assert env.commitlog_dir == str(tmp_path / "e")


def test_a_format_file_from_before_store_path_commit_log_opens(tmp_path):
    cfg = StoreConfig(store_path_root_dir=tmp_path)
    check_store_format(cfg, FileOps())
    path = tmp_path / "config" / "store_format.json"
    old = json.loads(path.read_text())
    del old["store_path_commit_log"]
    path.write_text(json.dumps(old))
    assert check_store_format(cfg, FileOps())["store_path_commit_log"] == ""
    with pytest.raises(StoreFormatError, match="its CommitLog is in that directory"):
        check_store_format(cfg.replace(store_path_commit_log=str(tmp_path / "x")), FileOps())


@pytest.mark.parametrize("key, value", [
    ("mapped_file_size_commitlog", 16384), ("mapped_file_size_consume_queue", 400),
    ("max_hash_slot_num", 101), ("max_index_num", 401), ("store_path_commit_log", "/elsewhere")])
def test_store_format_mismatch_refused(tmp_path, key, value):
    cfg = StoreConfig(store_path_root_dir=tmp_path, mapped_file_size_commitlog=8192,
                      mapped_file_size_consume_queue=200, max_hash_slot_num=100, max_index_num=400)
    check_store_format(cfg, FileOps())
    with pytest.raises(StoreFormatError) as info:
        check_store_format(cfg.replace(**{key: value}), FileOps())
    message = str(info.value)
    assert key in message and repr(getattr(cfg, key)) in message and repr(value) in message
    assert "must be opened with" in message
    assert isinstance(info.value, ConfigError)


def test_store_format_file_corrupt_or_newer(tmp_path):
    cfg = StoreConfig(store_path_root_dir=tmp_path)
    (tmp_path / "config").mkdir()
    path = tmp_path / "config" / "store_format.json"
    path.write_text("{not json")
    with pytest.raises(StoreFormatError, match="cannot be read"):
        check_store_format(cfg, FileOps())
    path.write_text(json.dumps({"version": 99}))
    with pytest.raises(StoreFormatError, match="version 99"):
        check_store_format(cfg, FileOps())


def test_store_format_goes_through_fileops(tmp_path):
    calls = []

    class Recording(FileOps):
        def make_dirs(self, path):
            calls.append(("make_dirs", path))
            super().make_dirs(path)

        def write_file_atomic(self, path, data):
            calls.append(("write_file_atomic", path))
            super().write_file_atomic(path, data)

    cfg = StoreConfig(store_path_root_dir=tmp_path)
    check_store_format(cfg, Recording())
    assert calls == [("make_dirs", cfg.config_dir), ("write_file_atomic", cfg.store_format_path)]
