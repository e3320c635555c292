"""The drivers' class-data archive: when a driver maps it, how the training run is configured, and when
setup builds it again. The archive itself, mapped by a real JVM: tests/test_class_archive_mapped.py."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig, load_config
from stream_pipelines.launching import class_archive, class_archive_training, jvm
from stream_pipelines.launching.spark_conf import DRIVER_JAVA_OPTIONS, spark_conf

METADATA = f"sensors.metadata_path={PROJECT_ROOT / 'conf' / 'sensor_metadata.csv'}"


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A JVM cache of the test's own: the archive and stamp are the test's to write."""
    cache = tmp_path / "jvm cache"
    monkeypatch.setenv(jvm.CACHE_VARIABLE, str(cache))
    monkeypatch.setattr(jvm, "spark_kafka_jars", lambda: ["/jars/kafka.jar"])
    return cache


def config(*overrides: str) -> PipelineConfig:
    return load_config("local", [METADATA, *overrides], environ={})


def test_every_driver_started_here_maps_the_archive_quoted_when_its_path_has_blanks(private_cache: Path):
    option = f'"-XX:SharedArchiveFile={private_cache}/cds/spark-driver.jsa"'
    assert class_archive.driver_java_option(config()) == option
    assert spark_conf(config())[DRIVER_JAVA_OPTIONS] == option
    # An app's driver: its own temp folder first, the archive, then the deployment's own options.
    app_conf = spark_conf(
        config("spark.extra_conf.spark.driver.extraJavaOptions=-XX:+UseG1GC"), "raw_archive"
    )
    assert app_conf[DRIVER_JAVA_OPTIONS].split(" ")[1:] == [*option.split(" "), "-XX:+UseG1GC"]


def test_no_archive_when_it_is_turned_off_or_the_driver_runs_on_the_cluster():
    assert class_archive.driver_java_option(config("spark.class_archive=false")) is None
    assert DRIVER_JAVA_OPTIONS not in spark_conf(config("spark.class_archive=false"))
    in_yarn = ("spark.master=yarn", "spark.deploy_mode=cluster", "yarn.resourcemanager_url=http://rm:8088")
    assert class_archive.driver_java_option(config(*in_yarn)) is None


def test_the_training_run_writes_an_archive_and_maps_none(tmp_path: Path):
    written = tmp_path / "new.jsa"
    crash_report = tmp_path / "hs_err.log"
    overrides = class_archive_training.training_overrides(
        tmp_path / "data", tmp_path / "replay", written, crash_report
    )
    training = config(*overrides)

    options = spark_conf(training, class_archive_training.TRAINING_APP)[DRIVER_JAVA_OPTIONS]

    assert f"-XX:ArchiveClassesAtExit={written}" in options
    assert f"-XX:ErrorFile={crash_report}" in options
    assert "SharedArchiveFile" not in options
    assert training.source.kind == "files"
    assert training.source.files_dir == str(tmp_path / "replay")
    assert training.paths.data_root == str(tmp_path / "data")
    # No metrics port of a running stack is taken by the training run.
    assert all(training.metrics.ports.get(app) == 0 for app in ("raw_archive", "sensor_aggregation"))


def test_setup_builds_again_only_when_the_stamp_is_not_this_java_and_these_jars(
    monkeypatch: pytest.MonkeyPatch,
):
    builds: list[PipelineConfig] = []

    def fake_build(settings: PipelineConfig, say=print) -> Path:
        builds.append(settings)
        archive = class_archive.archive_path()
        archive.parent.mkdir(parents=True, exist_ok=True)
        archive.write_bytes(b"archive")
        class_archive.stamp_path().write_text(stamp + "\n")
        return archive

    stamp = "digest of java 17 and the jars"
    monkeypatch.setattr(class_archive, "archive_digest", lambda: stamp)
    monkeypatch.setattr(class_archive_training, "build", fake_build)

    assert class_archive_training.ensure(config()) == class_archive.archive_path()
    assert class_archive_training.ensure(config()) == class_archive.archive_path()
    assert len(builds) == 1
    stamp = "digest of java 21 and the jars"  # a new JDK or a new pyspark: the old archive is stale
    class_archive_training.ensure(config())
    assert len(builds) == 2
    assert class_archive_training.ensure(config("spark.class_archive=false")) is None
    assert len(builds) == 2


