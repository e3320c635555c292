"""Where an app's driver runs, seen from its supervisor task: how each deploy mode finds, starts, follows
and stops a driver, behind one interface (``DriverPlacement``), with the watchdog beside it.

- ``OnThisWorker`` (local, standalone, YARN client mode): spark-submit runs in a session of its own on
  the Airflow worker and is the driver's process group; a driver an earlier try started is followed by
  its lease, and a stuck one is killed by its group.
- ``InYarn`` (YARN cluster mode): the driver runs in its application's ApplicationMaster; a driver an
  earlier try started is found through the ResourceManager and followed by its application, and a
  stuck one is killed through YARN. Airflow stopping the task leaves the application running for the
  next try to adopt.

Following ends quietly when the driver stopped gracefully, and raises ``AirflowException`` otherwise, so
that the retry policy restarts the app from its checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from logging import Logger
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowException

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.control.lease import Lease, LeaseRecord, live_owner
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.procfs import group_running, process_exists
from stream_pipelines.core.registry import App
from stream_pipelines.core.resource_manager import ResourceManager, YarnApplication
from stream_pipelines.launching import yarn_driver
from stream_pipelines.launching.launch import Launch
from stream_pipelines.launching.submit import submit_environment
from stream_pipelines.observability.watchdog import KafkaBacklog, Watchdog, WatchdogSettings, query_backlog

# What spark-submit is given of the worker's environment (the driver's Python, YARN's and Java's
# locations); nothing else of the task's environment, secrets included, is passed on by name.
SUBMIT_ENVIRONMENT = (
    "PYSPARK_PYTHON",
    "PYSPARK_DRIVER_PYTHON",
    "SPARK_HOME",
    "SPARK_LOCAL_IP",
    "PATH",
    "HADOOP_CONF_DIR",
    "JAVA_HOME",
    "PYSPARK_ARCHIVES_PATH",
)


class DriverPlacement(ABC):
    """How one deploy mode finds, starts, follows and stops an app's driver."""

    def __init__(self, config: PipelineConfig, app: App, log: Logger) -> None:
        self.config, self.app, self.log = config, app, log

    def running(self) -> Callable[[], None] | None:
        """A driver of the app that runs already (an earlier try's, whose task runner died): the call
        that follows it until it ends. None when none runs, so this try may start one."""
        owner = live_owner(self.config, self.app.name)
        return None if owner is None else lambda: self.adopt(owner)

    @abstractmethod
    def start(self, launch: Launch) -> None:
        """Submit a checked launch, then follow its driver until it ends."""

    def stop(self) -> None:
        """Airflow is stopping the task (on_kill): a worker's restart or redeploy, or a scheduler that died,
        whose task the other scheduler resets. The driver depends on neither (a YARN application, or a
        spark-submit in a session of its own), so it runs on and the next try adopts it; the
        ``pipeline_control`` DAG stops an app on purpose (decision 0023)."""
        self.log.info(
            "%s: the task is stopped, its driver runs on; the next try adopts it "
            "(stop the app with the pipeline_control DAG)",
            self.app.name,
        )

    def adopt(self, owner: LeaseRecord) -> None:
        """Follow a live owner through its lease until it ends. The watchdog follows it as it would a
        driver this try started."""
        app, lease = self.app.name, Lease(self.config, self.app.name)
        self.log.info("adopting %s: %s", app, owner.describe())
        guard = WatchdogThread(
            self.config, self.app, self.log, _ends_group(lambda: _owner_group(lease))
        ).start()
        interval = self.config.supervision.heartbeat_interval.seconds
        progress = _ProgressLog(self.log, app)
        try:
            while True:
                time.sleep(interval)
                if guard.verdict is not None:
                    raise AirflowException(f"watchdog: adopted {app} was stuck: {guard.verdict}")
                current = lease.read()
                if current is None:
                    ended = ControlStore(self.config).last_exit(app) or {}
                    if ended.get("status") in ("stopped", "finished"):
                        self.log.info("adopted %s ended: %s (%s)", app, ended["status"], ended.get("detail"))
                        return
                    how = f"{ended.get('status', 'no exit record')} {ended.get('detail', '')}".rstrip()
                    raise AirflowException(f"adopted {app} ended without a graceful stop: {how}")
                if not lease.is_live(current) and not guard.judging(current):
                    raise AirflowException(
                        f"adopted {app} stopped renewing its lease ({current.describe()}); "
                        "restarting it from its checkpoint"
                    )
                progress.note(current, prefix="adopted ")
        finally:
            guard.stop()

    def _hook(self, launch: Launch) -> SparkSubmitHook:
        environment = submit_environment(config=self.config)
        return ConfiguredSparkSubmitHook(
            self.config.spark.master,
            conf=launch.spark_conf,
            conn_id=self.config.supervision.spark_conn_id,
            name=self.app.name,
            application_args=launch.application_args,
            env_vars={name: environment[name] for name in SUBMIT_ENVIRONMENT if name in environment},
            deploy_mode=self.config.spark.deploy_mode,
        )


