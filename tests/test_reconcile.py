"""Nightly reconciliation against a scripted scenario run through the real apps (files source).

The scenario (tumbling 5 minutes, watermark 2 minutes, one replay file per micro-batch, see
tests/test_sensor_semantics.py for the late rule) has exactly two late deliveries the stream drops,
one duplicate delivery the stream counts, and one window still open at the end:

  batch 0: sensor-0001 00:00:30=10, 00:06:10=20                  watermark -> 00:04:10
  batch 1: filler
  batch 2: sensor-0001 00:04:00=30 (late, window open), 00:11:30=40   watermark -> 00:09:30
  batch 3: filler
  batch 4: sensor-0001 00:09:00=50 (open), 00:04:30=60 (DROPPED: [00:00, 00:05) closed),
           00:06:10=20 again (DUPLICATE delivery), sensor-0002 00:02:00=15 (DROPPED, whole window)
  batch 5: sensor-0001 00:30:00=70                                watermark -> 00:28:00
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from datetime import date, datetime
from itertools import pairwise
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from stream_pipelines.apps import raw_archive, sensor_aggregation
from stream_pipelines.core import registry, store
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.config import ReconciliationTolerances as Tolerances
from stream_pipelines.core.registry import COMPLIANCE_WINDOWS
from stream_pipelines.core.resource_manager import ENDED_STATES, ResourceManager
from stream_pipelines.driver.batch_log import (
    BatchRecord,
    copy_checkpoint_logs,
    load_batches,
    parse_batch_log,
)
from stream_pipelines.reconciliation.advisor import late_watermarks
from stream_pipelines.reconciliation.job import (
    ReconciliationResult,
    UnexplainedDifferences,
    run_reconciliation,
)
from stream_pipelines.reconciliation.ledger import with_batches
from stream_pipelines.reconciliation.report import report_dir
from stream_pipelines.tables import compacted_days
from tests.conftest import (
    Replay,
    compact_through_spark_submit,
    create_topic,
    files_source_overrides,
    make_overrides_config,
    overrides_for,
    run_in_process,
    run_then_reconcile,
    yarn_overrides,
)

pytestmark = pytest.mark.broker
compliance_dir = COMPLIANCE_WINDOWS.location

DAY = date(2026, 1, 1)
FILLER = ["{not json: a batch that moves no watermark"]


def reading(minute: int, second: int, temperature: float, sensor: str = "sensor-0001") -> dict:
    return {
        "event_id": f"{sensor}-{minute:02d}{second:02d}-{temperature}",
        "sensor_id": sensor,
        "temperature": temperature,
        "ts": f"2026-01-01T00:{minute:02d}:{second:02d}.000Z",
    }


SCENARIO: list[list] = [
    [reading(0, 30, 10.0), reading(6, 10, 20.0)],
    FILLER,
    [reading(4, 0, 30.0), reading(11, 30, 40.0)],
    FILLER,
    [reading(9, 0, 50.0), reading(4, 30, 60.0), reading(6, 10, 20.0), reading(2, 0, 15.0, "sensor-0002")],
    [reading(30, 0, 70.0)],
]
LATE_EVENTS = {"sensor-0001-0430-60.0", "sensor-0002-0200-15.0"}


def at(minute: int) -> datetime:
    return datetime(2026, 1, 1, 0, minute)


# The authoritative figures, by hand: one reading per event_id, nothing dropped.
EXPECTED_COMPLIANCE = {
    ("sensor-0001", at(0)): (3, (10 + 30 + 60) / 3, 60.0, 10.0),
    ("sensor-0001", at(5)): (2, 35.0, 50.0, 20.0),
    ("sensor-0001", at(10)): (1, 40.0, 40.0, 40.0),
    ("sensor-0001", at(30)): (1, 70.0, 70.0, 70.0),
    ("sensor-0002", at(0)): (1, 15.0, 15.0, 15.0),
}


def write_scenario(root: Path, batches: list[list]) -> None:
    """Replay files whose modification (= arrival) time is just after their newest event, rising."""
    replay = Replay(root)
    for topic in ("impressions", "clicks_ads"):
        (root / topic).mkdir(parents=True, exist_ok=True)
    arrival = datetime(2026, 1, 1).timestamp()
    for events in batches:
        replay.batch("sensors", events)
        newest = max(
            (datetime.fromisoformat(e["ts"]).timestamp() for e in events if isinstance(e, dict)), default=0
        )
        arrival = max(arrival + 1, newest + 5)
        written = root / "sensors" / f"batch-{replay.files:04d}.jsonl"
        os.utime(written, (arrival, arrival))


def scenario_config(data_root: Path, replay_root: Path, ports, sliding_topic: str, *extra: str):
    overrides = overrides_for(
        data_root,
        ports,
        *files_source_overrides(replay_root),
        f"kafka.topics.sliding_averages.name={sliding_topic}",
        *extra,
    )
    return make_overrides_config(overrides)


@dataclass
class Scenario:
    config: PipelineConfig
    replay_root: Path
    sliding_topic: str
    ports: tuple[int, int]


@pytest.fixture(scope="module")
def scenario(spark, broker, broker_ports, tmp_path_factory) -> Scenario:
    """The scenario run once through raw_archive and sensor_aggregation; tests copy it to change it."""
    root = tmp_path_factory.mktemp("reconcile")
    sliding_topic = f"sliding-{uuid.uuid4().hex[:8]}"
    create_topic(broker, sliding_topic, 1)
    write_scenario(root / "replay", SCENARIO)
    config = scenario_config(root / "data", root / "replay", broker_ports, sliding_topic)
    assert run_in_process(spark, config, raw_archive)[0] == 0
    assert run_in_process(spark, config, sensor_aggregation, batch_log=True)[0] == 0
    return Scenario(config, root / "replay", sliding_topic, broker_ports)


def copy_of(scenario: Scenario, tmp_path: Path) -> PipelineConfig:
    """A private copy of the scenario's data root; file-sink logs are pointed at the copied files."""
    original = scenario.config.project_path(scenario.config.paths.data_root)
    shutil.copytree(original, tmp_path / "data")
    for log in (tmp_path / "data").rglob("_spark_metadata/[0-9]*"):
        log.write_text(log.read_text().replace(f"file://{original}/", f"file://{tmp_path / 'data'}/"))
    return scenario_config(tmp_path / "data", scenario.replay_root, scenario.ports, scenario.sliding_topic)


