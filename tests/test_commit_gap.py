"""A driver that dies after the file sink committed batch N and before ``commits/N``: the one case in
which a restart does not reproduce the uninterrupted run, and the nightly ledger still explains it.

The restart re-runs N. The file sink already has N and skips it, so the batch sees no event time and
``commits/N`` records the watermark N *started* with: one batch behind. The lag reaches the next
batches' ``offsets``; a reading the uninterrupted run drops as late can then be accepted. The batch log
copies ``offsets/N`` as Spark wrote them, so it holds the watermarks the batches really used.

The kill is placed by making Spark's own commit of N fail: ``commits/N`` is there, as a folder, and the
commit log refuses to write an entry that exists. Everything up to and including the sink's commit of N
has happened (state store versions too); nothing after it has. Spark refuses to start a new query on a
``commits/`` that is not empty, so a first driver runs batch 0 alone and stops; the folder goes in
before the second one starts.

Tumbling 5 minutes, watermark 2 minutes, one replay file per batch (the files source: Spark's batch
boundaries are then the files, in both runs):

  batch 0: filler (the first driver's only batch)
  batch 1: sensor-0001 00:00:30=10, 00:06:10=20      watermark -> 00:04:10
  batch 2: sensor-0001 00:11:30=40                   watermark -> 00:09:30; after the gap 00:04:10
  batch 3: filler (moves no watermark, so the lag lasts into batch 4's late filter)
  batch 4: sensor-0001 00:04:30=60, 00:30:00=70      window [00:00, 00:05) ends 00:05:00:
           dropped at 00:09:30 (uninterrupted), accepted at 00:04:10 (after the gap)
  batch 5: no new data; the watermark, 00:28:00 in both runs, closes the windows up to 00:25
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from stream_pipelines.apps import raw_archive, sensor_aggregation
from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.core.registry import COMPLIANCE_WINDOWS
from stream_pipelines.driver.batch_log import load_batches
from stream_pipelines.reconciliation.job import ReconciliationResult, run_reconciliation
from tests.conftest import (
    Replay,
    batch_watermarks,
    committed_batches_of_files,
    create_topic,
    files_source_overrides,
    make_overrides_config,
    overrides_for,
    run_in_process,
)

pytestmark = pytest.mark.broker

APP = sensor_aggregation.APP
DAY = date(2026, 1, 1)
GAP = 2  # the batch whose sink commit happens and whose checkpoint commit does not
LATE = "sensor-0001-0430-60.0"
FILLER = ["{not json: a batch that moves no watermark"]


def reading(minute: int, second: int, temperature: float) -> dict:
    return {
        "event_id": f"sensor-0001-{minute:02d}{second:02d}-{temperature}",
        "sensor_id": "sensor-0001",
        "temperature": temperature,
        "ts": f"2026-01-01T00:{minute:02d}:{second:02d}.000Z",
    }


FIRST_DRIVER: list[list] = [FILLER]
SCENARIO: list[list] = [
    [reading(0, 30, 10.0), reading(6, 10, 20.0)],
    [reading(11, 30, 40.0)],
    FILLER,
    [reading(4, 30, 60.0), reading(30, 0, 70.0)],
]


def ms(minute: int, second: int = 0) -> int:
    return int(datetime(2026, 1, 1, 0, minute, second, tzinfo=UTC).timestamp() * 1000)


def at(minute: int) -> datetime:
    return datetime(2026, 1, 1, 0, minute)


def write_batches(replay: Replay, batches: list[list], arrival: float) -> float:
    """Replay files that arrive just after their newest event (the nightly reads arrival days around D);
    returns the last arrival."""
    for events in batches:
        replay.batch("sensors", events)
        newest = max(
            (datetime.fromisoformat(e["ts"]).timestamp() for e in events if isinstance(e, dict)), default=0
        )
        arrival = max(arrival + 1, newest + 5)
        os.utime(replay.root / "sensors" / f"batch-{replay.files:04d}.jsonl", (arrival, arrival))
    return arrival


@dataclass
class Run:
    config: PipelineConfig

    @property
    def checkpoint(self) -> Path:
        return Path(self.config.checkpoint_dir(APP, "tumbling"))

    @property
    def output(self) -> Path:
        return Path(self.config.output_dir("sensor_windows"))

    def commit_watermark(self, batch: int) -> int:
        return checkpoint_format.read_commit(self.checkpoint / "commits" / str(batch))

    def windows(self, spark) -> dict[datetime, tuple[int, float, int]]:
        """window_start -> (reading_count, avg_temperature, the batch that wrote it); one sensor."""
        owners = committed_batches_of_files(self.output)
        frame = spark.read.parquet(str(self.output))
        return {
            row["window_start"]: (row["reading_count"], row["avg_temperature"], owners[row["file"]])
            for row in frame.withColumn("file", F.regexp_extract(F.input_file_name(), r"[^/]+$", 0)).collect()
        }


@dataclass
class Runs:
    uninterrupted: Run
    gapped: Run


@pytest.fixture(scope="module")
def runs(spark, broker, broker_ports, tmp_path_factory) -> Runs:
    root = tmp_path_factory.mktemp("commitgap")
    replay = Replay(root / "replay")
    for topic in ("impressions", "clicks_ads"):
        (replay.root / topic).mkdir(parents=True, exist_ok=True)

    def config_of(run: str) -> PipelineConfig:
        sliding_topic = f"sliding-{uuid.uuid4().hex[:8]}"
        create_topic(broker, sliding_topic, 1)
        overrides = overrides_for(
            root / run,
            broker_ports,
            *files_source_overrides(replay.root),
            f"kafka.topics.sliding_averages.name={sliding_topic}",
            # One archive of the replay files serves both nightly runs.
            f"paths.archive={root / 'archive'}",
        )
        return make_overrides_config(overrides)

    uninterrupted, gapped = Run(config_of("uninterrupted")), Run(config_of("gapped"))

    arrival = write_batches(replay, FIRST_DRIVER, datetime(2026, 1, 1, tzinfo=UTC).timestamp())
    assert run_in_process(spark, gapped.config, sensor_aggregation, batch_log=True)[0] == ExitCode.OK
    write_batches(replay, SCENARIO, arrival)
    blocker = gapped.checkpoint / "commits" / str(GAP)
    blocker.mkdir()
    # No batch log recorder: a killed driver takes it along; the restart's recorder copies what it missed.
    assert run_in_process(spark, gapped.config, sensor_aggregation)[0] == ExitCode.QUERY_FAILED
    assert checkpoint_format.sink_log_latest_batch(gapped.output) == GAP, "the sink committed the batch"
    assert checkpoint_format.batch_ids(gapped.checkpoint / "offsets") == list(range(GAP + 1))
    shutil.rmtree(blocker)
    assert checkpoint_format.batch_ids(gapped.checkpoint / "commits") == list(range(GAP))
    assert run_in_process(spark, gapped.config, sensor_aggregation, batch_log=True)[0] == ExitCode.OK

    assert run_in_process(spark, uninterrupted.config, sensor_aggregation, batch_log=True)[0] == ExitCode.OK
    assert run_in_process(spark, uninterrupted.config, raw_archive)[0] == ExitCode.OK
    return Runs(uninterrupted, gapped)


def test_the_restart_runs_one_batch_behind_and_the_batch_log_holds_what_each_batch_used(spark, runs):
    uninterrupted, gapped = runs.uninterrupted, runs.gapped

    # The finding, reproduced: commits/N of the re-run batch is one batch behind.
    assert uninterrupted.commit_watermark(GAP) == ms(9, 30)
    assert gapped.commit_watermark(GAP) == ms(4, 10) == uninterrupted.commit_watermark(GAP - 1)
    used = batch_watermarks(gapped.checkpoint)
    reference = batch_watermarks(uninterrupted.checkpoint)
    assert reference.keys() == used.keys(), "the same batches in both runs"
    assert (reference[GAP + 1], used[GAP + 1]) == (ms(9, 30), ms(4, 10))
    # The filler after the gap moves nothing: the batch with the late reading starts behind too, and
    # its own readings catch the watermark up.
    assert (reference[GAP + 2], used[GAP + 2]) == (ms(9, 30), ms(4, 10))
    assert reference[GAP + 3] == used[GAP + 3] == ms(28)

    # What Spark did with those watermarks shows in the output: [00:00, 00:05) was emitted two batches
    # later after the gap, and with the reading the uninterrupted run dropped as late.
    assert uninterrupted.windows(spark)[at(0)] == (1, 10.0, GAP + 1)
    assert gapped.windows(spark)[at(0)] == (2, 35.0, GAP + 3)

    batches = {b.batch_id: b for b in load_batches(gapped.config, APP, "tumbling")}
    assert sorted(batches) == sorted(used)
    assert all(b.committed for b in batches.values())
    for batch_id, batch in batches.items():
        assert batch.eviction_watermark_ms == used[batch_id]
        assert batch.late_filter_watermark_ms == (used[batch_id - 1] if batch_id else 0)
    assert batches[GAP + 2].late_filter_watermark_ms == ms(4, 10), "the late filter the reading met"


def reconcile(spark, run: Run) -> ReconciliationResult:
    return run_reconciliation(run.config, DAY, spark=spark)


def compliance(spark, run: Run) -> list[tuple]:
    return sorted(tuple(row) for row in spark.read.parquet(COMPLIANCE_WINDOWS.location(run.config)).collect())


def test_the_ledger_explains_the_window_the_gap_changed(spark, runs):
    reference, gapped = reconcile(spark, runs.uninterrupted), reconcile(spark, runs.gapped)
    assert reference.status == gapped.status == "passed"
    assert not reference.unexplained and not gapped.unexplained

    def tumbling_ledger(result: ReconciliationResult) -> dict[str, tuple]:
        return {
            row["event_id"]: (row["window_start"], row["batch_id"], row["late_filter_watermark"])
            for row in result.ledger
            if row["query"] == "tumbling"
        }

    # The uninterrupted run dropped the reading with the watermark it had; after the gap it was read
    # with the lagging one, and the ledger says so: nothing dropped.
    assert tumbling_ledger(reference) == {LATE: ("2026-01-01T00:00:00", GAP + 2, "2026-01-01T00:09:30")}
    assert tumbling_ledger(gapped) == {}

    # The outputs differ in that window only, by that reading; each side's diff against the exact
    # recompute is what its own ledger says.
    expected, after_gap = runs.uninterrupted.windows(spark), runs.gapped.windows(spark)
    assert {start: figures[:2] for start, figures in expected.items() if start != at(0)} == {
        start: figures[:2] for start, figures in after_gap.items() if start != at(0)
    }
    verdicts = {
        run: {(d.window_start, d.kind, d.verdict, d.dropped_deliveries) for d in result.diffs}
        for run, result in (("uninterrupted", reference), ("gapped", gapped))
    }
    still_open = (at(30), "missing_window", "pending", 0)
    assert verdicts["uninterrupted"] == {(at(0), "different_figures", "explained", 1), still_open}
    assert verdicts["gapped"] == {still_open}
    # Whichever way the stream ran, the day's authoritative figures are the same.
    assert compliance(spark, runs.uninterrupted) == compliance(spark, runs.gapped)