class OnThisWorker(DriverPlacement):
    """spark-submit on the Airflow worker: the driver lives in its process group, a session of its own."""

    def start(self, launch: Launch) -> None:
        hook = self._hook(launch)
        guard = WatchdogThread(self.config, self.app, self.log, _ends_group(lambda: _submitted_group(hook)))
        guard.start()
        try:
            submit_detached(hook, self.app.entry_point)
        except Exception as error:
            if guard.verdict is not None:
                raise AirflowException(f"watchdog: {self.app.name} was stuck: {guard.verdict}") from error
            raise
        finally:
            guard.stop()
        if guard.verdict is not None:
            # It drained cleanly when asked, but it was asked because it was stuck: still a restart.
            raise AirflowException(f"watchdog: {self.app.name} was stuck: {guard.verdict}")
        self.log.info("%s exited 0 (deliberate stop): not a crash, no restart", self.app.name)


class InYarn(DriverPlacement):
    """YARN cluster mode: the driver lives in its application, which the ResourceManager reports on."""

    def __init__(self, config: PipelineConfig, app: App, log: Logger) -> None:
        super().__init__(config, app, log)
        self.rm = yarn_driver.resource_manager_of(config)

    def running(self) -> Callable[[], None] | None:
        owner = live_owner(self.config, self.app.name)
        if owner is not None and owner.spark_app_id:
            application = self.rm.application(owner.spark_app_id)
            if application is not None and application.active:
                return lambda: self.follow(application, adopted=True)
        if owner is not None:
            return lambda: self.adopt(owner)
        # An application that holds no lease yet (accepted, or its driver starting): never a second.
        applications = self.rm.applications(self.app.name)
        return (lambda: self.follow(applications[-1], adopted=True)) if applications else None

    def start(self, launch: Launch) -> None:
        assert launch.yarn_tag is not None, "a launch on YARN is tagged"
        # Returns once YARN accepted the application (spark.yarn.submit.waitAppCompletion=false).
        try:
            submit_detached(self._hook(launch), self.app.entry_point)
        finally:
            launch.submitted()
        self.follow(yarn_driver.submitted(self.rm, launch.yarn_tag), adopted=False)

    def follow(self, application: YarnApplication, *, adopted: bool) -> None:
        """Follow the application until it ends; the watchdog stops a stuck driver through YARN."""
        app, rm = self.app.name, self.rm
        self.log.info(
            "%s %s: %s; driver log: %s",
            "adopting" if adopted else "submitted",
            app,
            application.describe(),
            application.am_container_logs or "(not yet placed)",
        )
        lease = Lease(self.config, app)
        guard = WatchdogThread(self.config, self.app, self.log, _ends_application(rm, application.id)).start()
        seen = {"attempt": application.attempt, "state": application.state}
        progress = _ProgressLog(self.log, app)

        def on_look(current: YarnApplication) -> None:
            if current.state != seen["state"] or current.attempt != seen["attempt"]:
                self.log.info("%s: %s", app, current.describe())
                seen["state"], seen["attempt"] = current.state, current.attempt
            try:
                record = lease.read()
            except Exception:  # the store failed this read; the next look reads again
                return
            if record is not None:
                progress.note(record)

        try:
            final = yarn_driver.follow(
                rm,
                application,
                self.config.supervision.heartbeat_interval.seconds,
                on_look,
                should_stop=lambda: guard.verdict is not None and not guard.busy,
            )
        finally:
            guard.stop()
        if final.active:
            final = rm.application(final.id) or final
        problem = yarn_driver.remove_staging(self.config, final)
        if problem:
            self.log.warning("%s: %s", app, problem)
        tail = rm.driver_log_tail(final, size=self.config.yarn.driver_log_bytes)
        if tail:
            self.log.info("the end of %s's driver log (%s):\n%s", app, final.am_container_logs, tail)
        if guard.verdict is not None:
            raise AirflowException(f"watchdog: {app} was stuck: {guard.verdict}")
        result = yarn_driver.outcome(self.config, app, final)
        if result.graceful:
            self.log.info("%s ended (deliberate stop): %s; not a crash, no restart", app, result.text)
            return
        raise AirflowException(f"{app}'s driver ended without a graceful stop: {result.text}")