@dataclass
class Reconciled:
    config: PipelineConfig
    result: ReconciliationResult


@pytest.fixture(scope="module")
def reconciled(spark, scenario, tmp_path_factory) -> Reconciled:
    """One reconciliation of the scenario's day, shared by the tests that only read its result."""
    config = copy_of(scenario, tmp_path_factory.mktemp("reconciled"))
    return Reconciled(config, run_reconciliation(config, DAY, spark=spark))


def compliance_rows(spark, config: PipelineConfig, day: date = DAY) -> dict:
    table = spark.read.parquet(compliance_dir(config)).where(f"event_date = '{day.isoformat()}'")
    return {
        (r["sensor_id"], r["window_start"]): (
            r["reading_count"],
            r["avg_temperature"],
            r["max_temperature"],
            r["min_temperature"],
        )
        for r in table.collect()
    }


def test_batch_log_holds_every_batch_with_its_files_and_watermarks(scenario):
    batches = load_batches(scenario.config, "sensor_aggregation", "tumbling")
    assert [b.batch_id for b in batches][: len(SCENARIO)] == list(range(len(SCENARIO)))
    assert all(b.committed for b in batches)
    assert [len(b.files) for b in batches[: len(SCENARIO)]] == [1] * len(SCENARIO)
    assert batches[0].late_filter_watermark_ms == 0
    for previous, batch in pairwise(batches):
        assert batch.late_filter_watermark_ms == previous.eviction_watermark_ms
    # Batch 4 (the late one) filters with batch 3's watermark, 00:09:30.
    assert batches[4].late_filter_watermark_ms == int(datetime(2026, 1, 1, 0, 9, 30).timestamp() * 1000)


