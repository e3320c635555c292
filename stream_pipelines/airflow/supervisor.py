"""The supervisor of a streaming app inside Airflow: the operator, adoption, the watchdog thread and the
retry policy; the DAG files only wire these together.

Importing this module loads the Spark provider's operator (the supervisor DAG's tasks are instances of
it) but no pyspark and no config: everything that reads config or the filesystem happens when a task
runs, so DAG parsing stays fast and side-effect free.

A supervisor run: ``wait_until_wanted`` (a rescheduling sensor: passes while the app should run;
waits while an operator has stopped or paused it, or the crash-loop guard has tripped) then
``run_app`` (spark-submit of the app, blocking while it streams). Each try of ``run_app`` first runs
the checkpoint preflight and logs the resume point. A crash (non-zero exit) is retried by
``SupervisorRetryPolicy``: exponential backoff with jitter, from config, until the crash-loop
guard trips. A deliberate stop exits 0, so the run succeeds and is not counted as a crash; the next
run then waits until the app is wanted again.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

from stream_pipelines.airflow import task_config
from stream_pipelines.control.control_store import ControlStore, CrashLoopError, should_run
from stream_pipelines.control.lease import Lease, live_owner
from stream_pipelines.core.exit_codes import NOT_RETRIED, ExitCode
from stream_pipelines.core.procfs import group_running, process_exists
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.core.resource_manager import ResourceManager, YarnApplication
from stream_pipelines.launching import yarn_driver
from stream_pipelines.observability.watchdog import KafkaBacklog, Watchdog, WatchdogSettings, query_backlog


class SupervisorRetryPolicy(RetryPolicy):
    """Restart a crashed app after an exponentially growing, jittered delay; stop when crash-looping."""

    def __init__(self, app: str) -> None:
        self.app = app

    def evaluate(
        self, exception: BaseException, try_number: int, max_tries: int, context=None
    ) -> RetryDecision:
        config = task_config()
        settings = config.supervision
        cause = _describe_crash(exception)
        exit_code = _exit_code(exception)
        if exit_code in NOT_RETRIED:
            return RetryDecision.fail(reason=f"{self.app}: {cause}: {NOT_RETRIED[exit_code]}")
        if exit_code == ExitCode.OWNED_ELSEWHERE:
            # Not a crash: another driver owns the app. The next try adopts it instead of starting one.
            return RetryDecision.retry(
                delay=timedelta(seconds=settings.heartbeat_interval.seconds),
                reason=f"{self.app} is owned by another driver; the next try follows it",
            )
        try:
            restarts = count_driver_restart(config, self.app, cause)
        except CrashLoopError as error:
            return RetryDecision.fail(reason=str(error))
        # Keyed on the restarts within the crash-loop window, not on the try number: a supervisor run
        # lasts as long as the app streams, so its try number counts every crash since it began, and a
        # crash after weeks of quiet would wait as long as the fifth of a crash loop. Full jitter on
        # top of the base spreads restarts of several apps that failed together.
        delay = settings.restart_delay(restarts, random.random())
        if restarts == 1 and _signal_of(exit_code) is not None:
            # A driver killed by a signal (kill -9, the OOM killer taking the JVM) is a JVM's
            # death, which no wait mends; a failing query was already restarted inside the driver. So
            # the first restart within the window is at once; a second backs off as any.
            delay = 0.0
        return RetryDecision.retry(
            delay=timedelta(seconds=delay),
            reason=(
                f"{self.app} crashed ({cause}); driver restart {restarts} within the window, "
                f"from its checkpoint in {delay:.0f}s"
            ),
        )

    def serialize(self) -> dict[str, Any]:
        return {"__type": "SupervisorRetryPolicy", "app": self.app}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> SupervisorRetryPolicy:
        return cls(data["app"])


def count_driver_restart(config: Any, app: str, cause: str) -> int:
    """Count a restart of the app's driver under the crash-loop guard: the restarts within the window,
    or ``CrashLoopError`` at the limit."""
    settings = config.supervision
    return ControlStore(config).record_restart(
        app,
        cause=cause,
        limit=settings.max_restarts,
        window=timedelta(seconds=settings.crash_loop_window.seconds),
        kind="driver",
    )


def _exit_code(exception: BaseException) -> int | None:
    import re

    match = re.search(r"Error code is: (-?\d+)", str(exception))
    return int(match.group(1)) if match else None


def _signal_of(exit_code: int | None) -> int | None:
    """The signal that killed spark-submit's process: a negative code when it was killed itself, 128 + N
    when the shell that spark-submit is reported its child killed by signal N."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    return exit_code - 128 if 128 < exit_code < 128 + 32 else None


