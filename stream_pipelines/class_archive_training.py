"""Training the driver JVM's class-data archive (``class_archive``), which ``make setup`` runs.

It spark-submits the ad app on a small generated replay from files, with an available-now trigger, in
a throwaway data root, and the JVM writes the classes it loaded when it exits; the archive replaces
the earlier one atomically and is stamped with what it is valid for.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from stream_pipelines.class_archive import ARCHIVE_NAME, archive_digest, archive_path, is_current, stamp_path
from stream_pipelines.config import PROJECT_ROOT, PipelineConfig, load_config
from stream_pipelines.registry import AD_MATCHING, APP_NAMES
from stream_pipelines.submit import spark_submit_command, submit_environment

# The app whose start trains the archive: with a files replay it needs no broker (all its sinks are
# Parquet), and it runs the parsing, deduplication, windowed aggregation, stream-stream join, RocksDB
# state store and file sink that the other apps are made of.
TRAINING_APP = AD_MATCHING.name
TRAINING_TIMEOUT_S = 600.0


class ClassArchiveError(RuntimeError):
    """The archive could not be built; the message says why and where the training run's log is."""


def training_overrides(data_root: Path, replay: Path, archive: Path) -> list[str]:
    """The training run's config: a throwaway data root, the files replay, no metrics port, the archive
    off (a driver cannot map one archive while it writes another) and the JVM told to write one."""
    return [
        f"paths.data_root={data_root}",
        "source.kind=files",
        f"source.files_dir={replay}",
        "spark.class_archive=false",
        f"spark.extra_conf.spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={archive}",
        *(f"metrics.ports.{app}=0" for app in APP_NAMES),
    ]


def build(config: PipelineConfig, say: Callable[[str], None] = print) -> Path:
    """Train and store the archive, replacing any earlier one; ClassArchiveError when the run fails."""
    from stream_pipelines.devtools import generator

    target = archive_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    log_path = target.with_suffix(".training.log")
    with tempfile.TemporaryDirectory(prefix="class-archive-", dir=target.parent) as scratch:
        folder = Path(scratch)
        replay, written = folder / "replay", folder / ARCHIVE_NAME
        spec = generator.recent_scenario(seed=5, match_interval_s=config.ads.match_interval.seconds)
        generator.write_jsonl(generator.generate(spec), replay)
        overrides = training_overrides(folder / "data", replay, written)
        training = load_config(config.env, overrides, conf_dir=config.conf_dir)
        command = spark_submit_command(training, TRAINING_APP, "available-now", overrides)
        say(f"class archive: training it on a start of {TRAINING_APP} (about a minute); log: {log_path}")
        with log_path.open("w") as log_file:
            try:
                result = subprocess.run(
                    command,
                    env=submit_environment(),
                    cwd=PROJECT_ROOT,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    timeout=TRAINING_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise ClassArchiveError(
                    f"the training run of {TRAINING_APP} did not end within {TRAINING_TIMEOUT_S:.0f}s; "
                    f"see {log_path}"
                ) from None
        if result.returncode != 0 or not written.is_file():
            raise ClassArchiveError(
                f"the training run of {TRAINING_APP} exited with {result.returncode} and wrote "
                f"{'an archive' if written.is_file() else 'no archive'}; see {log_path}. Apps still start "
                "without it, only slower; `spark.class_archive: false` stops setup from trying."
            )
        # A driver starting now maps either the old file or the new one, never half of one.
        os.replace(written, target)
    stamp_path().write_text(archive_digest() + "\n")
    return target


def ensure(config: PipelineConfig, say: Callable[[str], None] = print) -> Path | None:
    """The archive, built when it is missing or stale; None when ``spark.class_archive`` is off."""
    if not config.spark.class_archive:
        return None
    if is_current():
        return archive_path()
    return build(config, say)
