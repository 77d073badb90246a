"""core/record/layout.py: the one field list of the record header, and what is derived from it
(structs of the four host variants, numpy dtypes, positions, structs reading some fields)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.record import layout
from core.record.codec import encode_message
from core.record.message import Message


def test_the_header_is_design_section_3():
    assert layout.HEADER_V4.format == ">iiiiiqqiq8sq8siqi" and layout.HEADER_V4_SIZE == 88
    for b in (8, 20):
        for s in (8, 20):
            assert layout.HEADERS[b, s].format == f">iiiiiqqiq{b}sq{s}siqi"
            assert layout.DTYPES[b, s].itemsize == layout.HEADERS[b, s].size
            assert layout.DTYPES[b, s].names == layout.NAMES
    assert (layout.QUEUE_OFFSET_POS, layout.PHYS_OFFSET_POS, layout.SYSFLAG_POS,
            layout.BORN_HOST_POS) == (20, 28, 36, 48)
    assert layout.MIN_RECORD_SIZE == 91 and layout.BODY_POS == (88, 100, 100, 112)
    assert layout.store_timestamp_position(0) == 56 and layout.store_timestamp_position(0x10) == 68
    assert layout.record_size(32, 6, 29) == 158                   # DESIGN.md's worked example


hosts = st.sampled_from([("127.0.0.1", 5), ("::1", 7)])


@settings(max_examples=50, deadline=None)
@given(hosts, hosts, st.integers(0, 1 << 40), st.integers(-(1 << 31), (1 << 31) - 1))
def test_struct_dtype_and_picked_fields_read_the_same_values(born, store, phys, flag):
    rec = encode_message(Message("T", b"body", queue_id=3, flag=flag, born_host=born, store_host=store,
                                 born_timestamp=9), queue_offset=4, phys_offset=phys, store_timestamp=11)
    lengths = layout.host_lengths(rec[layout.SYSFLAG_POS + 3])
    h = layout.HEADERS[lengths].unpack_from(rec)
    row = np.frombuffer(rec, layout.DTYPES[lengths], 1)[0]
    for i, name in enumerate(layout.NAMES):
        value = row[name]
        assert (value.tobytes() if isinstance(h[i], bytes) else int(value)) == h[i], name
    assert (h[layout.F_QUEUE_OFFSET], h[layout.F_PHYS], h[layout.F_FLAG]) == (4, phys, flag)
    picked = layout.picked_struct(("total", "magic", "sys_flag", "body_len"), *lengths)
    assert picked.unpack_from(rec) == (h[0], h[1], h[7], h[14])


def test_the_view_does_not_import_the_codec():
    """The import circle codec -> status -> decode -> codec is gone: the lazy view and the
    layout stand without the codec."""
    code = ("import sys, core.record.decode, core.record.layout; "
            "sys.exit('core.record.codec' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
