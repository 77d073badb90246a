"""The ports of a store's services: checking that the front door, appender, reader and
replication ports can be listened on before anything starts (`check_host`, `check_ports`),
picking free ones for port 0 (`free_port`, below the kernel's ephemeral range), the plan of
endpoints (`plan_endpoints`), and the store host stamped on every record, derived from the
front door's endpoint (`listening_store_host`).

The store host is, as in RocketMQ, the store's own address and listening port (the broker's
listenPort, 10911): unless the configuration sets `store_host`, `run_dir.prepare_run` derives
it from the front door's endpoint, the address clients are given (the port planned here,
which with port 0 is the free port picked for it), before any service starts.
"""
from __future__ import annotations

import ipaddress
import secrets
import socket

from supervisor.cli import SupervisorError


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ports it hands out by itself (outgoing connections, bind to 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = map(int, f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str, taken=()) -> int:
    """A port free on `host` now, for a service that binds it a moment later. It is picked
    below the ephemeral range: a port the kernel handed out (bind to 0) could be given again to
    any outgoing connection before the service binds it, and the service's bind would fail."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    lo = ephemeral_range()[0]
    rng = secrets.SystemRandom()
    for _ in range(200):
        port = rng.randrange(max(1024, lo - 16384), lo) if lo > 2048 else 0
        if port in taken:
            continue
        with socket.socket(family) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise SupervisorError(f"no free port found on {host}; choose one with --port", exit_code=2)


def port_error(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on (the OS's words), or None when it can."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.strerror or str(e)
    return None


def check_host(host: str) -> None:
    """SupervisorError (usage) unless `host` resolves and is an address of this machine."""
    try:
        socket.getaddrinfo(host.strip("[]"), None)
    except (socket.gaierror, UnicodeError) as e:
        raise SupervisorError(f"--host {host}: cannot resolve it ({getattr(e, 'strerror', e)})",
                              exit_code=2) from None
    reason = port_error(host.strip("[]"), 0)
    if reason:
        raise SupervisorError(f"--host {host}: cannot listen there ({reason}); give an address "
                              "of this machine, 0.0.0.0 or ::", exit_code=2)


def check_ports(host: str, port: int, ha_port: int | None = None) -> None:
    """SupervisorError naming the port and its role unless port, port+2 and port+3 are free,
    and the replication port: `ha_port` when one is configured (0: any), else port+1 (port
    0: free ports are picked later, nothing to check)."""
    wanted = [(ha_port, "replication (ha_listen_port)")] if ha_port else []
    if port:
        if port + 3 > 65535:
            raise SupervisorError(f"--port {port}: the store also needs port+1 to port+3, so the "
                                  "port must be at most 65532", exit_code=2)
        wanted += [(port, "front door"), (port + 2, "appender"), (port + 3, "reader")]
        if ha_port is None:
            wanted.append((port + 1, "replication (ha_listen_port: --port + 1)"))
    for p, role in wanted:
        reason = port_error(host, p)
        if reason:
            raise SupervisorError(
                f"cannot listen on {host}:{p} for the {role}: {reason}; another mqstore (or "
                "another program) is using it; choose another port with --port (the store "
                "uses --port, --port+2 and --port+3)", exit_code=2)


def plan_endpoints(host: str, port: int, ha_port: int | None = None) -> dict:
    """Front door at `port`, appender at port+2, reader at port+3; free ports when port is 0.
    The ha process (replication) listens at `ha_port` when it is configured (0: a free port),
    else at port+1 as RocketMQ's haListenPort (the broker's listenPort + 1), or a free port."""
    if port:
        ports = [port, port + 2, port + 3]
    else:
        ports = []
        for _ in range(3):
            ports.append(free_port(host, ports))
    if ha_port is None:
        ha_port = port + 1 if port else 0
    ports.append(ha_port or free_port(host, ports))
    h = f"[{host}]" if ":" in host else host
    return {name: f"tcp://{h}:{p}" for name, p in zip(("front", "appender", "reader", "ha"), ports)}


def listening_store_host(config, endpoints: dict, host: str) -> str:
    """`store_host` for a store whose front door listens at `endpoints["front"]`: that port,
    with `host` when it is an IP address other than a wildcard (0.0.0.0, ::), else the address
    of the configured `store_host` (a wildcard or a name is no address to stamp)."""
    port = int(endpoints["front"].rpartition(":")[2])
    address = config.store_host_tuple[0]
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
        if not ip.is_unspecified:
            address = str(ip)
    except ValueError:
        pass
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
