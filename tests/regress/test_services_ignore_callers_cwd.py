"""Regression: the supervisor started its services with `python -m services.X` in the caller's
working directory, so a `services/` folder there (or a module shadowing the stdlib) replaced
ours and the store never served. Services now run from the project's own directory."""
import os
import subprocess
import sys

from tests.integration.supervised import TINY_TOML, write_toml


def test_start_from_a_directory_with_a_foreign_services_package(tmp_path):
    shadow = tmp_path / "cwd"
    (shadow / "services").mkdir(parents=True)
    (shadow / "services" / "__init__.py").write_text("raise SystemExit('wrong services package')\n")
    toml = write_toml(str(tmp_path / "store.toml"), TINY_TOML)
    store = str(tmp_path / "store")
    script = os.path.join(os.path.dirname(sys.executable), "mqstore")
    proc = subprocess.Popen([script, "start", "--store", store, "--port", "0", "--config", toml],
                            cwd=shadow, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ready = None
        for line in proc.stdout:
            if line.startswith("mqstore ready at "):
                ready = line.split()[-1]
                break
        assert ready, "the store did not start"
        from ipc import Producer
        with Producer(ready, timeout=10) as producer:
            assert producer.send("T", b"hello").status.name == "PUT_OK"
    finally:
        proc.terminate()
        proc.wait(60)
