"""The bodies of the operator-facing DAGs' tasks: pipeline_control, checkpoint_reset, output_maintenance.

Each reads the config when it runs (``task_config``) and fails with ``AirflowFailException`` (never
retried) when a person has to act.
"""

from __future__ import annotations

from typing import Any

from stream_pipelines.airflow import task_config
from stream_pipelines.airflow.nightly import run_logged
from stream_pipelines.checkpoint.inspect import CheckpointError
from stream_pipelines.checkpoint.reset import parse_offsets_argument, parse_reset_time, reset
from stream_pipelines.control.control_store import ControlStore, app_status, apply_action
from stream_pipelines.core.registry import APP_NAMES
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.kafka.clients import KafkaAccessRefused
from stream_pipelines.launching.submit import compact_submit_command
from stream_pipelines.tables import maintenance


def control_app(app: str, action: str, reason: str, requested_by: str) -> str:
    outcome = apply_action(task_config(), declared_app(app), action, by=requested_by, reason=reason)  # type: ignore[arg-type]
    print(outcome, flush=True)
    return outcome


def status_table() -> str:
    config = task_config()
    lines = [f"{'app':<20} {'state':<14} detail"]
    for app in APP_NAMES:
        status = app_status(config, app)
        lines.append(f"{app:<20} {status.state:<14} {status.detail}")
    table = "\n".join(lines)
    print(table, flush=True)
    return table


def reset_checkpoint(params: dict[str, Any]) -> str:
    """The checkpoint_reset DAG's task: refuses unless the app is stopped and the name is typed to confirm."""
    from airflow.sdk.exceptions import AirflowFailException

    config = task_config()
    app = params["app"]
    store = ControlStore(config)
    if store.running_pids(app) or store.desired(app)["desired"] != "stopped":
        raise AirflowFailException(
            f"{app} must be stopped first: trigger pipeline_control with app={app}, action=stop, "
            "wait for its supervisor run to finish, then reset"
        )
    try:
        result = reset(
            config,
            declared_app(app),
            params.get("query") or "all",
            from_=params["start_from"],
            offsets=parse_offsets_argument(params["offsets"]) if params.get("offsets") else None,
            timestamp_ms=parse_reset_time(params["time"]) if params.get("time") else None,
            confirm=params.get("confirm"),
        )
    except (CheckpointError, ValueError, KafkaAccessRefused) as error:
        raise AirflowFailException(str(error)) from None
    print(result.describe(), flush=True)
    return result.describe()


def compact(params: dict[str, Any]) -> str:
    """The output_maintenance DAG's first task: the compaction job (spark-submit), its lines in the task
    log; fails when a sink's compaction failed, or a file left (or is about to leave) its sink's log
    before a compacted version held its days."""

    config = task_config()
    run_logged(compact_submit_command(config, dry_run=bool(params.get("dry_run"))), "compact", "compaction")
    return "compacted"


def maintain(params: dict[str, Any]) -> dict[str, Any]:
    """The output_maintenance DAG's task: the sweep of every file sink and the rest of retention, its
    lines in the task log; fails (not retried) when a folder was refused, which needs a person."""
    from airflow.sdk.exceptions import AirflowFailException

    config = task_config()
    outcome = maintenance.maintain(
        config, config.maintenance.orphan_grace.seconds, dry_run=bool(params.get("dry_run"))
    )
    print("\n".join(outcome.lines()), flush=True)
    if not outcome.ok:
        problems = "; ".join(
            sweep.summary() for sweep in outcome.sweeps if sweep.refused or sweep.uncompacted
        )
        raise AirflowFailException(f"output sweep: {problems}")
    return outcome.as_json()
