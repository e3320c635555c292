"""Where a supervisor task's driver runs: the placement chosen from the config, and the spark-submit it
builds (the Spark provider's hook), with the config's master unless Airflow defines the connection."""

from __future__ import annotations

import logging
import os

import pytest

from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import app

LOG = logging.getLogger("supervisor")


@pytest.fixture(autouse=True)
def airflow_home(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", os.environ.get("AIRFLOW_HOME", str(tmp_path / "airflow")))


def test_a_driver_in_yarn_cluster_mode_is_followed_through_yarn_any_other_on_this_worker(tmp_path):
    from stream_pipelines.airflow.drivers import InYarn, OnThisWorker, placement

    local = load_config("local", [f"paths.data_root={tmp_path}"], environ={})
    assert type(placement(local, app("raw_archive"), LOG)) is OnThisWorker
    client_mode = load_config(
        "local",
        [f"paths.data_root={tmp_path}", "spark.master=yarn", "yarn.resourcemanager_url=http://127.0.0.1:9"],
        environ={},
    )
    assert type(placement(client_mode, app("raw_archive"), LOG)) is OnThisWorker
    cluster = load_config(
        "local",
        [
            f"paths.data_root={tmp_path}",
            "spark.master=yarn",
            "spark.deploy_mode=cluster",
            "yarn.resourcemanager_url=http://127.0.0.1:9",
        ],
        environ={},
    )
    assert type(placement(cluster, app("raw_archive"), LOG)) is InYarn


def test_spark_submit_goes_to_the_configs_master_unless_airflow_defines_the_connection(monkeypatch):
    from stream_pipelines.airflow.drivers import ConfiguredSparkSubmitHook

    def master(hook) -> str:
        command = hook._build_spark_submit_command("app.py")
        return command[command.index("--master") + 1]

    hook = ConfiguredSparkSubmitHook("spark://127.0.0.1:7077", conn_id="spark_pipeline", name="raw_archive")
    assert master(hook) == "spark://127.0.0.1:7077"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_PIPELINE", '{"conn_type": "spark", "host": "yarn"}')
    hook = ConfiguredSparkSubmitHook("spark://127.0.0.1:7077", conn_id="spark_pipeline", name="raw_archive")
    assert master(hook) == "yarn"


def test_the_operator_writes_nothing_into_the_workers_environment(tmp_path, monkeypatch):
    """What spark-submit needs (PATH to the venv, the drivers' Python) goes in the hook's own
    environment, not the task process's: its on_kill and the next try read the same environment."""
    from stream_pipelines.airflow.drivers import SUBMIT_ENVIRONMENT, OnThisWorker

    config = load_config("local", [f"paths.data_root={tmp_path}"], environ={})
    before = dict(os.environ)

    class Launch:
        spark_conf = {"spark.app.name": "raw_archive"}
        application_args = ["--checked"]

    hook = OnThisWorker(config, app("raw_archive"), LOG)._hook(Launch())  # type: ignore[arg-type]
    assert dict(os.environ) == before
    assert hook._env_vars["PATH"].split(os.pathsep)[0].endswith("bin")
    assert "PYSPARK_PYTHON" in hook._env_vars
    assert set(hook._env_vars) <= set(SUBMIT_ENVIRONMENT), "a task's variable passed on by name"
