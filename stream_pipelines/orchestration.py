"""Airflow pieces for supervising the streaming apps; the DAG files only wire these together.

Importing this module is cheap (no pyspark, no config read): everything that reads config or the
filesystem happens when a task runs, so DAG parsing stays fast and side-effect free.

A supervisor run: ``wait_until_wanted`` (a rescheduling sensor: passes while the app should run;
waits while an operator has stopped or paused it, or the crash-loop guard has tripped) then
``run_app`` (spark-submit of the app, blocking while it streams). Each try of ``run_app`` first runs
the checkpoint preflight and logs the resume point. A crash (non-zero exit) is retried by
``SupervisorRetryPolicy``: exponential backoff with jitter, from config, until the crash-loop
guard trips. A deliberate stop exits 0, so the run succeeds and is not counted as a crash; the next
run then waits until the app is wanted again.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

from stream_pipelines.config import PROJECT_ROOT
from stream_pipelines.registry import APP_NAMES

# Effectively unbounded: the crash-loop guard, not a try count, decides when restarts stop.
SUPERVISOR_RETRIES = 1000
DEFAULT_ARGS = {"owner": "data-platform", "depends_on_past": False}
SUPERVISOR_TAGS = ["streaming", "supervisor"]


def _config():
    from stream_pipelines.config import load_config

    return load_config()


class SupervisorRetryPolicy(RetryPolicy):
    """Restart a crashed app after an exponentially growing, jittered delay; stop when crash-looping."""

    def __init__(self, app: str) -> None:
        self.app = app

    def evaluate(
        self, exception: BaseException, try_number: int, max_tries: int, context=None
    ) -> RetryDecision:
        from stream_pipelines.control import CrashLoopError, record_restart_attempt
        from stream_pipelines.metrics import record_restart

        config = _config()
        settings = config.supervision
        cause = _describe_crash(exception)
        exit_code = _exit_code(exception)
        if exit_code in _NOT_RETRIED_EXIT_CODES:
            return RetryDecision.fail(reason=f"{self.app}: {cause}: {_NOT_RETRIED_EXIT_CODES[exit_code]}")
        try:
            restarts = record_restart_attempt(
                config,
                self.app,
                limit=settings.max_restarts,
                window=timedelta(seconds=settings.crash_loop_window.seconds),
                cause=cause,
            )
        except CrashLoopError as error:
            return RetryDecision.fail(reason=str(error))
        record_restart(config, self.app)
        base = settings.retry_delay.seconds * settings.backoff_multiplier ** max(try_number - 1, 0)
        # Full jitter on top of the base spreads restarts of several apps that failed together.
        delay = min(base * (1 + random.random()), settings.max_retry_delay.seconds)
        return RetryDecision.retry(
            delay=timedelta(seconds=delay),
            reason=(
                f"{self.app} crashed ({cause}); "
                f"restart {restarts} within the window, from its checkpoint in {delay:.0f}s"
            ),
        )

    def serialize(self) -> dict[str, Any]:
        return {"__type": "SupervisorRetryPolicy", "app": self.app}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> SupervisorRetryPolicy:
        return cls(data["app"])


# Exits that a restart cannot fix: a person has to act, so they fail at once instead of looping.
_NOT_RETRIED_EXIT_CODES = {
    2: "the configuration is invalid (see the message above)",
    4: "the checkpoint preflight refused to start (see the message above)",
}


# Exits that a restart cannot fix: a person has to act, so they fail at once instead of looping.
_NOT_RETRIED_EXIT_CODES = {
    2: "the configuration is invalid (see the message above)",
    4: "the checkpoint preflight refused to start (see the message above)",
}


def _exit_code(exception: BaseException) -> int | None:
    import re

    match = re.search(r"Error code is: (-?\d+)", str(exception))
    return int(match.group(1)) if match else None


def _describe_crash(exception: BaseException) -> str:
    """A short cause: the hook's message quotes the whole spark-submit command line."""
    number = _exit_code(exception)
    if number is not None:
        killed = f", killed by signal {-number}" if number < 0 else ""
        return f"spark-submit exited with code {number}{killed}"
    text = str(exception).strip()
    first_line = text.splitlines()[0] if text else type(exception).__name__
    return first_line[:200]


