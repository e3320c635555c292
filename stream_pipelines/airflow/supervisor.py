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

import random
import sys
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy
from airflow.sdk.exceptions import AirflowFailException

from stream_pipelines.airflow import task_config
from stream_pipelines.airflow.drivers import DriverPlacement, placement
from stream_pipelines.control.control_store import ControlStore, CrashLoopError, should_run
from stream_pipelines.core.exit_codes import NOT_RETRIED, ExitCode
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.launching.launch import StartRefused, prepare


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


class StreamingAppOperator(BaseOperator):
    """One try of an app's supervision: follow the app's driver if one runs already, else start one from
    its checkpoint and follow it, until it ends. Where the driver runs is its ``DriverPlacement``'s
    business (on this worker, or in YARN)."""

    def __init__(self, *, app: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app = app
        self._placement: DriverPlacement | None = None

    def execute(self, context: Any) -> None:
        config, app = task_config(), declared_app(self.app)
        wanted, why = should_run(config, app.name)
        if not wanted:
            raise AirflowFailException(f"not starting: {why}")
        self._placement = placement(config, app, self.log)
        running = self._placement.running()
        if running is not None:
            running()  # an earlier try's driver: never a second one on the same checkpoint
            return
        self._count_uncounted_death(config)
        try:
            launch = prepare(config, app, "processing", log=self.log.info)
        except StartRefused as refused:
            # Every start refusal is final (exit_codes.NOT_RETRIED): a restart cannot fix it.
            raise AirflowFailException(str(refused)) from None
        where = config.checkpoint_dir(app.name, "*")
        self.log.info("starting %s on %s from %s", app.name, config.spark.master, where)
        self._placement.start(launch)

    def _count_uncounted_death(self, config: Any) -> None:
        """A start after a driver death no supervisor saw (its task runner or the scheduler was down
        meanwhile) is a restart too: counted, under the crash-loop guard, as the retry policy counts one."""
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

    def on_kill(self) -> None:
        """Airflow is stopping the task: the placement says what that means for the driver."""
        driver = self._placement or placement(task_config(), declared_app(self.app), self.log)
        driver.stop()


def app_is_wanted(app: str) -> bool:
    """The supervisor's sensor: True when the app should run; otherwise logs why it waits."""

    wanted, why = should_run(task_config(), app)
    print(why, file=sys.stderr if not wanted else sys.stdout, flush=True)
    return wanted
