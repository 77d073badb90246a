"""How the client commands show message fields as text: one line, no control characters.

`printable(text)` and `printable_body(body)` escape what would break a line of tab-separated
fields or reach a terminal as a control sequence: the backslash itself (`\\\\`), tab, newline and
carriage return (`\\t`, `\\n`, `\\r`), every other C0 control character and DEL (`\\xNN`), the
C1 control characters (`\\u0080` to `\\u009f`), and, in a body, the bytes that are not UTF-8
(`\\xNN`, 80 to ff). Everything else is kept as it is, and no two texts are shown alike.
"""
from __future__ import annotations

_ESCAPES = {ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"}
for _c in [*range(0x20), 0x7F]:
    _ESCAPES.setdefault(_c, f"\\x{_c:02x}")
for _c in range(0x80, 0xA0):
    _ESCAPES[_c] = f"\\u{_c:04x}"
for _b in range(0x80, 0x100):                  # undecodable bytes, as "surrogateescape" gives them
    _ESCAPES[0xDC00 + _b] = f"\\x{_b:02x}"
del _c, _b


def printable(text: str) -> str:
    return text.translate(_ESCAPES)


def printable_body(body) -> str:
    return bytes(body).decode("utf-8", "surrogateescape").translate(_ESCAPES)