def placement(config: PipelineConfig, app: App, log: Logger) -> DriverPlacement:
    """Where this config runs the app's driver."""
    return InYarn(config, app, log) if config.drivers_in_cluster else OnThisWorker(config, app, log)


class ConfiguredSparkSubmitHook(SparkSubmitHook):
    """The provider's spark-submit, with the pipeline config's master when Airflow has no connection of
    that id: the deployment may define the connection, and needs none."""

    def __init__(self, master: str, **kwargs: Any) -> None:
        self.master = master
        super().__init__(**kwargs)

    def get_connection(self, conn_id: str) -> Any:  # type: ignore[override]
        from airflow.sdk import Connection

        try:
            return super().get_connection(conn_id)
        except AirflowException:  # none of that id: the provider's own hook falls back here too
            return Connection(conn_id=conn_id, conn_type="spark", host=self.master)


def submit_detached(hook: SparkSubmitHook, application: str) -> None:
    """spark-submit in a session of its own (the watchdog can end the whole driver, JVM and Python
    driver, without signalling this task's process group, and the driver outlives the task when Airflow
    stops it), with the task's stdin withheld."""
    # Without its stdin: before this, the driver inherited the task's. An Airflow 3 task's stdin is its
    # supervisor's socket, and the supervisor ends the try only when that socket closes: after a kill -9
    # of the task process, the orphaned driver held it open, and the retry that adopts the driver waited
    # until something killed the driver.
    hook.submit(application, start_new_session=True, stdin=subprocess.DEVNULL)


class _ProgressLog:
    """A driver's progress in the task log: at most every 30 s, and only when a batch moved."""

    def __init__(self, log: Logger, app: str) -> None:
        self.log, self.app = log, app
        self.logged, self.batches = 0.0, None

    def note(self, record: LeaseRecord, prefix: str = "") -> None:
        batches = {name: q.get("batch_id") for name, q in record.queries.items()}
        if batches != self.batches and time.monotonic() - self.logged >= 30:
            self.log.info("%s%s progress: %s", prefix, self.app, progress_line(record.queries))
            self.logged, self.batches = time.monotonic(), batches


def progress_line(queries: dict[str, dict[str, Any]]) -> str:
    return "; ".join(
        f"{name} batch {q.get('batch_id')} rows {q.get('input_rows')} watermark {q.get('watermark')}"
        for name, q in sorted(queries.items())
    )


# ------------------------------------------------------------------ ending a driver

# How a watchdog ends a driver, given the drain timeout: None when nothing here is its to end, "" when
# the driver stopped within the drain timeout, else what it killed.
Ender = Callable[[float], str | None]


def _submitted_group(hook: SparkSubmitHook) -> int | None:
    """The process group of the spark-submit a hook started (a session of its own), while it runs."""
    process = getattr(hook, "_submit_sp", None)
    return process.pid if process is not None and process.poll() is None else None


def _owner_group(lease: Lease) -> int | None:
    """The process group of an adopted driver, when it runs on this host in a group of its own."""
    record = lease.read()
    if record is None or record.host != lease.host or not process_exists(record.pid):
        return None
    try:
        group = os.getpgid(record.pid)
    except ProcessLookupError:
        return None
    # Never this task's own group: a driver started without a session of its own shares it.
    return group if group != os.getpgid(0) else None


def _ends_group(group: Callable[[], int | None]) -> Ender:
    """A driver on this host: its process group, killed after the drain timeout."""

    def end(drain_timeout_s: float) -> str | None:
        found = group()
        if found is None:
            return None
        return "" if _end_group(found, drain_timeout_s) else f"its process group {found}"

    return end


def _ends_application(rm: ResourceManager, application_id: str) -> Ender:
    """A driver in YARN: its application, killed through the ResourceManager after the drain timeout."""

    def end(drain_timeout_s: float) -> str | None:
        if yarn_driver.end(rm, application_id, drain_timeout_s):
            return ""
        return f"its YARN application {application_id} through the ResourceManager"

    return end


