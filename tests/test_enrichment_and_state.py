"""Enrichment picks up a changed metadata file without a restart; state stays bounded under a watermark."""

from __future__ import annotations

import shutil
import threading
import uuid
from pathlib import Path

import pytest

from stream_pipelines.apps import sensor_aggregation
from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core.config import DEFAULT_CONF_DIR
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.devtools import generator
from stream_pipelines.driver.lifecycle import run_streams
from tests.conftest import (
    Replay,
    create_topic,
    files_source_overrides,
    make_overrides_config,
    run_in_process,
    wait_for,
)

pytestmark = pytest.mark.broker


def reading(minute: int, temperature: float, sensor: str = "sensor-0001") -> dict:
    return {
        "event_id": f"{sensor}-{minute}-{temperature}",
        "sensor_id": sensor,
        "temperature": temperature,
        "ts": f"2026-01-01T00:{minute:02d}:00.000Z",
    }


def test_changed_metadata_is_picked_up_without_restarting_the_query(spark, broker, make_overrides, tmp_path):
    metadata = tmp_path / "sensor_metadata.csv"
    shutil.copy(DEFAULT_CONF_DIR / "sensor_metadata.csv", metadata)
    sliding_topic = f"sliding-{uuid.uuid4().hex[:8]}"
    create_topic(broker, sliding_topic, 1)
    replay = Replay(tmp_path / "replay")
    config = make_overrides_config(
        make_overrides(
            *files_source_overrides(replay.root),
            f"sensors.metadata_path={metadata}",
            f"kafka.topics.sliding_averages.name={sliding_topic}",
            "sensors.trigger=1 seconds",
        )
    )
    tumbling = Path(config.checkpoint_dir("sensor_aggregation", "tumbling"))
    queries: list = []
    outcome: dict[str, int] = {}

    def run() -> None:
        sinks = sensor_aggregation.build_sinks(spark, config)
        outcome["code"] = run_streams(
            config, declared_app("sensor_aggregation"), sinks, "processing", on_started=queries.extend
        ).code

    replay.batch("sensors", [reading(1, 20.0)])
    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        wait_for(
            lambda: (tumbling / "commits" / "0").exists() or not runner.is_alive(), 600, "the first batch"
        )
        assert runner.is_alive(), f"the app ended early: {outcome}"
        query_ids = {query.id for query in queries}
        # Replace the file atomically, as docs/semantics.md asks operators to do.
        staged = metadata.with_suffix(".tmp")
        staged.write_text(metadata.read_text().replace("sensor-0001,warehouse,", "sensor-0001,cold-store-7,"))
        staged.replace(metadata)
        replay.batch("sensors", [reading(20, 21.0)])  # closes [00:00, 00:05)
        output = Path(config.output_dir("sensor_windows"))

        def emitted() -> bool:
            return any(output.glob("*.parquet")) and spark.read.parquet(str(output)).count() >= 1

        wait_for(emitted, 600, "the first window to be written")
    finally:
        ControlStore(config).request_stop("sensor_aggregation")
        runner.join(180)
    assert outcome.get("code") == 0
    assert {query.id for query in queries} == query_ids, "the same queries ran throughout: no restart"
    row = spark.read.parquet(config.output_dir("sensor_windows")).where("sensor_id = 'sensor-0001'").first()
    assert row["location"] == "cold-store-7", "the window emitted after the change carries the new metadata"


def test_state_levels_off_while_input_keeps_flowing(spark, broker, make_overrides, tmp_path):
    sliding_topic = f"sliding-{uuid.uuid4().hex[:8]}"
    create_topic(broker, sliding_topic, 1)
    replay = Replay(tmp_path / "replay")
    sensors = 20
    spec = generator.ScenarioSpec(
        seed=9,
        duration_s=3600,
        sensor_rate=2,
        ad_rate=0.01,
        sensor_count=sensors,
        mix=generator.DelayMix(
            late_within_share=0,
            late_beyond_share=0,
            duplicate_share=0,
            malformed_share=0,
            unknown_sensor_share=0,
        ),
    )
    readings = [r for r in generator.generate(spec) if r.topic == "sensors"]
    per_file = len(readings) // 24  # 24 micro-batches of 2.5 minutes of event time each
    for start in range(0, len(readings), per_file):
        replay.batch("sensors", [r.value.decode() for r in readings[start : start + per_file]])
    config = make_overrides_config(
        make_overrides(
            *files_source_overrides(replay.root), f"kafka.topics.sliding_averages.name={sliding_topic}"
        )
    )
    code, queries = run_in_process(spark, config, sensor_aggregation)
    assert code == 0
    states = [
        sum(op["numRowsTotal"] for op in progress["stateOperators"])
        for progress in queries["tumbling"].recentProgress
        if progress["numInputRows"]
    ]
    assert len(states) >= 20
    inputs = sum(p["numInputRows"] for p in queries["tumbling"].recentProgress)
    # Open tumbling windows per sensor: at most ceil((window + delay) / window) + 1 = 3.
    assert max(states) <= sensors * 3, states
    assert max(states[len(states) // 2 :]) <= max(states[: len(states) // 2]) * 1.2, states
    assert inputs > 10 * max(states), "input kept flowing well past the state size"
