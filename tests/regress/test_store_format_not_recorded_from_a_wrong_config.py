"""Regression: a store without config/store_format.json (its format file lost, or a store that
RocketMQ wrote) opened once with a wrong segment size recorded that wrong size as the store's
format before the load refused the segments, so that every later open with the right size was
refused ("was created with 8192") and the store could not be opened without editing the file.
Format parameters are recorded only when they match the files already written."""
import json
import os

import pytest

from core import MessageStore, StoreFormatError


def test_a_wrong_size_is_not_recorded_for_a_store_without_format_file(tiny_config, written_store):
    cfg = tiny_config(mapped_file_size_commitlog=4096, mapped_file_size_consume_queue=200,
                      max_index_num=64)
    written_store(cfg, 30)
    os.unlink(cfg.store_format_path)

    for wrong in ({"mapped_file_size_commitlog": 8192}, {"mapped_file_size_consume_queue": 400},
                  {"max_index_num": 128}):
        with pytest.raises(StoreFormatError) as info:
            MessageStore(cfg.replace(**wrong)).load()
        assert next(iter(wrong)) in str(info.value)
        assert not os.path.exists(cfg.store_format_path)

    store = MessageStore(cfg)
    assert store.load()
    try:
        assert store.get_max_offset_in_queue("T", 0) == 30
    finally:
        store.shutdown()
    with open(cfg.store_format_path) as f:
        assert json.load(f)["mapped_file_size_commitlog"] == 4096
