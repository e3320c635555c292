"""DAG integrity: every DAG loads without errors, parses quickly, and follows the house policy."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime

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
from airflow.serialization.serialized_objects import DagSerialization
from airflow.timetables.base import TimeRestriction
if "nightly_reconciliation" in bag.dags:
    # The scheduler's view: the DAG as serialized, and the first run its timetable gives.
    nightly = DagSerialization.from_dict(DagSerialization.to_dict(bag.dags["nightly_reconciliation"]))
    first = nightly.timetable.next_dagrun_info(
        last_automated_data_interval=None,
        restriction=TimeRestriction(earliest=nightly.start_date, latest=None, catchup=True),
    )
    dags["nightly_reconciliation"]["first_run"] = {
        "run_after": first.run_after.isoformat(), "data_interval_start": first.data_interval.start.isoformat()
    }
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


def test_the_nightly_reconciles_each_day_after_it_ends_from_the_go_live_day_on(airflow_env):
    from stream_pipelines.airflow.nightly import event_day

    bag = load_bag({**airflow_env, "PIPELINE_NIGHTLY_START_DATE": "2026-11-02"})
    nightly = bag["dags"]["nightly_reconciliation"]
    assert nightly["catchup"] is True
    first = nightly["first_run"]
    # The first run starts at midnight after the go-live day, and reconciles the go-live day itself.
    assert first["run_after"].startswith("2026-11-03T00:00:00")
    interval_start = datetime.fromisoformat(first["data_interval_start"])
    assert event_day(None, interval_start, None) == "2026-11-02"


def test_a_bad_go_live_day_is_an_import_error_naming_the_variable(airflow_env):
    bag = load_bag({**airflow_env, "PIPELINE_NIGHTLY_START_DATE": "last tuesday"})
    errors = bag["errors"]
    [error] = [message for path, message in errors.items() if path.endswith("nightly_reconciliation.py")]
    assert "PIPELINE_NIGHTLY_START_DATE='last tuesday' is not a YYYY-MM-DD date" in error
