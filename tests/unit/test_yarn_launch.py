"""Drivers in YARN, without a cluster: the config's rules, the spark-submit settings of a YARN launch, how
the ResourceManager's answers are read, and how a driver's end is judged. Against a real ResourceManager
and NodeManager: tests/test_yarn_cluster_mode.py."""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import time
from pathlib import Path

import pytest

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core.config import PROJECT_ROOT, ConfigError, load_config
from stream_pipelines.core.resource_manager import (
    YarnApplication,
    application_of_container,
    tags_of,
    unwrap,
)
from stream_pipelines.devtools.tls import make_test_pki
from stream_pipelines.launching import driver_bundle, submit, yarn_driver
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


def test_the_packed_archives_are_urls_and_ship_with_every_application(tmp_path):
    with pytest.raises(
        ConfigError, match=r"yarn\.python_environment is set, but spark\.master is 'local\[2\]'"
    ):
        config("yarn.python_environment=hdfs://nn:8020/apps/env.tar.gz")
    with pytest.raises(ConfigError, match=r"yarn\.spark_jars_archive: 'jars\.zip' is not a URL"):
        config(*IN_YARN, "yarn.spark_jars_archive=jars.zip")
    packed = config(
        *IN_YARN,
        f"paths.data_root={tmp_path}",
        "yarn.python_environment=hdfs://nn:8020/apps/env.tar.gz",
        "yarn.spark_jars_archive=hdfs://nn:8020/apps/jars.zip",
    )
    conf = spark_conf(packed, "raw_archive")
    assert conf["spark.archives"] == "hdfs://nn:8020/apps/env.tar.gz#environment"
    assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == "./environment/bin/python"
    assert conf["spark.yarn.archive"] == "hdfs://nn:8020/apps/jars.zip" and "spark.yarn.jars" not in conf
    # pyspark.zip and py4j are uploaded with the application: a node has no launcher's paths.
    environment = submit.submit_environment({"PYSPARK_PYTHON": "/launcher/venv/bin/python"}, packed)
    archives = environment["PYSPARK_ARCHIVES_PATH"].split(",")
    assert archives and not [path for path in archives if path.startswith("local:")]
    # spark-submit hands its environment's Python on to the driver's container: the packed one.
    assert environment["PYSPARK_PYTHON"] == environment["PYSPARK_DRIVER_PYTHON"] == "./environment/bin/python"
    # which is not this host's: pip's spark-submit is told its Spark home instead of asking that Python.
    assert (Path(environment["SPARK_HOME"]) / "bin" / "spark-class").is_file()


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


def test_a_driver_in_its_container_loads_the_launchers_config_from_its_bundle_alone(tmp_path, monkeypatch):
    """Secrets, overrides (environment and --set), the conf dir and the TLS files travel in the bundle; the
    command line and Spark's settings carry only the names of its files."""
    pki = make_test_pki(tmp_path / "tls")
    client = pki.client  # a key encrypted as openssl 3 encrypts one by default
    conf_dir = tmp_path / "site-conf"
    shutil.copytree(PROJECT_ROOT / "conf", conf_dir)
    launcher_environment = {
        "KAFKA_USERNAME": "pipeline",
        "KAFKA_PASSWORD": "a 'pass\\word\" with $ and ;",
        "KAFKA_KEY_PASSWORD": client.key_password,
        "PIPELINE__ARCHIVE__TRIGGER": "3 seconds",
    }
    overrides = [
        *IN_YARN,
        f"paths.data_root={tmp_path}/data",
        "sensors.metadata_path=site-conf/sensor_metadata.csv",
        "kafka.security.protocol=SASL_SSL",
        "kafka.security.sasl_mechanism=SCRAM-SHA-512",
        "kafka.security.sasl_username=${KAFKA_USERNAME}",
        "kafka.security.sasl_password_env=KAFKA_PASSWORD",
        f"kafka.security.ca_file={pki.ca}",
        f"kafka.security.certificate_file={client.certificate}",
        f"kafka.security.key_file={client.key}",
        "kafka.security.key_password_env=KAFKA_KEY_PASSWORD",
    ]
    launcher = load_config("local", overrides, conf_dir=conf_dir, environ=launcher_environment)
    shipped = submit.submission(
        launcher, "raw_archive", ["--trigger", "processing"], overrides, app="raw_archive"
    )
    assert shipped.bundle is not None

    secrets = [launcher_environment["KAFKA_PASSWORD"], client.key_password]
    line = " ".join(shipped.command())
    assert not [secret for secret in secrets if secret in line]
    assert "--set" not in shipped.args and shipped.args[:4] == [
        "--env",
        "local",
        "--conf-dir",
        "pipeline/site-conf",
    ]
    assert {key for key in shipped.conf if ".appMasterEnv." in key} == {
        "spark.yarn.appMasterEnv.PIPELINE_ENVIRONMENT_FILE",
        "spark.yarn.appMasterEnv.SPARK_LOCAL_IP",
    } - ({"spark.yarn.appMasterEnv.SPARK_LOCAL_IP"} - set(shipped.conf))
    archive, link = shipped.conf["spark.yarn.dist.archives"].split("#")
    assert link == "pipeline" and Path(archive) == shipped.bundle.archive
    assert stat.S_IMODE(Path(archive).stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(archive).parent.stat().st_mode) == 0o700

    # The container: the archive unpacked as YARN does, the driver started with its own arguments only.
    container = tmp_path / "container"
    with tarfile.open(archive) as tar:
        tar.extractall(container / "pipeline", filter="data")
    monkeypatch.chdir(container)
    environment = {"PIPELINE_ENVIRONMENT_FILE": "pipeline/environment.json"}
    driver = load_config("local", conf_dir=shipped.args[3], environ=environment)
    # The same properties; the key re-encrypted for Java's client (a fresh salt each time it is read).
    theirs, ours = driver.kafka.java_client_properties(), launcher.kafka.java_client_properties()
    assert theirs.pop("ssl.keystore.key").startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert ours.pop("ssl.keystore.key") and theirs == ours
    assert driver.archive.trigger.seconds == 3 and driver.spark.master == "yarn"
    assert driver.data_path("checkpoints") == launcher.data_path("checkpoints")
    assert Path(driver.kafka.security.key_file).resolve().is_relative_to(container)

    shipped.bundle.discard()
    assert not Path(archive).exists()


