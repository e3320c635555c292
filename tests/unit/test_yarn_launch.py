"""Drivers in YARN, without a cluster: the config's rules, the spark-submit settings of a YARN launch, how
the ResourceManager's answers are read, and how a driver's end is judged. Against a real ResourceManager
and NodeManager: tests/test_yarn_cluster_mode.py."""

from __future__ import annotations

import os

import pytest

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core.config import PROJECT_ROOT, ConfigError, load_config
from stream_pipelines.core.resource_manager import (
    YarnApplication,
    application_of_container,
    tags_of,
    unwrap,
)
from stream_pipelines.launching import submit, yarn_driver
from stream_pipelines.launching.spark_conf import spark_conf

METADATA = f"sensors.metadata_path={PROJECT_ROOT / 'conf' / 'sensor_metadata.csv'}"
IN_YARN = (
    "spark.master=yarn",
    "spark.deploy_mode=cluster",
    "yarn.resourcemanager_url=http://rm.internal:8088",
)


def config(*overrides: str, environ: dict[str, str] | None = None):
    return load_config("local", [METADATA, *overrides], environ=environ or {})


def test_cluster_mode_is_refused_without_yarn_and_yarn_without_its_resourcemanager():
    with pytest.raises(ConfigError, match=r"deploy_mode: cluster needs spark\.master: yarn"):
        config("spark.master=spark://master:7077", "spark.deploy_mode=cluster")
    with pytest.raises(ConfigError, match=r"needs yarn\.resourcemanager_url"):
        config("spark.master=yarn")
    with pytest.raises(ConfigError, match=r"must name it as http://127\.0\.0\.1:<port>"):
        config(*IN_YARN, "yarn.manage_local=true")


def test_the_yarn_profile_loads_with_drivers_in_the_cluster_over_its_own_hdfs():
    profile = load_config("yarn", environ={})
    assert profile.drivers_in_cluster
    assert profile.data_path("checkpoints").startswith("hdfs://127.0.0.1:8021/")
    assert profile.hadoop_conf_dir() == f"{profile.data_path('yarn')}/conf"


def test_a_streaming_app_in_yarn_is_tagged_has_one_attempt_and_returns_at_acceptance(tmp_path):
    conf = spark_conf(config(*IN_YARN, f"paths.data_root={tmp_path}"), "raw_archive")
    assert (
        conf["spark.yarn.tags"] == tags_of("raw_archive") == "stream-pipelines,stream-pipelines-raw_archive"
    )
    assert conf["spark.yarn.maxAppAttempts"] == "1"
    assert conf["spark.yarn.submit.waitAppCompletion"] == "false"
    assert conf["spark.yarn.jars"].startswith("local:") and conf["spark.yarn.jars"].endswith("/jars/*")
    # A driver in a container clears no scratch of the launcher's host, and maps no class archive.
    assert "spark.local.dir" not in conf and "spark.driver.extraJavaOptions" not in conf


def test_a_batch_job_in_yarn_waits_for_its_end_and_a_cluster_archive_is_kept(tmp_path):
    archive = "spark.extra_conf.spark.yarn.archive=hdfs:///spark/jars.zip"
    job = config(*IN_YARN, f"paths.data_root={tmp_path}", archive)
    command = submit.reconcile_submit_command(job, __import__("datetime").date(2026, 11, 25))
    assert "spark.yarn.submit.waitAppCompletion=true" in command
    assert "spark.yarn.tags=stream-pipelines,stream-pipelines-reconcile" in command
    assert not any(arg.startswith("spark.yarn.jars=") for arg in command)


