"""What the nightly reconciliation DAG's tasks do; the DAG file only wires these together.

The config comes from the environment exactly as for the apps (PIPELINE_ENV, PIPELINE__SECTION__KEY);
the reconciliation itself runs through spark-submit with the streaming apps' Spark settings, and the
quality gates run in the task's own process on a local session.
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
from stream_pipelines.core.config import PipelineConfig
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


def _spark(config: PipelineConfig, name: str):
    from stream_pipelines.driver.runtime import get_spark

    return get_spark(config, name)


def gate_raw_events(day: str) -> dict[str, Any]:
    from stream_pipelines.quality import gates as quality_gates

    config = task_config()
    result = quality_gates.raw_events_gate(config, date.fromisoformat(day), _spark(config, "nightly_gx"))
    print(f"raw events gate: {result.as_json()}")
    return quality_gates.enforce(result).as_json()


def _job_line_level(line: str) -> int:
    """The logging level of a line of spark-submit output: Spark's own, else INFO."""
    spark_level = _SPARK_LOG_LEVEL.match(line)
    return _LEVELS.get(spark_level.group(1), logging.INFO) if spark_level else logging.INFO


def reconcile(day: str) -> str:
    """spark-submit the package's spark_apps/reconcile.py for D; a non-zero exit fails the task with the
    job's message."""

    run_logged(
        reconcile_submit_command(task_config(), date.fromisoformat(day)),
        "reconcile",
        f"reconciliation of {day}",
    )
    return day


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


def gate_outputs(day: str) -> list[dict[str, Any]]:
    from stream_pipelines.quality import gates as quality_gates

    config = task_config()
    spark = _spark(config, "nightly_gx")
    results = [
        quality_gates.streaming_outputs_gate(config, date.fromisoformat(day), spark),
        quality_gates.compliance_gate(config, date.fromisoformat(day), spark),
    ]
    quality_gates.attach_to_report(config, date.fromisoformat(day), results)
    for result in results:
        print(f"{result.suite} gate: {result.as_json()}")
        quality_gates.enforce(result)
    return [r.as_json() for r in results]


def publish_report(day: str, raw_gate: dict[str, Any], output_gates: list[dict[str, Any]]) -> str:
    """Attach every gate's result to D's report; returns the HTML report's path."""
    from stream_pipelines.reconciliation.report import report_dir, update_report

    folder = report_dir(task_config(), day)
    update_report(folder, "quality_gates", [raw_gate, *output_gates])
    return str(folder / "report.html")
