"""The streaming apps' drivers in YARN (cluster mode) under real Airflow, on a real ResourceManager and
NodeManager over HDFS (``devtools.yarn``), with real spark-submit runs of the app.

The supervisor submits, follows the application through the ResourceManager and restarts it from its
checkpoint when its container dies; YARN never runs two applications of one app (sampled every second);
a frozen driver is killed through the ResourceManager by the watchdog; a graceful stop goes through the
stop marker on HDFS and is not restarted.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from stream_pipelines.checkpoint.inspect import inspect
from stream_pipelines.control.control_store import ControlStore, app_status, apply_action
from stream_pipelines.control.lease import Lease, LeaseRecord
from stream_pipelines.core.procfs import process_exists
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.core.resource_manager import ENDED_STATES, ResourceManager
from tests.conftest import (
    SUPERVISED_ARCHIVE,
    make_overrides_config,
    private_source_topics,
    produce_scenario,
    start_dag_test,
    wait_for,
    yarn_overrides,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow]

APP = "raw_archive"


def last_committed(config) -> int:
    try:
        return inspect(config, declared_app(APP)).query("archive").last_committed_batch or -1
    except Exception:  # not written yet
        return -1


def archive_count(spark, config) -> int:
    try:
        return spark.read.parquet(config.data_path("archive")).count()
    except Exception:  # not written yet
        return -1


class ApplicationSampler:
    """Asks the ResourceManager every second how many applications of the app are not over."""

    def __init__(self, rm: ResourceManager) -> None:
        self.rm, self.most, self.samples = rm, 0, 0
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ApplicationSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            running = [app for app in self.rm.applications(APP) if app.state == "RUNNING"]
            self.most, self.samples = max(self.most, len(running)), self.samples + 1
            self.seen.update(app.id for app in running)


def wait_for_new_application(rm: ResourceManager, known: set[str]):
    """The app's next application once YARN runs it."""
    found: list = []

    def running() -> bool:
        found[:] = [app for app in rm.applications(APP) if app.id not in known and app.state == "RUNNING"]
        return bool(found)

    wait_for(running, 240, "a new application of the app")
    return found[-1]


def driver_pid(config) -> int | None:
    record = Lease(config, APP).read()
    return record.pid if record is not None and process_exists(record.pid) else None


def container_group(pid: int) -> int:
    """The process group of the container the driver runs in (YARN starts each in a session of its own)."""
    return os.getpgid(pid)


def test_a_driver_in_yarn_restarts_from_its_checkpoint_when_its_container_dies_or_it_freezes(
    spark, yarn, hdfs_root, broker, make_overrides, airflow_env, tmp_path
):
    overrides = make_overrides(
        *private_source_topics(),
        *SUPERVISED_ARCHIVE,
        "supervision.heartbeat_interval=1 seconds",
        *yarn_overrides(yarn, f"{hdfs_root}/pipeline"),
    )
    config = make_overrides_config(overrides)
    records = produce_scenario(config, seed=23)
    rm = ResourceManager(yarn.rm_url)
    log, adopter_log = tmp_path / "dag_test.log", tmp_path / "adopter.log"
    adopter = None
    supervisor = start_dag_test(airflow_env, f"supervise_{APP}", overrides, log)
    try:
        with ApplicationSampler(rm) as sampler:
            wait_for(lambda: last_committed(config) >= 1, 300, "the first committed batches in YARN")
            first = rm.applications(APP)[-1]
            pid = driver_pid(config)
            assert pid is not None, "the driver's lease names its process on this host"
            before_kill = last_committed(config)
            # kill -9 of the driver's whole container: its JVM, its Python.
            os.killpg(container_group(pid), signal.SIGKILL)
            wait_for(lambda: last_committed(config) > before_kill, 240, "a batch committed after the restart")
            # Freeze the new driver's JVM (the ApplicationMaster): the watchdog must kill it through YARN.
            second = wait_for_new_application(rm, {first.id})
            wait_for(lambda: driver_pid(config) is not None, 120, "the second driver's lease")
            after_freeze = last_committed(config)
            pid = driver_pid(config)
            assert pid is not None
            jvm = int(Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[1])
            os.kill(jvm, signal.SIGSTOP)
            wait_for(
                lambda: (rm.application(second.id).state in ENDED_STATES), 180, "YARN to end the frozen one"
            )
            third = wait_for_new_application(rm, {first.id, second.id})
            wait_for(lambda: last_committed(config) > after_freeze, 240, "a batch after the second restart")
            # kill -9 of the task runner (dag.test() runs the task in-process): the application lives on
            # in YARN, and the next run adopts it instead of submitting.
            os.kill(supervisor.pid, signal.SIGKILL)
            supervisor.wait()
            adopter = start_dag_test(airflow_env, f"supervise_{APP}", overrides, adopter_log)
            wait_for(
                lambda: f"adopting {APP}: YARN application {third.id}" in adopter_log.read_text(),
                240,
                "the adoption",
            )
            status = app_status(config, APP)
            wait_for(lambda: archive_count(spark, config) == len(records), 300, "the archive to catch up")
            apply_action(config, declared_app(APP), "stop", by="test", reason="end of test")
            adopter.wait(300)
        first_output, output = log.read_text(), adopter_log.read_text()
    finally:
        for process in (supervisor, adopter):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        for app in rm.applications(APP):
            rm.kill(app.id)
    # Airflow restarted it twice, each counted: the dead container at once, then the frozen driver.
    assert "restart 1 within the window, from its checkpoint in 0s" in first_output, first_output[-4000:]
    assert "watchdog: raw_archive is stuck" in first_output and "restart 2 within the window" in first_output
    assert f"killed its YARN application {second.id} through the ResourceManager" in first_output
    assert rm.application(second.id).state == "KILLED"
    # The task log names the application, links its driver log, and shows its tail.
    assert f"submitted {APP}: YARN application" in first_output
    assert "/node/containerlogs/container_" in first_output
    assert "the end of raw_archive's driver log" in first_output
    # The adopting run followed the application it found to its graceful end.
    assert "DAG RUN STATE success" in output, output[-4000:]
    assert "ended (deliberate stop)" in output and f"submitted {APP}" not in output
    assert status.state == "running" and third.id in status.detail and "tracking http" in status.detail
    # Never two applications of one app at once, sampled from the ResourceManager every second.
    assert sampler.samples > 30 and sampler.most == 1, (sampler.samples, sampler.most)
    assert sampler.seen == {first.id, second.id, third.id}
    # A lease from another host with a young heartbeat: held while its application is unknown to YARN
    # (the heartbeat decides), stale at once when YARN says its application is over.
    lease = Lease(config, APP)
    elsewhere = LeaseRecord("o", "another-host", 1, time.time(), time.time(), spark_app_id=first.id)
    assert not lease.is_live(elsewhere)
    elsewhere.spark_app_id = "application_1_9999"
    assert lease.is_live(elsewhere)
    archive = spark.read.parquet(config.data_path("archive"))
    assert archive.count() == len(records)
    assert archive.select("topic", "partition", "offset").distinct().count() == len(records)
    assert ControlStore(config).restarts(APP).total >= 2
