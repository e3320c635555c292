"""The reconciliation DAG through Airflow's own dag.test() (a manual run with the ``date`` param). Runs
started by the data, through a real scheduler and the REST API, are in tests/test_day_lifecycle.py.

Airflow runs in a child process so that its settings (AIRFLOW_HOME, the DB) never leak into the
test session; the pipeline config reaches the tasks through PIPELINE__* variables, as in production.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import date, datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from stream_pipelines.airflow.nightly import event_day
from stream_pipelines.core import store
from stream_pipelines.core.config import PROJECT_ROOT
from stream_pipelines.devtools import stack

DAG_FILE = PROJECT_ROOT / "dags" / "nightly_reconciliation.py"
DAY = date(2026, 1, 1)

DAG_RUN = textwrap.dedent(
    """
    import importlib.util, json, sys
    from datetime import datetime, UTC
    spec = importlib.util.spec_from_file_location("nightly_reconciliation", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    heavy = sorted(m for m in ("pyspark", "great_expectations") if m in sys.modules)
    conf = {"date": sys.argv[2], "declare_final": sys.argv[3]}
    run = module.dag.test(logical_date=datetime(2026, 1, 2, tzinfo=UTC), run_conf=conf)
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    print("RESULT " + json.dumps({"state": str(run.state), "tasks": states, "heavy_at_parse": heavy}))
    """
)


def test_event_day_is_the_param_then_the_partition_key():
    assert event_day("2026-01-01", "2026-02-02") == "2026-01-01"
    assert event_day(None, "2026-02-02") == "2026-02-02"
    with pytest.raises(ValueError):
        event_day("01/01/2026", None)
    with pytest.raises(ValueError, match="partition key 'x' is not an event day"):
        event_day(None, "x")
    with pytest.raises(ValueError, match="needs the date param"):
        event_day(None, None)


def airflow_environment(tmp_path: Path, data_root: Path | str) -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRFLOW", "PIPELINE__", "PYSPARK_GATEWAY"))
    }
    environment.update(
        {
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAG_FILE.parent),
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow' / 'airflow.db'}",
            "PIPELINE__PATHS__DATA_ROOT": str(data_root),
            # Host-local (GX's working folder, Spark's scratch), whatever store the data root is on.
            "PIPELINE__PATHS__LOCAL_ROOT": str(tmp_path / "local"),
            "PIPELINE__SPARK__SHUFFLE_PARTITIONS": "2",
            "PIPELINE__SPARK__DRIVER_MEMORY": "1g",
            "PIPELINE__METRICS__ENABLED": "false",
            "PYTHONPATH": str(PROJECT_ROOT),
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
    )
    return environment


def write_archive_for_day(spark, data_root: Path | str) -> None:
    """Three archived sensor readings of D (no stream ran: every window is pending for it)."""
    readings = [
        ("e1", 1, 20.0, 10),
        ("e2", 2, 22.0, 20),
        ("e3", 7, 30.0, 30),
    ]
    rows = [
        (
            "sensors",
            0,
            offset,
            None,
            json.dumps(
                {
                    "event_id": event,
                    "sensor_id": "sensor-0001",
                    "temperature": temperature,
                    "ts": f"2026-01-01T00:{minute:02d}:00Z",
                }
            ).encode(),
            datetime(2026, 1, 1, 0, minute, second),
            None,
            datetime(2026, 1, 1, 0, minute, second + 1),
        )
        for offset, (event, minute, temperature, second) in enumerate(readings)
    ]
    spark.createDataFrame(
        rows,
        "topic string, partition int, offset long, key string, value binary, kafka_timestamp timestamp, "
        "source_file string, archived_at timestamp",
    ).withColumn("arrival_date", F.lit(DAY.isoformat())).write.partitionBy("topic", "arrival_date").parquet(
        f"{data_root}/archive"
    )


@pytest.fixture(params=["local", "hdfs"])
def nightly_data_root(request, tmp_path):
    """The run's data root: a local folder, or the lab's layout on the session's HDFS."""
    if request.param == "local":
        return tmp_path / "data"
    return request.getfixturevalue("hdfs_root") + "/pipeline"


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a DB migration, a GX context, a spark-submit: minutes on a busy machine
def test_the_dag_runs_every_task_through_dag_test(spark, tmp_path, nightly_data_root):
    data_root = nightly_data_root
    write_archive_for_day(spark, data_root)
    environment = airflow_environment(tmp_path, data_root)
    failure = stack.migrate_airflow_db(environment)
    assert failure is None, failure

    run = subprocess.run(
        [sys.executable, "-c", DAG_RUN, str(DAG_FILE), DAY.isoformat(), "no stream ran for this test day"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"dag.test() did not finish:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    outcome = json.loads(lines[-1].removeprefix("RESULT "))
    assert outcome["heavy_at_parse"] == [], "the DAG file imported Spark or GX at parse time"
    assert outcome["state"] == "success", f"{outcome}\n{run.stderr[-6000:]}"
    assert outcome["tasks"] == {
        **dict.fromkeys(
            ("choose_day", "claim", "gx_raw_events", "reconcile", "gx_outputs", "report", "record"), "success"
        ),
        "record_failure": "skipped",
        "ask_sign_off": "success",  # the day was declared final: its report asks for a sign-off
    }

    report = store.read_json(
        store.location(None, f"{data_root}/reports/reconciliation/{DAY.isoformat()}/report.json")
    )
    assert report["status"] == "passed"
    assert [gate["suite"] for gate in report["quality_gates"]] == [
        "raw_events",
        "streaming_outputs",
        "compliance_table",
    ]
    assert all(gate["data_docs"] for gate in report["quality_gates"])
    assert report["compliance_rows"] == 2
    # A day the data never closed, declared final by hand: the run is its final one, with the reason.
    record = store.read_json(
        store.location(None, f"{data_root}/reports/reconciliation/days/{DAY.isoformat()}.json")
    )
    assert record["runs"]["final"]["status"] == "passed" and record["runs"]["final"]["manual"] is True
    assert record["runs"]["final"]["figures"]["compliance_rows"] == 2
    assert record["history"][-1]["reason"] == "no stream ran for this test day"
    assert report["day_state"]["state"] == "reconciled_final"
