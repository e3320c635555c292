"""The supervisor DAGs under real Airflow (dag.test()) with real spark-submit runs of the apps.

- a crash loop trips the guard, which stops restarts and says why;
- a graceful stop exits 0 and is not restarted as a crash.

The faults a running driver meets under a real scheduler (kill -9, a frozen JVM, a killed task runner
and its orphan's adoption, a failed query) are tests/test_chaos_smoke.py's, on `make chaos`'s stack.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from stream_pipelines.control.control_store import ControlStore, apply_action
from stream_pipelines.core.registry import app as declared_app
from tests.conftest import (
    SUPERVISED_ARCHIVE,
    make_overrides_config,
    private_source_topics,
    produce_scenario,
    start_dag_test,
    wait_for,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def committed(checkpoint: Path) -> list[int]:
    return sorted(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*"))


def finish(process, log: Path, timeout: float = 300) -> str:
    try:
        process.wait(timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return log.read_text()


@pytest.fixture
def archive_setup(broker, make_overrides):
    overrides = make_overrides(
        *private_source_topics(),
        *SUPERVISED_ARCHIVE,
    )
    config = make_overrides_config(overrides)
    records = produce_scenario(config, seed=21)
    return overrides, config, records


def test_crash_loop_guard_stops_restarts_and_says_why(airflow_env, archive_setup, tmp_path):
    overrides, config, _ = archive_setup
    # A starting offset for a topic the query does not read makes every start fail at once.
    crashing = [
        *overrides,
        'kafka.starting_offsets={"no-such-topic": {"0": 0}}',
        "supervision.max_restarts=2",
    ]
    log = tmp_path / "dag_test.log"
    output = finish(start_dag_test(airflow_env, "supervise_raw_archive", crashing, log), log, 600)
    assert "DAG RUN STATE failed" in output, output[-3000:]
    assert "raw_archive is crash-looping: 2 restarts within 1:00:00 (limit 2)" in output
    marker = json.loads((Path(config.data_path("control")) / "raw_archive.crashloop.json").read_text())
    assert "Restarts stopped" in marker["reason"]
    history = ControlStore(config).restarts("raw_archive")
    assert len(history.recent) == 2


def test_graceful_stop_is_not_restarted_as_a_crash(
    airflow_env, broker, secured_kafka, make_overrides, monkeypatch, tmp_path
):
    """Over the broker's mutual TLS listener, with a client key encrypted as openssl 3 encrypts one by
    default: the supervisor's start checks, the driver's Kafka source and its watchdog all take it."""
    environment = secured_kafka.environment()
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    overrides = make_overrides(*private_source_topics(), *SUPERVISED_ARCHIVE, *secured_kafka.mutual_tls())
    config = make_overrides_config(overrides)
    assert config.kafka.security.key_password_env is not None
    produce_scenario(config, seed=22)
    checkpoint = Path(config.checkpoint_dir("raw_archive", "archive"))
    log = tmp_path / "dag_test.log"
    supervisor = start_dag_test({**airflow_env, **environment}, "supervise_raw_archive", overrides, log)
    try:
        wait_for(lambda: len(committed(checkpoint)) >= 1, 240, "the first committed batch")
        apply_action(config, declared_app("raw_archive"), "stop", by="test", reason="maintenance")
        output = finish(supervisor, log)
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
    assert "DAG RUN STATE success" in output, output[-3000:]
    assert "exited 0 (deliberate stop): not a crash, no restart" in output
    assert ControlStore(config).restarts("raw_archive").total == 0
    exit_state = json.loads((Path(config.data_path("control")) / "raw_archive.exit.json").read_text())
    assert exit_state["status"] == "stopped"
