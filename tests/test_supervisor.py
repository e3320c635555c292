"""The supervisor DAGs under real Airflow (dag.test()) with real spark-submit runs of the apps.

- kill -9 of the running driver: Airflow restarts the app from the same checkpoint; it resumes at a
  later batch id and the output is exact;
- a crash loop trips the guard, which stops restarts and says why;
- a graceful stop exits 0 and is not restarted as a crash.
"""

from __future__ import annotations

import json
import os
import signal
import time
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


def test_kill_minus_nine_is_healed_from_the_checkpoint(spark, airflow_env, archive_setup, tmp_path):
    overrides, config, records = archive_setup
    checkpoint = Path(config.checkpoint_dir("raw_archive", "archive"))
    running = Path(config.data_path("control")) / "raw_archive.running.json"
    log = tmp_path / "dag_test.log"
    supervisor = start_dag_test(airflow_env, "supervise_raw_archive", overrides, log)
    try:
        wait_for(lambda: len(committed(checkpoint)) >= 2, 240, "the first committed batches")
        first_driver = json.loads(running.read_text())["pid"]
        before_kill = committed(checkpoint)[-1]
        os.kill(first_driver, signal.SIGKILL)

        def restarted() -> bool:
            record = json.loads(running.read_text()) if running.exists() else {}
            return record.get("pid") not in (None, first_driver)

        wait_for(restarted, 180, "Airflow to start the app again")
        wait_for(lambda: committed(checkpoint)[-1] > before_kill, 180, "a batch committed after the restart")
        # Let it drain the topics, then stop it the way an operator would.
        wait_for(lambda: archive_count(spark, config) == len(records), 240, "the archive to catch up")
        apply_action(config, declared_app("raw_archive"), "stop", by="test", reason="end of test")
        output = finish(supervisor, log)
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
    assert "DAG RUN STATE success" in output, output[-3000:]
    assert "restart 1 within the window, from its checkpoint" in output
    assert "checkpoint preflight for raw_archive" in output and "last committed batch" in output
    archive = spark.read.parquet(config.data_path("archive"))
    assert archive.count() == len(records)
    assert archive.select("topic", "partition", "offset").distinct().count() == len(records)
    restarts = json.loads((Path(config.data_path("control")) / "raw_archive.restarts.json").read_text())
    assert restarts, "the restart counter was fed"


def archive_count(spark, config) -> int:
    try:
        return spark.read.parquet(config.data_path("archive")).count()
    except Exception:  # not written yet
        return -1


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