def _describe_crash(exception: BaseException) -> str:
    """A short cause: the hook's message quotes the whole spark-submit command line."""
    number = _exit_code(exception)
    if number is not None:
        signal_number = _signal_of(number)
        killed = f", killed by signal {signal_number}" if signal_number is not None else ""
        return f"spark-submit exited with code {number}{killed}"
    text = str(exception).strip()
    first_line = text.splitlines()[0] if text else type(exception).__name__
    return first_line[:200]


def submit_detached(hook: Any, application: str) -> None:
    """spark-submit in a session of its own (the watchdog and on_kill can end the whole driver, JVM and
    Python driver, without signalling this task's process group), with the task's stdin withheld."""
    # Without its stdin: before this, the driver inherited the task's. An Airflow 3 task's stdin is its
    # supervisor's socket, and the supervisor ends the try only when that socket closes: after a kill -9
    # of the task process, the orphaned driver held it open, and the retry that adopts the driver waited
    # until something killed the driver.
    hook.submit(application, start_new_session=True, stdin=subprocess.DEVNULL)


class StreamingAppOperator(SparkSubmitOperator):
    """spark-submit of one streaming app with the pipeline's config, read when the task runs."""

    def __init__(self, *, app: str, **kwargs: Any) -> None:
        super().__init__(application=declared_app(app).entry_point, name=app, **kwargs)
        self.app = app

    def execute(self, context: Any) -> None:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from stream_pipelines.launching.launch import StartRefused, prepare
        from stream_pipelines.launching.submit import submit_environment

        config = task_config()
        wanted, why = should_run(config, self.app)
        if not wanted:
            raise AirflowFailException(f"not starting: {why}")
        rm = yarn_driver.resource_manager_of(config) if config.drivers_in_cluster else None
        owner = live_owner(config, self.app)
        if owner is not None and rm is not None and owner.spark_app_id:
            application = rm.application(owner.spark_app_id)
            if application is not None and application.active:
                # A driver this task did not start owns the app from its YARN application: follow that.
                self._follow(config, rm, application, adopted=True)
                return
        if owner is not None:
            # A driver this task did not start (an earlier try's, whose runner died) still owns the
            # app: follow it instead of starting a second one on the same checkpoint.
            self._adopt(config, Lease(config, self.app), owner)
            return
        if rm is not None:
            running = rm.applications(self.app)
            if running:
                # YARN runs an application of this app that holds no lease yet (accepted, or its driver
                # starting): follow it. Never a second application of one app.
                self._follow(config, rm, running[-1], adopted=True)
                return
        self._count_uncounted_death(config)
        try:
            launch = prepare(config, declared_app(self.app), "processing", log=self.log.info)
        except StartRefused as refused:
            # Every start refusal is final (exit_codes.NOT_RETRIED): a restart cannot fix it.
            raise AirflowFailException(str(refused)) from None
        self.conf = launch.spark_conf
        self.application_args = launch.application_args
        self._conn_id = config.supervision.spark_conn_id
        environment = submit_environment(config=config)
        self.env_vars = {
            name: environment[name]
            for name in (
                "PYSPARK_PYTHON",
                "PYSPARK_DRIVER_PYTHON",
                "SPARK_LOCAL_IP",
                "PATH",
                "HADOOP_CONF_DIR",
                "JAVA_HOME",
                "PYSPARK_ARCHIVES_PATH",
            )
            if name in environment
        }
        self._deploy_mode = config.spark.deploy_mode
        # spark-submit must be on the worker's PATH (the hook runs it by name).
        os.environ["PATH"] = environment["PATH"]
        # The Spark connection comes from the environment; without one, it is built from config.
        variable = f"AIRFLOW_CONN_{self._conn_id.upper()}"
        os.environ.setdefault(variable, json.dumps({"conn_type": "spark", "host": config.spark.master}))
        self.log.info(
            "starting %s on %s from %s", self.app, config.spark.master, config.checkpoint_dir(self.app, "*")
        )
        if self._hook is None:
            self._hook = self._get_hook()
        hook = self._hook
        if rm is not None and launch.yarn_tag is not None:
            # Returns once YARN accepted the application (spark.yarn.submit.waitAppCompletion=false).
            submit_detached(hook, self.application)
            self._follow(config, rm, yarn_driver.submitted(rm, launch.yarn_tag), adopted=False)
            return
        guard = _WatchdogThread(self, config, _ends_group(lambda: _submitted_group(hook))).start()
        try:
            submit_detached(hook, self.application)
        except Exception as error:
            if guard.verdict is not None:
                raise AirflowException(f"watchdog: {self.app} was stuck: {guard.verdict}") from error
            raise
        finally:
            guard.stop()
        if guard.verdict is not None:
            # It drained cleanly when asked, but it was asked because it was stuck: still a restart.
            raise AirflowException(f"watchdog: {self.app} was stuck: {guard.verdict}")
        self.log.info("%s exited 0 (deliberate stop): not a crash, no restart", self.app)

    def _count_uncounted_death(self, config: Any) -> None:
        """A start after a driver death no supervisor saw (its task runner or the scheduler was down
        meanwhile) is a restart too: counted, under the crash-loop guard, as the retry policy counts one."""
        from airflow.sdk.exceptions import AirflowFailException

        death = ControlStore(config).uncounted_death(self.app)
        if death is None:
            return
        try:
            restarts = count_driver_restart(config, self.app, death)
        except CrashLoopError as error:
            raise AirflowFailException(str(error)) from None
        self.log.info(
            "%s: %s; driver restart %d within the window, from its checkpoint", self.app, death, restarts
        )

    def _adopt(self, config: Any, lease: Any, owner: Any) -> None:
        """Follow a live owner until it ends: a graceful stop is success, anything else a failure that
        the retry policy restarts from the checkpoint. The watchdog follows it as it would our own."""
        from airflow.sdk.exceptions import AirflowException

        self.log.info("adopting %s: %s", self.app, owner.describe())
        guard = _WatchdogThread(self, config, _ends_group(lambda: _owner_group(lease))).start()
        interval = config.supervision.heartbeat_interval.seconds
        last_logged, last_batches = 0.0, None
        try:
            while True:
                time.sleep(interval)
                if guard.verdict is not None:
                    raise AirflowException(f"watchdog: adopted {self.app} was stuck: {guard.verdict}")
                current = lease.read()
                if current is None:
                    ended = ControlStore(config).last_exit(self.app) or {}
                    if ended.get("status") in ("stopped", "finished"):
                        self.log.info(
                            "adopted %s ended: %s (%s)", self.app, ended["status"], ended.get("detail")
                        )
                        return
                    how = f"{ended.get('status', 'no exit record')} {ended.get('detail', '')}".rstrip()
                    raise AirflowException(f"adopted {self.app} ended without a graceful stop: {how}")
                if not lease.is_live(current) and not guard.judging(current):
                    raise AirflowException(
                        f"adopted {self.app} stopped renewing its lease ({current.describe()}); "
                        "restarting it from its checkpoint"
                    )
                batches = {name: q.get("batch_id") for name, q in current.queries.items()}
                if batches != last_batches and time.monotonic() - last_logged >= 30:
                    self.log.info("adopted %s progress: %s", self.app, _progress_line(current.queries))
                    last_logged, last_batches = time.monotonic(), batches
        finally:
            guard.stop()

    def _follow(
        self, config: Any, rm: ResourceManager, application: YarnApplication, *, adopted: bool
    ) -> None:
        """Follow a driver in YARN through its application until it ends: a graceful stop is success,
        anything else a failure the retry policy restarts from the checkpoint. The watchdog follows it
        as it would a local one, and stops a stuck driver through the ResourceManager."""
        from airflow.sdk.exceptions import AirflowException

        self.log.info(
            "%s %s: %s; driver log: %s",
            "adopting" if adopted else "submitted",
            self.app,
            application.describe(),
            application.am_container_logs or "(not yet placed)",
        )
        lease = Lease(config, self.app)
        ender = _ends_application(rm, application.id)
        guard = _WatchdogThread(self, config, ender).start()
        seen = {"attempt": application.attempt, "logged": 0.0, "batches": None, "state": application.state}

        def on_look(current: YarnApplication) -> None:
            if current.state != seen["state"] or current.attempt != seen["attempt"]:
                self.log.info("%s: %s", self.app, current.describe())
                seen["state"], seen["attempt"] = current.state, current.attempt
            try:
                record = lease.read()
            except Exception:  # the store failed this read; the next look reads again
                return
            if record is None:
                return
            batches = {name: q.get("batch_id") for name, q in record.queries.items()}
            if batches != seen["batches"] and time.monotonic() - seen["logged"] >= 30:
                self.log.info("%s progress: %s", self.app, _progress_line(record.queries))
                seen["logged"], seen["batches"] = time.monotonic(), batches

        try:
            final = yarn_driver.follow(
                rm,
                application,
                config.supervision.heartbeat_interval.seconds,
                on_look,
                should_stop=lambda: guard.verdict is not None and not guard.busy,
            )
        finally:
            guard.stop()
        if final.active:
            final = rm.application(final.id) or final
        tail = rm.driver_log_tail(final, size=config.yarn.driver_log_bytes)
        if tail:
            self.log.info("the end of %s's driver log (%s):\n%s", self.app, final.am_container_logs, tail)
        if guard.verdict is not None:
            raise AirflowException(f"watchdog: {self.app} was stuck: {guard.verdict}")
        result = yarn_driver.outcome(config, self.app, final)
        if result.graceful:
            self.log.info("%s ended (deliberate stop): %s; not a crash, no restart", self.app, result.text)
            return
        raise AirflowException(f"{self.app}'s driver ended without a graceful stop: {result.text}")

    def on_kill(self) -> None:
        """Airflow is stopping the task. A driver on this worker is asked to drain and stop before
        anything harsher. A driver in YARN does not live here: a worker's restart or redeploy must not
        take it down, so it runs on and the next try (or run) adopts it; ``pipeline_control`` stops an
        app on purpose."""

        config = task_config()
        if config.drivers_in_cluster:
            self.log.info(
                "%s: the task is stopped, its YARN application runs on; the next try adopts it "
                "(stop the app with the pipeline_control DAG)",
                self.app,
            )
            return
        ControlStore(config).request_stop(self.app)
        group = _submitted_group(self._hook) if self._hook else None
        if group is not None and not _end_group(group, config.supervision.drain_timeout.seconds):
            self.log.warning("%s did not stop within the drain timeout: killed", self.app)


