"""`mqstore start [--config FILE] [--store DIR] [--host H] [--port P] [--metrics-port M]
[--role ROLE] [--master HOST:PORT] [--secure] [--foreground]`: run a store under the supervisor,
in this terminal, until Ctrl-C, SIGTERM or `mqstore stop`.

The configuration is the TOML file, then `MQSTORE_*` variables, then `--store` and `--port`
(core.config); without `--store` or a store directory in the configuration the store is
`./store-data`, as for every command (supervisor.cli). The front door listens on
`--port` (default the `listen_port` key, 10911), the ha process (replication) on port+1
unless `ha_listen_port` is configured, the appender on port+2 and the reader on port+3;
`--port 0` picks free ports. `--role` and `--master` set `broker_role` and
`ha_master_address` (`--master` alone means a slave). `--secure` sets `security = "curve"`:
every tcp socket is a CurveZMQ server admitting only the keys of `config/keys/` (`mqstore
keys`; the store's own pair is made at the first secure start).
Once every service runs, the supervisor prints
`mqstore ready at tcp://HOST:PORT` on stdout (and writes it to `<store>/run/address`).
Records are stamped with the store host the store listens at (`--host` when it is an IP
address other than 0.0.0.0 or ::, else 127.0.0.1, and PORT), which every offset message id
encodes, unless the configuration sets `store_host`.

Recovery shows a progress bar on a terminal (percent of the bytes to scan) and log lines
otherwise. The supervisor's log goes to stderr and to `<store>/logs/supervisor.log`; each
service logs to `<store>/logs/<service>.log`. Ctrl-C (or SIGTERM, or SIGHUP when the terminal
closes) stops cleanly; a second one kills the services at once (the abort file then stays and
the next start runs the abnormal recovery).

The supervisor always runs in the foreground (as under systemd or a container runtime);
`--foreground` says so explicitly.

Exit status: 0 after a stop (`logs/supervisor.log` says whether it was clean), 1 when the
store cannot start or recover (the message says why), 2 for a usage error (bad option or
configuration, format parameters other than the store was created with, a port in use, the
store locked by a running supervisor), 130 when interrupted
during recovery.
"""
from __future__ import annotations

import logging
import os
import sys

from core.config import StoreConfig
from supervisor.cli import EXIT_USAGE, UsageError, add_store_options, configured, store_config
from supervisor.progress import ProgressBar
from supervisor.terminal import SafeStream


def add_parser(subparsers):
    p = subparsers.add_parser("start", help="start a store and supervise its services",
                              description=__doc__.split("\n\n")[0])
    add_store_options(p)
    p.add_argument("--host", default="127.0.0.1", metavar="H",
                   help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, metavar="P",
                   help="front door port (default: listen_port, 10911); the appender uses P+2, "
                        "the reader P+3; 0 picks free ports")
    p.add_argument("--metrics-port", type=int, metavar="M",
                   help="serve Prometheus metrics at http://H:M/metrics (0 picks a free port; "
                        "`mqstore status` shows it)")
    p.add_argument("--role", type=str.upper, choices=("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"),
                   help="broker_role: ASYNC_MASTER (default), SYNC_MASTER (a put is answered once a "
                        "slave has it) or SLAVE (follows --master, refuses puts, serves reads)")
    p.add_argument("--master", metavar="HOST:PORT",
                   help="ha_master_address: the master's replication port (its ha_listen_port, "
                        "by default its --port + 1); implies --role SLAVE when --role is not given")
    p.add_argument("--secure", action="store_true",
                   help='security = "curve": CurveZMQ on every tcp socket, only keys registered with '
                        "`mqstore keys --new` admitted, each with its permissions")
    p.add_argument("--foreground", action="store_true",
                   help="stay in the foreground (the only mode; accepted for scripts)")
    return p


def load_config(args) -> StoreConfig:
    """The store options as every command reads them (supervisor.cli), then `--port`."""
    config = store_config(args, must_exist=False)
    if args.port is not None:
        config = config.replace(listen_port=args.port)
    role = args.role or ("SLAVE" if args.master else None)
    if role is not None:
        config = config.replace(broker_role=role)
    if args.master is not None:
        config = config.replace(ha_master_address=args.master)
    if args.secure:
        config = config.replace(security="curve")
    return config


def ha_port(args, config: StoreConfig) -> int | None:
    """The configured ha_listen_port (0: any free port), or None: the front door's port + 1."""
    return config.ha_listen_port if configured(args.config, "ha_listen_port") else None


def check_store_dir(root: str) -> None:
    """Create the store directory; UsageError when it cannot be (a file is in the way, or the
    place refuses it), before anything else is written."""
    if os.path.isfile(root):
        raise UsageError(f"--store {root}: not a directory")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        reason = "a file in its path is not a directory" if isinstance(exc, NotADirectoryError) \
            else exc.strerror
        raise UsageError(f"--store {root}: cannot create the store directory: {reason}") from None


def setup_logging(config: StoreConfig, err) -> None:
    os.makedirs(config.logs_dir, exist_ok=True)
    root = logging.getLogger("mqstore")
    root.setLevel(logging.INFO)
    root.propagate = False
    to_file = logging.FileHandler(os.path.join(config.logs_dir, "supervisor.log"))
    to_file.setFormatter(logging.Formatter(
        "%(asctime)s supervisor[%(process)d] %(levelname)s %(name)s: %(message)s"))
    to_err = logging.StreamHandler(err)
    to_err.setFormatter(logging.Formatter("mqstore: %(message)s"))
    for handler in (to_file, to_err):
        root.addHandler(handler)
    core_log = logging.getLogger("core")          # the engine's recovery and config lines
    core_log.setLevel(logging.INFO)
    core_log.propagate = False
    core_log.addHandler(to_file)
    core_err = logging.StreamHandler(err)         # its warnings (a recovery cut) on the terminal
    core_err.setLevel(logging.WARNING)
    core_err.setFormatter(to_err.formatter)
    core_log.addHandler(core_err)


def run(args) -> int:
    config = load_config(args)                 # ConfigError: supervisor.cli reports it, exit 2
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        print(f"mqstore start: --metrics-port {args.metrics_port}: must be between 0 and 65535",
              file=sys.stderr)
        return EXIT_USAGE
    from supervisor.cli import SupervisorError
    from supervisor.ports import check_host, check_ports
    try:                                        # before anything is written in the store
        check_host(args.host)
        check_ports(args.host, config.listen_port, ha_port(args, config))
    except SupervisorError as e:
        raise UsageError(str(e)) from None
    check_store_dir(config.store_path_root_dir)
    out, err = SafeStream(sys.stdout), SafeStream(sys.stderr)   # a closed pipe never stops it
    setup_logging(config, err)
    from supervisor.daemon import Supervisor   # not imported by the other commands
    from supervisor.metrics import Metrics
    metrics = Metrics(args.metrics_port, args.host) if args.metrics_port is not None else None
    sup = Supervisor(config, host=args.host, port=config.listen_port, metrics=metrics,
                     progress=ProgressBar("recovering", stream=err), out=out,
                     store_host_configured=configured(args.config, "store_host"),
                     ha_port=ha_port(args, config))
    sup.install_signal_handlers()
    logging.getLogger("mqstore").info("starting the store at %s", config.store_path_root_dir)
    return sup.run()