def test_a_frozen_driver_jvm_is_found_by_its_silence_killed_at_once_and_restarted_with_exact_output(
    spark, airflow_env, archive_setup, tmp_path
):
    """SIGSTOP of the driver's JVM: the Python driver keeps its heartbeat, but its call into the JVM
    does not come back. The watchdog calls it frozen once that silence reaches jvm_answer_timeout (well
    before the no-progress window), kills its process group without asking a drain it cannot do, and
    the app restarts from its checkpoint, exactly."""
    from stream_pipelines.devtools.processes import alive, parent_pid

    overrides, config, records = archive_setup
    watched = [
        *overrides,
        "supervision.heartbeat_interval=1 seconds",
        "supervision.lease_timeout=30 seconds",
        "supervision.watchdog_triggers=60",
        "supervision.watchdog_min_window=60 seconds",
        "supervision.jvm_answer_timeout=10 seconds",
        # Long: a frozen JVM must be killed without waiting for a drain.
        "supervision.drain_timeout=60 seconds",
    ]
    checkpoint = Path(config.checkpoint_dir("raw_archive", "archive"))
    running = Path(config.data_path("control")) / "raw_archive.running.json"
    log = tmp_path / "dag_test.log"
    supervisor = start_dag_test(airflow_env, "supervise_raw_archive", watched, log)
    jvm = None
    try:
        wait_for(lambda: len(committed(checkpoint)) >= 2, 240, "the first committed batches")
        driver = json.loads(running.read_text())["pid"]
        jvm = parent_pid(driver)
        assert jvm is not None
        frozen_at_batch = committed(checkpoint)[-1]
        os.kill(jvm, signal.SIGSTOP)
        frozen_at = time.monotonic()
        wait_for(lambda: "watchdog: raw_archive is stuck" in log.read_text(), 120, "the watchdog's verdict")
        found_after_s = time.monotonic() - frozen_at
        verdict = next(
            line for line in log.read_text().splitlines() if "watchdog: raw_archive is stuck" in line
        )
        wait_for(lambda: "killed its process group" in log.read_text(), 30, "the kill, without a drain")
        # A SIGKILLed JVM with a hundred threads is still "R" while the kernel tears it down.
        wait_for(lambda: not alive(jvm), 30, "the frozen JVM to be gone")

        def restarted() -> bool:
            record = json.loads(running.read_text()) if running.exists() else {}
            return record.get("pid") not in (None, driver)

        wait_for(restarted, 180, "Airflow to start the app again")
        wait_for(lambda: committed(checkpoint)[-1] > frozen_at_batch + 1, 180, "batches after the restart")
        wait_for(lambda: archive_count(spark, config) == len(records), 240, "the archive to catch up")
        apply_action(config, declared_app("raw_archive"), "stop", by="test", reason="end of test")
        output = finish(supervisor, log)
    finally:
        if jvm is not None and Path(f"/proc/{jvm}").exists():
            os.kill(jvm, signal.SIGCONT)
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
    # Found by the JVM's silence (the heartbeat stayed fresh), before the 60 s no-progress window.
    assert "its JVM has not answered for" in verdict and "killing it at once" in verdict, verdict
    silent_s = int(verdict.split("answered for ")[1].split("s ")[0])
    assert 10 <= silent_s <= 10 + 5, verdict
    assert found_after_s < 40, f"found {found_after_s:.0f}s after the freeze: {verdict}"
    assert "asking it to stop" not in output, "a frozen JVM is not asked to drain"
    assert "DAG RUN STATE success" in output, output[-3000:]
    assert "(watchdog: raw_archive was stuck" in output, "the restart names the watchdog's reason"
    assert ControlStore(config).watchdog_restarts("raw_archive") == 1
    archive = spark.read.parquet(config.data_path("archive"))
    assert archive.count() == len(records)
    assert archive.select("topic", "partition", "offset").distinct().count() == len(records)


def test_a_killed_task_runner_leaves_an_orphan_that_the_next_run_adopts(airflow_env, archive_setup, tmp_path):
    """kill -9 of the process running the run_app task (dag.test() runs it in-process) leaves the
    driver running. The next run adopts it instead of starting a second spark-submit; one driver at
    every sample; after a graceful stop of the orphan the run succeeds and supervision goes on."""
    from stream_pipelines.devtools.chaos import DriverSampler

    overrides, config, _records = archive_setup
    checkpoint = Path(config.checkpoint_dir("raw_archive", "archive"))
    data_root = Path(config.data_path("control")).parent
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    sampler = DriverSampler(["raw_archive"], data_root).start()
    first = start_dag_test(airflow_env, "supervise_raw_archive", overrides, first_log)
    second = None
    try:
        wait_for(lambda: len(committed(checkpoint)) >= 1, 240, "the first committed batch")
        os.kill(first.pid, signal.SIGKILL)  # the task runner only: the driver has a session of its own
        first.wait()
        orphan = json.loads((Path(config.data_path("control")) / "raw_archive.running.json").read_text())
        assert Path(f"/proc/{orphan['pid']}").exists(), "the driver outlived its task runner"
        second = start_dag_test(airflow_env, "supervise_raw_archive", overrides, second_log)
        wait_for(lambda: "adopting raw_archive: owner" in second_log.read_text(), 240, "the adoption")
        before = committed(checkpoint)[-1]
        wait_for(lambda: committed(checkpoint)[-1] > before, 120, "the orphan to go on committing")
        apply_action(config, declared_app("raw_archive"), "stop", by="test", reason="end of test")
        output = finish(second, second_log)
    finally:
        sampler.stop()
        for process in (first, second):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert "DAG RUN STATE success" in output, output[-3000:]
    assert "adopting raw_archive: owner" in output and f"pid {orphan['pid']}" in output
    assert "adopted raw_archive ended: stopped" in output
    assert "starting raw_archive on" not in output, "the second run started a second spark-submit"
    assert sampler.samples > 10 and sampler.max_drivers == {"raw_archive": 1}, sampler.violations
    assert ControlStore(config).restarts("raw_archive").total == 0, "an adoption is not a crash"