def test_the_stamp_changes_with_the_jars_on_sparks_class_path_and_the_java_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import pyspark

    fake = tmp_path / "pyspark"
    (fake / "jars").mkdir(parents=True)
    (fake / "jars" / "spark-core.jar").write_bytes(b"one")
    monkeypatch.setattr(pyspark, "__file__", str(fake / "__init__.py"))
    monkeypatch.setattr(class_archive, "java_build", lambda: 'openjdk version "17.0.15"')
    before = class_archive.archive_digest()
    assert class_archive.archive_digest() == before
    (fake / "jars" / "spark-core.jar").write_bytes(b"a longer jar")
    after_new_jar = class_archive.archive_digest()
    assert after_new_jar != before
    monkeypatch.setattr(class_archive, "java_build", lambda: 'openjdk version "21.0.4"')
    assert class_archive.archive_digest() != after_new_jar


class AbortingTrainingRuns:
    """spark-submit as the training runs it, for a JVM that aborts as it exits on its first ``aborts``
    runs: it writes the archive it was told to (an abort in the exit-time dump can leave one behind)
    and a crash report where ``-XX:ErrorFile`` says, and exits as SIGABRT does (-6)."""

    def __init__(self, aborts: int):
        self.aborts, self.commands = aborts, []
        self.other_commands = subprocess.run  # `java -version`, for the stamp, runs for real

    def __call__(self, command: list[str], **kwargs) -> subprocess.CompletedProcess:
        conf = dict(setting.split("=", 1) for setting in command if setting.startswith("spark."))
        if DRIVER_JAVA_OPTIONS not in conf:
            return self.other_commands(command, **kwargs)
        self.commands.append(command)
        options = dict(option.split("=", 1) for option in shlex.split(conf[DRIVER_JAVA_OPTIONS]))
        Path(options["-XX:ArchiveClassesAtExit"]).write_bytes(b"archive")
        if len(self.commands) > self.aborts:
            return subprocess.CompletedProcess(command, 0)
        Path(options["-XX:ErrorFile"]).write_text("# SIGABRT in DynamicArchive\n")
        return subprocess.CompletedProcess(command, -6)


def test_a_training_run_that_aborts_is_run_again_and_its_crash_report_kept(monkeypatch: pytest.MonkeyPatch):
    runs = AbortingTrainingRuns(aborts=1)
    monkeypatch.setattr(class_archive_training.subprocess, "run", runs)

    archive = class_archive_training.build(config(), say=lambda line: None)

    assert len(runs.commands) == 2
    assert archive.read_bytes() == b"archive" and class_archive.is_current()


def test_setup_gives_up_after_three_aborted_runs_and_names_their_logs(monkeypatch: pytest.MonkeyPatch):
    runs = AbortingTrainingRuns(aborts=3)
    monkeypatch.setattr(class_archive_training.subprocess, "run", runs)

    with pytest.raises(class_archive_training.ClassArchiveError) as failure:
        class_archive_training.build(config(), say=lambda line: None)

    assert len(runs.commands) == 3
    message = str(failure.value)
    assert "exited with -6" in message and "3 times" in message
    crash_report = class_archive.archive_path().parent / "spark-driver.training.hs_err.log"
    assert f"the JVM's crash report: {crash_report}" in message
    assert crash_report.read_text().startswith("# SIGABRT")
    # An aborted run's archive is never used: the JVM may have died half-way through writing it.
    assert not class_archive.archive_path().exists() and not class_archive.is_current()


def test_a_training_run_that_hangs_is_not_run_again(monkeypatch: pytest.MonkeyPatch):
    runs = AbortingTrainingRuns(aborts=0)

    def hanging(command: list[str], **kwargs) -> subprocess.CompletedProcess:
        if not any(part.startswith(DRIVER_JAVA_OPTIONS) for part in command):
            return runs.other_commands(command, **kwargs)
        runs.commands.append(command)
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    monkeypatch.setattr(class_archive_training.subprocess, "run", hanging)

    with pytest.raises(class_archive_training.ClassArchiveError, match="did not end within 600s") as failure:
        class_archive_training.build(config(), say=lambda line: None)

    assert len(runs.commands) == 1
    assert "times in a row" not in str(failure.value)
