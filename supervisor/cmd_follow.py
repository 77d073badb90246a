"""`mqstore follow [--store DIR | --address A] --master HOST:PORT [--timeout S]`: turn a
running store into a slave of another (docs/OPERATIONS.md, "Replication").

The store stops taking puts and follows the master at HOST:PORT (its ha_listen_port, by
default its front-door port + 1). This is how an old master rejoins after a slave was
promoted: when its log holds bytes the new master does not (puts no slave acknowledged), the
new master tells it where their histories part, and the store truncates its log, consume
queues and index there, durably, before it follows. The change lasts until the store stops;
its configuration decides the next start.

Exit status: 0 once the store runs as a slave, 1 when it is not running, refused or did not
finish within --timeout, 2 for a usage error (a bad --master).
"""
from __future__ import annotations

import argparse

from core.config import ConfigError, StoreConfig
from supervisor import role_request
from supervisor.cli import UsageError
from supervisor.store_access import add_store_arguments


def add_parser(subparsers):
    p = subparsers.add_parser("follow", help="turn a running store into a slave of a master",
                              description="\n\n".join(__doc__.split("\n\n")[:3]),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_store_arguments(p)
    p.add_argument("--master", required=True, metavar="HOST:PORT",
                   help="the master's replication address (its ha_listen_port)")
    role_request.add_common(p)
    return p


def run(args) -> int:
    try:
        StoreConfig(ha_master_address=args.master)
    except ConfigError as e:
        raise UsageError(f"--master {args.master!r}: {str(e).split(': ', 1)[-1]}") from None
    return role_request.request(args, "follow", {"master": args.master}, want_slave=True, done="following")
