"""The stack starts Airflow's schedulers last, once its api-server answers: a task a scheduler queued
before then failed its first try (the chaos smoke's start lost 48 s to it, decision 0029)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from stream_pipelines.core.config import load_config
from stream_pipelines.devtools import stack
from stream_pipelines.devtools.processes import free_port, stop_process_group

# Answers the health check only after a while, as the api-server does, and notes when it began to.
SLOW_API_SERVER = """
import http.server, sys, time
port, delay_s, noted = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
time.sleep(delay_s)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/api/v2/monitor/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", port), Health)
open(noted, "w").write(repr(time.time()))
server.serve_forever()
"""
NOTE_START = "import sys, time; open(sys.argv[1], 'w').write(repr(time.time())); time.sleep(60)"


def components(tmp_path: Path, port: int, delay_s: float) -> list[stack.Component]:
    scheduler, api = tmp_path / "scheduler-started", tmp_path / "api-answering"
    return [
        stack.Component(stack.SCHEDULERS[0], [sys.executable, "-c", NOTE_START, str(scheduler)]),
        stack.Component(
            stack.AIRFLOW_API_SERVER,
            [sys.executable, "-c", SLOW_API_SERVER, str(port), str(delay_s), str(api)],
        ),
    ]


@pytest.fixture
def config(tmp_path):
    return load_config("local", [f"paths.data_root={tmp_path}/data"])


def test_the_schedulers_start_after_the_api_server_answers(config, tmp_path):
    port = free_port()
    said: list[str] = []
    started = stack.start_components(config, components(tmp_path, port, 2.0), {}, port, say=said.append)
    try:
        assert set(started) == {stack.SCHEDULERS[0], stack.AIRFLOW_API_SERVER}
        deadline = time.monotonic() + 30
        while not (tmp_path / "scheduler-started").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        answering = float((tmp_path / "api-answering").read_text())
        scheduler_started = float((tmp_path / "scheduler-started").read_text())
        assert scheduler_started >= answering, "a scheduler started before the api-server answered"
        assert said == [
            f"waiting for Airflow's api-server on 127.0.0.1:{port} before starting the schedulers"
        ]
    finally:
        for pid in started.values():
            stop_process_group(pid)


def test_an_api_server_that_never_answers_starts_no_scheduler_and_names_its_log(config, tmp_path):
    port = free_port()
    with pytest.raises(RuntimeError) as raised:
        stack.start_components(config, components(tmp_path, port, 600.0), {}, port, timeout_s=1.0, say=print)
    try:
        log = stack.stack_dir(config) / "logs" / f"{stack.AIRFLOW_API_SERVER}.log"
        assert str(raised.value) == (
            f"Airflow's api-server did not answer on 127.0.0.1:{port} within 1s, so the schedulers were "
            f"not started; see {log}"
        )
        assert stack.recorded_pid(config, stack.SCHEDULERS[0]) is None
    finally:
        pid = stack.recorded_pid(config, stack.AIRFLOW_API_SERVER)
        if pid:
            stop_process_group(pid)