def test_known_late_events_are_exactly_the_ledger_and_every_diff_is_explained(spark, reconciled):
    config, result = reconciled.config, reconciled.result

    assert result.status == "passed", result.notes
    tumbling_ledger = [row for row in result.ledger if row["query"] == "tumbling"]
    assert {row["event_id"] for row in tumbling_ledger} == LATE_EVENTS
    assert len(tumbling_ledger) == len(LATE_EVENTS)
    late = next(row for row in tumbling_ledger if row["event_id"] == "sensor-0001-0430-60.0")
    assert late["batch_id"] == 4 and late["window_start"].startswith("2026-01-01T00:00")
    assert late["source_file"].endswith("batch-0005.jsonl")
    # Arrived at 00:09:05 + a few seconds of rising file times; written at 00:04:30.
    assert 270 < late["arrival_delay_s"] < 500

    assert compliance_rows(spark, config) == pytest.approx(EXPECTED_COMPLIANCE)

    verdicts = {(d.sensor_id, d.window_start): (d.kind, d.verdict) for d in result.diffs}
    assert verdicts == {
        ("sensor-0001", at(0)): ("different_figures", "explained"),  # the dropped 00:04:30
        ("sensor-0001", at(5)): ("different_figures", "explained"),  # the duplicate 00:06:10
        ("sensor-0002", at(0)): ("missing_window", "explained"),  # its only reading was dropped
        ("sensor-0001", at(30)): ("missing_window", "pending"),  # not closed by the stream yet
    }
    assert not result.unexplained

    report = json.loads(Path(result.report_json).read_text())
    assert report["inputs"]["archive_rows_read"] == sum(len(b) for b in SCENARIO)
    assert report["inputs"]["code_version"]
    assert {"delay_histogram.png", "what_if.png"} <= {
        p.name for p in Path(result.report_json).parent.iterdir()
    }
    page = Path(result.report_html).read_text()
    assert "sensor-0002-0200-15.0" in page
    # For people: the verdict first, then the plots (embedded), the details and the provenance.
    assert page.index('<section id="summary">') < page.index('<section id="plots">')
    assert page.index("PASSED: the stream") < page.index("data:image/png;base64,")
    assert report["inputs"]["config_digest"].startswith("sha256:")
    assert report["day_totals"] == {"exact_readings": 8, "streaming_readings": 6, "model_readings": 6}
    assert report["pdf"]["rendered"], report["pdf"]
    assert (Path(result.report_json).parent / "report.pdf").read_bytes().startswith(b"%PDF")
    sensors = next(s for s in result.delay_stats if s.topic == "sensors")
    assert sensors.events == sum(isinstance(e, dict) for b in SCENARIO for e in b)
    assert result.recommended_watermark_s == pytest.approx(-(-sensors.p99_s * 1.4 // 1))
    assert result.quarantine["sensors"] == {"broken_json": 2}


def tamper_average(spark, output: Path, window_start: datetime, sensor_id: str, by: float) -> None:
    """Change one committed window's average in place, keeping the file sink's log consistent.

    Spark rewrites the file (so the Parquet types stay Spark's), then the copy replaces the original.
    """
    from pyspark.sql import functions as F

    target = (F.col("window_start") == F.lit(window_start)) & (F.col("sensor_id") == sensor_id)
    for part in output.glob("*.parquet"):
        frame = spark.read.parquet(str(part))
        if frame.where(target).count() == 0:
            continue
        rewritten = output.parent / f"rewrite-{part.stem}"
        changed = frame.withColumn(
            "avg_temperature",
            F.when(target, F.col("avg_temperature") + by).otherwise(F.col("avg_temperature")),
        )
        changed.coalesce(1).write.parquet(str(rewritten))
        shutil.move(next(rewritten.glob("*.parquet")), part)
        part.with_name(f".{part.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old bytes
        for log in (output / "_spark_metadata").glob("[0-9]*"):
            lines = log.read_text().splitlines()
            entries = [json.loads(line) if line.startswith("{") else line for line in lines]
            for entry in entries:
                if isinstance(entry, dict) and entry["path"].endswith(part.name):
                    entry["size"] = part.stat().st_size
            log.write_text("\n".join(e if isinstance(e, str) else json.dumps(e) for e in entries))


def test_a_tampered_streaming_window_fails_the_run_and_names_the_window(spark, scenario, tmp_path):
    config = copy_of(scenario, tmp_path)
    tamper_average(spark, Path(config.output_dir("sensor_windows")), at(10), "sensor-0001", 1.0)
    with pytest.raises(UnexplainedDifferences) as failure:
        run_reconciliation(config, DAY, spark=spark)
    message = str(failure.value)
    assert "2026-01-01 00:10:00" in message and "sensor-0001" in message
    assert "avg_temperature" in message
    assert failure.value.result.status == "failed"
    assert json.loads(Path(failure.value.result.report_json).read_text())["status"] == "failed"


def test_a_rerun_replaces_only_its_own_day(spark, reconciled):
    config, first = reconciled.config, reconciled.result
    table = spark.read.parquet(compliance_dir(config))
    other_day = (
        table.where(f"event_date = '{DAY.isoformat()}'")
        .limit(1)
        .withColumn("event_date", F.lit("2025-12-31"))
    )
    other_day.write.mode("append").partitionBy("event_date").parquet(compliance_dir(config))
    second = run_reconciliation(config, DAY, spark=spark)
    assert first.compliance_rows == second.compliance_rows == len(EXPECTED_COMPLIANCE)
    assert compliance_rows(spark, config) == pytest.approx(EXPECTED_COMPLIANCE)
    assert spark.read.parquet(compliance_dir(config)).where("event_date = '2025-12-31'").count() == 1
    assert first.ledger_count == second.ledger_count


def test_an_empty_day_gives_a_clear_result(spark, reconciled):
    config = reconciled.config
    result = run_reconciliation(config, date(2026, 1, 5), spark=spark)
    assert result.status == "empty_day"
    assert result.diffs == [] and result.ledger_count == 0 and result.compliance_rows == 0
    assert any("empty day" in note for note in result.notes)
    assert Path(result.report_html).is_file()


def test_a_day_without_streaming_output_is_pending_not_failed(spark, scenario, tmp_path):
    config = copy_of(scenario, tmp_path)
    shutil.rmtree(config.output_dir("sensor_windows"))
    shutil.rmtree(config.data_path("batch_log"))
    result = run_reconciliation(config, DAY, spark=spark)
    assert result.status == "passed"
    assert {d.verdict for d in result.diffs} == {"pending"}
    assert len(result.diffs) == len(EXPECTED_COMPLIANCE)
    assert any("no streaming output" in note for note in result.notes)
    assert compliance_rows(spark, config) == pytest.approx(EXPECTED_COMPLIANCE)


def test_what_if_drops_agree_with_a_replay_at_that_delay(spark, scenario, reconciled, tmp_path):
    result = reconciled.result
    by_delay = {w.delay_s: w for w in result.what_if}
    # At the delay the stream ran with (2 minutes), the what-if is the ledger.
    assert by_delay[120].dropped == len(LATE_EVENTS)

    replayed = scenario_config(
        tmp_path / "replayed",
        scenario.replay_root,
        scenario.ports,
        scenario.sliding_topic,
        "sensors.watermark=1 minute",
    )
    assert run_in_process(spark, replayed, sensor_aggregation, batch_log=True)[0] == 0
    # Spark's numRowsDroppedByWatermark counts partially aggregated groups, not readings, so the
    # replay's drops are read from its output: readings in windows it closed minus readings it counted.
    emitted = spark.read.parquet(replayed.output_dir("sensor_windows")).agg(F.sum("reading_count")).first()[0]
    still_open = 1  # the 00:30:00 reading: its window is open in both runs
    replay_dropped = by_delay[60].deliveries - still_open - emitted
    assert by_delay[60].dropped == replay_dropped == 5
    assert by_delay[60].dropped_share == pytest.approx(replay_dropped / by_delay[60].deliveries)
    # The same bookkeeping on the original run (2 minutes) agrees with its own output.
    original = spark.read.parquet(reconciled.config.output_dir("sensor_windows")).agg(F.sum("reading_count"))
    assert by_delay[120].dropped == by_delay[120].deliveries - still_open - original.first()[0]


def test_kafka_batch_log_ranges_start_where_the_previous_batch_ended(tmp_path):
    log = tmp_path / "log"
    (log / "offsets").mkdir(parents=True)
    (log / "commits").mkdir()
    (log / "sources" / "0").mkdir(parents=True)
    # The Kafka source's initial offsets: a zero byte, a version line, then the JSON.
    (log / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"sensors":{"0":5,"1":0}}')
    metadata = '{{"batchWatermarkMs":{mark},"batchTimestampMs":1,"conf":{{}}}}'
    for batch, (mark, ends) in enumerate(
        [(0, '{"0":8,"1":3}'), (1000, '{"0":8,"1":6}'), (2000, '{"0":9,"1":6}')]
    ):
        (log / "offsets" / str(batch)).write_text(f'v1\n{metadata.format(mark=mark)}\n{{"sensors":{ends}}}')
        if batch < 2:
            (log / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    batches = parse_batch_log(log)
    assert [b.kafka_ranges for b in batches] == [
        {("sensors", 0): (5, 8), ("sensors", 1): (0, 3)},
        {("sensors", 1): (3, 6)},
        {("sensors", 0): (8, 9)},
    ]
    assert [b.late_filter_watermark_ms for b in batches] == [0, 0, 1000]
    assert [b.eviction_watermark_ms for b in batches] == [0, 1000, 2000]
    assert [b.committed for b in batches] == [True, True, False]


def test_recorder_copies_are_idempotent_and_outlive_checkpoint_cleanup(tmp_path):
    checkpoint, target = tmp_path / "checkpoint", tmp_path / "log"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"logOffset":0}')
    assert copy_checkpoint_logs(checkpoint, target) == 1
    assert copy_checkpoint_logs(checkpoint, target) == 0
    (checkpoint / "offsets" / "0").unlink()  # Spark's retention removes old batches
    assert (target / "offsets" / "0").is_file()


def test_what_if_watermarks_follow_sparks_previous_batch_rule():
    minute = 60_000
    # Batch maxima 11:30, none (a batch that read nothing), 04:30: the late filter lags one batch.
    marks = late_watermarks([int(11.5 * minute), None, int(4.5 * minute)], 2 * minute)
    assert marks == [0, 0, int(9.5 * minute)]


def test_each_delivery_meets_exactly_the_batch_whose_offset_range_holds_it(spark):
    # A backlog batch far wider than the rest, small batches, empty ranges, a gap the log lost (7..9),
    # two partitions and a replay file: the bucketed join must place every offset as a plain scan would.
    ranges = {
        0: {("sensors", 0): (0, 5000), ("sensors", 1): (0, 3)},
        1: {("sensors", 0): (5000, 5001), ("sensors", 1): (3, 3)},
        2: {("sensors", 0): (5001, 5004), ("sensors", 1): (3, 7)},
        4: {("sensors", 1): (9, 12)},
    }
    batches = [
        BatchRecord(batch_id, kafka_ranges=kafka, late_filter_watermark_ms=batch_id * 1000, committed=True)
        for batch_id, kafka in ranges.items()
    ] + [BatchRecord(5, files=frozenset({"/replay/a.jsonl"}), late_filter_watermark_ms=5000)]
    offsets = {0: [0, 1, 2499, 4999, 5000, 5001, 5003, 5004, 9000], 1: [0, 2, 3, 6, 7, 8, 9, 11, 12]}
    deliveries = spark.createDataFrame(
        [("sensors", partition, offset, None) for partition, listed in offsets.items() for offset in listed]
        + [("sensors", 2, 0, "/replay/a.jsonl")],
        "topic string, partition int, offset long, source_file string",
    )

    def scanned(partition: int, offset: int) -> int | None:
        holding = [
            batch_id
            for batch_id, kafka in ranges.items()
            if ("sensors", partition) in kafka
            and kafka["sensors", partition][0] <= offset < kafka["sensors", partition][1]
        ]
        return holding[0] if holding else None

    assigned = {
        (row["partition"], row["offset"]): (row["batch_id"], row["late_filter_watermark_ms"])
        for row in with_batches(spark, deliveries, batches).collect()
    }
    assert len(assigned) == deliveries.count(), "each delivery appears once"
    for (partition, offset), (batch_id, watermark) in assigned.items():
        expected = 5 if partition == 2 else scanned(partition, offset)
        assert batch_id == expected, f"partition {partition} offset {offset}"
        assert watermark == (None if expected is None else expected * 1000)


def test_a_stream_match_on_an_event_not_yet_archived_is_pending_not_unexplained(spark):
    # A live stack: the ad app matched click-late after the nightly read the archive, which lacks it.
    from stream_pipelines.core.config import Duration
    from stream_pipelines.reconciliation.ads import diff_matches

    shown = datetime(2026, 11, 23, 10, 0)
    pairs = "impression_id string, click_id string, shown_at timestamp"
    exact = spark.createDataFrame([("imp-a", None, shown), ("imp-b", None, shown)], pairs)
    streaming = spark.createDataFrame(
        [("imp-a", "click-late", shown), ("imp-b", "click-known", shown)], pairs
    )
    archived = spark.createDataFrame([("imp-a",), ("imp-b",), ("click-known",)], "event_id string")
    no_drops = spark.createDataFrame([], "event_id string")
    long_after = int(datetime(2026, 11, 24).timestamp() * 1000)

    diffs = diff_matches(exact, streaming, no_drops, archived, Duration.parse("5 minutes"), long_after)
    verdicts = {(d.impression_id, d.click_id, d.kind): d.verdict for d in diffs}
    assert verdicts[("imp-a", "click-late", "wrong_match")] == "pending"
    assert verdicts[("imp-a", None, "missing_match")] == "pending", "the exact side's unmatched twin"
    # Both events archived and still not reproduced: that one stays a failure.
    assert verdicts[("imp-b", "click-known", "wrong_match")] == "unexplained"


def test_windows_closed_after_the_stream_read_past_the_archive_are_not_checked_against_it():
    from stream_pipelines.reconciliation.ledger import archived_eviction_watermark_ms

    def batch(batch_id: int, ends: tuple[int, int], watermark: int, committed: bool = True) -> BatchRecord:
        starts = (0, 0) if batch_id == 0 else (ends[0] - 10, ends[1] - 10)
        return BatchRecord(
            batch_id=batch_id,
            kafka_ranges={("sensors", p): (starts[p], ends[p]) for p in (0, 1)},
            eviction_watermark_ms=watermark,
            committed=committed,
        )

    batches = [batch(0, (10, 10), 100), batch(1, (20, 20), 200), batch(2, (30, 30), 300)]
    # The archive holds partition 0 up to offset 29, partition 1 only up to 24: batch 2 read past it.
    assert archived_eviction_watermark_ms(batches, {("sensors", 0): 30, ("sensors", 1): 25}) == 200
    assert archived_eviction_watermark_ms(batches, {("sensors", 0): 30, ("sensors", 1): 30}) == 300
    # A partition the archive read has no row of (read only before its arrival days) constrains nothing.
    assert archived_eviction_watermark_ms(batches, {("sensors", 0): 30}) == 300
    assert archived_eviction_watermark_ms(batches, {("sensors", 0): 5}) is None
    uncommitted_last = [*batches[:2], batch(2, (30, 30), 300, committed=False)]
    assert archived_eviction_watermark_ms(uncommitted_last, {("sensors", 0): 99, ("sensors", 1): 99}) == 200


def test_a_stream_window_with_events_not_yet_archived_is_pending_and_archived_ones_stay_unexplained():
    from stream_pipelines.reconciliation import diff

    figures = {"reading_count": 3, "avg_temperature": 20.0, "max_temperature": 30.0, "min_temperature": 10.0}
    row = {
        "window_start": datetime(2026, 11, 23, 10, 0),
        "window_end": datetime(2026, 11, 23, 10, 5),
        "sensor_id": "sensor-0001",
        "closed_by_stream": True,
        "exact_present": True,
        **{f"exact_{k}": v for k, v in figures.items()},
        "model_present": True,
        **{f"model_{k}": v for k, v in figures.items()},
        "streaming_present": True,
        **{f"streaming_{k}": v for k, v in figures.items()},
        "streaming_reading_count": 4,  # one reading the archive read does not have
    }
    tolerances = Tolerances()

    awaiting = diff.classify({**row, "archived_for_stream": False}, tolerances)
    assert (awaiting.kind, awaiting.verdict) == (diff.DIFFERENT, diff.PENDING)
    assert "rerun later" in awaiting.reasons[0]
    archived = diff.classify({**row, "archived_for_stream": True}, tolerances)
    assert (archived.kind, archived.verdict) == (diff.DIFFERENT, diff.UNEXPLAINED)
    extra = diff.classify({**row, "exact_present": None, "archived_for_stream": False}, tolerances)
    assert (extra.kind, extra.verdict) == (diff.EXTRA, diff.PENDING)


def compliance_rows_on_store(config: PipelineConfig, day: date = DAY) -> dict:
    """Day D's compliance rows read with pyarrow through the file layer (another reader than Spark)."""
    partition = store.location(
        config.spark.extra_conf, f"{compliance_dir(config)}/event_date={day.isoformat()}"
    )
    rows = {}
    for name in store.files_under(partition):
        if not name.endswith(".parquet"):
            continue
        with (partition / name).open("rb") as handle:
            for r in pq.read_table(handle).to_pylist():
                rows[(r["sensor_id"], r["window_start"].replace(tzinfo=None))] = (
                    r["reading_count"],
                    r["avg_temperature"],
                    r["max_temperature"],
                    r["min_temperature"],
                )
    return rows


# What a run decides, apart from where it read and wrote and when it ran.
VERDICT_SECTIONS = (
    "status",
    "window_counts",
    "diffs",
    "ad_match_diffs",
    "late_event_ledger",
    "delay_analysis",
    "quarantine",
    "compliance_rows",
)


@pytest.mark.slow
def test_the_reconciliation_on_hdfs_equals_the_same_run_over_local_data(
    spark, scenario, reconciled, hdfs_root, yarn, tmp_path
):
    """The scenario with every stored path on HDFS: the archive, sensor_aggregation (drained in the
    session's Spark: a driver in YARN over HDFS is tests/test_yarn_cluster_mode.py's), their checkpoints
    and batch log; the day compacted on the store (the compaction job, through spark-submit); then the
    nightly job in YARN cluster mode (its driver in an ApplicationMaster container of the session's
    YARN), reading the compacted day: its ledger, verdicts and compliance rows equal the local run's,
    its quality gates pass with their Data Docs on HDFS, and its report names the remote inputs. The
    same steps on S3 run with ad_matching in tests/test_object_store.py."""
    overrides = [
        *overrides_for(
            tmp_path / "unused",
            scenario.ports,
            *files_source_overrides(scenario.replay_root),
            f"kafka.topics.sliding_averages.name={scenario.sliding_topic}",
        ),
        f"paths.data_root={hdfs_root}/pipeline",
        f"paths.scratch={tmp_path}/scratch",
        # The scenario's day is older than the outputs' and quarantines' retention by now, and will be
        # older than the archive's.
        "retention.outputs=forever",
        "retention.quarantine=forever",
        "retention.archive=forever",
    ]
    config = make_overrides_config(overrides)
    bucket_root = config.data_path("checkpoints").removesuffix("/checkpoints")
    assert bucket_root.startswith("hdfs://"), bucket_root
    log = tmp_path / "spark-submit.log"
    for app in (raw_archive, sensor_aggregation):
        assert run_in_process(spark, config, app, batch_log=True)[0] == 0
    compact_through_spark_submit(config, overrides, log)
    archive_day = compacted_days.latest(config, registry.ARCHIVE, DAY.isoformat())
    assert archive_day is not None and archive_day.rows == sum(len(b) for b in SCENARIO)
    assert compacted_days.latest(config, registry.SENSOR_WINDOWS, DAY.isoformat()) is not None

    rm = ResourceManager(yarn.rm_url)
    jobs_before = {app.id for app in rm.applications("reconcile", ENDED_STATES)}
    run_then_reconcile([], [*overrides, *yarn_overrides(yarn, config.paths.data_root)], DAY, log)
    ran = [app for app in rm.applications("reconcile", ENDED_STATES) if app.id not in jobs_before]
    assert [(app.state, app.final_status) for app in ran] == [("FINISHED", "SUCCEEDED")], ran

    folder = report_dir(config, DAY.isoformat())
    remote = json.loads((folder / "report.json").read_text())
    local = json.loads(Path(reconciled.result.report_json).read_text())
    assert remote["status"] == "passed"
    assert {section: remote[section] for section in VERDICT_SECTIONS} == {
        section: local[section] for section in VERDICT_SECTIONS
    }
    assert remote["inputs"]["archive_rows_read"] == archive_day.rows
    assert remote["late_event_ledger"]["count"] == len(LATE_EVENTS)
    # The quality gates ran in the same driver, in YARN, and published their Data Docs to HDFS.
    gates = remote["quality_gates"]
    assert [(gate["suite"], gate["success"]) for gate in gates] == [
        ("raw_events", True),
        ("streaming_outputs", True),
        ("compliance_table", True),
    ]
    assert all(gate["data_docs"].startswith(f"{config.data_path('gx')}/") for gate in gates), gates
    assert compliance_rows_on_store(config) == pytest.approx(compliance_rows(spark, reconciled.config))
    assert compliance_rows_on_store(config) == pytest.approx(EXPECTED_COMPLIANCE)

    inputs = remote["inputs"]
    for name in ("archive_path", "streaming_output_path", "batch_log_path", "ad_matches_path"):
        assert inputs[name].startswith(f"{bucket_root}/"), (name, inputs[name])
    assert (
        remote["outputs"]["report_html"]
        == f"{bucket_root}/reports/reconciliation/{DAY.isoformat()}/report.html"
    )
    assert {"delay_histogram.png", "what_if.png", "report.html"} <= set(store.files_under(folder))
    assert (folder / "what_if.png").read_bytes().startswith(b"\x89PNG")
    assert (folder / "report.pdf").read_bytes().startswith(b"%PDF"), remote["pdf"]
    assert not (tmp_path / "unused").exists(), "something was written to the local data root"
