"""DAG integrity: every DAG loads without errors, parses quickly, and follows the house policy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json, sys, time
from airflow.dag_processing.dagbag import DagBag
started = time.monotonic()  # the DAG files themselves, not Airflow's own import
bag = DagBag(sys.argv[1])
elapsed = time.monotonic() - started
heavy = sorted(m for m in ("pyspark", "pandas", "great_expectations", "matplotlib") if m in sys.modules)
dags = {}
for dag_id, dag in bag.dags.items():
    dags[dag_id] = {
        "tags": sorted(dag.tags),
        "tasks": {
            t.task_id: {
                "owner": t.owner,
                "retries": t.retries,
                "backoff": t.retry_exponential_backoff,
                "retry_delay": t.retry_delay.total_seconds(),
                "max_retry_delay": t.max_retry_delay.total_seconds() if t.max_retry_delay else None,
                "policy": type(getattr(t, "retry_policy", None)).__name__,
            }
            for t in dag.tasks
        },
        "max_active_runs": dag.max_active_runs,
        "start_date": dag.start_date.isoformat() if dag.start_date else None,
        "catchup": dag.catchup,
        "schedule": str(dag.schedule) if hasattr(dag, "schedule") else None,
    }
    timetable = dag.timetable
    dags[dag_id]["timetable"] = type(timetable).__name__
    condition = getattr(timetable, "asset_condition", None)
    dags[dag_id]["assets"] = [condition.name] if condition is not None and hasattr(condition, "name") else []
    dags[dag_id]["every_s"] = timetable.delta.total_seconds() if hasattr(timetable, "delta") else None
    for t in dag.tasks:
        rule = t.trigger_rule
        dags[dag_id]["tasks"][t.task_id]["trigger_rule"] = getattr(rule, "value", str(rule))
        dags[dag_id]["tasks"][t.task_id]["assigned_users"] = getattr(t, "assigned_users", None)
        dags[dag_id]["tasks"][t.task_id]["outlets"] = [a.name for a in t.outlets]
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "seconds": elapsed,
                  "dags": dags, "heavy": heavy}))
"""


def load_bag(airflow_env):
    import json

    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, airflow_env["AIRFLOW__CORE__DAGS_FOLDER"]],
        env=airflow_env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_dags_load_without_errors_quickly_and_without_heavy_imports(airflow_env):
    bag = load_bag(airflow_env)
    assert bag["errors"] == {}
    assert {
        "supervise_raw_archive",
        "supervise_sensor_aggregation",
        "supervise_ad_matching",
        "pipeline_control",
        "checkpoint_reset",
        "output_maintenance",
    } <= set(bag["dags"])
    assert bag["seconds"] < 5, f"parsing the DAG folder took {bag['seconds']:.1f}s"
    assert bag["heavy"] == [], f"DAG parsing imported {bag['heavy']}"


def test_policy_owner_tags_retries_and_backoff(airflow_env):
    bag = load_bag(airflow_env)
    for dag_id, dag in bag["dags"].items():
        assert dag["tags"], f"{dag_id} has no tags"
        for task_id, task in dag["tasks"].items():
            assert task["owner"] and task["owner"] != "airflow", f"{dag_id}.{task_id} has no owner"
            assert task["retries"] is not None, f"{dag_id}.{task_id} has no retries setting"
    for app in ("raw_archive", "sensor_aggregation", "ad_matching"):
        supervisor = bag["dags"][f"supervise_{app}"]
        assert supervisor["max_active_runs"] == 1
        run_app = supervisor["tasks"]["run_app"]
        assert run_app["retries"] > 0 and run_app["policy"] == "SupervisorRetryPolicy"
        # Crashes back off through the policy. Airflow's own delay serves a try whose task process died,
        # whose driver may run unsupervised until the next try adopts it: soon, and not growing.
        assert run_app["retry_delay"] <= 10 and not run_app["backoff"]


