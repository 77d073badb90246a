"""Regression: MQSTORE_PURE_PYTHON (core/record/accel.py's switch to the pure-Python record
codec) was read as the configuration key `pure_python`, so `mqstore start` and every
`StoreConfig.from_sources` refused to run under the pure-Python CI pass
("unknown configuration key 'pure_python' in environment variable MQSTORE_PURE_PYTHON")."""
from __future__ import annotations

import pytest

from core.config import ConfigError, StoreConfig


def test_the_accelerator_switch_is_not_read_as_a_config_key():
    cfg = StoreConfig.from_sources(env={"MQSTORE_PURE_PYTHON": "1", "MQSTORE_MAX_INDEX_NUM": "100"})
    assert cfg.max_index_num == 100


def test_other_unknown_variables_are_still_refused():
    with pytest.raises(ConfigError, match="pure_pythons"):
        StoreConfig.from_sources(env={"MQSTORE_PURE_PYTHONS": "1"})
