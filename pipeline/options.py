"""The data source's options, checked: Spark hands them over as strings under lower-cased names
(`.option("batchSize", 50)` arrives as {"batchsize": "50"}); a missing or bad one is a
ValueError that names the option and says what it takes."""
from __future__ import annotations

import os

from core.meta.topics import topic_name_problem


def text(options, name: str, default: str | None = None) -> str | None:
    value = options.get(name.lower())
    return default if value is None or value == "" else str(value)


def integer(options, name: str, default: int, minimum: int = 0) -> int:
    value = text(options, name)
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"option {name}={value!r}: a whole number is needed") from None
    if n < minimum:
        raise ValueError(f"option {name}={n}: at least {minimum}")
    return n


def flag(options, name: str, default: bool) -> bool:
    value = text(options, name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise ValueError(f"option {name}={value!r}: true or false")
    return value.lower() == "true"


def store_root(options) -> str:
    """The `path` option: a store's root directory (it holds commitlog/)."""
    path = text(options, "path")
    if path is None:
        raise ValueError('option path is required: the store\'s root directory, '
                         'e.g. .option("path", "./store-data")')
    return os.path.abspath(os.path.expanduser(path))


def topics(options) -> frozenset | None:
    """The `topic` option: one topic or several separated by commas; None: every topic."""
    value = text(options, "topic")
    if value is None:
        return None
    names = frozenset(t.strip() for t in value.split(","))
    for name in names:
        problem = topic_name_problem(name)
        if problem:
            raise ValueError(f"option topic={value!r}: {problem}")
    return names


def one_topic(options) -> str:
    names = topics(options)
    if names is None or len(names) != 1:
        raise ValueError("option topic is required and names one topic")
    return next(iter(names))


def client_keys(options) -> dict:
    """A secure store (docs/OPERATIONS.md "Security"): the `keyFile` option (this client's
    NAME.key_secret) and `serverKeyFile` (the store's server.key; default
    `<path>/config/keys/server.key`), as the clients' `key_file=`/`server_key_file=`; {}
    without `keyFile`. The files must be readable where the tasks run (every executor)."""
    key = text(options, "keyFile")
    server = text(options, "serverKeyFile")
    if key is None:
        if server is not None:
            raise ValueError("option serverKeyFile needs keyFile (the client's NAME.key_secret)")
        return {}
    if server is None:
        if text(options, "path") is None:
            raise ValueError("option keyFile with address needs serverKeyFile (the store's server.key)")
        server = os.path.join(store_root(options), "config", "keys", "server.key")
    return {"key_file": os.path.abspath(os.path.expanduser(key)),
            "server_key_file": os.path.abspath(os.path.expanduser(server))}


def endpoint(options) -> tuple[str | None, str | None]:
    """(address, store root) of a running store, one of them None: the `address` option
    (tcp://host:port), or the store at `path`, whose run/address the clients read again when
    the store comes back on other ports. A store at `path` that is not running is refused."""
    given = text(options, "address")
    if given is not None:
        return given, None
    if text(options, "path") is None:
        raise ValueError("option address (tcp://host:port of a running store) or path (its "
                         "root directory) is required")
    from ipc.client_common import resolve_address
    root = store_root(options)
    resolve_address(store=root)                 # ConnectionError when it is not running
    return None, root
