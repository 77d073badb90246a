"""The supervisor daemon as operators and clients see it: `mqstore start` as a real process
with every service, the front door (`hello`, `status`, `topics`, `stop`) over a raw DEALER,
clean and unclean stops and the recovery they lead to, `mqstore status` and `mqstore stop`,
the metrics endpoint, and the refusals (port taken, store already running)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.files.store_files import StoreLock
from services.histogram import BUCKETS_MS
from tests.integration.harness import wait_for
from tests.integration.supervised import REPO, SupervisedStore, cli, pid_gone
from tests.integration.supervised import supervised_stores  # noqa: F401 (the `store` fixture)

SERVICES = ["allocator", "flusher", "reput", "ha", "appender", "reader", "scheduler"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def put_some(s: SupervisedStore, topic: str, n: int, size: int = 0) -> list[dict]:
    replies = [s.put(topic, (b"body-%d-" % i).ljust(size, b"x"), keys=f"k{i}") for i in range(n)]
    assert all(r["status"] == "PUT_OK" for r in replies), replies[-1]
    return replies


def test_front_door_and_clean_stop(store):
    s = store().start()
    assert open(s.path("run", "address")).read().strip() == s.address
    assert os.path.exists(s.path("abort"))
    hello, _ = s.call("hello")
    assert hello["status"] == "OK" and hello["version"] == 1
    assert hello["appender"].startswith("tcp://") and hello["reader"].startswith("tcp://")
    assert hello["store"] == s.root

    st = s.status()
    assert [x["name"] for x in st["services"]] == SERVICES
    for svc in st["services"]:
        assert svc["state"] == "RUNNING" and svc["restarts"] == 0
        assert svc["pid"] > 0 and svc["uptime_s"] >= 0
        assert open(s.path("run", f"{svc['name']}.pid")).read().strip() == str(svc["pid"])
        assert {"rss", "cpu"} <= set(svc)
    assert {"wrote", "committed", "flushed", "dispatched", "confirm", "min"} <= set(st["positions"])
    assert "writable" in st["flags"] and st["puts"] == "accepted"
    assert st["supervisor"]["recovery"] == "normal"

    put_some(s, "Orders", 30)
    s.put("Audit", b"x")
    topics, _ = s.call("topics")
    assert {"topic": "Orders", "queues": 4} in topics["topics"]
    assert "Audit" in [t["topic"] for t in topics["topics"]]
    assert wait_for(lambda: s.status()["positions"]["flushed"] > 0, 10)

    unknown, _ = s.call("no_such_op")
    assert unknown["status"] == "ERROR" and unknown["code"] == 2
    control = s.control_name()
    pids = [x["pid"] for x in st["services"]]
    assert s.stop() == 0
    assert all(pid_gone(p) for p in pids)
    assert not os.path.exists(s.path("abort"))
    assert os.listdir(s.path("run")) == []               # no stale sockets or endpoints
    assert not os.path.exists(f"/dev/shm/{control}")
    with StoreLock(s.path("lock")):
        pass


@pytest.mark.slow
def test_restart_after_clean_stop_is_normal_and_keeps_the_data(store):
    s = store().start()
    put_some(s, "Keep", 40, size=500)
    wrote = s.status()["positions"]["wrote"]
    assert wrote > 16384                                 # more than one segment
    segments = lambda: sorted(n for n in os.listdir(s.path("commitlog")) if n.isdigit())
    assert wait_for(lambda: len(segments()) == wrote // 16384 + 2, 10), "no segment made ahead"
    s.signal(signal.SIGTERM)                             # what `kill` and systemd send
    assert s.wait_exit() == 0
    assert not os.path.exists(s.path("abort"))
    assert segments() == [f"{i * 16384:020d}" for i in range(wrote // 16384 + 1)]   # none ahead

    s.start()
    st = s.status()
    assert st["supervisor"]["recovery"] == "normal"
    assert st["positions"]["wrote"] == wrote
    assert st["positions"]["dispatched"] == wrote
    s.signal(signal.SIGINT)                              # Ctrl-C at the terminal
    assert s.wait_exit() == 0
    assert not os.path.exists(s.path("abort"))


def test_killed_supervisor_leaves_abort_and_next_start_recovers_abnormally(store):
    s = store().start()
    replies = put_some(s, "Crash", 25)
    assert wait_for(lambda: s.status()["positions"]["flushed"] >= replies[-1]["phys_offset"], 10)
    st = s.status()
    pids = [x["pid"] for x in st["services"]]
    s.kill()
    assert wait_for(lambda: all(pid_gone(p) for p in pids), 10), "services outlived the supervisor"
    assert os.path.exists(s.path("abort"))

    s.start()
    after = s.status()
    assert after["supervisor"]["recovery"] == "abnormal"
    assert after["positions"]["wrote"] == st["positions"]["wrote"]
    assert all(x["state"] == "RUNNING" for x in after["services"])
    assert s.put("Crash", b"after")["queue_offset"] >= 0
    assert s.stop() == 0
    assert not os.path.exists(s.path("abort"))


@pytest.mark.slow
def test_a_start_unlinks_the_control_block_of_a_killed_tree(store):
    """SIGKILL of the whole tree, Python's resource tracker included (which would otherwise
    unlink the segment when its supervisor dies): the next start removes the dead one's
    control block from /dev/shm instead of leaving its memory there until a reboot."""
    s = store().start()
    control = s.control_name()
    s.kill_tree()
    assert os.path.exists(os.path.join("/dev/shm", control))    # nobody was left to unlink it
    s.start()
    assert not os.path.exists(os.path.join("/dev/shm", control)), "the dead tree's control block"
    assert s.stop() == 0


@pytest.mark.slow
def test_status_and_stop_commands(store):
    s = store().start()
    put_some(s, "Cmd", 5)
    out = cli("status", "--store", s.root, "--json")
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)
    assert [x["name"] for x in st["services"]] == SERVICES
    assert {"wrote", "flushed", "dispatched", "confirm"} <= set(st["positions"])
    assert {"flush", "dispatch", "confirm"} <= set(st["lags"])
    assert st["disk"]["commitlog_bytes"] > 0
    human = cli("status", "--address", s.address)
    assert human.returncode == 0, human.stderr
    assert "SERVICE" in human.stdout and "appender" in human.stdout and "RUNNING" in human.stdout

    out = cli("stop", "--store", s.root)
    assert out.returncode == 0, out.stderr
    assert "stopped" in out.stdout
    assert s.proc.poll() == 0
    gone = cli("status", "--store", s.root)
    assert gone.returncode == 1 and "no store is running" in gone.stderr
    assert cli("stop", "--store", s.root).returncode == 1


def test_a_commitlog_on_a_directory_of_its_own(store, tmp_path):
    """store_path_commit_log (RocketMQ's storePathCommitLog): every service finds the log there."""
    log_dir = str(tmp_path / "disk2" / "commitlog")
    s = store(store_path_commit_log=log_dir).start()
    put_some(s, "Far", 40, size=600)
    assert wait_for(lambda: s.status()["lags"]["dispatch"] == 0, 10)
    assert os.listdir(log_dir) and not os.path.exists(s.path("commitlog"))
    assert s.status()["disk"]["commitlog_bytes"] > 0
    reader = s.call("hello")[0]["reader"]
    pulled, _ = s.call("pull", endpoint=reader, group="g", topic="Far", queue_id=0, offset=0, max_msgs=32)
    assert pulled["status"] == "FOUND" and pulled["count"] == 10
    assert s.stop() == 0
    assert cli("check", "--store", s.root).returncode == 0


def test_second_supervisor_on_the_same_store_is_refused(store):
    s = store().start()
    other = store("other", root=s.root).start(wait_ready=False)
    assert other.wait_exit(30) == 2
    assert "lock" in other.stderr()
    assert s.status()["services"][0]["state"] == "RUNNING"
    assert open(s.path("run", "address")).read().strip() == s.address


def test_port_in_use_is_reported(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = cli("start", "--store", str(tmp_path / "s"), "--port", str(port), timeout=30)
    assert out.returncode == 2
    assert f"127.0.0.1:{port}" in out.stderr and "--port" in out.stderr
    assert not os.path.exists(tmp_path / "s" / "abort")


def histograms(text: str, name: str) -> dict:
    """{label values without le: {"buckets": [(le, count)], "count": n, "sum": s}} of the
    histogram `name` in a Prometheus text exposition."""
    out: dict = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            series = out.setdefault(key, {"buckets": []})
            if sample.name.endswith("_bucket"):
                series["buckets"].append((float(sample.labels["le"]), sample.value))
            else:
                series[sample.name.rpartition("_")[2]] = sample.value
    return out


def check_histogram(series: dict, bounds: list) -> None:
    """Every bound, cumulative, +Inf = _count, and a _sum that the buckets allow."""
    les = [le for le, _ in series["buckets"]]
    counts = [n for _, n in series["buckets"]]
    assert les == sorted(les) and les[-1] == float("inf") and les == bounds, les
    assert counts == sorted(counts), f"not cumulative: {series['buckets']}"
    assert "count" in series and "sum" in series, series
    assert series["count"] == counts[-1] > 0
    lower = upper = 0.0
    for (le, n), (prev_le, prev_n) in zip(series["buckets"], [(0.0, 0.0)] + series["buckets"]):
        if n > prev_n:                   # observations in (prev_le, le]
            lower += (n - prev_n) * prev_le
            upper += (n - prev_n) * le
    assert lower - 1e-9 <= series["sum"] <= upper + 1e-9, (series, lower, upper)


@pytest.mark.slow
def test_metrics_endpoint(store):
    port = free_port()
    s = store().start("--metrics-port", str(port))
    put_some(s, "Metered", 12)

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    assert wait_for(lambda: 'mqstore_puts_total{topic="Metered"} 12.0' in scrape(), 10)
    assert wait_for(lambda: histograms(scrape(), "mqstore_put_latency_seconds")
                    .get((("status", "PUT_OK"),), {}).get("count") == 12, 10)
    assert wait_for(lambda: ((("operation", "flush"), ("service", "flusher"))
                             in histograms(scrape(), "mqstore_service_latency_seconds")), 10)
    text = scrape()
    bounds = [b / 1000 for b in BUCKETS_MS]
    puts = histograms(text, "mqstore_put_latency_seconds")
    for series in puts.values():
        check_histogram(series, bounds)
    assert puts[(("status", "PUT_OK"),)]["count"] == 12 and puts[(("status", "PUT_OK"),)]["sum"] > 0
    for series in histograms(text, "mqstore_service_latency_seconds").values():
        check_histogram(series, bounds)
    assert 'mqstore_put_latency_seconds_bucket{le="+Inf",status="PUT_OK"} 12.0' in text
    assert 'mqstore_service_rss_bytes{service="appender"}' in text
    assert 'mqstore_service_restarts_total{service="reput"} 0.0' in text
    assert 'mqstore_position_bytes{position="wrote"}' in text
    assert 'mqstore_lag_bytes{lag="flush"}' in text
    assert s.stop() == 0


def test_metrics_port_zero_picks_a_free_port_that_status_shows(store):
    # Regression: --metrics-port 0 was refused ("must be between 1 and 65535") while --port 0
    # picks free ports, so several stores with metrics needed hand-picked ports.
    s = store().start("--metrics-port", "0")
    url = s.status()["supervisor"]["metrics"]
    assert url.startswith("http://127.0.0.1:") and not url.startswith("http://127.0.0.1:0/")

    def scrape() -> str:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    assert wait_for(lambda: "mqstore_position_bytes" in scrape(), 10)   # after the first snapshot
    shown = cli("status", "--store", s.root)
    assert shown.returncode == 0 and f"metrics {url}" in shown.stdout, shown
    assert s.stop() == 0


@pytest.mark.slow
def test_a_damaged_record_is_told_on_stderr_and_the_log_kept_behind_it(store):
    # Regression: one flipped body byte made the next start drop every record after it, and
    # the operator saw only "recovery done: the log spans [0, X)". Now (integrity) the damaged
    # record is quarantined, said so on stderr, and the 19 records behind it stay.
    s = store().start()
    replies = put_some(s, "Cut", 50, size=200)
    wrote = s.status()["positions"]["wrote"]
    assert s.stop() == 0
    victim = replies[30]["phys_offset"]
    path = s.path("commitlog", "%020d" % 0)
    with open(path, "r+b") as f:
        data = f.read(replies[-1]["phys_offset"] + 400)
        at = data.index(b"body-30-")
        assert victim < at < replies[31]["phys_offset"]
        f.seek(at)
        f.write(b"X")
    s.start()
    err = s.stderr()
    assert f"the record at {victim} is damaged" in err and "quarantined" in err, err
    assert os.listdir(s.path("quarantine"))
    assert s.status()["positions"]["wrote"] == wrote          # nothing cut behind it
    assert s.stop() == 0


def test_sighup_stops_cleanly(store):
    # Regression: SIGHUP (the terminal or SSH session closed) killed the supervisor at once
    # (exit 129): the services died with it and the abort file stayed.
    s = store().start()
    put_some(s, "Hup", 5)
    s.signal(signal.SIGHUP)
    assert s.wait_exit() == 0
    assert not os.path.exists(s.path("abort"))


def test_a_closed_stdout_and_stderr_do_not_stop_the_store(tmp_path):
    # Regression: `mqstore start ... | head -1` died of the broken pipe (exit 141) on its next
    # write, taking the services with it and leaving the abort file.
    root = str(tmp_path / "piped")
    proc = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "start", "--store", root,
                             "--port", "0"], cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline().startswith("mqstore: starting the store")
        proc.stdout.close()                            # before the recovery summary and the
        proc.stderr.close()                            # ready line are written
        address = os.path.join(root, "run", "address")
        assert wait_for(lambda: os.path.exists(address) or proc.poll() is not None, 60)
        assert proc.poll() is None, proc.returncode
        s = SupervisedStore(tmp_path, root=root)
        s.address = open(address).read().strip()
        put_some(s, "Piped", 5)                        # the store keeps serving
        stopped = cli("stop", "--store", root)         # and its stop lines go nowhere
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait(60) == 0
        assert not os.path.exists(os.path.join(root, "abort"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_slave_says_that_it_refuses_puts(store):
    # Regression: a SLAVE store showed "flags: writable, slave" while it refused every put.
    s = store(broker_role="SLAVE").start()
    assert s.put("T", b"x")["status"] == "SERVICE_NOT_AVAILABLE"
    assert s.status()["puts"] == "refused (slave)"
    shown = cli("status", "--store", s.root)
    assert "puts refused (slave)" in shown.stdout, shown.stdout
    assert s.stop() == 0
