"""core.record.key_block: a batch's UNIQ_KEYs as one block split back into the keys it was made of,
and the wire check that refuses a block that is not one."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core.record.key_block import KeyBlock, block_problem
from ipc.producer import UniqKeyGenerator

ascii_keys = st.integers(1, 40).flatmap(
    lambda w: st.lists(st.text(st.characters(min_codepoint=0, max_codepoint=127), min_size=w, max_size=w),
                       min_size=1, max_size=30))


@given(ascii_keys)
def test_a_block_splits_into_its_keys(keys):
    data = "".join(keys).encode("ascii")
    assert block_problem(data, len(keys)) is None
    block = KeyBlock(data, len(keys))
    assert block.keys() == keys and block.width == len(keys[0])
    assert block.has_separators() == any("\x01" in k or "\x02" in k for k in keys)


def test_what_is_not_a_block():
    assert "3 keys" in block_problem(b"abcd", 3)            # does not split evenly
    assert block_problem(b"", 1) and block_problem(b"ab", 0)
    assert block_problem("ключ".encode(), 2) == "must be ASCII"


def test_no_keys():
    assert KeyBlock(b"", 0).keys() == []
    assert UniqKeyGenerator().next_keys(0) == []
