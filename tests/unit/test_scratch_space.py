"""Where a streaming app's driver keeps Spark's scratch, and what a restart clears of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig, load_config
from stream_pipelines.driver.runtime import Cleared, clear_scratch, driver_started_at
from stream_pipelines.launching import class_archive, jvm
from stream_pipelines.launching.spark_conf import spark_conf

METADATA = f"sensors.metadata_path={PROJECT_ROOT / 'conf' / 'sensor_metadata.csv'}"


@pytest.fixture(autouse=True)
def fixed_jars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm, "spark_kafka_jars", lambda: ["/jars/kafka.jar"])


def config(*overrides: str) -> PipelineConfig:
    return load_config("local", [METADATA, *overrides], environ={})


def test_each_app_has_its_own_scratch_folder_under_the_data_root(tmp_path: Path):
    assert (
        config(f"paths.data_root={tmp_path}").scratch_dir("raw_archive") == f"{tmp_path}/scratch/raw_archive"
    )
    assert config(f"paths.data_root=file://{tmp_path}").scratch_dir("ad_matching") == (
        f"{tmp_path}/scratch/ad_matching"
    )


def test_with_a_remote_data_root_the_scratch_is_local_only_when_configured_so(tmp_path: Path):
    remote = config("paths.data_root=s3a://bucket/pipeline")
    assert remote.scratch_dir("raw_archive") is None
    assert spark_conf(remote, "raw_archive").keys() == spark_conf(remote).keys()
    local = config("paths.data_root=s3a://bucket/pipeline", f"paths.scratch={tmp_path}")
    assert local.scratch_dir("raw_archive") == f"{tmp_path}/raw_archive"


def test_an_apps_driver_keeps_spark_local_dirs_and_the_jvm_temp_folder_in_its_scratch(tmp_path: Path):
    settings = config(f"paths.data_root={tmp_path}")
    folder = f"{tmp_path}/scratch/sensor_aggregation"

    conf = spark_conf(settings, "sensor_aggregation")

    assert conf["spark.local.dir"] == folder
    assert conf["spark.driver.extraJavaOptions"].split(" ")[0] == f"-Djava.io.tmpdir={folder}"
    # Other drivers (the nightly job, the tests' shared session) keep Spark's defaults.
    assert "spark.local.dir" not in spark_conf(settings)
    assert "java.io.tmpdir" not in spark_conf(settings).get("spark.driver.extraJavaOptions", "")


def test_a_deployments_own_java_options_are_kept_after_the_scratch_folder(tmp_path: Path):
    settings = config(
        f"paths.data_root={tmp_path / 'with blank'}",
        "spark.extra_conf.spark.driver.extraJavaOptions=-XX:+UseG1GC",
    )

    options = spark_conf(settings, "raw_archive")["spark.driver.extraJavaOptions"]

    archive = f"-XX:SharedArchiveFile={class_archive.archive_path()}"
    assert options == f'"-Djava.io.tmpdir={tmp_path}/with blank/scratch/raw_archive" {archive} -XX:+UseG1GC'


def aged(path: Path, at: float) -> Path:
    os.utime(path, (at, at))
    return path


def test_a_restart_clears_what_earlier_runs_left_and_spares_what_its_own_jvm_made(tmp_path: Path):
    started = time.time() - 60
    earlier = tmp_path / "spark-1111"
    (earlier / "userFiles-2222").mkdir(parents=True)
    (earlier / "userFiles-2222" / "kafka-clients.jar").write_bytes(b"x" * 3000)
    aged(earlier / "userFiles-2222", started - 10)
    aged(earlier, started - 10)
    library = tmp_path / "liblz4-java-1.so"
    library.write_bytes(b"y" * 500)
    aged(library, started - 5)
    launch = tmp_path / "spark-3333"  # the launcher's folder, made by this run's JVM before the driver
    launch.mkdir()

    cleared = clear_scratch(tmp_path, started)

    assert cleared == Cleared(entries=2, size=3500)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark-3333"]
    assert cleared.describe() == "cleared 2 entries (0.0 MB) left by earlier runs"


def test_what_cannot_be_removed_is_named_and_the_rest_still_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "blockmgr-4444" / "0e").mkdir(parents=True)
    (tmp_path / "snappy.so").write_bytes(b"z")

    def refused(path: object, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", refused)
    cleared = clear_scratch(tmp_path, time.time() + 1)

    assert (cleared.entries, cleared.failed) == (1, ("blockmgr-4444",))
    assert cleared.describe().endswith("; could not remove blockmgr-4444")
    assert [p.name for p in tmp_path.iterdir()] == ["blockmgr-4444"]


def test_a_folder_no_run_has_made_yet_has_nothing_to_clear(tmp_path: Path):
    assert clear_scratch(tmp_path / "scratch" / "raw_archive", time.time()) == Cleared()


def test_a_driver_started_by_spark_submit_dates_its_jvm_by_its_parent():
    # A Python parent standing in for spark-submit's JVM: it starts the driver a second after itself.
    driver = "from stream_pipelines.driver.runtime import driver_started_at; print(repr(driver_started_at()))"
    launcher = (
        "import os, subprocess, sys, time; time.sleep(1.0); "
        f"subprocess.run([sys.executable, '-c', {driver!r}], check=True, "
        "env={**os.environ, 'PYSPARK_GATEWAY_PORT': '1'})"
    )
    launched = time.time()
    output = subprocess.run(
        [sys.executable, "-c", launcher],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    ).stdout

    assert launched - 0.1 <= float(output) < launched + 1.0


def test_a_driver_that_starts_its_own_jvm_dates_it_now(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    before = time.time()
    assert before <= driver_started_at() <= time.time()