class StreamingAppOperator(SparkSubmitOperator):
    """spark-submit of one streaming app with the pipeline's config, read when the task runs."""

    def __init__(self, *, app: str, **kwargs: Any) -> None:
        if app not in APP_NAMES:
            raise ValueError(f"unknown app {app!r}; the apps are: {', '.join(APP_NAMES)}")
        super().__init__(application=str(PROJECT_ROOT / "spark_apps" / f"{app}.py"), name=app, **kwargs)
        self.app = app

    def execute(self, context: Any) -> None:
        from airflow.sdk.exceptions import AirflowFailException

        from stream_pipelines.checkpoint.inspect import CheckpointError, preflight
        from stream_pipelines.control import clear_stale_stop_marker, should_run
        from stream_pipelines.runtime import spark_conf
        from stream_pipelines.submit import application_args, submit_environment

        config = _config()
        wanted, why = should_run(config, self.app)
        if not wanted:
            raise AirflowFailException(f"not starting: {why}")
        try:
            report = preflight(config, self.app)
        except CheckpointError as error:
            raise AirflowFailException(
                f"checkpoint preflight refused to start {self.app}:\n{error}"
            ) from None
        self.log.info("checkpoint preflight for %s:\n%s", self.app, report.describe())
        if clear_stale_stop_marker(config, self.app):
            self.log.info("removed a stop marker left by an earlier stop")

        self.conf = spark_conf(config)
        self.application_args = application_args(config, "processing")
        self._conn_id = config.supervision.spark_conn_id
        environment = submit_environment()
        self.env_vars = {
            name: environment[name]
            for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP", "PATH")
            if name in environment
        }
        # spark-submit must be on the worker's PATH (the hook runs it by name).
        os.environ["PATH"] = environment["PATH"]
        # The Spark connection comes from the environment; without one, it is built from config.
        variable = f"AIRFLOW_CONN_{self._conn_id.upper()}"
        os.environ.setdefault(variable, json.dumps({"conn_type": "spark", "host": config.spark.master}))
        self.log.info(
            "starting %s on %s from %s", self.app, config.spark.master, config.checkpoint_dir(self.app, "*")
        )
        super().execute(context)
        self.log.info("%s exited 0 (deliberate stop): not a crash, no restart", self.app)

    def on_kill(self) -> None:
        """Airflow is stopping the task: ask the app to drain and stop before anything harsher."""
        from stream_pipelines.control import request_graceful_stop

        config = _config()
        request_graceful_stop(config, self.app)
        deadline = time.monotonic() + config.supervision.drain_timeout.seconds
        process = getattr(self._hook, "_submit_sp", None) if self._hook else None
        while process is not None and process.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        if process is None or process.poll() is None:
            super().on_kill()


def app_is_wanted(app: str) -> bool:
    """The supervisor's sensor: True when the app should run; otherwise logs why it waits."""
    from stream_pipelines.control import should_run

    wanted, why = should_run(_config(), app)
    print(why, file=sys.stderr if not wanted else sys.stdout, flush=True)
    return wanted


def control_app(app: str, action: str, reason: str, requested_by: str) -> str:
    from stream_pipelines.control import apply_action

    outcome = apply_action(_config(), app, action, by=requested_by, reason=reason)  # type: ignore[arg-type]
    print(outcome, flush=True)
    return outcome


def status_table() -> str:
    from stream_pipelines.control import app_status, running_app_pids

    config = _config()
    lines = [f"{'app':<20} {'state':<14} detail"]
    for app in APP_NAMES:
        status = app_status(config, app, running_app_pids(config, app))
        lines.append(f"{app:<20} {status.state:<14} {status.detail}")
    table = "\n".join(lines)
    print(table, flush=True)
    return table


def dags_folder() -> Path:
    return PROJECT_ROOT / "dags"


def reset_checkpoint(params: dict[str, Any]) -> str:
    """The checkpoint_reset DAG's task: refuses unless the app is stopped and the name is typed to confirm."""
    from airflow.sdk.exceptions import AirflowFailException

    from stream_pipelines.checkpoint.inspect import CheckpointError
    from stream_pipelines.checkpoint.reset import parse_offsets_argument, parse_reset_time, reset
    from stream_pipelines.control import desired_state, running_app_pids

    config = _config()
    app = params["app"]
    if running_app_pids(config, app) or desired_state(config, app)["desired"] != "stopped":
        raise AirflowFailException(
            f"{app} must be stopped first: trigger pipeline_control with app={app}, action=stop, "
            "wait for its supervisor run to finish, then reset"
        )
    try:
        result = reset(
            config,
            app,
            params.get("query") or "all",
            from_=params["start_from"],
            offsets=parse_offsets_argument(params["offsets"]) if params.get("offsets") else None,
            timestamp_ms=parse_reset_time(params["time"]) if params.get("time") else None,
            confirm=params.get("confirm"),
        )
    except (CheckpointError, ValueError) as error:
        raise AirflowFailException(str(error)) from None
    print(result.describe(), flush=True)
    return result.describe()
