"""Training the driver JVM's class-data archive (``class_archive``), which ``make setup`` runs.

It spark-submits the ad app on a small replay written here (``write_training_replay``), from files,
with an available-now trigger, in a throwaway data root, and the JVM writes the classes it loaded
when it exits; the archive replaces the earlier one atomically and is stamped with what it is valid for.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from stream_pipelines.core.config import PipelineConfig, load_config
from stream_pipelines.core.registry import AD_MATCHING, APP_NAMES
from stream_pipelines.inputs.parsing import CLICK_SCHEMA, IMPRESSION_SCHEMA
from stream_pipelines.launching import jvm
from stream_pipelines.launching.class_archive import (
    ARCHIVE_NAME,
    archive_digest,
    archive_path,
    is_current,
    stamp_path,
)
from stream_pipelines.launching.submit import spark_submit_command, submit_environment

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

# The app whose start trains the archive: with a files replay it needs no broker (all its sinks are
# Parquet), and it runs the parsing, deduplication, windowed aggregation, stream-stream join, RocksDB
# state store and file sink that the other apps are made of.
TRAINING_APP = AD_MATCHING.name
TRAINING_TIMEOUT_S = 600.0
TRAINING_ATTEMPTS = 3
TRAINING_IMPRESSIONS = 600


class ClassArchiveError(RuntimeError):
    """The archive could not be built; the message says why and where the training run's log is."""


class TrainingTimedOut(ClassArchiveError):
    """A training run that did not end: not tried again, since a hang is not the rare abort at exit."""


def write_training_replay(config: PipelineConfig, folder: Path, now: datetime) -> None:
    """Two minutes of ad traffic ending ``now``, as the files source reads it (one JSON value a line under
    ``<folder>/<topic name>/``): an impression every 200 ms, a click on every third one a few seconds
    later, one duplicate delivery and one malformed line per topic. The training start thus runs the
    parsing, quarantine, deduplication, stream-stream join, windowed aggregation and state store the
    apps are made of, on timestamps as recent as a real start's first batch."""
    impressions, clicks = [], []
    for number in range(TRAINING_IMPRESSIONS):
        shown_at = now - timedelta(seconds=120) + timedelta(milliseconds=200 * number)
        ad, user = f"ad-{number % 7}", f"user-{number % 50}"
        impressions.append(_event(IMPRESSION_SCHEMA, f"impression-{number}", ad, user, shown_at))
        if number % 3 == 0:
            clicks.append(_event(CLICK_SCHEMA, f"click-{number}", ad, user, shown_at + timedelta(seconds=4)))
    impressions.append(impressions[0])
    topics = config.kafka.topics
    for topic, lines in ((topics.impressions, impressions), (topics.clicks, clicks)):
        target = folder / topic.name
        target.mkdir(parents=True, exist_ok=True)
        (target / "part-00000.jsonl").write_text("\n".join([*lines, "{not json"]) + "\n")


def _event(schema: StructType, *values: object) -> str:
    """One event as its producer sends it: the schema's fields in order, the time as ISO-8601 UTC."""
    *fields, moment = values
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"  # type: ignore[attr-defined]
    return json.dumps(dict(zip(schema.fieldNames(), [*fields, stamp], strict=True)))


def training_overrides(data_root: Path, replay: Path, archive: Path, crash_report: Path) -> list[str]:
    """The training run's config: a throwaway data root, the files replay, no metrics port, the archive
    off (a driver cannot map one archive while it writes another), the JVM told to write one, and its
    crash report, if it dies, kept beside the log rather than in the scratch folder that goes."""
    java_options = (
        jvm.java_option(f"-XX:ArchiveClassesAtExit={archive}"),
        jvm.java_option(f"-XX:ErrorFile={crash_report}"),
    )
    return [
        f"paths.data_root={data_root}",
        "source.kind=files",
        f"source.files_dir={replay}",
        "spark.class_archive=false",
        f"spark.extra_conf.spark.driver.extraJavaOptions={' '.join(java_options)}",
        *(f"metrics.ports.{app}=0" for app in APP_NAMES),
    ]


def build(config: PipelineConfig, say: Callable[[str], None] = print) -> Path:
    """Train and store the archive, replacing any earlier one; ClassArchiveError when
    TRAINING_ATTEMPTS runs in a row fail, or one does not end within TRAINING_TIMEOUT_S.

    A run is tried again because the JVM sometimes aborts as it exits, in the exit-time dump (seen
    once in about sixty setups on CI, exit -6, and never in a row): the next run is a fresh JVM."""
    target = archive_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, TRAINING_ATTEMPTS + 1):
        try:
            _train(config, target, say)
            break
        except TrainingTimedOut as failure:
            raise _given_up(str(failure)) from None
        except ClassArchiveError as failure:
            if attempt == TRAINING_ATTEMPTS:
                raise _given_up(f"{failure} ({attempt} times in a row)") from None
            say(f"class archive: {failure}; training again ({attempt + 1} of {TRAINING_ATTEMPTS})")
    stamp_path().write_text(archive_digest() + "\n")
    return target


def _given_up(why: str) -> ClassArchiveError:
    return ClassArchiveError(
        f"{why}. Apps still start without the archive, only slower; "
        "`spark.class_archive: false` stops setup from trying."
    )


def _train(config: PipelineConfig, target: Path, say: Callable[[str], None]) -> None:
    """One training run; on success the new archive replaces ``target``."""
    log_path = target.with_suffix(".training.log")
    crash_report = target.with_suffix(".training.hs_err.log")
    crash_report.unlink(missing_ok=True)  # only this run's report is named if it fails
    with tempfile.TemporaryDirectory(prefix="class-archive-", dir=target.parent) as scratch:
        folder = Path(scratch)
        replay, written = folder / "replay", folder / ARCHIVE_NAME
        write_training_replay(config, replay, datetime.now(UTC))
        overrides = training_overrides(folder / "data", replay, written, crash_report)
        training = load_config(config.env, overrides, conf_dir=config.conf_dir)
        command = spark_submit_command(training, AD_MATCHING, "available-now", overrides)
        say(f"class archive: training it on a start of {TRAINING_APP} (about a minute); log: {log_path}")
        with log_path.open("w") as log_file:
            try:
                result = subprocess.run(
                    command,
                    env=submit_environment(),
                    cwd=folder,  # whatever Spark leaves in its working folder goes with the scratch
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    timeout=TRAINING_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise TrainingTimedOut(
                    f"the training run of {TRAINING_APP} did not end within {TRAINING_TIMEOUT_S:.0f}s; "
                    f"see {log_path}"
                ) from None
        if result.returncode != 0 or not written.is_file():
            # An archive left by a JVM that died is not used: the abort may have cut its dump short.
            report = f" and the JVM's crash report: {crash_report}" if crash_report.is_file() else ""
            raise ClassArchiveError(
                f"the training run of {TRAINING_APP} exited with {result.returncode} and wrote "
                f"{'an archive' if written.is_file() else 'no archive'}; see {log_path}{report}"
            )
        # A driver starting now maps either the old file or the new one, never half of one.
        os.replace(written, target)


def ensure(config: PipelineConfig, say: Callable[[str], None] = print) -> Path | None:
    """The archive, built when it is missing or stale; None when ``spark.class_archive`` is off."""
    if not config.spark.class_archive:
        return None
    if is_current():
        return archive_path()
    return build(config, say)
