"""The `mqstore` console script: an argparse parser built from a registry of command modules.

Every subcommand lives in its own module, `supervisor/cmd_<name>.py`, which exposes
`add_parser(subparsers) -> argparse.ArgumentParser` (it adds its subcommand, with help for every
option) and `run(args) -> int` (the exit code). The registry is the package itself: each
`cmd_*` module found in `supervisor/` is a command, so adding a command is adding a module.

Shared here: the store options every command takes (`--store`, `--config`), how they become a
`StoreConfig`, and the exit codes. 0 means done (and clean, for a check), 1 that the store has
problems, 2 a usage error: bad options, a bad configuration, a missing store directory or a
store locked by a running process. A command raises `UsageError` (or lets `ConfigError` or
`StoreLockedError` through) and `main` prints the one-line reason to stderr and returns 2.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import signal
import sys
import tomllib

from core.config import ENV_PREFIX, ConfigError, StoreConfig
from core.files.store_files import StoreLockedError

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
DEFAULT_STORE = "./store-data"
COMMAND_PREFIX = "cmd_"
EXIT_CODES_HELP = "exit codes: 0 done and clean, 1 the store has problems, 2 usage error " \
                  "(bad options or config, no store, store locked)"
MAIN_EXIT_CODES_HELP = "exit codes: 0 done (and, for check and recover, clean), 1 the store is not " \
                       "running, refused a request or (check, recover) has problems, 2 usage " \
                       "error (bad options or config, no store directory, store locked)"


class UsageError(Exception):
    """A command cannot run as asked; `main` prints the reason and exits 2."""


class SupervisorError(RuntimeError):
    """The store cannot start; the message says why and what to do. `exit_code` 2 marks a
    usage error (a port in use, the store locked), 1 anything else (`mqstore start` exits
    with it)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def command_modules(only: str | None = None) -> list:
    """The command modules of the registry (`supervisor/cmd_*.py`), by name; with `only` the
    name of one of them (the command a command line asks for), that one alone: a command pays
    for its own imports, not for every other command's."""
    import supervisor
    names = sorted(m.name for m in pkgutil.iter_modules(supervisor.__path__)
                   if m.name.startswith(COMMAND_PREFIX))
    if only is not None and COMMAND_PREFIX + only in names:
        names = [COMMAND_PREFIX + only]
    return [importlib.import_module(f"supervisor.{name}") for name in names]


def _asked_command(argv) -> str | None:
    """The command word of `argv` when it comes first (`mqstore start ...`); None otherwise
    (no command, `--help`, an option first): then every command is loaded, for the usage."""
    argv = sys.argv[1:] if argv is None else argv
    return argv[0] if argv and not argv[0].startswith("-") else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mqstore", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="mqstore: Apache RocketMQ's message store in Python. Every command works on "
                    "one store directory (--store, default ./store-data); `mqstore COMMAND --help` "
                    "explains a command and its options.",
        epilog=MAIN_EXIT_CODES_HELP)
    sub = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    sub.required = True
    for module in command_modules(only):
        module.add_parser(sub).set_defaults(run=module.run)
    parser.commands = sub.choices          # name -> its parser, for errors in its own usage
    return parser


# tcp://HOST:PORT with HOST a name, an IPv4 address or a bracketed IPv6 address.
_ADDRESS = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[^:/\s\[\]]+):([0-9]{1,5})")


def check_address(address) -> None:
    """UsageError unless `address` (of `--address`) is tcp://HOST:PORT with PORT 1..65535."""
    if address is None:
        return
    match = _ADDRESS.fullmatch(address)
    if match is None or not 0 < int(match[2]) <= 65535:
        raise UsageError(f"--address {address!r}: expected tcp://HOST:PORT with PORT 1..65535")


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """`--store DIR` and `--config FILE`, as every command takes them."""
    parser.add_argument("--store", metavar="DIR",
                        help="the store directory (default: store_path_root_dir from --config or "
                             f"MQSTORE_STORE_PATH_ROOT_DIR when set there, else {DEFAULT_STORE})")
    parser.add_argument("--config", metavar="FILE",
                        help="a TOML file of store settings (RocketMQ's MessageStoreConfig names in "
                             "snake_case, at the top level or under [store]); MQSTORE_<KEY> "
                             "environment variables override it")


def store_config(args, must_exist: bool = True) -> StoreConfig:
    """The StoreConfig of `--config`, the environment and `--store`; with `must_exist`, a
    UsageError when the store directory is missing."""
    root = args.store if args.store is not None or configured(args.config, "store_path_root_dir") \
        else DEFAULT_STORE
    cfg = StoreConfig.from_sources(args.config, store_path_root_dir=root)
    if must_exist and not os.path.isdir(cfg.store_path_root_dir):
        raise UsageError(f"no store directory at {cfg.store_path_root_dir}")
    return cfg


def configured(toml_path, key: str) -> bool:
    """Whether the environment (MQSTORE_<KEY>) or the TOML file sets `key`."""
    if ENV_PREFIX + key.upper() in os.environ:
        return True
    try:
        with open(toml_path, "rb") as f:
            data = tomllib.load(f)
    except (TypeError, OSError, tomllib.TOMLDecodeError):
        return False                      # no file; or from_sources reports what is wrong
    section = data.get("store")
    return key in data or (isinstance(section, dict) and key in section)


def main(argv=None) -> int:
    try:
        parser = build_parser(_asked_command(argv))      # imports the command's module
    except KeyboardInterrupt:             # Ctrl-C while a slow first import still runs
        print("mqstore: interrupted", file=sys.stderr)
        return 130
    args, unknown = parser.parse_known_args(argv)
    if unknown:                           # argparse would print the top-level usage
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        check_address(getattr(args, "address", None))
        return args.run(args)
    except (UsageError, ConfigError, StoreLockedError) as exc:
        print(f"mqstore {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"mqstore {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:                  # `mqstore consume ... | head`: the reader is done
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy, so that the exception classes
    # the command modules raise (imported from supervisor.cli) are the ones caught.
    from supervisor.cli import main as _main
    raise SystemExit(_main())