def test_the_pipeline_overrides_of_the_environment_reach_the_driver_in_its_container(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE__ARCHIVE__TRIGGER", "3 seconds")
    monkeypatch.setenv("KAFKA_PASSWORD", "not-for-the-command-line")
    conf = spark_conf(config(*IN_YARN, f"paths.data_root={tmp_path}"), "raw_archive")
    assert conf["spark.yarn.appMasterEnv.PIPELINE__ARCHIVE__TRIGGER"] == "3 seconds"
    assert not any("KAFKA_PASSWORD" in key for key in conf)


def test_spark_submit_gets_the_hadoop_config_java_and_pyspark_for_the_containers(tmp_path):
    conf_dir = tmp_path / "hadoop-conf"
    environment = submit.submit_environment(
        {}, config(*IN_YARN, f"paths.data_root={tmp_path}", f"yarn.hadoop_conf_dir={conf_dir}")
    )
    assert environment["HADOOP_CONF_DIR"] == str(conf_dir)
    assert environment["JAVA_HOME"]
    archives = environment["PYSPARK_ARCHIVES_PATH"].split(",")
    assert archives[0].startswith("local:") and archives[0].endswith("pyspark.zip")
    assert any("py4j" in archive for archive in archives)
    assert "HADOOP_CONF_DIR" not in submit.submit_environment({}, config(f"paths.data_root={tmp_path}"))


def test_the_resourcemanagers_answers_are_read_wrapped_or_not():
    record = {"id": "application_1_0002", "state": "RUNNING"}
    assert unwrap({"apps": {"app": [record]}}, "apps", "app") == [record]
    assert unwrap({"apps": [record]}, "apps", "app") == [record]
    assert unwrap({"apps": None}, "apps", "app") is None
    assert unwrap({"clusterInfo": {"state": "STARTED"}}, "clusterInfo") == {"state": "STARTED"}
    assert unwrap({"state": "STARTED"}, "clusterInfo") == {"state": "STARTED"}


def application(**fields) -> YarnApplication:
    return YarnApplication.of(
        {
            "id": "application_1795733859463_0002",
            "state": "RUNNING",
            "applicationTags": "stream-pipelines,stream-pipelines-raw_archive",
            "amContainerLogs": "http://nm:8042/node/containerlogs/container_e07_1795733859463_0002_02_000001/u",
            "amHostHttpAddress": "nm:8042",
            **fields,
        }
    )


def test_an_application_names_its_driver_container_and_attempt_and_a_container_its_application():
    running = application()
    assert running.active and not running.ended
    assert running.am_container_id == "container_e07_1795733859463_0002_02_000001"
    assert running.attempt == 2
    assert application_of_container("container_e07_1795733859463_0002_02_000001") == running.id
    assert application_of_container("container_1795733859463_0002_01_000001") == running.id
    assert application_of_container(None) is None and application_of_container("bogus") is None


def test_how_a_driver_in_yarn_ended_from_its_exit_record_and_yarns_diagnostics(tmp_path):
    settings = config(f"paths.data_root={tmp_path}")
    store = ControlStore(settings)
    store.record_exit("raw_archive", "stopped", "deliberate stop")
    stopped = yarn_driver.outcome(
        settings, "raw_archive", application(state="FINISHED", finalStatus="SUCCEEDED")
    )
    assert stopped.graceful and stopped.code is None
    killed = application(
        state="FAILED",
        finalStatus="FAILED",
        diagnostics="AM Container for appattempt_1_0002_000001 exited with  exitCode: 137\nFailing",
    )
    store.record_exit("raw_archive", "crashed", "lost")
    result = yarn_driver.outcome(settings, "raw_archive", killed)
    assert not result.graceful and result.code == 137
    # The supervisor's retry policy reads the code from this phrase, as from a local spark-submit's.
    assert "Error code is: 137" in result.text
    refused = application(
        state="FINISHED", finalStatus="FAILED", diagnostics="User application exited with status 2"
    )
    assert yarn_driver.outcome(settings, "raw_archive", refused).code == 2
    # Succeeded without the driver saying it stopped (an available-now run that finished is "finished").
    store.record_exit("raw_archive", "crashed", "lost")
    assert not yarn_driver.outcome(
        settings, "raw_archive", application(state="FINISHED", finalStatus="SUCCEEDED")
    ).graceful


def test_airflow_stopping_a_task_leaves_its_application_running_in_yarn(tmp_path, monkeypatch):
    """A worker's restart or redeploy terminates its tasks (Airflow calls on_kill): a driver in YARN does
    not live on that worker, so it runs on and the next try adopts it. No stop is asked, and the
    ResourceManager (unreachable here) is not even called; pipeline_control stops an app on purpose."""
    from stream_pipelines.core.config import override_variables

    overrides = [
        f"paths.data_root={tmp_path}",
        "spark.master=yarn",
        "spark.deploy_mode=cluster",
        "yarn.resourcemanager_url=http://127.0.0.1:9",
    ]
    for name, value in override_variables(overrides).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PIPELINE_ENV", "local")
    monkeypatch.setenv("AIRFLOW_HOME", os.environ.get("AIRFLOW_HOME", str(tmp_path / "airflow")))
    from stream_pipelines.airflow.supervisor import StreamingAppOperator

    StreamingAppOperator(task_id="run_app", app="raw_archive").on_kill()
    config = load_config("local", overrides, environ={})
    assert not ControlStore(config).stop_marker("raw_archive").exists()
