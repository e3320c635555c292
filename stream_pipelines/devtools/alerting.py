"""Prometheus, Alertmanager and the example webhook receiver as real processes on free loopback ports,
each stopped (its whole process group) when its context ends, also on failure.

The monitoring tests and `make game-day` run the shipped monitoring/ files through these: the rules and
configs rendered by ``observability.monitoring_rules``, the receiver as monitoring/webhook_receiver.py.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from stream_pipelines.core.config import PROJECT_ROOT
from stream_pipelines.devtools.processes import free_port, stop_process_group
from stream_pipelines.observability.monitoring_rules import write_yaml

# The example receiver is a developer's stand-in for a pager: in the checkout, not in the package.
WEBHOOK_RECEIVER = PROJECT_ROOT / "monitoring" / "webhook_receiver.py"
INSTALL_HINT = "run infra/scripts/install_test_servers.sh (make test-deps does)"


class ServerFailed(RuntimeError):
    """A server is missing, exited, or did not answer in time; the message says which and where its log is."""


def wait_until(condition: Callable[[], Any], what: str, timeout_s: float = 60.0, poll_s: float = 0.2) -> Any:
    """The first truthy result of ``condition``; connection errors count as "not yet"."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            result = condition()
        except OSError:
            result = None
        if result:
            return result
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def required_binary(*names: str) -> str:
    for name in names:
        if path := shutil.which(name):
            return path
    raise ServerFailed(f"{' or '.join(names)} is not on PATH: {INSTALL_HINT}")


@contextlib.contextmanager
def server_process(name: str, command: list[str], folder: Path, ready_url: str) -> Iterator[subprocess.Popen]:
    """``command`` running with its output in ``folder/<name>.log`` until ``ready_url`` answers 200;
    stopped (SIGTERM, then SIGKILL) when the context ends."""
    log_path = folder / f"{name}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:

            def ready() -> bool:
                if process.poll() is not None:
                    raise ServerFailed(
                        f"{name} exited with {process.returncode}: {log_path.read_text()[-3000:]}"
                    )
                with urllib.request.urlopen(ready_url, timeout=2) as response:
                    return response.status == 200

            wait_until(ready, f"{name} to answer {ready_url} (log: {log_path})", timeout_s=30)
            yield process
        finally:
            stop_process_group(process.pid, timeout_s=15)
            process.wait(timeout=5)


@contextlib.contextmanager
def _configured_server(
    name: str, binaries: tuple[str, ...], config: Mapping[str, Any], folder: Path, *flags: str
) -> Iterator[str]:
    """One of Prometheus' servers with ``config`` written into ``folder`` and its data there, on a free
    port, with ``flags``; yields its host:port once its ready endpoint answers."""
    binary = required_binary(*binaries)
    folder.mkdir(parents=True, exist_ok=True)
    config_path = write_yaml(folder / f"{name}.yml", config)
    address = f"127.0.0.1:{free_port()}"
    command = [binary, f"--config.file={config_path}", f"--web.listen-address={address}", *flags]
    with server_process(name, command, folder, f"http://{address}/-/ready"):
        yield address


@contextlib.contextmanager
def prometheus_server(config: Mapping[str, Any], folder: Path, retention: str = "1h") -> Iterator[str]:
    """A Prometheus with ``config`` on a free port, keeping ``retention`` of samples; yields its base URL."""
    flags = (f"--storage.tsdb.path={folder / 'data'}", f"--storage.tsdb.retention.time={retention}")
    with _configured_server("prometheus", ("prometheus",), config, folder, *flags) as address:
        yield f"http://{address}"


@contextlib.contextmanager
def alertmanager_server(config: Mapping[str, Any], folder: Path) -> Iterator[str]:
    """A real Alertmanager with ``config`` on a free port, without its cluster port; yields host:port."""
    flags = ("--cluster.listen-address=", f"--storage.path={folder / 'data'}")
    binaries = ("prometheus-alertmanager", "alertmanager")
    with _configured_server("alertmanager", binaries, config, folder, *flags) as address:
        yield address


def notifications(received: Path) -> list[dict[str, Any]]:
    """What the webhook receiver has logged so far: one record per alert of each notification."""
    if not received.exists():
        return []
    return [json.loads(line) for line in received.read_text().splitlines()]


@contextlib.contextmanager
def webhook_receiver(output: Path, folder: Path) -> Iterator[str]:
    """monitoring/webhook_receiver.py as its own process on a free port, appending to ``output``;
    yields its base URL. It answers only POST, so readiness is a connection it accepts."""
    port = free_port()
    command = [sys.executable, str(WEBHOOK_RECEIVER), "--port", str(port), "--output", str(output)]
    log_path = folder / "webhook_receiver.log"
    folder.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:

            def listening() -> bool:
                if process.poll() is not None:
                    raise ServerFailed(f"the webhook receiver exited: {log_path.read_text()[-3000:]}")
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True

            wait_until(listening, f"the webhook receiver on port {port}", timeout_s=20)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process_group(process.pid, timeout_s=10)
            process.wait(timeout=5)
