"""The streaming apps' drivers in YARN (cluster mode) under real Airflow, on a real ResourceManager and
NodeManager over HDFS (``devtools.yarn``), with real spark-submit runs of the app, over the broker's
SASL_SSL listener with a client certificate whose key is encrypted as openssl 3 encrypts one. The
supervisor runs from the installed wheel (``installed_site``: its DAG files, its conf dir, its
spark-submit), and the containers on the Python and jars its `pipelinectl pack-env` put on HDFS.

The driver loads its config in its container from the bundle it was shipped (``driver_bundle``): the
secrets never show on a command line, in a container's environment or logs (its launch script
included), in the ResourceManager's answers or in Spark's event log (what its UI shows).

The supervisor submits, follows the application through the ResourceManager and restarts it from its
checkpoint when its container dies; YARN never runs two applications of one app (sampled every second);
a frozen driver is killed through the ResourceManager by the watchdog; a graceful stop goes through the
stop marker on HDFS and is not restarted.
"""

from __future__ import annotations

import base64
import os
import signal
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from stream_pipelines.checkpoint.inspect import inspect
from stream_pipelines.control.control_store import ControlStore, app_status, apply_action
from stream_pipelines.control.lease import Lease, LeaseRecord
from stream_pipelines.core import store
from stream_pipelines.core.procfs import process_exists
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.core.resource_manager import ENDED_STATES, ResourceManager
from stream_pipelines.core.tls_files import open_client_key
from stream_pipelines.launching import yarn_driver
from stream_pipelines.launching.driver_bundle import FOLDER_PREFIX
from tests.conftest import (
    SUPERVISED_ARCHIVE,
    make_overrides_config,
    private_source_topics,
    produce_scenario,
    start_dag_test,
    wait_for,
    yarn_overrides,
)

# Beside another worker's test it may take twice its 6 minutes alone: more than the suite's limit of 15.
pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(1800)]

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