def _end_group(group: int, drain_timeout_s: float) -> bool:
    """Wait up to the drain timeout for a driver's group to exit (a stop was asked); then kill it.
    True when it ended by itself."""
    deadline = time.monotonic() + drain_timeout_s
    while time.monotonic() < deadline:
        if not group_running(group):
            return True
        time.sleep(1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    return False


class WatchdogThread:
    """Looks at the app's lease every heartbeat; when the app is stuck, stops it: the stop marker,
    the drain timeout, then the kill (``ender``: SIGKILL to the driver's process group, or YARN's kill of
    its application). ``verdict`` says why."""

    def __init__(self, config: PipelineConfig, app: App, log: Logger, ender: Ender) -> None:
        self.config, self.app, self.log, self.ender = config, app, log, ender
        self.verdict: str | None = None
        # True from the verdict until the driver is gone, so the task does not give up on it first.
        self.busy = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watchdog-{app.name}", daemon=True)

    def start(self) -> WatchdogThread:
        self._thread.start()
        return self

    def judging(self, record: LeaseRecord) -> bool:
        """Whether this watchdog, not the caller, decides about a stale lease: its driver still runs
        here (a frozen one must be stopped and killed before anything restarts the app)."""
        if self.busy:
            return True
        return self._thread.is_alive() and record.host == socket.gethostname() and process_exists(record.pid)

    def stop(self) -> None:
        """Stop looking. A restart in progress (stop asked, drain timeout, kill) is waited for: the task
        process exits when its try ends, and this daemon thread with it, which would leave a stuck
        driver running."""
        self._stopping.set()
        if self._thread is threading.current_thread():
            return
        drain_s = self.config.supervision.drain_timeout.seconds
        self._thread.join(timeout=drain_s + 30 if self.busy else 10)

    def _run(self) -> None:
        app, log = self.app.name, self.log
        lease = Lease(self.config, app)
        backlog = KafkaBacklog(self.config)
        watchdog = Watchdog(
            WatchdogSettings.of(self.config, self.app), query_backlog(self.config, app, backlog)
        )
        interval = self.config.supervision.heartbeat_interval.seconds
        unreadable, last_answer = False, time.monotonic()
        try:
            while not self._stopping.wait(interval):
                try:
                    record = lease.read()
                except Exception as error:  # the store failed this read; the watchdog looks again
                    if not unreadable:
                        log.warning("watchdog: cannot read %s's lease (%s); looking again", app, error)
                    unreadable = True
                    continue
                answered = time.monotonic()
                silent_s, last_answer, unreadable = answered - last_answer, answered, False
                if watchdog.store_answered(silent_s, answered):
                    log.warning(
                        "watchdog: the store did not answer for %.0fs: %s's heartbeat is judged again "
                        "once the driver has had a lease timeout to renew it",
                        silent_s,
                        app,
                    )
                if record is None:
                    continue
                driver_exists = process_exists(record.pid) if record.host == lease.host else None
                verdict = watchdog.look(record, driver_exists, answered)
                if verdict is not None:
                    self.busy, self.verdict = True, verdict
                    self._restart(verdict, can_drain=not watchdog.frozen)
                    return
        except Exception as error:
            # The watchdog must never be what ends a healthy app's supervision.
            log.warning("watchdog for %s stopped looking: %s", app, error)
        finally:
            backlog.close()

    def _restart(self, verdict: str, can_drain: bool) -> None:
        app, log = self.app.name, self.log
        store = ControlStore(self.config)
        # A frozen JVM cannot drain: asking it to would only add the drain timeout to the outage.
        drain_s = self.config.supervision.drain_timeout.seconds if can_drain else 0.0
        if can_drain:
            log.error(
                "watchdog: %s is stuck: %s; asking it to stop (drain timeout %.0fs)", app, verdict, drain_s
            )
        else:
            log.error(
                "watchdog: %s is stuck: %s; killing it at once (a frozen JVM cannot drain)", app, verdict
            )
        store.record_watchdog_restart(app, verdict)
        if can_drain:
            store.request_stop(app)
        try:
            killed = self.ender(drain_s)
            if killed is None:
                log.error("watchdog: %s runs elsewhere or is gone: nothing here to kill", app)
            elif not killed:
                log.info("watchdog: %s stopped within the drain timeout", app)
            else:
                log.error("watchdog: %s did not stop within %.0fs: killed %s", app, drain_s, killed)
        finally:
            self.busy = False