def test_the_data_drives_each_days_reconciliation_and_sign_off(airflow_env):
    """reconciliation_days watches from the go-live day and emits the due asset; the reconciliation runs
    once per day it names; a final run's report asks the named reviewers for a sign-off."""
    bag = load_bag(
        {
            **airflow_env,
            "PIPELINE_NIGHTLY_START_DATE": "2026-11-02",
            "PIPELINE_DAYS_WATCH_EVERY": "2 minutes",
            "PIPELINE_COMPLIANCE_REVIEWERS": "ann, bob",
        }
    )
    watcher = bag["dags"]["reconciliation_days"]
    assert watcher["start_date"].startswith("2026-11-02") and watcher["every_s"] == 120
    assert watcher["catchup"] is False and watcher["max_active_runs"] == 1
    assert watcher["tasks"]["watch_days"]["outlets"] == ["reconciliation_day_due"]

    nightly = bag["dags"]["nightly_reconciliation"]
    assert (nightly["timetable"], nightly["assets"]) == (
        "PartitionedAssetTimetable",
        ["reconciliation_day_due"],
    )
    assert nightly["max_active_runs"] == 1
    assert nightly["tasks"]["ask_sign_off"]["outlets"] == ["reconciliation_final_reported"]
    assert nightly["tasks"]["record"]["outlets"] == []
    assert nightly["tasks"]["record_failure"]["trigger_rule"] == "one_failed"
    # A try of the day-state bookkeeping that a restart of the metadata database fails (its XCom
    # unreadable) is tried again within a minute; only the recompute waits 10 minutes for its retry.
    for task_id in ("choose_day", "claim", "record", "ask_sign_off", "record_failure"):
        bookkeeping = nightly["tasks"][task_id]
        assert bookkeeping["retries"] >= 3 and bookkeeping["retry_delay"] <= 30, (task_id, bookkeeping)
    assert nightly["tasks"]["reconcile"]["retry_delay"] == 600

    sign_off = bag["dags"]["compliance_sign_off"]
    assert (sign_off["timetable"], sign_off["assets"]) == (
        "PartitionedAssetTimetable",
        ["reconciliation_final_reported"],
    )
    assert sign_off["tasks"]["sign_off"]["assigned_users"] == [
        {"id": "ann", "name": "ann"},
        {"id": "bob", "name": "bob"},
    ]


def test_the_event_day_is_the_param_then_the_partition_key_and_a_run_by_hand_needs_the_date():
    from stream_pipelines.airflow.nightly import event_day

    assert event_day("2026-01-01", "2026-02-02") == "2026-01-01"
    assert event_day(None, "2026-02-02") == "2026-02-02"
    with pytest.raises(ValueError, match="needs the date param"):
        event_day(None, None)
    with pytest.raises(ValueError):
        event_day("01/01/2026", None)
    with pytest.raises(ValueError, match="partition key 'x' is not an event day"):
        event_day(None, "x")


def test_a_bad_go_live_day_watch_interval_or_reviewer_list_is_an_import_error_naming_the_variable(
    airflow_env,
):
    cases = [
        ("PIPELINE_NIGHTLY_START_DATE", "last tuesday", "reconciliation_days.py", "is not a YYYY-MM-DD date"),
        ("PIPELINE_DAYS_WATCH_EVERY", "often", "reconciliation_days.py", "PIPELINE_DAYS_WATCH_EVERY='often'"),
        ("PIPELINE_COMPLIANCE_REVIEWERS", "ann,,bob", "compliance_sign_off.py", "must list Airflow user ids"),
    ]
    for variable, value, dag_file, message in cases:
        errors = load_bag({**airflow_env, variable: value})["errors"]
        [error] = [text for path, text in errors.items() if path.endswith(dag_file)]
        assert variable in error and message in error, error


def test_the_page_reaches_airflow_through_the_packages_entry_point_not_a_plugins_folder(
    airflow_env, tmp_path
):
    """`airflow plugins`, as a platform engineer checks an install: with an empty plugins folder the page's
    plugin is listed, its source the installed package's ``airflow.plugins`` entry point, and no plugin
    failed to import."""
    empty = tmp_path / "plugins"
    empty.mkdir()
    environment = {**airflow_env, "AIRFLOW__CORE__PLUGINS_FOLDER": str(empty)}
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "plugins", "--output", "json"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert listed.returncode == 0, listed.stderr[-3000:]
    plugins = {plugin["name"]: plugin for plugin in json.loads(listed.stdout)}
    assert "streaming_pipeline" in plugins, sorted(plugins)
    source = str(plugins["streaming_pipeline"]["source"])
    assert "stream-pipelines" in source and "StreamingPipelinePlugin" in source, source
    assert "already registered" not in listed.stderr and "Failed to load plugin" not in listed.stderr