class EverySecond:
    """A look taken every second in a thread of its own, for as long as the ``with`` block lasts."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.look()

    def look(self) -> None:
        raise NotImplementedError


class ApplicationSampler(EverySecond):
    """Asks the ResourceManager every second how many applications of the app are not over."""

    def __init__(self, rm: ResourceManager) -> None:
        super().__init__()
        self.rm, self.most, self.samples = rm, 0, 0
        self.seen: set[str] = set()

    def look(self) -> None:
        running = [app for app in self.rm.applications(APP) if app.state == "RUNNING"]
        self.most, self.samples = max(self.most, len(running)), self.samples + 1
        self.seen.update(app.id for app in running)


class ProcessWatch(EverySecond):
    """Every second, every process's command line, and the environment of each process in a YARN
    container: the places a secret must never be seen in (``leaks``)."""

    def __init__(self, secrets: list[str], containers: Path) -> None:
        super().__init__()
        self.secrets = [secret.encode() for secret in secrets]
        self.containers = str(containers.resolve()).encode()
        self.leaks: list[str] = []
        self.container_processes = 0
        self.pythons: set[str] = set()  # the executables of the containers' Python processes

    def look(self) -> None:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                self._look(entry)

    def _look(self, entry: Path) -> None:
        try:
            command = (entry / "cmdline").read_bytes()
            # A container's processes run in its working folder (a Python driver's command line is
            # relative to it: ./environment/bin/python raw_archive.py ...).
            in_container = os.readlink(entry / "cwd").encode().startswith(self.containers)
            environment = (entry / "environ").read_bytes() if in_container else b""
            executable = os.readlink(entry / "exe") if in_container else ""
        except OSError:
            return  # gone, or not ours
        self.container_processes += in_container
        if "python" in Path(executable).name:
            self.pythons.add(executable)
        for secret in self.secrets:
            if secret in command or secret in environment:
                where = "environment" if secret in environment else "command line"
                self.leaks.append(f"{where} of {command[:200]!r}")


def leaked_into(texts: dict[str, bytes], secrets: list[str]) -> list[str]:
    flat_secrets = [secret.encode() for secret in secrets]
    return [name for name, text in texts.items() for secret in flat_secrets if secret in text]


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
    spark,
    yarn,
    hdfs_root,
    broker,
    secured_kafka,
    packed_on_store,
    installed_site,
    make_overrides,
    airflow_env,
    tmp_path,
    monkeypatch,
):
    secrets = secured_kafka.environment()
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    client = secured_kafka.pki.client
    event_log = f"{hdfs_root}/spark-events"
    store.write_atomically(store.location(None, event_log) / "README", "Spark's event logs of this test")
    overrides = make_overrides(
        *private_source_topics(),
        *SUPERVISED_ARCHIVE,
        "supervision.heartbeat_interval=1 seconds",
        *yarn_overrides(yarn, f"{hdfs_root}/pipeline"),
        *secured_kafka.sasl_ssl(),
        f"kafka.security.certificate_file={client.certificate}",
        f"kafka.security.key_file={client.key}",
        f"kafka.security.key_password_env={secured_kafka.key_password_variable}",
        "spark.extra_conf.spark.eventLog.enabled=true",
        f"spark.extra_conf.spark.eventLog.dir={event_log}",
        "spark.extra_conf.spark.eventLog.compress=false",  # so that it can be searched as written
        # The containers run the packed Python (interpreter included) and Spark's jars from HDFS.
        *packed_on_store.settings(),
    )
    config = make_overrides_config(overrides)
    assert config.kafka.security.protocol == "SASL_SSL" and config.kafka.security.mutual_tls
    plain_key = open_client_key(client.key, client.key_password, None).private_bytes(
        Encoding.DER, PrivateFormat.PKCS8, NoEncryption()
    )
    never_shown = [*config.kafka.security.secrets(), base64.b64encode(plain_key).decode()[:48]]
    bundles_before = set(Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"))
    records = produce_scenario(config, seed=23)
    rm = ResourceManager(yarn.rm_url)
    log, adopter_log = tmp_path / "dag_test.log", tmp_path / "adopter.log"
    adopter = None
    # The supervisor as a deployment runs it: the installed wheel, the DAG files its pipelinectl writes,
    # the conf dir its init-conf wrote; nothing from this checkout.
    supervisor = start_dag_test(airflow_env, f"supervise_{APP}", overrides, log, secrets, installed_site)
    try:
        with ApplicationSampler(rm) as sampler, ProcessWatch(never_shown, yarn.home / "nm-local") as watch:
            # The submit, the containers' start and the first batch took over 300 s beside the other
            # worker's test (a run of 29f52a9 on two workers, two cores).
            wait_for(lambda: last_committed(config) >= 1, 600, "the first committed batches in YARN")
            first = rm.applications(APP)[-1]
            staged = store.location(None, yarn_driver.staging_folder(config, first.id))
            assert any(name.startswith("pipeline.tar.gz") for name in store.entries(staged)), staged
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
            adopter = start_dag_test(
                airflow_env, f"supervise_{APP}", overrides, adopter_log, secrets, installed_site
            )
            wait_for(
                lambda: f"adopting {APP}: YARN application {third.id}" in adopter_log.read_text(),
                240,
                "the adoption",
            )
            status = app_status(config, APP)
            wait_for(lambda: archive_count(spark, config) == len(records), 300, "the archive to catch up")
            apply_action(config, declared_app(APP), "stop", by="test", reason="end of test")
            adopter.wait(300)
            answers = {
                path: urllib.request.urlopen(f"{yarn.rm_url}{path}", timeout=30).read()
                for application in (first, second, third)
                for path in (
                    f"/ws/v1/cluster/apps/{application.id}",
                    f"/ws/v1/cluster/apps/{application.id}/appattempts",
                    f"/cluster/app/{application.id}",
                )
            }
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
    assert "MODULES FROM THE CHECKOUT []" in output, output[-2000:]
    shipped_entry_point = f"{installed_site.venv}/lib/python3.11/site-packages/stream_pipelines/spark_apps/"
    assert f"{shipped_entry_point}raw_archive.py" in first_output, "the installed package's entry point"
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
    # No secret anywhere it could be seen: command lines and the containers' environments (sampled every
    # second), the ResourceManager's REST answers and web pages, every container's logs (its launch
    # script included), Spark's event logs (what its UI shows: settings and plans), the task logs.
    assert watch.container_processes > 30 and not watch.leaks, watch.leaks[:5]
    # Every Python in a container (drivers, executors' workers) is the packed one YARN unpacked there.
    assert watch.pythons and all(
        Path(python).is_relative_to(yarn.home / "nm-local") for python in watch.pythons
    ), watch.pythons
    assert not leaked_into(answers, never_shown)
    container_logs = {
        str(path): path.read_bytes() for path in (yarn.home / "nm-logs").rglob("*") if path.is_file()
    }
    launch_scripts = [text for name, text in container_logs.items() if name.endswith("launch_container.sh")]
    assert any(b"PIPELINE_ENVIRONMENT_FILE" in text for text in launch_scripts)
    # A driver's Python data sources start the Python its environment names: the packed one, too.
    drivers = [
        text
        for name, text in container_logs.items()
        if name.endswith("launch_container.sh")
        and any(application.id in name for application in (first, second, third))
        and b"PIPELINE_ENVIRONMENT_FILE" in text
    ]
    assert len(drivers) >= 3
    assert all(b'export PYSPARK_PYTHON="./environment/bin/python"' in text for text in drivers)
    assert not leaked_into(container_logs, never_shown)
    events = store.location(None, event_log)
    event_logs = {name: store.read_bytes(events / name) for name in store.files_under(events)}
    assert len(event_logs) >= 4 and b"SparkListenerEnvironmentUpdate" in b"".join(event_logs.values())
    assert not leaked_into(event_logs, never_shown)
    assert not leaked_into({"task logs": (first_output + output).encode()}, never_shown)
    # The staging folders are gone, each bundle with its own: Spark's own clean-up after the graceful stop
    # and the killed one, the supervisor's after the container's kill -9. And the bundles on this host.
    for application in (first, second, third):
        assert not store.entries(store.location(None, yarn_driver.staging_folder(config, application.id)))
    assert set(Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*")) <= bundles_before
