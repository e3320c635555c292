"""The nightly reconciliation DAG through Airflow's own dag.test(), and triggered through the REST API.

Airflow runs in a child process so that its settings (AIRFLOW_HOME, the DB) never leak into the
test session; the pipeline config reaches the tasks through PIPELINE__* variables, as in production.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from stream_pipelines import store
from stream_pipelines.airflow.nightly import START_DATE_VARIABLE, event_day
from stream_pipelines.config import PROJECT_ROOT
from stream_pipelines.devtools import stack
from stream_pipelines.devtools.processes import stop_processes
from tests.conftest import free_port, make_overrides_config, pipeline_environment

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
    run = module.dag.test(logical_date=datetime(2026, 1, 2, tzinfo=UTC), run_conf={"date": sys.argv[2]})
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    print("RESULT " + json.dumps({"state": str(run.state), "tasks": states, "heavy_at_parse": heavy}))
    """
)


def test_event_day_prefers_the_param_then_the_data_interval():
    start = datetime(2026, 3, 4, tzinfo=UTC)
    assert event_day("2026-01-01", start, None) == "2026-01-01"
    assert event_day(None, start, None) == "2026-03-04"
    assert event_day("", None, datetime(2026, 3, 5, tzinfo=UTC)) == "2026-03-05"
    with pytest.raises(ValueError):
        event_day("01/01/2026", start, None)


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
        [sys.executable, "-c", DAG_RUN, str(DAG_FILE), DAY.isoformat()],
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
    assert set(outcome["tasks"]) == {"choose_day", "gx_raw_events", "reconcile", "gx_outputs", "report"}

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


class AirflowRest:
    """The calls the Airflow UI makes, through the public REST API (v2) with a JWT from /auth/token."""

    def __init__(self, base_url: str, password: str) -> None:
        self.base_url, self.password = base_url, password

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        token = self._request(
            "POST", "/auth/token", {"username": stack.AIRFLOW_USER, "password": self.password}
        )
        return self._request(method, path, body, token["access_token"])

    def _request(self, method: str, path: str, body: dict | None = None, token: str | None = None) -> dict:
        request = urllib.request.Request(
            self.base_url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                **({"Authorization": f"Bearer {token}"} if token else {}),
            },
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"{}")


def poll(check, timeout_s: float, what: str, every_s: float = 3.0):
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            found = check()
        except (OSError, KeyError) as error:  # the server is not up yet, or the DAG not parsed yet
            last_error, found = error, None
        if found:
            return found
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last error: {last_error})")


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_a_run_triggered_like_the_ui_does_succeeds_and_streams_the_job_into_the_task_log(
    spark, make_overrides, tmp_path
):
    """Real Airflow components (api-server, scheduler, dag-processor) started as `make up` starts them."""
    overrides = make_overrides()
    config = make_overrides_config(overrides)
    write_archive_for_day(spark, Path(config.paths.data_root))
    port = free_port()
    environment = {
        **stack.airflow_environment(config, port),
        **pipeline_environment(overrides),
        # The streaming supervisors stay paused (no broker here); the test unpauses the nightly DAG.
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        # No scheduled run may start while the test runs, even across midnight.
        START_DATE_VARIABLE: (datetime.now(UTC).date() + timedelta(days=1)).isoformat(),
    }
    assert stack.migrate_airflow_db(environment) is None
    started = [component.name for component in stack.airflow_components(port)[:3]]
    for component in stack.airflow_components(port)[:3]:
        stack.start_component(config, component, environment)
    try:
        password = stack.airflow_admin_password(environment["AIRFLOW_HOME"], timeout_s=300)
        assert password, "the api-server wrote no admin password"
        rest = AirflowRest(f"http://127.0.0.1:{port}", password)
        poll(
            lambda: rest.call("GET", "/api/v2/dags/nightly_reconciliation")["dag_id"],
            600,
            "the DAG to be parsed",
        )

        rest.call("PATCH", "/api/v2/dags/nightly_reconciliation", {"is_paused": False})
        run = rest.call(
            "POST",
            "/api/v2/dags/nightly_reconciliation/dagRuns",
            {"logical_date": None, "conf": {"date": DAY.isoformat()}},
        )
        run_path = f"/api/v2/dags/nightly_reconciliation/dagRuns/{urllib.parse.quote(run['dag_run_id'])}"
        state = poll(
            lambda: (s := rest.call("GET", run_path)["state"]) in ("success", "failed") and s,
            1500,
            "the run to finish",
            every_s=5,
        )
        tasks = {
            ti["task_id"]: ti["state"]
            for ti in rest.call("GET", f"{run_path}/taskInstances")["task_instances"]
        }
        assert state == "success", f"{tasks}\n{_stack_logs(config)}"
        assert tasks == dict.fromkeys(
            ("choose_day", "gx_raw_events", "reconcile", "gx_outputs", "report"), "success"
        )

        log = rest.call("GET", f"{run_path}/taskInstances/reconcile/logs/1?full_content=true")["content"]
        lines = [entry for entry in log if isinstance(entry, dict) and "event" in entry]
        verdicts = [line for line in lines if str(line["event"]).startswith("reconcile:")]
        assert verdicts and all(line["level"] == "info" for line in verdicts), (
            "the job's summary is in the log"
        )
        steps = [line for line in lines if str(line["event"]).startswith("reconcile progress [")]
        assert len(steps) >= 5, "the job's steps reach the task log as they start"
        spark_info = [line for line in lines if " INFO " in str(line["event"])[:30]]
        assert spark_info and all(line["level"] == "info" for line in spark_info), (
            "Spark INFO is not an error"
        )
    finally:
        stray = stack.stop_components(config, started)
        stop_processes(stray)

    report = json.loads(
        (
            Path(config.paths.data_root) / "reports/reconciliation" / DAY.isoformat() / "report.json"
        ).read_text()
    )
    assert report["status"] == "passed" and len(report["quality_gates"]) == 3


def _stack_logs(config) -> str:
    logs = stack.stack_dir(config) / "logs"
    return "\n".join(f"--- {log.name}\n{log.read_text()[-2000:]}" for log in sorted(logs.glob("*.log")))