def test_a_conf_dir_too_large_to_ship_is_refused_naming_it(tmp_path, monkeypatch):
    conf_dir = tmp_path / "conf"
    shutil.copytree(PROJECT_ROOT / "conf", conf_dir)
    (conf_dir / "events.jsonl").write_bytes(b"x" * 1024)
    monkeypatch.setattr(driver_bundle, "MAX_CONF_BYTES", 1000)
    in_yarn = load_config("local", [*IN_YARN, f"paths.data_root={tmp_path}"], conf_dir=conf_dir, environ={})
    with pytest.raises(driver_bundle.DriverBundleError, match=f"the conf dir {conf_dir} holds"):
        submit.submission(in_yarn, "raw_archive", app="raw_archive")


def test_a_bundle_left_by_a_launcher_that_died_is_removed_by_a_later_launch(tmp_path):
    conf = load_config("local", [METADATA, *IN_YARN, f"paths.data_root={tmp_path}"], environ={})
    left = driver_bundle.write(conf)
    assert driver_bundle.remove_leftovers(now=time.time()) == 0 and left.archive.exists()
    assert driver_bundle.remove_leftovers(now=time.time() + driver_bundle.LEFTOVER_AGE_S + 1) >= 1
    assert not left.archive.exists()


def test_an_applications_staging_folder_is_where_spark_submit_puts_it(monkeypatch, tmp_path):
    monkeypatch.setenv("HADOOP_USER_NAME", "etl")
    on_hdfs = config(*IN_YARN, "spark.extra_conf.spark.hadoop.fs.defaultFS=hdfs://nn:8020/")
    assert yarn_driver.staging_folder(on_hdfs, "application_1_0002") == (
        "hdfs://nn:8020/user/etl/.sparkStaging/application_1_0002"
    )
    chosen = config(*IN_YARN, "spark.extra_conf.spark.yarn.stagingDir=s3a://b/staging/")
    assert (
        yarn_driver.staging_folder(chosen, "application_1_0002")
        == "s3a://b/staging/.sparkStaging/application_1_0002"
    )
    assert yarn_driver.staging_folder(config(*IN_YARN), "application_1_0002") is None
    # Else the default file system of the Hadoop client configuration spark-submit reads.
    hadoop = tmp_path / "hadoop-conf"
    hadoop.mkdir()
    (hadoop / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name><value>hdfs://127.0.0.1:9000</value>"
        "</property></configuration>"
    )
    from_site = config(*IN_YARN, f"yarn.hadoop_conf_dir={hadoop}")
    assert yarn_driver.staging_folder(from_site, "application_1_0003") == (
        "hdfs://127.0.0.1:9000/user/etl/.sparkStaging/application_1_0003"
    )


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


@pytest.mark.parametrize(
    "placement",
    [
        [],
        ["spark.master=yarn", "spark.deploy_mode=cluster", "yarn.resourcemanager_url=http://127.0.0.1:9"],
    ],
    ids=["on the worker", "in yarn"],
)
def test_airflow_stopping_a_task_leaves_its_driver_running(tmp_path, monkeypatch, placement):
    """Airflow terminates a task (on_kill) when its orchestration goes: a worker's restart or redeploy, or
    a scheduler that died, whose task the other scheduler resets. The driver does not depend on either
    (a YARN application, or a spark-submit in a session of its own), so it runs on and the next try adopts
    it. No stop is asked, and the ResourceManager (unreachable here) is not even called; pipeline_control
    stops an app on purpose."""
    from stream_pipelines.core.config import override_variables

    overrides = [f"paths.data_root={tmp_path}", *placement]
    for name, value in override_variables(overrides).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PIPELINE_ENV", "local")
    monkeypatch.setenv("AIRFLOW_HOME", os.environ.get("AIRFLOW_HOME", str(tmp_path / "airflow")))
    from stream_pipelines.airflow.supervisor import StreamingAppOperator

    StreamingAppOperator(task_id="run_app", app="raw_archive").on_kill()
    config = load_config("local", overrides, environ={})
    assert not ControlStore(config).stop_marker("raw_archive").exists()