def _submitted_group(hook: Any) -> int | None:
    """The process group of the spark-submit this task started, while it runs."""
    process = getattr(hook, "_submit_sp", None)
    return process.pid if process is not None and process.poll() is None else None


def _owner_group(lease: Any) -> int | None:
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


# How a watchdog ends a driver, given the drain timeout: None when nothing here is its to end, "" when
# the driver stopped within the drain timeout, else what it killed.
Ender = Callable[[float], str | None]


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


class _WatchdogThread:
    """Looks at the app's lease every heartbeat; when the app is stuck, stops it: the stop marker,
    the drain timeout, then the kill (``ender``: SIGKILL to the driver's process group, or YARN's kill of
    its application). ``verdict`` says why."""

    def __init__(self, operator: StreamingAppOperator, config: Any, ender: Ender) -> None:
        self.operator, self.config, self.ender = operator, config, ender
        self.verdict: str | None = None
        # True from the verdict until the driver is gone, so the task does not give up on it first.
        self.busy = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watchdog-{operator.app}", daemon=True)

    def start(self) -> _WatchdogThread:
        self._thread.start()
        return self

    def judging(self, record: Any) -> bool:
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
        app, log = self.operator.app, self.operator.log
        lease = Lease(self.config, app)
        backlog = KafkaBacklog(self.config)
        watchdog = Watchdog(WatchdogSettings.of(self.config, app), query_backlog(self.config, app, backlog))
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
        app, log = self.operator.app, self.operator.log
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


def _progress_line(queries: dict[str, dict[str, Any]]) -> str:
    return "; ".join(
        f"{name} batch {q.get('batch_id')} rows {q.get('input_rows')} watermark {q.get('watermark')}"
        for name, q in sorted(queries.items())
    )


def app_is_wanted(app: str) -> bool:
    """The supervisor's sensor: True when the app should run; otherwise logs why it waits."""

    wanted, why = should_run(task_config(), app)
    print(why, file=sys.stderr if not wanted else sys.stdout, flush=True)
    return wanted
