"""The values of the configuration that have a syntax of their own, and the error every bad
key or value raises: RocketMQ's `messageDelayLevel` list and HOST:PORT addresses (core.config
checks every other value against its field's type and bounds)."""
from __future__ import annotations

import ipaddress
import re

_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY_ITEM = re.compile(r"^([0-9]+)([smhd])$")


class ConfigError(ValueError):
    """A configuration key or value that cannot be used; the message names the key."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """RocketMQ's messageDelayLevel ("1s 5s 10s 30s 1m ... 2h": one delay per level, a whole
    number and a unit s, m, h or d) as ms per level; ConfigError naming the key otherwise."""
    items = text.split()
    out = []
    for item in items:
        m = _DELAY_ITEM.match(item)
        if m is None or int(m.group(1)) == 0:
            raise ConfigError(f"message_delay_level = {text!r}: {item!r} is not a delay; give "
                              "delays such as '1s 5s 10s 1m 2h 1d' (a whole number above 0 and "
                              "a unit s, m, h or d, separated by spaces)", "message_delay_level")
        out.append(int(m.group(1)) * _DELAY_UNITS_MS[m.group(2)])
    if not out:
        raise ConfigError(f"message_delay_level = {text!r}: give at least one delay", "message_delay_level")
    return tuple(out)


def parse_host_port(key: str, text: str, ip_literal: bool) -> tuple[str, int]:
    """(host, port) of `text`, for key `key`; with `ip_literal` the host must be an IP address."""
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    allowed = ("an IP address and port, e.g. '127.0.0.1:10911' or '[::1]:10911'" if ip_literal
               else "host:port, e.g. '10.0.0.2:10912'")
    if not sep or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ConfigError(f"{key} = {text!r}: must be {allowed}", key)
    if ip_literal:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"{key} = {text!r}: must be {allowed}", key) from None
    return host, int(port_text)
