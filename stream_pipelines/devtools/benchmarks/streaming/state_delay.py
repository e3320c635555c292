"""State rows against the watermark delay: the same stream run at each delay."""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.devtools.benchmarks.common import (
    BenchmarkError,
    Interrupts,
    await_queries,
    batch_progress,
    derive_config,
    isolated_run,
    log,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

from stream_pipelines.core import registry
from stream_pipelines.devtools.benchmarks.streaming.settings import DELAYS_MINUTES, SENSOR_APP, Profile

# --------------------------------------------------------------------------- state rows vs delay


@dataclass
class DelayResult:
    delay_minutes: float
    model_rows: int
    expected_mean_rows: float
    measured_median: float
    measured_mean: float
    measured_min: int
    measured_max: int
    ratio: float  # measured median / model
    mean_ratio: float
    batches: int
    steady_batches: int
    dropped_by_watermark: int
    seconds: float
    rows_by_batch: list[int] = field(default_factory=list)


def write_state_stream(
    folder: Path, config: PipelineConfig, keys: int, batch_s: int, span_s: int
) -> list[Path]:
    """``span_s`` seconds of on-time readings, one per sensor per second, one file per batch."""
    from stream_pipelines.devtools import generator

    slide_s = int(config.sensors.slide.seconds)
    # Starts on a slide boundary, a day back: old event times are fine for the file source, whose
    # arrival time is the file's modification time (now), and never look ahead of their arrival.
    start_s = (int(time.time()) - 86_400) // slide_s * slide_s
    mix = generator.DelayMix(
        late_within_share=0.0,
        late_beyond_share=0.0,
        duplicate_share=0.0,
        malformed_share=0.0,
        unknown_sensor_share=0.0,
        on_time_max_s=0.0,
    )
    spec = generator.ScenarioSpec(
        start=datetime.fromtimestamp(start_s, UTC),
        duration_s=span_s,
        sensor_rate=float(keys),
        ad_rate=0.0,
        sensor_count=keys,
        mix=mix,
        topics=generator.TopicNames(sensors=config.kafka.topics.sensors.name),
    )
    files = generator.write_jsonl(generator.iter_generate(spec), folder, records_per_file=keys * batch_s)
    # The file source takes files in modification-time order; files written within the same clock
    # tick would leave the order to the directory listing.
    base = time.time()
    for index, path in enumerate(files):
        os.utime(path, (base + index, base + index))
    return files


def run_state_vs_delay(
    spark: SparkSession, config: PipelineConfig, profile: Profile, keys: int, interrupts: Interrupts
) -> dict[str, Any]:
    settings = config.sensors
    window_s, slide_s = settings.sliding_window.seconds, settings.slide.seconds
    batch_s = profile.state_batch_s
    if slide_s % batch_s:
        raise BenchmarkError(f"--state-batch-seconds ({batch_s}) must divide the slide ({slide_s:g} s)")
    measured_batches = profile.state_slides * int(slide_s // batch_s)

    def warmup_batches(delay_s: float) -> int:
        # The state holds every window it should once the previous batch's event time is past
        # start + delay; one slide more is margin.
        return math.ceil((delay_s + slide_s) / batch_s) + 1

    longest = max(DELAYS_MINUTES) * 60
    files_needed = warmup_batches(longest) + measured_batches
    root = Path(config.project_path(config.paths.data_root)) / "state_replay"
    source = root / "all"
    log(f"state vs delay: writing {files_needed} files of {keys * batch_s:,} readings ({keys} sensors) ...")
    files = write_state_stream(source, config, keys, batch_s, files_needed * batch_s)
    topic = config.kafka.topics.sensors.name

    results = []
    for minutes in DELAYS_MINUTES:
        interrupts.check()
        delay_s = minutes * 60
        count = warmup_batches(delay_s) + measured_batches
        replay = root / f"delay-{minutes}m"
        (replay / topic).mkdir(parents=True, exist_ok=True)
        for path in files[:count]:
            os.link(path, replay / topic / path.name)
        delay_config = derive_config(
            config,
            [
                "source.kind=files",
                f"source.files_dir={replay}",
                "source.max_files_per_trigger=1",
                f"sensors.watermark={delay_s} seconds",
            ],
        )
        started = time.perf_counter()
        progress = replay_sliding(spark, delay_config, f"state-{minutes}m", interrupts)
        seconds = time.perf_counter() - started
        data = [update for update in progress if int(update["numInputRows"]) > 0]
        rows_read = sum(int(update["numInputRows"]) for update in data)
        if len(data) != count or rows_read != count * keys * batch_s:
            raise BenchmarkError(
                f"the {minutes} min replay ran {len(data)} data batches over {rows_read:,} rows; "
                f"expected {count} over {count * keys * batch_s:,}"
            )
        state_rows = [int(update["stateOperators"][0]["numRowsTotal"]) for update in data]
        steady = state_rows[-measured_batches:]
        model = keys * math.ceil((window_s + delay_s) / slide_s)
        median = statistics.median(steady)
        mean = statistics.fmean(steady)
        result = DelayResult(
            delay_minutes=minutes,
            model_rows=model,
            expected_mean_rows=keys * (window_s + delay_s + batch_s) / slide_s,
            measured_median=median,
            measured_mean=mean,
            measured_min=min(steady),
            measured_max=max(steady),
            ratio=median / model,
            mean_ratio=mean / model,
            batches=len(data),
            steady_batches=len(steady),
            dropped_by_watermark=sum(
                int(update["stateOperators"][0].get("numRowsDroppedByWatermark") or 0) for update in data
            ),
            seconds=seconds,
            rows_by_batch=state_rows,
        )
        log(
            f"state vs delay: {minutes} min: median {median:g} rows, model {model} "
            f"(ratio {result.ratio:.2f}), {len(data)} batches in {seconds:.0f}s"
        )
        results.append(result)
    return {
        "keys": keys,
        "window_s": window_s,
        "slide_s": slide_s,
        "batch_event_seconds": batch_s,
        "steady_batches_per_delay": measured_batches,
        "state_store": config.spark.state_store,
        "shuffle_partitions": config.spark.shuffle_partitions,
        "model": "keys * ceil((window + delay) / slide)",
        "expected_mean": "keys * (window + delay + batch span) / slide",
        "delays": [asdict(result) for result in results],
    }


def replay_sliding(
    spark: SparkSession, config: PipelineConfig, name: str, interrupts: Interrupts
) -> list[dict[str, Any]]:
    """The app's sliding aggregation over the replay files, to the noop sink in update mode."""
    from stream_pipelines.apps.sensor_aggregation import readings_with_watermark, sliding_window_averages
    from stream_pipelines.driver.runtime import StreamSink, read_raw, start_sink
    from stream_pipelines.inputs.parsing import SENSOR_READING, parse_events, valid_events

    with isolated_run(config, name) as run_config:
        settings = run_config.sensors
        parsed = parse_events(
            read_raw(spark, run_config, [run_config.kafka.topics.sensors]), SENSOR_READING, run_config.quality
        )
        readings = readings_with_watermark(valid_events(parsed, SENSOR_READING), settings.watermark)
        frame = sliding_window_averages(readings, settings.sliding_window, settings.slide)
        sink = StreamSink(name="sliding_state", frame=frame, output_mode="update", format="noop")
        query = start_sink(run_config, registry.app(SENSOR_APP), sink, "available-now")
        await_queries([query], interrupts)
        return batch_progress(query)
