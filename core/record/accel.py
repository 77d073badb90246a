"""The choice between the compiled accelerator of the record codec and its pure-Python
reference (DESIGN.md section 1), made once per process; the only importer of `_accel`.

`native` is the extension module `core.record._accel` (C on the CPython API, built by
`pip install` from setup.py) or None: None when `MQSTORE_PURE_PYTHON=1` (or any value but
"" and "0") forces the reference, or when the extension is not built (a checkout run without
`pip install`; a warning says so). Each module of a path the accelerator speeds up asks this
one and chooses there, never its callers: core.record.crc (crc32), core.record.body_crc (CRCs
of many bodies), core.record.crc_property (sealing), core.read.check (the read check).
The functions of `native` and their references are listed in _accel.c's opening comment;
tests/unit/test_accel.py holds them equal.
"""
from __future__ import annotations

import os
import warnings

PURE = os.environ.get("MQSTORE_PURE_PYTHON", "") not in ("", "0")



def load():
    """The extension module, whatever the environment says (tests of it); ImportError when it
    is not built."""
    from core.record import _accel
    return _accel


native = None
if not PURE:
    try:
        native = load()
    except ImportError as exc:                         # not built: the reference serves
        warnings.warn(f"core.record._accel is not built ({exc}); the pure-Python record codec "
                      "is used (pip install -e . builds it)", RuntimeWarning, stacklevel=2)


def mode() -> str:
    """'native' or 'pure': which implementation this process runs (benchmarks print it)."""
    return "pure" if native is None else "native"
