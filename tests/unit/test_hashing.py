"""Java `String.hashCode` as the JVM computes it (UTF-16 code units, int32 wrap-around), the
consume-queue tag code, the index key hash (|h| with Integer.MIN_VALUE mapped to 0), and the
subscription expressions matched by those codes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.record.hashing import index_key_hash, index_key_hashes, java_hash, tags_code
from core.read.subscription import subscription_codes, tags_match

INT_MIN = -(1 << 31)
INT_MAX = (1 << 31) - 1


def utf16_units(s: str) -> list[int]:
    """The UTF-16 code units of `s`, as a Java String holds them."""
    raw = s.encode("utf-16-be")
    return [int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2)]


def by_formula(s: str) -> int:
    """sum(s[i] * 31**(n-1-i)) over UTF-16 units, exactly, then reduced to a signed int32."""
    units = utf16_units(s)
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units))
    total %= 1 << 32
    return total - (1 << 32) if total >= 1 << 31 else total


def test_hello_is_the_jvm_value():
    assert java_hash("hello") == 99162322


def test_empty_string_hashes_to_zero():
    assert java_hash("") == 0
    assert tags_code("") == 0
    assert tags_code(None) == 0


def test_small_literals():
    assert java_hash("a") == 97
    assert java_hash("ab") == 97 * 31 + 98
    # The classic collision: both are 2112.
    assert java_hash("Aa") == java_hash("BB") == 2112


def test_non_bmp_character_counts_as_its_surrogate_pair():
    # U+1F600 is the pair D83D DE00. By hand: 97*31 = 3007; +0xD83D (55357) = 58364;
    # *31 = 1809284; +0xDE00 (56832) = 1866116; *31 = 57849596; +98 = 57849694.
    assert utf16_units("a\U0001F600b") == [97, 0xD83D, 0xDE00, 98]
    assert java_hash("a\U0001F600b") == 57849694
    # Alone: 55357*31 + 56832 = 1772899.
    assert java_hash("\U0001F600") == 1772899
    # A code-point based hash would differ.
    assert java_hash("a\U0001F600b") != (97 * 31 + 0x1F600) * 31 + 98


def test_non_bmp_matches_the_formula():
    for s in ("\U0001F600", "x\U00010000y", "\U0010FFFF" * 3, "标签\U0001F680tag"):
        assert java_hash(s) == by_formula(s), s


def test_bmp_non_ascii_uses_utf16_units_not_utf8_bytes():
    assert java_hash("é") == 0xE9
    assert java_hash("标签") == 0x6807 * 31 + 0x7B7E


def test_int32_wrap_around():
    s = "polygenelubricants"
    assert by_formula(s) == INT_MIN
    assert java_hash(s) == INT_MIN
    long_ascii = "The quick brown fox jumps over the lazy dog"
    assert java_hash(long_ascii) == by_formula(long_ascii)
    assert INT_MIN <= java_hash(long_ascii) <= INT_MAX
    assert java_hash("a" * 1000) == by_formula("a" * 1000)


def test_negative_hash_values():
    # Ten ASCII letters overflow into the sign bit.
    s = "hellohello"
    assert by_formula(s) == -1538739392
    assert java_hash(s) == by_formula(s)


def test_index_key_hash_is_absolute_value():
    s = "hellohello"
    assert java_hash(s) < 0
    assert index_key_hash(s) == -java_hash(s)
    assert index_key_hash("hello") == 99162322


def _min_value_string() -> str:
    """Search short strings for one whose hashCode is Integer.MIN_VALUE.

    With a prefix p and two more units a, b: h = 961*hash(p) + 31*a + b (mod 2**32), so for
    each prefix solve 31*a + b = r. Prefixes chr(x) + "zz" for consecutive CJK x step
    961*hash(p) by 923521, less than the ~2.1 million values 31*a + b can take, so a few
    thousand prefixes are enough to land on a solution.
    """
    for x in range(0x4E00, 0x9FA5):
        prefix = chr(x) + "zz"
        r = (INT_MIN - 961 * java_hash(prefix)) % (1 << 32)
        a = min(r // 31, 0xFFFF)
        b = r - 31 * a
        if 0 <= b <= 0xFFFF and not (0xD800 <= a <= 0xDFFF or 0xD800 <= b <= 0xDFFF):
            return prefix + chr(a) + chr(b)
    raise AssertionError("no string found")


def test_index_key_hash_maps_int_min_to_zero():
    assert index_key_hash("polygenelubricants") == 0
    constructed = _min_value_string()
    assert java_hash(constructed) == INT_MIN == by_formula(constructed)
    assert index_key_hash(constructed) == 0


def test_tags_code_is_hash_of_the_whole_tags_string():
    assert tags_code("TAG1") == java_hash("TAG1")
    assert tags_code("TagA||TagB") == java_hash("TagA||TagB")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_java_hash_matches_formula(s):
    h = java_hash(s)
    assert h == by_formula(s)
    assert INT_MIN <= h <= INT_MAX
    assert 0 <= index_key_hash(s) <= INT_MAX


def test_subscription_codes():
    assert subscription_codes(None) is None
    assert subscription_codes("*") is None
    # RocketMQ's FilterAPI: only a whole "*" is everything; in a list it is a tag
    assert subscription_codes("TagA || *") == frozenset({java_hash("TagA"), java_hash("*")})
    assert subscription_codes("||") == frozenset()     # no tag: nothing matches
    assert subscription_codes("  ") is None
    assert subscription_codes("TagA || TagB") == frozenset({java_hash("TagA"), java_hash("TagB")})
    assert subscription_codes(" TagA ||TagB|| ") == frozenset({java_hash("TagA"), java_hash("TagB")})


def test_tags_match_rechecks_the_string():
    assert tags_match(None, None) and tags_match("*", "x")
    assert tags_match("TagA || TagB", "TagB")
    assert not tags_match("TagA || TagB", "TagC")
    assert not tags_match("TagA", None)
    # "Aa" and "BB" share a hash: the code filter passes both, the re-check does not.
    assert java_hash("Aa") in subscription_codes("BB")
    assert not tags_match("BB", "Aa")


def test_java_hash_matches_the_utf16_recurrence_for_long_and_mixed_strings():
    import random
    from array import array

    def reference(s):
        units = array("H")
        units.frombytes(s.encode("utf-16-le"))
        h = 0
        for u in units:
            h = (31 * h + u) & 0xFFFFFFFF
        return h - (1 << 32) if h & 0x80000000 else h

    rng = random.Random(7)
    alphabet = "abcXYZ019#%_-é中😀"
    for n in list(range(0, 20)) + [255, 256, 257, 600]:
        s = "".join(rng.choice(alphabet) for _ in range(n))
        assert java_hash.__wrapped__(s) == reference(s), s


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), min_size=0, max_size=40), st.text(min_size=1, max_size=300))
def test_index_key_hashes_equals_one_at_a_time(keys, one):
    """Batches of any keys, and 16+ keys of one ASCII width (the numpy path), including the
    string whose hash is Integer.MIN_VALUE (its index hash is 0)."""
    assert index_key_hashes(keys).tolist() == [index_key_hash(k) for k in keys]
    same = [one] * 20 + ["polygenelubricants"[:len(one)]] * 3
    assert index_key_hashes(same).tolist() == [index_key_hash(k) for k in same]
    assert index_key_hashes(["polygenelubricants"] * 17).tolist() == [0] * 17
    ascii_keys = ["BenchTopic#%032X" % (i * 2654435761) for i in range(64)]
    assert index_key_hashes(ascii_keys).tolist() == [index_key_hash(k) for k in ascii_keys]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30), st.lists(st.text(max_size=12), max_size=30),
       st.text(alphabet=st.characters(max_codepoint=127), min_size=1, max_size=40),
       st.integers(0, 40))
def test_index_key_hashes_with_a_prefix_hash_the_joined_keys(prefix, keys, one, copies):
    """A prefix (`topic#`) is hashed as if joined to each key, on both the numpy path (16+
    ASCII keys of one width) and the one-at-a-time path."""
    assert index_key_hashes(keys, prefix).tolist() == [index_key_hash(prefix + k) for k in keys]
    same = [one[::-1]] * copies + [one] * 16
    assert index_key_hashes(same, prefix).tolist() == [index_key_hash(prefix + k) for k in same]
    uniq = ["%032X" % (i * 2654435761) for i in range(40)]
    assert index_key_hashes(uniq, "BenchTopic#").tolist() == [
        index_key_hash("BenchTopic#" + k) for k in uniq]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30), st.integers(0, 300), st.integers(0, 20), st.data())
def test_index_key_hashes_of_a_byte_matrix_hash_its_rows_as_keys(prefix, width, n, data):
    """Keys given as rows of ASCII bytes (what the dispatcher hands over for UNIQ_KEYs),
    of any width, hash as the strings they spell."""
    rows = data.draw(st.lists(st.binary(min_size=width, max_size=width).map(
        lambda b: bytes(c & 0x7F for c in b)), min_size=n, max_size=n))
    units = np.frombuffer(b"".join(rows), np.uint8).reshape(n, width)
    keys = [r.decode("ascii") for r in rows]
    assert index_key_hashes(units, prefix).tolist() == [index_key_hash(prefix + k) for k in keys]
