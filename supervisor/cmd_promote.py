"""`mqstore promote [--store DIR | --address A] [--role ROLE] [--timeout S]`: turn a running
slave into a master (docs/OPERATIONS.md, "Replication").

The store stops following its master, records a new epoch at the end of its log
(config/epochs.json), and takes puts as ASYNC_MASTER (or `--role SYNC_MASTER`); its ha process
then serves slaves on its ha_listen_port. Use it when the master is gone for good: a master
that still runs must not take puts any more (stop it, then make it rejoin with `mqstore
follow`). The change lasts until the store stops; its configuration decides the next start.

Exit status: 0 once the store runs as a master, 1 when it is not running, refused (it is a
master already, or busy) or did not finish within --timeout, 2 for a usage error.
"""
from __future__ import annotations

import argparse

from supervisor import role_request
from supervisor.store_access import add_store_arguments


def add_parser(subparsers):
    p = subparsers.add_parser("promote", help="turn a running slave into a master (new epoch)",
                              description="\n\n".join(__doc__.split("\n\n")[:3]),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_store_arguments(p)
    p.add_argument("--role", type=str.upper, choices=("ASYNC_MASTER", "SYNC_MASTER"), default="ASYNC_MASTER",
                   help="the master's broker_role (default ASYNC_MASTER)")
    role_request.add_common(p)
    return p


def run(args) -> int:
    return role_request.request(args, "promote", {"role": args.role}, want_slave=False, done="promoted")
