"""The text form of message fields in `mqstore consume` and `query`: one line, no control
characters, and no two different bodies shown alike."""
from __future__ import annotations

from hypothesis import given, strategies as st

from supervisor.printable import printable, printable_body


def test_controls_backslash_and_bad_bytes_are_escaped():
    assert printable_body(b"a\tb\nc\rd\x1b[2Je\\f\xff\x7f") == "a\\tb\\nc\\rd\\x1b[2Je\\\\f\\xff\\x7f"
    assert printable("k1\tk2\x85") == "k1\\tk2\\u0085"
    assert printable_body("héllo €".encode()) == "héllo €"


def unescape(text: str) -> bytes:
    out, i = bytearray(), 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "x":
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        elif nxt == "u":
            out += chr(int(text[i + 2:i + 6], 16)).encode()
            i += 6
        else:
            out += {"\\": b"\\", "t": b"\t", "n": b"\n", "r": b"\r"}[nxt]
            i += 2
    return bytes(out)


@given(st.binary(max_size=200))
def test_a_body_is_one_line_without_controls_and_can_be_read_back(body):
    shown = printable_body(body)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in shown)
    assert unescape(shown) == body
