"""What the nightly reconciliation DAG's tasks do; the DAG file only wires these together.

The config comes from the environment exactly as for the apps (PIPELINE_ENV, PIPELINE__SECTION__KEY);
the nightly job (quality gates and reconciliation in one driver: stream_pipelines.quality.nightly_job)
runs through spark-submit with the streaming apps' Spark settings.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections import deque
from datetime import date, datetime
from typing import Any

from stream_pipelines.airflow import task_config
from stream_pipelines.launching.submit import reconcile_submit_command, submit_environment

log = logging.getLogger(__name__)
# The first event day to reconcile (the go-live day): the day states watch every day since, and none
# before; a far-past default on a fresh deployment would ask for a run of every day in between and
# count each as overdue. `make up` sets it to the stack's first day.
START_DATE_VARIABLE = "PIPELINE_NIGHTLY_START_DATE"
DEFAULT_FIRST_DAY = "2026-01-01"
# log4j's default console layout: "yy/MM/dd HH:mm:ss LEVEL logger: message".
_SPARK_LOG_LEVEL = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (ERROR|WARN|INFO|DEBUG|TRACE) ")
_LEVELS = {"ERROR": logging.ERROR, "WARN": logging.WARNING}


def first_event_day() -> datetime:
    """The go-live day from the environment, read when the DAG is parsed; a bad value names the variable."""
    given = os.environ.get(START_DATE_VARIABLE, DEFAULT_FIRST_DAY)
    try:
        return datetime.fromisoformat(given)
    except ValueError as error:
        raise ValueError(f"{START_DATE_VARIABLE}={given!r} is not a YYYY-MM-DD date") from error


def event_day(requested: str | None, partition_key: str | None) -> str:
    """D: the ``date`` param when given (runs by hand), else the day the asset event named (the run's
    partition key)."""
    if requested:
        return date.fromisoformat(str(requested)).isoformat()
    if partition_key:
        try:
            return date.fromisoformat(partition_key).isoformat()
        except ValueError as error:
            raise ValueError(
                f"the run's partition key {partition_key!r} is not an event day (YYYY-MM-DD)"
            ) from error
    raise ValueError("a run started by hand needs the date param (YYYY-MM-DD): which event day?")


def requested_kind(triggering_events: Any, day: str) -> str | None:
    """The kind of run the day states asked for D (from the asset event's extra), None for a run nobody's
    asset event asked for (a manual trigger)."""
    for events in (triggering_events or {}).values():
        for event in events:
            due = (getattr(event, "extra", None) or {}).get("due") or {}
            if day in due:
                return str(due[day])
    return None


def _job_line_level(line: str) -> int:
    """The logging level of a line of spark-submit output: Spark's own, else INFO."""
    spark_level = _SPARK_LOG_LEVEL.match(line)
    return _LEVELS.get(spark_level.group(1), logging.INFO) if spark_level else logging.INFO


def reconcile(day: str) -> str:
    """spark-submit the package's spark_apps/reconcile.py for D: the raw events gate, the reconciliation
    and the output gates in one driver; a non-zero exit fails the task with the job's verdict. Returns
    the path of D's report."""
    from stream_pipelines.reconciliation.report import report_dir  # matplotlib: not at the DAG's parse

    config = task_config()
    run_logged(
        reconcile_submit_command(config, date.fromisoformat(day)), "reconcile", f"nightly job of {day}"
    )
    return str(report_dir(config, day) / "report.html")


def run_logged(command: list[str], verdict_prefix: str, what: str) -> None:
    """Run a spark-submit job with its output in the task log line by line as it comes, so the UI shows
    progress while the job runs, not all at once when it ends; each line keeps Spark's own level, so its
    INFO chatter does not show as errors. A non-zero exit raises with the job's last verdict line (one
    starting with ``<verdict_prefix>:``), else its last lines."""

    verdicts: list[str] = []
    last_lines: deque[str] = deque(maxlen=40)
    with subprocess.Popen(
        command,
        env=submit_environment(config=task_config()),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as job:
        assert job.stdout is not None
        for line in job.stdout:
            log.log(_job_line_level(line), line.rstrip())
            last_lines.append(line.rstrip("\n"))
            if line.startswith(f"{verdict_prefix}:"):
                verdicts.append(line.strip())
    if job.returncode != 0:
        detail = verdicts[-1] if verdicts else "\n".join(last_lines)
        raise RuntimeError(f"{what} exited {job.returncode}: {detail}")
