"""`mqstore keys [--store DIR] --new NAME [--role ROLE] [--topics LIST] [--groups LIST]
[--out DIR2]`, `mqstore keys --list`, `mqstore keys --revoke NAME`: the CURVE keys of a secure
store (docs/OPERATIONS.md, "Security").

`--new` makes a key pair in pyzmq's certificate format in DIR2 (default: the current
directory): NAME.key (public) and NAME.key_secret (the secret, readable by its owner only: give
it to the client, and only to it), and registers the public half with its permissions in the
store's config/keys/acl.json. `--role`: admin (everything), producer (put to --topics),
consumer (read and commit --topics with --groups), replica (follow this store as a slave);
--topics and --groups take names or patterns separated by commas (default `*`, all). The
store's own pair (config/keys/server.key, what clients are given as the server key) is made
here too when it does not exist yet, else at the first secure start.

`--list` prints every key: name, role, rights, revoked or not, the public key. `--revoke NAME`
marks it revoked: a running store refuses its next connection and its next request. Works on
a running store or a stopped one (the file is replaced whole).

Exit status: 0 done, 2 for a usage error (no store directory, a bad name or role, a name
registered already, an unknown key to revoke).
"""
from __future__ import annotations

import argparse
import os

from ipc.keyring import ROLES, KeyDirectory, KeyringError, check_name, make_pair, read_public, \
    rights_for_role
from supervisor.cli import UsageError, add_store_options, store_config


def add_parser(subparsers):
    p = subparsers.add_parser("keys", help="make, list and revoke the CURVE keys of a secure store",
                              description="\n\n".join(__doc__.split("\n\n")[:3]),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_store_options(p)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--new", metavar="NAME", help="make a key pair NAME.key / NAME.key_secret and register it")
    what.add_argument("--list", action="store_true", help="list the registered keys")
    what.add_argument("--revoke", metavar="NAME", help="revoke the key NAME")
    p.add_argument("--role", choices=ROLES, default="producer",
                   help="with --new: what the key may do (default producer)")
    p.add_argument("--topics", metavar="LIST", help="with --new: topics (names or patterns, comma-separated; default *)")
    p.add_argument("--groups", metavar="LIST", help="with --new, a consumer: its groups (default *)")
    p.add_argument("--out", metavar="DIR2", default=".",
                   help="with --new: where the two key files go (default the current directory)")
    return p


def _split(text):
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def run(args) -> int:
    config = store_config(args)
    keys = KeyDirectory(config.store_path_root_dir)
    try:
        if args.list:
            return _list(keys)
        if args.revoke:
            rec = keys.revoke(args.revoke)
            print(f"revoked {rec.name} ({rec.role}): a running store refuses it from its next "
                  "connection and request")
            return 0
        return _new(keys, args)
    except KeyringError as e:
        raise UsageError(str(e)) from None


def _new(keys: KeyDirectory, args) -> int:
    check_name(args.new)
    if args.new in keys.records():
        raise UsageError(f"a key named {args.new!r} is registered already (revoke it or choose another name)")
    if args.groups and args.role != "consumer":
        raise UsageError("--groups is for --role consumer")
    if args.topics and args.role not in ("producer", "consumer"):
        raise UsageError(f"--topics is for --role producer or consumer (an {args.role} key has no topic list)")
    if keys.ensure_server_pair():
        print(f"made the store's server key pair; give clients {keys.server_public_path}")
    public_path, secret_path = make_pair(os.path.abspath(args.out), args.new)
    public = read_public(public_path).decode("ascii")
    keys.register(rights_for_role(args.new, public, args.role, _split(args.topics), _split(args.groups)))
    print(f"{args.new} ({args.role}): public {public_path}, secret {secret_path} (give the secret "
          f"to the client with {keys.server_public_path})")
    return 0


def _list(keys: KeyDirectory) -> int:
    records = keys.records()
    if not records:
        print("no keys registered")
        return 0
    for rec in records.values():
        rights = []
        if rec.admin:
            rights.append("admin")
        if rec.put:
            rights.append("put " + ",".join(rec.put))
        if rec.read:
            rights.append("read " + ",".join(rec.read))
        if rec.groups and not rec.admin:
            rights.append("groups " + ",".join(rec.groups))
        if rec.replica:
            rights.append("replica")
        state = "REVOKED" if rec.revoked else "active"
        print(f"{rec.name:<20} {rec.role:<9} {state:<8} {'; '.join(rights):<40} {rec.public_key}")
    return 0
