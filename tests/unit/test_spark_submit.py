"""The spark-submit command lines, argument by argument, for an app and for the reconciliation job."""

from __future__ import annotations

import shutil
import sys
from datetime import date
from pathlib import Path

import pytest

import stream_pipelines
from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig, load_config
from stream_pipelines.core.kafka_security import SECRET_OPTIONS_PATTERN
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.launching import class_archive, jvm, submit

SPARK_SUBMIT = "/opt/spark/bin/spark-submit"
KAFKA_JARS = ["/jars/spark-sql-kafka.jar", "/jars/kafka-clients.jar"]
METADATA = str(PROJECT_ROOT / "conf" / "sensor_metadata.csv")
# spark-submit runs the entry points the package ships, wherever it is installed.
SHIPPED_ENTRY_POINTS = Path(stream_pipelines.__file__).parent / "spark_apps"
# Relative paths resolve against the conf folder's parent, which a relocated conf folder changes.
METADATA_OVERRIDE = f"sensors.metadata_path={METADATA}"


@pytest.fixture(autouse=True)
def fixed_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where spark-submit and the Kafka connector jars are found depends on the machine, not the config."""
    monkeypatch.setattr(submit, "spark_submit_executable", lambda: SPARK_SUBMIT)
    monkeypatch.setattr(jvm, "spark_kafka_jars", lambda: list(KAFKA_JARS))


def local_spark_conf(scratch: Path | None = None) -> list[str]:
    """--conf pairs for conf/local.yaml, in the order spark_conf lists them; an app's driver
    also has its scratch folder."""
    settings = [
        "spark.sql.shuffle.partitions=2",
        "spark.sql.streaming.stateStore.providerClass="
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true",
        "spark.sql.session.timeZone=UTC",
        "spark.ui.enabled=false",
        "spark.ui.showConsoleProgress=false",
        "spark.driver.memory=2g",
        "spark.sql.streaming.metricsEnabled=true",
        # The Kafka options that carry a secret stay out of Spark's plan strings.
        f"spark.sql.redaction.options.regex={SECRET_OPTIONS_PATTERN}",
        "spark.driver.host=127.0.0.1",
        "spark.driver.bindAddress=127.0.0.1",
        f"spark.pyspark.python={sys.executable}",
        f"spark.pyspark.driver.python={sys.executable}",
        "spark.jars=/jars/spark-sql-kafka.jar,/jars/kafka-clients.jar",
    ]
    # Every driver on this machine maps the class archive `make setup` builds; an app's has its scratch.
    archive = f"-XX:SharedArchiveFile={class_archive.archive_path()}"
    if scratch is not None:
        settings += [
            f"spark.local.dir={scratch}",
            f"spark.driver.extraJavaOptions=-Djava.io.tmpdir={scratch} {archive}",
        ]
    else:
        settings.append(f"spark.driver.extraJavaOptions={archive}")
    return [argument for setting in settings for argument in ("--conf", setting)]


def local_config(conf_dir: Path | None = None, overrides: tuple[str, ...] = ()) -> PipelineConfig:
    # An empty environment: PIPELINE_* variables of the machine running the tests must not leak in.
    return load_config("local", overrides, conf_dir=conf_dir, environ={})


@pytest.fixture
def relocated_conf(tmp_path: Path) -> Path:
    """conf/local.yaml copied into a folder that is not <project>/conf, as a deployment may keep it."""
    folder = tmp_path / "settings"
    folder.mkdir()
    shutil.copy(PROJECT_ROOT / "conf" / "local.yaml", folder / "local.yaml")
    return folder


def test_an_app_command_line():
    config = local_config()

    assert submit.spark_submit_command(config, declared_app("sensor_aggregation"), "processing") == [
        SPARK_SUBMIT,
        "--master",
        "local[2]",
        "--deploy-mode",
        "client",
        "--name",
        "sensor_aggregation",
        *local_spark_conf(PROJECT_ROOT / "data" / "scratch" / "sensor_aggregation"),
        str(SHIPPED_ENTRY_POINTS / "sensor_aggregation.py"),
        "--env",
        "local",
        "--conf-dir",
        str(PROJECT_ROOT / "conf"),
        "--trigger",
        "processing",
    ]


def test_the_reconcile_job_command_line():
    config = local_config()

    command = submit.reconcile_submit_command(config, date(2026, 1, 1), ["sensors.watermark=3 minutes"])

    assert command == [
        SPARK_SUBMIT,
        "--master",
        "local[2]",
        "--deploy-mode",
        "client",
        "--name",
        "reconcile",
        *local_spark_conf(),
        str(SHIPPED_ENTRY_POINTS / "reconcile.py"),
        "--env",
        "local",
        "--conf-dir",
        str(PROJECT_ROOT / "conf"),
        "--date",
        "2026-01-01",
        "--set",
        "sensors.watermark=3 minutes",
    ]


def test_an_app_reads_its_config_from_the_folder_the_launcher_read_it_from(relocated_conf: Path):
    config = local_config(relocated_conf, (METADATA_OVERRIDE,))

    assert submit.spark_submit_command(
        config, declared_app("raw_archive"), "available-now", [METADATA_OVERRIDE]
    ) == [
        SPARK_SUBMIT,
        "--master",
        "local[2]",
        "--deploy-mode",
        "client",
        "--name",
        "raw_archive",
        # Relative data paths, scratch included, resolve against the relocated conf folder's parent.
        *local_spark_conf(relocated_conf.parent.resolve() / "data" / "scratch" / "raw_archive"),
        str(SHIPPED_ENTRY_POINTS / "raw_archive.py"),
        "--env",
        "local",
        "--conf-dir",
        str(relocated_conf.resolve()),
        "--trigger",
        "available-now",
        "--set",
        METADATA_OVERRIDE,
    ]


def test_the_reconcile_job_reads_its_config_from_the_folder_the_launcher_read_it_from(relocated_conf: Path):
    config = local_config(relocated_conf, (METADATA_OVERRIDE,))

    command = submit.reconcile_submit_command(config, date(2026, 1, 1), [METADATA_OVERRIDE])

    assert command[command.index("--conf-dir") + 1] == str(relocated_conf.resolve())


def test_airflow_hands_an_app_the_same_arguments_as_the_command_line(relocated_conf: Path):
    # The Airflow operator passes the script and the Spark settings apart from the driver's arguments.
    config = local_config(relocated_conf, (METADATA_OVERRIDE,))
    command = submit.spark_submit_command(config, declared_app("ad_matching"), "processing")

    script = command.index(str(SHIPPED_ENTRY_POINTS / "ad_matching.py"))
    shipped = submit.submission(config, "ad_matching", ["--trigger", "processing"], app="ad_matching")
    assert shipped.args == command[script + 1 :]


def test_an_unknown_app_is_refused_before_anything_starts():
    with pytest.raises(ValueError, match="unknown app 'sensors'"):
        submit.spark_submit_command(local_config(), declared_app("sensors"), "processing")
