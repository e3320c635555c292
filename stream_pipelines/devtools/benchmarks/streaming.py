"""Streaming benchmark: sustained throughput of both apps, a naive baseline, state rows against delay.

One run starts a private broker and one Spark session, then measures:

State rows against watermark delay. A fixed stream (``--state-keys`` sensors, one reading per sensor
per second, all on time) is written to JSON-lines files of ``--state-batch-seconds`` of event time
each and replayed through the app's sliding-window aggregation (``sliding_window_averages`` after the
app's parse and watermark) with each delay (1, 2, 5 and 10 minutes), one file per micro-batch
(``source.kind=files``, available-now). Files rather than Kafka because they make every batch exactly
the same span of event time, so the runs are deterministic and independent of the machine's speed.
State rows are the stateful operator's ``numRowsTotal`` after each batch; the steady state is the
median over the batches after the state has filled (event time past start + delay + one slide),
over two slides, so that every phase of the slide is sampled equally. The model is
keys x ceil((window + delay) / slide). Spark evicts with the watermark of the previous batch, so a
key holds the windows whose start lies in (t_prev - delay - window, t_now]: on average
(window + delay + batch span) / slide of them, reported as ``expected_mean_rows``.

Sustained throughput. Each app's own queries (``build_sinks``: every sink, as deployed, without the
metrics exporter) run with their configured processing-time trigger while a background thread
produces generator records (event time = now) at a target rate. After a rate change a step waits
until every query has finished a batch that started after it (two after a restart: the cold batch
and the one catching up), then looks at the batches that start within ``--measure-seconds``. It
passes when, for every query of the app, the p95 of ``triggerExecution`` is within the trigger
interval and the backlog does not grow. The backlog is the broker's latest offsets minus the query's
end offsets, sampled as each batch is seen; it "grows" when its least-squares trend over the window
adds up to more than one trigger's worth of input. Rates are chosen by a secant search on the p95
batch duration (aiming at 90% of the trigger), kept inside the bracket of the highest passing and
lowest failing rate, until the bracket is within 15%, the per-search time budget
(``--search-seconds``) runs out, or two passing steps in a row got under 85% of the rate asked of
the producer (it runs in this process, on the same cores as Spark: asking more would measure it, and
the table says the bound is the generator's). After a failed step the queries restart from fresh
checkpoints at the latest offsets, so the next step never inherits the failed step's backlog. The
sustained rate is the highest passing input rate measured on the broker: a lower bound, good to the
bracket.
``--knee`` gives the tuned queries alone the budget to bracket it (up to 14 steps, 30 minutes per
app): the table then names the knee (the highest passing rate and the failing rate above it), or says
that the search stopped first and the figure is a lower bound, with the goal beside the sensor app's.
``maxOffsetsPerTrigger`` is lifted during these runs: in steady state it only binds when
rate x trigger exceeds it, and then the benchmark would measure the cap, not the pipeline.

Naive baseline. The same queries from the same pure transforms, as a tutorial would write them
(a tutorial does not rewrite the transforms) and with the settings a tutorial leaves alone: 200
shuffle partitions and the HDFS-backed state store. Its search starts at the tuned variant's
sustained rate, so both are measured at that same rate; the report gives the ratio of sustained
rates (tuned / naive; a lower bound when the naive variant passed no step) and, at the shared rate,
the ratio of rows processed per second of batch time.

The producer, the broker and Spark share the machine's cores, as they would on any single host.
The generator is not free (about a sixth of a core per 2,000 records/s here); every step records the
CPU this process (the load) took, and a step whose producer fell behind its target is judged at the
rate the broker actually received. Results: a table on stdout, JSON in data/bench/streaming.json and
a plot next to it (streaming.png).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines import registry
from stream_pipelines.config import PROJECT_ROOT, PipelineConfig
from stream_pipelines.devtools.benchmarks.common import (
    BenchmarkError,
    Interrupts,
    add_results_argument,
    await_queries,
    batch_progress,
    benchmark_parser,
    derive_config,
    isolated_run,
    load_average,
    log,
    machine_info,
    positive_float,
    positive_int,
    private_broker,
    run_main,
    stop_session,
    write_results,
)
from stream_pipelines.lifecycle import build_sinks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from stream_pipelines.devtools.generator import Record, ScenarioSpec

DEFAULT_OUT = PROJECT_ROOT / "data" / "bench" / "streaming.json"
SENSOR_APP = "sensor_aggregation"
AD_APP = "ad_matching"
APPS = (SENSOR_APP, AD_APP)
TUNED, NAIVE = "tuned", "naive"
# What a tutorial leaves at Spark's defaults; the transforms themselves stay the same.
NAIVE_OVERRIDES = ("spark.shuffle_partitions=200", "spark.state_store=hdfs")
DELAYS_MINUTES = (1, 2, 5, 10)
PARTITIONS = 3
# Enough sensors and users that key hashing spreads the load over partitions and join keys.
SENSOR_COUNT = 1_000
USER_COUNT = 100_000
# A step passes while the p95 batch stays within the trigger; the search aims a little below.
AIM = 0.9
# The search stops once the highest pass and the lowest failure are this close (ratio - 1).
RESOLUTION = 0.15
# A passing step whose producer sent less than this share of the rate asked was held back by the
# producer (it shares the machine's cores with Spark), not by the app.
GENERATOR_SHORTFALL = 0.85
POLL_S = 0.5
MIN_WINDOW_BATCHES = 2
# Below this the search gives up on finding a passing rate.
MIN_RATE = 10.0
# Sleeping until each record is due costs a wake-up per record at these rates; sends go in bursts
# of this much time instead, which is nothing next to a 10 s trigger.
PACE_SLACK_S = 0.005
SEGMENT_S = 6 * 3600.0
SEED_BASE = 1_000


@dataclass(frozen=True)
class Profile:
    """How long each part runs: the full run (~10 min on 2 idle cores), a quick smoke run, or the knee
    (the tuned queries only, with the budget to bracket the highest sustained rate)."""

    name: str
    measure_s: float  # per rate step, after settling
    search_s: float  # per app and variant, start-up included
    max_steps: int
    state_batch_s: int  # event time per state batch (and per file)
    state_slides: int  # slides of steady state measured per delay
    trigger: str | None  # overrides the apps' triggers when set
    naive: bool = True  # also search the naive variant
    state: bool = True  # also replay state against watermark delay


FULL = Profile(
    "full", measure_s=30, search_s=120, max_steps=4, state_batch_s=60, state_slides=2, trigger=None
)
QUICK = Profile(
    "quick", measure_s=10, search_s=25, max_steps=1, state_batch_s=150, state_slides=1, trigger="5 seconds"
)
KNEE = Profile(
    "knee",
    measure_s=30,
    search_s=1800,
    max_steps=14,
    state_batch_s=60,
    state_slides=2,
    trigger=None,
    naive=False,
    state=False,
)
DEFAULT_START_RATES = {SENSOR_APP: 2_000.0, AD_APP: 1_000.0}
# The efficiency issue's goal for the sensor app: a sustained input rate of at least this, 10 s trigger.
GOAL_SUSTAINED = {SENSOR_APP: 20_000.0}


# --------------------------------------------------------------------------- small helpers


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default); the max of one sample."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = fraction * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def trend(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of y over x; 0 for fewer than two distinct x."""
    if len(points) < 2:
        return 0.0
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def epoch_seconds(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def offsets_by_partition(value: object) -> dict[tuple[str, int], int]:
    """A Kafka source's offsets as {(topic, partition): offset}; empty for other sources or none."""
    from stream_pipelines.runtime import parse_offsets

    parsed = parse_offsets(value) if value not in (None, "None") else {}
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in parsed.items()
        if isinstance(partitions, dict)
        for partition, offset in partitions.items()
    }


def session_settings(spark: SparkSession, config: PipelineConfig) -> dict[str, str | None]:
    """Set the session's SQL settings to ``config``'s and return the previous values.

    Shuffle partitions and the state store provider are read when a query starts from a fresh
    checkpoint, so one session serves both variants.
    """
    from stream_pipelines.runtime import spark_conf

    previous: dict[str, str | None] = {}
    for key, value in spark_conf(config).items():
        if key.startswith("spark.sql.") and spark.conf.get(key, None) != value:
            previous[key] = spark.conf.get(key, None)
            spark.conf.set(key, value)
    return previous


def restore_settings(spark: SparkSession, previous: dict[str, str | None]) -> None:
    for key, value in previous.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


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
    from stream_pipelines.parsing import SENSOR_READING, parse_events, valid_events
    from stream_pipelines.runtime import StreamSink, read_raw, start_sink

    with isolated_run(config, name) as run_config:
        settings = run_config.sensors
        parsed = parse_events(
            read_raw(spark, run_config, [run_config.kafka.topics.sensors]), SENSOR_READING, run_config.quality
        )
        readings = readings_with_watermark(valid_events(parsed, SENSOR_READING), settings.watermark)
        frame = sliding_window_averages(readings, settings.sliding_window, settings.slide)
        sink = StreamSink(name="sliding_state", frame=frame, output_mode="update", format="noop")
        query = start_sink(run_config, SENSOR_APP, sink, "available-now")
        await_queries([query], interrupts)
        return batch_progress(query)


# --------------------------------------------------------------------------- load


class PacedProducer:
    """Generator records into the app's topics at a target rate, from a thread of its own.

    Each rate is a new generator scenario starting now, so event time follows the wall clock, with
    a seed of its own, so event ids never repeat (the ad app drops a repeated id as a duplicate).
    Records are sent when due, by sleeping between bursts: ``produce_to_kafka``'s own real-time mode
    polls in a tight loop when records are due less than a millisecond apart, which would take a
    core away from Spark at these rates.
    """

    def __init__(self, config: PipelineConfig, app: str) -> None:
        self.config = config
        self.app = app
        self.error: BaseException | None = None
        self._rate = 0.0
        self._version = 0
        self._closing = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"producer-{app}", daemon=True)
        self.records_per_event = self._records_per_event()

    def start(self) -> PacedProducer:
        self._thread.start()
        return self

    def set_rate(self, records_per_s: float) -> None:
        """Produce about ``records_per_s`` records per second from now on (0 pauses)."""
        with self._changed:
            self._rate = records_per_s
            self._version += 1
            self._changed.notify_all()

    def check(self) -> None:
        if self.error is not None:
            raise BenchmarkError(f"the producer for {self.app} failed: {self.error}") from self.error

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join(timeout=150)

    def _spec(self, events_per_s: float, seed: int, start: datetime) -> ScenarioSpec:
        from stream_pipelines.devtools import generator

        topics = self.config.kafka.topics
        sensors = self.app == SENSOR_APP
        return generator.ScenarioSpec(
            seed=seed,
            start=start,
            duration_s=SEGMENT_S,
            sensor_rate=events_per_s if sensors else 0.0,
            ad_rate=0.0 if sensors else events_per_s,
            sensor_count=SENSOR_COUNT,
            user_count=USER_COUNT,
            topics=generator.TopicNames(
                sensors=topics.sensors.name, impressions=topics.impressions.name, clicks=topics.clicks.name
            ),
            partitions=generator.PartitionCounts(
                sensors=topics.sensors.partitions,
                impressions=topics.impressions.partitions,
                clicks=topics.clicks.partitions,
            ),
        )

    def _records_per_event(self) -> float:
        """Records per logical event (duplicates, malformed extras, clicks per impression)."""
        from stream_pipelines.devtools import generator

        rate, seconds = 200.0, 120.0
        sample = replace(self._spec(rate, SEED_BASE, datetime.now(UTC)), duration_s=seconds)
        return sum(1 for _ in generator.iter_generate(sample)) / (rate * seconds)

    def _run(self) -> None:
        from stream_pipelines.devtools import generator

        segment = 0
        try:
            while True:
                with self._changed:
                    self._changed.wait_for(lambda: self._rate > 0 or self._closing)
                    if self._closing:
                        return
                    version, rate = self._version, self._rate
                segment += 1
                start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
                spec = self._spec(rate / self.records_per_event, SEED_BASE + segment, start)
                # One-second chunks: the default minute-long ones are generated in one go, a stall of
                # seconds at high rates during which nothing is sent.
                records = (record for chunk in generator.generate_chunks(spec, 1.0) for record in chunk)
                generator.produce_to_kafka(
                    self._paced(records, version),
                    self.config.kafka_client_config(),
                )
        except BaseException as error:  # handed to the main thread by check()
            self.error = error

    def _paced(self, records: Iterator[Record], version: int) -> Iterator[Record]:
        def superseded() -> bool:
            return self._version != version or self._closing

        for record in records:
            # The scenario starts now, so a record's delivery time is the wall-clock time it is due.
            wait = record.delivery_time.timestamp() - time.time()
            if wait > PACE_SLACK_S:
                with self._changed:
                    if self._changed.wait_for(superseded, timeout=wait):
                        return
            elif superseded():
                return
            yield record


class BrokerOffsets:
    """The broker's latest offsets of the app's input topics."""

    def __init__(self, config: PipelineConfig, app: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        topics = config.kafka.topics
        inputs = [topics.sensors] if app == SENSOR_APP else [topics.impressions, topics.clicks]
        self.partitions = [TopicPartition(t.name, p) for t in inputs for p in range(t.partitions)]
        # No subscription, so no group is ever joined; the id only satisfies the client.
        self._consumer = Consumer(
            {
                **config.kafka_client_config(),
                "group.id": "bench-streaming-offsets",
                "enable.auto.commit": False,
            }
        )

    def latest(self) -> dict[tuple[str, int], int]:
        latest = {}
        for partition in self.partitions:
            _, high = self._consumer.get_watermark_offsets(partition, timeout=10, cached=False)
            latest[(partition.topic, partition.partition)] = high
        return latest

    def total(self) -> tuple[float, int]:
        """(when, records on the broker); the time is the middle of the round trips."""
        before = time.time()
        total = sum(self.latest().values())
        return (before + time.time()) / 2, total

    def close(self) -> None:
        self._consumer.close()


# --------------------------------------------------------------------------- the app under load


@dataclass
class Batch:
    query: str
    run: int
    batch_id: int
    started: float  # epoch seconds
    # durationMs as Spark reports it: triggerExecution and its parts (addBatch, queryPlanning, ...)
    durations: dict[str, int]
    rows: int  # from the source offsets
    backlog: int | None  # records behind the broker's latest when the batch was first seen
    seen_at: float
    # What the stateful operators really ran with, as evidence that a variant's settings took hold.
    state: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float:
        """The whole batch: triggerExecution."""
        return self.durations["triggerExecution"] / 1000


def state_operators(update: dict[str, Any]) -> tuple[str, ...]:
    """Each stateful operator as "<name>/<store>/<partitions>"; the store is told by its metrics."""
    described = []
    for operator in update.get("stateOperators") or []:
        metrics = operator.get("customMetrics") or {}
        store = "rocksdb" if any(name.startswith("rocksdb") for name in metrics) else "hdfs"
        described.append(f"{operator['operatorName']}/{store}/{operator['numShufflePartitions']}")
    return tuple(described)


class StepFailed(Exception):
    """A query failed or a batch overran the wait during a rate step."""


def unknown_queries(app: str, names: Sequence[str]) -> str | None:
    """What is wrong with running ``names`` of ``app``'s queries, or None when the app has them all."""
    declared = registry.APPS[app].query_names
    if unknown := sorted(set(names) - set(declared)):
        return f"{app} has no query {', '.join(unknown)}; its queries: {', '.join(declared)}"
    return None


class LoadedApp:
    """The app's queries, restartable from fresh checkpoints, watched batch by batch."""

    def __init__(
        self,
        spark: SparkSession,
        config: PipelineConfig,
        app: str,
        name: str,
        offsets: BrokerOffsets,
        interrupts: Interrupts,
        only: Sequence[str] = (),
    ) -> None:
        """``only`` names the app's queries to run (its registry names); empty runs them all."""
        if problem := unknown_queries(app, only):
            raise BenchmarkError(problem)
        self.spark = spark
        self.config = config
        self.app = app
        self.only = set(only)
        self.name = name
        self.offsets = offsets
        self.interrupts = interrupts
        self.queries: list[StreamingQuery] = []
        self.batches: list[Batch] = []
        self.run = 0
        self._last_seen: dict[str, int] = {}
        self._folders = ExitStack()

    def start(self) -> None:
        from stream_pipelines.runtime import start_sink

        self.run += 1
        run_config = self._folders.enter_context(isolated_run(self.config, f"{self.name}-{self.run}"))
        self._last_seen = {}
        self.queries = [
            start_sink(run_config, self.app, sink, "processing")
            for sink in build_sinks(registry.APPS[self.app], self.spark, run_config)
            if not self.only or sink.name in self.only
        ]

    def stop(self, grace_s: float = 0.0) -> None:
        """Stop the queries, letting a running batch finish for up to ``grace_s`` (an interrupted
        batch only adds error logs)."""
        deadline = time.time() + grace_s
        try:
            for query in self.queries:
                while query.isActive and query.status["isTriggerActive"] and time.time() < deadline:
                    time.sleep(0.2)
                if query.isActive:
                    query.stop()
        finally:
            self.queries = []
            self._folders.close()

    def restart(self, grace_s: float) -> None:
        self.stop(grace_s)
        self.start()

    def poll(self) -> None:
        """Record the batches finished since the last poll; raise StepFailed if a query died."""
        fresh: list[tuple[str, dict[str, Any]]] = []
        for query in self.queries:
            if not query.isActive:
                raise StepFailed(f"query {query.name} stopped: {query.exception()}")
            last = query.lastProgress
            if last is None:
                continue
            name = str(query.name)
            seen = self._last_seen.get(name, -1)
            batch_id = int(last["batchId"])
            if batch_id <= seen:
                continue
            updates = [last] if batch_id == seen + 1 else list(query.recentProgress)
            fresh += [(name, update) for update in updates if int(update["batchId"]) > seen]
            self._last_seen[name] = batch_id
        if not fresh:
            return
        latest = self.offsets.latest()
        now = time.time()
        for name, update in fresh:
            end: dict[tuple[str, int], int] = {}
            rows = 0
            for source in update["sources"]:
                source_end = offsets_by_partition(source["endOffset"])
                source_start = offsets_by_partition(source["startOffset"])
                end.update(source_end)
                rows += sum(offset - source_start.get(key, offset) for key, offset in source_end.items())
            backlog = (
                sum(max(latest.get(key, offset) - offset, 0) for key, offset in end.items()) if end else None
            )
            self.batches.append(
                Batch(
                    query=name,
                    run=self.run,
                    batch_id=int(update["batchId"]),
                    started=epoch_seconds(update["timestamp"]),
                    durations={part: int(ms) for part, ms in update["durationMs"].items()},
                    rows=rows,
                    backlog=backlog,
                    seen_at=now,
                    state=state_operators(update),
                )
            )

    def watch_until(self, deadline: float) -> None:
        while time.time() < deadline:
            self.poll()
            self.interrupts.check()
            time.sleep(min(POLL_S, max(deadline - time.time(), 0.0)))
        self.poll()

    def seen(self, name: str, after: float) -> list[Batch]:
        """This run's batches of one query that started at or after ``after``."""
        return [b for b in self.batches if b.query == name and b.run == self.run and b.started >= after]

    def settle(self, after: float, count: int, timeout_s: float) -> bool:
        """Wait until every query finished ``count`` batches that started after ``after``; False on
        timeout (the step goes on and its window shows whatever is wrong)."""
        deadline = time.time() + timeout_s
        while True:
            self.poll()
            if self.finished_in(after, count):
                return True
            if time.time() > deadline:
                return False
            self.interrupts.check()
            time.sleep(POLL_S)

    def finished_in(self, after: float, count: int) -> bool:
        """Whether every query finished ``count`` batches that started after ``after``."""
        return all(len(self.seen(str(query.name), after)) >= count for query in self.queries)

    def running(self) -> dict[str, int]:
        """{query: last batch id seen} for the queries running a batch now."""
        self.poll()
        return {
            str(query.name): self._last_seen.get(str(query.name), -1)
            for query in self.queries
            if query.status["isTriggerActive"]
        }

    def wait_for(self, running: dict[str, int], timeout_s: float) -> None:
        """Wait until the batches that were running (``running()``) have finished."""
        deadline = time.time() + timeout_s
        while True:
            self.poll()
            pending = [name for name, last in running.items() if self._last_seen.get(name, -1) <= last]
            if not pending:
                return
            if time.time() > deadline:
                raise StepFailed(f"{', '.join(pending)} still ran a batch {timeout_s:.0f}s after the window")
            self.interrupts.check()
            time.sleep(POLL_S)


# --------------------------------------------------------------------------- rate steps and the search


@dataclass
class QueryStep:
    batches: int
    p95_s: float | None
    max_s: float | None
    backlog_growth: float  # records over the window, from the trend
    backlog_last: float | None
    rows: int
    busy_s: float
    # Per batch in the window: start (seconds into the window), duration, rows read, backlog seen.
    detail: list[tuple[float, float, int, int | None]] = field(default_factory=list)
    state_operators: list[str] = field(default_factory=list)


@dataclass
class Step:
    target_rate: float
    input_rate: float  # measured on the broker over the window
    passed: bool
    reason: str
    restarted: bool
    window_s: float
    p95_s: float | None  # worst query
    load_generator_cores: float | None  # CPU the producer (this process) took during the window
    queries: dict[str, QueryStep]
    load_average: list[float]

    @property
    def rows_per_busy_s(self) -> float | None:
        """Rows per second of batch time over the app's queries; None unless every one had batches
        in the window (the cheap ones alone would flatter a variant whose stateful ones stalled)."""
        if not self.queries or any(q.batches == 0 for q in self.queries.values()):
            return None
        rows = sum(q.rows for q in self.queries.values())
        busy = sum(q.busy_s for q in self.queries.values())
        return rows / busy if busy > 0 else None


def run_step(
    app: LoadedApp,
    producer: PacedProducer,
    rate: float,
    trigger_s: float,
    measure_s: float,
    restart: bool,
    interrupts: Interrupts,
) -> Step:
    producer.set_rate(rate)
    if restart:
        app.restart(grace_s=trigger_s)
    changed = time.time()
    failure = None
    before = after = None
    cpu_before = cpu_after = 0.0
    window_start = window_end = changed
    try:
        # The first batch after a change still holds data from before it. After a restart the first
        # batch also pays for planning and cold caches, and the next one catches up on what arrived
        # meanwhile; the window starts once they are done.
        settled = app.settle(changed, 2 if restart else 1, timeout_s=max(6 * trigger_s, measure_s, 60.0))
        if not settled:
            log(f"{app.name}: still settling after the change; measuring anyway")
        window_start = max(time.time(), changed + trigger_s)
        app.watch_until(window_start)
        before = app.offsets.total()
        cpu_before = time.process_time()
        app.watch_until(window_start + measure_s)
        # Batches longer than the window would leave it empty; it stretches until every query has
        # a few, within a cap. A passing step has them long before.
        cap = window_start + max(3 * measure_s, measure_s + 60.0)
        while time.time() < cap and not app.finished_in(window_start, MIN_WINDOW_BATCHES):
            app.watch_until(time.time() + POLL_S)
        window_end = time.time()
        after = app.offsets.total()
        cpu_after = time.process_time()
        app.wait_for(app.running(), timeout_s=max(3 * trigger_s, 30.0))
    except StepFailed as error:
        failure = str(error)
    producer.check()
    interrupts.check()
    input_rate = rate
    load_cores = None
    if before is not None and after is not None and after[0] > before[0]:
        input_rate = (after[1] - before[1]) / (after[0] - before[0])
        # This process is the load: the producer thread, librdkafka's threads and the polling.
        load_cores = (cpu_after - cpu_before) / (after[0] - before[0])

    queries: dict[str, QueryStep] = {}
    for name in sorted({b.query for b in app.batches if b.run == app.run}):
        mine = [
            b
            for b in app.batches
            if b.query == name and b.run == app.run and window_start <= b.started < window_end
        ]
        durations = [b.duration_s for b in mine]
        backlog = [(b.seen_at, float(b.backlog)) for b in mine if b.backlog is not None]
        growth = trend(backlog) * (backlog[-1][0] - backlog[0][0]) if len(backlog) > 1 else 0.0
        queries[name] = QueryStep(
            batches=len(mine),
            p95_s=percentile(durations, 0.95) if durations else None,
            max_s=max(durations) if durations else None,
            backlog_growth=growth,
            backlog_last=backlog[-1][1] if backlog else None,
            rows=sum(b.rows for b in mine),
            busy_s=sum(durations),
            detail=[(round(b.started - window_start, 2), b.duration_s, b.rows, b.backlog) for b in mine],
            state_operators=sorted({operator for b in mine for operator in b.state}),
        )
    worst = max((q.p95_s for q in queries.values() if q.p95_s is not None), default=None)
    reasons = []
    if failure:
        reasons.append(failure)
    for name, query in queries.items():
        short = name.split(".", 1)[-1]
        if query.batches == 0:
            reasons.append(f"{short}: no batch finished in the {window_end - window_start:.0f}s window")
        elif query.p95_s is not None and query.p95_s > trigger_s:
            reasons.append(f"{short}: p95 {query.p95_s:.1f}s > {trigger_s:g}s")
        if query.backlog_growth > input_rate * trigger_s:
            reasons.append(f"{short}: backlog grew by {query.backlog_growth:,.0f}")
    if not queries:
        reasons.append("no batches")
    return Step(
        target_rate=rate,
        input_rate=input_rate,
        passed=not reasons,
        reason="; ".join(reasons) or "ok",
        restarted=restart,
        window_s=window_end - window_start,
        p95_s=worst,
        load_generator_cores=load_cores,
        queries=queries,
        load_average=load_average(),
    )


def generator_bound(steps: Sequence[Step]) -> bool:
    """Whether the last two steps passed with the load generator well short of the rates asked of it:
    then asking more measures the generator, not the app, and the best pass is its lower bound."""
    last = steps[-2:]
    return len(last) == 2 and all(
        step.passed and step.input_rate < GENERATOR_SHORTFALL * step.target_rate for step in last
    )


def propose_rate(steps: Sequence[Step], trigger_s: float) -> float | None:
    """The next rate to try, or None when the bracket is tight enough or the generator is the limit."""
    if generator_bound(steps):
        return None
    passed = [step.input_rate for step in steps if step.passed]
    failed = [step.input_rate for step in steps if not step.passed]
    low = max(passed, default=None)
    high = min(failed, default=None)
    if low is not None and high is not None and high <= low * (1 + RESOLUTION):
        return None
    if len(steps) >= 2 and not steps[-1].passed and not steps[-2].passed:
        (slower, faster) = sorted(steps[-2:], key=lambda step: step.input_rate)
        if (
            slower.p95_s is not None
            and faster.p95_s is not None
            and faster.input_rate > 1.5 * slower.input_rate
            and faster.p95_s < 1.25 * slower.p95_s
        ):
            # Batches barely got shorter at a much lower rate: their fixed cost alone is over the
            # trigger, and no rate passes.
            return None
    target = AIM * trigger_s
    points = sorted(
        {(step.input_rate, step.p95_s) for step in steps if step.p95_s is not None},
        key=lambda p: abs(p[1] - target),
    )
    last = steps[-1].input_rate
    guess = None
    if len(points) >= 2 and points[0][0] != points[1][0]:
        (r1, d1), (r2, d2) = points[:2]
        slope = (d2 - d1) / (r2 - r1)
        if slope > 0:
            guess = r1 + (target - d1) / slope
    if guess is None and points:
        rate, duration = points[0]
        # Batch time proportional to rate: optimistic, as it ignores the fixed cost of a batch.
        guess = rate * target / duration if duration > 0 else rate * 4
    if guess is None:
        guess = last / 2 if not steps[-1].passed else last * 2
    guess = min(max(guess, last / 4), last * 4)
    if (
        low is not None
        and high is not None
        and not low * (1 + RESOLUTION / 2) < guess < high / (1 + RESOLUTION / 2)
    ):
        guess = math.sqrt(low * high)
    elif low is not None and guess <= low * (1 + RESOLUTION):
        guess = low * (1 + 2 * RESOLUTION)
    elif high is not None and guess >= high / (1 + RESOLUTION):
        guess = high / (1 + 2 * RESOLUTION)
    return guess if guess >= MIN_RATE else None


@dataclass
class Search:
    app: str
    variant: str
    trigger_s: float
    steps: list[Step]
    seconds: float
    load_average_before: list[float]
    load_average_after: list[float]

    @property
    def sustained(self) -> Step | None:
        return max((step for step in self.steps if step.passed), key=lambda s: s.input_rate, default=None)

    @property
    def lowest_failure(self) -> Step | None:
        return min((step for step in self.steps if not step.passed), key=lambda s: s.input_rate, default=None)


def search_sustained(
    spark: SparkSession,
    config: PipelineConfig,
    app: str,
    variant: str,
    start_rate: float,
    profile: Profile,
    interrupts: Interrupts,
) -> Search:
    trigger_s = registry.app(app).trigger_interval(config).seconds
    started = time.monotonic()
    load_before = load_average()
    offsets = BrokerOffsets(config, app)
    producer = PacedProducer(config, app).start()
    loaded = LoadedApp(spark, config, app, f"{app}-{variant}", offsets, interrupts)
    previous = session_settings(spark, config)
    steps: list[Step] = []
    try:
        rate: float | None = start_rate
        # The first step starts the queries, and settles as long as after a restart.
        restart = True
        # A step takes its settling triggers, the window and about one batch to finish.
        step_s = profile.measure_s + 3 * trigger_s
        while rate is not None and len(steps) < profile.max_steps:
            if steps and time.monotonic() - started + step_s > profile.search_s:
                break
            log(f"{app} {variant}: {rate:,.0f} records/s for {profile.measure_s:g}s ...")
            step = run_step(loaded, producer, rate, trigger_s, profile.measure_s, restart, interrupts)
            steps.append(step)
            worst = "n/a" if step.p95_s is None else f"{step.p95_s:.1f}s"
            log(
                f"{app} {variant}: {step.input_rate:,.0f} records/s in: p95 batch {worst} -> "
                f"{'pass' if step.passed else 'FAIL'} ({step.reason})"
            )
            # A failed step leaves a backlog (or a long batch) behind; start the next from scratch.
            restart = not step.passed
            rate = propose_rate(steps, trigger_s)
    finally:
        producer.close()
        try:
            loaded.stop(grace_s=trigger_s)
        finally:
            offsets.close()
            restore_settings(spark, previous)
    producer.check()
    check_settings_took_hold(config, app, variant, steps)
    return Search(
        app=app,
        variant=variant,
        trigger_s=trigger_s,
        steps=steps,
        seconds=time.monotonic() - started,
        load_average_before=load_before,
        load_average_after=load_average(),
    )


def check_settings_took_hold(config: PipelineConfig, app: str, variant: str, steps: Sequence[Step]) -> None:
    """The variants differ only in session settings; make sure the queries really ran with them."""
    expected = f"/{config.spark.state_store}/{config.spark.shuffle_partitions}"
    seen = {
        operator for step in steps for query in step.queries.values() for operator in query.state_operators
    }
    wrong = sorted(operator for operator in seen if not operator.endswith(expected))
    if wrong:
        raise BenchmarkError(f"{app} {variant}: state operators ran as {wrong}, expected *{expected}")


# --------------------------------------------------------------------------- orchestration


def run_benchmark(args: argparse.Namespace, interrupts: Interrupts) -> dict[str, Any]:
    from stream_pipelines.runtime import get_spark

    load_before = load_average()
    profile = QUICK if args.quick else KNEE if args.knee else FULL
    profile = Profile(
        **{
            **asdict(profile),
            **({"measure_s": args.measure_seconds} if args.measure_seconds else {}),
            **({"search_s": args.search_seconds} if args.search_seconds else {}),
            **({"max_steps": args.max_steps} if args.max_steps else {}),
            **({"state_batch_s": args.state_batch_seconds} if args.state_batch_seconds else {}),
        }
    )
    triggers = (
        [f"{section}.trigger={profile.trigger}" for section in ("sensors", "ads")] if profile.trigger else []
    )
    overrides = [
        *(f"kafka.topics.{topic}.partitions={PARTITIONS}" for topic in ("sensors", "impressions", "clicks")),
        *triggers,
        *args.overrides,
        "metrics.enabled=false",
    ]
    started = time.monotonic()
    with private_broker(args.env, overrides, conf_dir=args.conf_dir, prefix="bench_streaming-") as config:
        log(f"private broker on {config.kafka.bootstrap_servers}, data under {config.paths.data_root}")
        spark = get_spark(config, "bench_streaming")
        interrupts.install()
        try:
            interrupts.check()
            spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "1000")
            state = None
            if profile.state and not args.skip_state:
                state = run_state_vs_delay(spark, config, profile, args.state_keys, interrupts)
            load_config = derive_config(
                config, ["kafka.starting_offsets=latest", "kafka.max_offsets_per_trigger=null"]
            )
            variants = {
                TUNED: load_config,
                NAIVE: derive_config(load_config, list(NAIVE_OVERRIDES)),
            }
            searches: dict[str, dict[str, Search]] = defaultdict(dict)
            for app in args.apps:
                start_rate = args.start_rate.get(app, DEFAULT_START_RATES[app])
                tuned = search_sustained(spark, variants[TUNED], app, TUNED, start_rate, profile, interrupts)
                searches[app][TUNED] = tuned
                if not profile.naive:
                    continue
                # The naive variant starts where the tuned one ended, so both meet at that rate.
                shared = tuned.sustained.input_rate if tuned.sustained else start_rate
                searches[app][NAIVE] = search_sustained(
                    spark, variants[NAIVE], app, NAIVE, shared, profile, interrupts
                )
        finally:
            stop_session(spark)
        results = build_results(config, variants, args, profile, state, searches)
    results["seconds"] = time.monotonic() - started
    results["load_average"] = {"before": load_before, "after": load_average()}
    return results


def compare(searches: dict[str, Search]) -> dict[str, Any] | None:
    if NAIVE not in searches:
        return None
    tuned, naive = searches[TUNED], searches[NAIVE]
    best, naive_best = tuned.sustained, naive.sustained
    comparison: dict[str, Any] = {"sustained_ratio": None, "sustained_ratio_is_lower_bound": False}
    if best is not None and naive_best is not None:
        comparison["sustained_ratio"] = best.input_rate / naive_best.input_rate
    elif best is not None and naive.lowest_failure is not None:
        # The naive variant sustains less than the lowest rate it was tried at.
        comparison["sustained_ratio"] = best.input_rate / naive.lowest_failure.input_rate
        comparison["sustained_ratio_is_lower_bound"] = True
    # The shared rate: the naive search's first step ran at the tuned variant's best (or, if the
    # tuned variant passed nothing, at the rate both started at).
    reference = best or (tuned.steps[0] if tuned.steps else None)
    if reference is not None and naive.steps:
        first = naive.steps[0]
        tuned_rate, naive_rate = reference.rows_per_busy_s, first.rows_per_busy_s
        comparison["shared_rate"] = {
            "tuned_input_rate": reference.input_rate,
            "naive_input_rate": first.input_rate,
            "tuned_passed": reference.passed,
            "naive_passed": first.passed,
            "tuned_p95_s": reference.p95_s,
            "naive_p95_s": first.p95_s,
            "naive_window_s": first.window_s,
            "tuned_rows_per_busy_s": tuned_rate,
            "naive_rows_per_busy_s": naive_rate,
            "rows_per_busy_s_ratio": tuned_rate / naive_rate if tuned_rate and naive_rate else None,
        }
    return comparison


def knee(search: Search) -> dict[str, Any]:
    """The highest passing rate, and whether a failing rate above it brackets it (the knee) or the
    search stopped first (a lower bound only)."""
    best = search.sustained
    above = [
        step
        for step in search.steps
        if not step.passed and (best is None or step.input_rate > best.input_rate)
    ]
    failure = min(above, key=lambda step: step.input_rate, default=None)
    return {
        "rate": best.input_rate if best else None,
        "p95_s": best.p95_s if best else None,
        "load_generator_cores": best.load_generator_cores if best else None,
        "fails_at": failure.input_rate if failure else None,
        "bracketed": best is not None and failure is not None,
        "bracket": failure.input_rate / best.input_rate - 1 if best and failure else None,
        "generator_bound": failure is None and generator_bound(search.steps),
        "asked_up_to": max((step.target_rate for step in search.steps), default=None),
        "goal": GOAL_SUSTAINED.get(search.app),
    }


def knee_line(app: str, search: dict[str, Any]) -> str:
    found = search["knee"]
    goal = f"   goal >= {found['goal']:,.0f}/s" if found["goal"] else ""
    if found["rate"] is None:
        failed = shown(found["fails_at"], ",.0f")
        return f"{app}: no rate passed (lowest tried failed at {failed}/s){goal}"
    load = shown(found["load_generator_cores"], ".2f", " cores")
    if found["bracketed"]:
        return (
            f"{app} knee: sustains {found['rate']:,.0f}/s (p95 {shown(found['p95_s'], '.1f')}s), fails at "
            f"{found['fails_at']:,.0f}/s, a bracket of {found['bracket']:.0%}; the load generator took {load}"
            f"{goal}"
        )
    if found.get("generator_bound"):
        return (
            f"{app}: at least {found['rate']:,.0f}/s (p95 {shown(found['p95_s'], '.1f')}s); the load "
            f"generator sent no faster though asked up to {found['asked_up_to']:,.0f}/s (it took {load}), so "
            f"this is a lower bound set by the generator, not the knee{goal}"
        )
    return (
        f"{app}: at least {found['rate']:,.0f}/s; no higher rate failed within {search['seconds']:.0f}s, so "
        f"this is a lower bound, not the knee{goal}"
    )


def search_summary(search: Search) -> dict[str, Any]:
    best, failure = search.sustained, search.lowest_failure
    return {
        "trigger_s": search.trigger_s,
        "knee": knee(search),
        "sustained_rate": best.input_rate if best else None,
        "sustained_p95_s": best.p95_s if best else None,
        "lowest_failing_rate": failure.input_rate if failure else None,
        "seconds": search.seconds,
        "load_average_before": search.load_average_before,
        "load_average_after": search.load_average_after,
        "steps": [{**asdict(step), "rows_per_busy_s": step.rows_per_busy_s} for step in search.steps],
    }


def build_results(
    config: PipelineConfig,
    variants: dict[str, PipelineConfig],
    args: argparse.Namespace,
    profile: Profile,
    state: dict[str, Any] | None,
    searches: dict[str, dict[str, Search]],
) -> dict[str, Any]:
    throughput = {
        app: {
            **{variant: search_summary(search) for variant, search in by_variant.items()},
            "comparison": compare(by_variant),
        }
        for app, by_variant in searches.items()
    }
    return {
        "benchmark": "streaming",
        "machine": machine_info(),
        "settings": {
            "profile": asdict(profile),
            "env": config.env,
            "apps": list(args.apps),
            "spark_master": config.spark.master,
            "driver_memory": config.spark.driver_memory,
            "triggers": {app: str(registry.app(app).trigger_interval(config)) for app in APPS},
            "variants": {
                name: {
                    "shuffle_partitions": variant.spark.shuffle_partitions,
                    "state_store": variant.spark.state_store,
                    "changelog_checkpointing": variant.spark.changelog_checkpointing,
                }
                for name, variant in variants.items()
            },
            "configured_max_offsets_per_trigger": config.kafka.max_offsets_per_trigger,
            "partitions": PARTITIONS,
            "sensor_count": SENSOR_COUNT,
            "user_count": USER_COUNT,
            "state_keys": args.state_keys,
            "overrides": list(args.overrides),
        },
        "method": {
            "rate": "input records/s measured on the broker over the step's window (all input topics)",
            "pass": "every query: p95 triggerExecution <= trigger and backlog trend over the window "
            "<= one trigger of input",
            "sustained_rate": "highest passing rate; lowest_failing_rate bounds it from above",
            "sustained_ratio": "tuned sustained / naive sustained (lower bound if the naive passed no step)",
            "rows_per_busy_s_ratio": "at the shared rate: rows / summed triggerExecution, tuned over naive",
            "state_rows": "median numRowsTotal over the steady batches; ratio = median / model",
            "max_offsets_per_trigger": "lifted (null) for the throughput runs",
        },
        "state_vs_delay": state,
        "throughput": throughput,
    }


def shown(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def format_table(results: dict[str, Any]) -> str:
    machine, settings = results["machine"], results["settings"]
    load = " / ".join(f"{value:.2f}" for value in results["load_average"]["before"]) or "unknown"
    load_after = " / ".join(f"{value:.2f}" for value in results["load_average"]["after"]) or "unknown"
    lines = [
        f"Streaming benchmark ({settings['profile']['name']}, {results['seconds'] / 60:.1f} min): "
        f"Spark {machine['pyspark']} {settings['spark_master']}, Kafka {machine['kafka']}; "
        f"{machine['usable_cpus']} CPUs ({machine['cpu_model']}); load average before {load}, "
        f"after {load_after}",
    ]
    state = results["state_vs_delay"]
    if state:
        lines += [
            "",
            f"State rows vs watermark delay: {state['keys']} sensors, sliding {state['window_s'] / 60:g} min "
            f"every {state['slide_s'] / 60:g} min, {state['batch_event_seconds']}s of event time per batch, "
            f"{state['state_store']} store; median of {state['steady_batches_per_delay']} steady batches",
            f"{'delay':>7}{'model':>8}{'measured':>10}{'ratio':>7}{'mean':>8}{'ratio':>7}{'min':>6}{'max':>6}"
            f"{'expected mean':>15}",
        ]
        for delay in state["delays"]:
            lines.append(
                f"{delay['delay_minutes']:>5g} m{delay['model_rows']:>8}{delay['measured_median']:>10g}"
                f"{delay['ratio']:>7.2f}{delay['measured_mean']:>8.1f}{delay['mean_ratio']:>7.2f}"
                f"{delay['measured_min']:>6}{delay['measured_max']:>6}{delay['expected_mean_rows']:>15.1f}"
            )
        lines.append(
            "model = keys x ceil((window + delay) / slide); expected mean = keys x (window + delay + batch "
            "span) / slide"
        )
    throughput = results["throughput"]
    if throughput:
        variants = settings["variants"]
        searched = [
            variant for variant in (TUNED, NAIVE) if any(variant in entry for entry in throughput.values())
        ]
        lines += [
            "",
            "Sustained throughput (input records/s; p95 batch <= trigger, backlog not growing): "
            + "; ".join(
                f"{variant} = {variants[variant]['shuffle_partitions']} shuffle partitions, "
                f"{variants[variant]['state_store']}"
                for variant in searched
            ),
            f"{'app':<20}{'variant':<8}{'trigger':>8}{'sustained':>11}{'p95 s':>7}{'fails at':>10}"
            f"{'steps':>6}{'load after':>12}",
        ]
        for app, entry in throughput.items():
            for variant in searched:
                search = entry[variant]
                load_now = search["load_average_after"][0] if search["load_average_after"] else None
                sustained = shown(search["sustained_rate"], ",.0f")
                failing = shown(search["lowest_failing_rate"], ",.0f")
                lines.append(
                    f"{app:<20}{variant:<8}{search['trigger_s']:>7g}s{sustained:>11}"
                    f"{shown(search['sustained_p95_s'], '.1f'):>7}{failing:>10}"
                    f"{len(search['steps']):>6}{shown(load_now, '.2f'):>12}"
                )
        lines.append("")
        for app, entry in throughput.items():
            lines.append(knee_line(app, entry[TUNED]))
            comparison = entry["comparison"]
            if comparison is None:
                continue
            bound = ">" if comparison["sustained_ratio_is_lower_bound"] else ""
            line = (
                f"{app}: sustained tuned / naive = {bound}{shown(comparison['sustained_ratio'], '.2f', 'x')}"
            )
            shared = comparison.get("shared_rate")
            if shared:
                naive_p95 = shown(shared["naive_p95_s"], ".1f", "s")
                if not shared["naive_passed"] and shared["naive_p95_s"] is None:
                    naive_p95 = f"none finished in {shared['naive_window_s']:.0f}s"
                line += (
                    f"; at {shared['tuned_input_rate']:,.0f}/s p95 tuned "
                    f"{shown(shared['tuned_p95_s'], '.1f', 's')}, naive {naive_p95}; rows per busy second "
                    f"tuned / naive {shown(shared['rows_per_busy_s_ratio'], '.2f', 'x')}"
                )
            lines.append(line)
        lines.append("Every step's queries, batch counts and reasons are in the JSON.")
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> Path:
    # The object API with no pyplot: no global backend or figure state to set or leak.
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 4.5), layout="constrained")
    left, right = figure.subplots(1, 2)
    state = results["state_vs_delay"]
    if state:
        delays = [d["delay_minutes"] for d in state["delays"]]
        left.plot(
            delays, [d["model_rows"] for d in state["delays"]], "o--", label="model: keys x ceil((w+d)/s)"
        )
        left.plot(
            delays,
            [d["expected_mean_rows"] for d in state["delays"]],
            ":",
            label="expected mean (w+d+batch)/s",
        )
        medians = [d["measured_median"] for d in state["delays"]]
        errors = [
            [m - d["measured_min"] for m, d in zip(medians, state["delays"], strict=True)],
            [d["measured_max"] - m for m, d in zip(medians, state["delays"], strict=True)],
        ]
        left.errorbar(delays, medians, yerr=errors, fmt="s-", capsize=4, label="measured median (min-max)")
        left.plot(
            delays,
            [d["measured_mean"] for d in state["delays"]],
            "x",
            color="black",
            zorder=3,
            label="measured mean",
        )
        left.set_xlabel("watermark delay (minutes)")
        left.set_ylabel("state rows (numRowsTotal)")
        left.set_title(f"Sliding-window state, {state['keys']} keys")
        left.set_xticks(delays)
        left.legend(fontsize="small")
        left.grid(alpha=0.3)
    throughput = results["throughput"]
    if throughput:
        apps = list(throughput)
        searched = [variant for variant in (TUNED, NAIVE) if all(variant in throughput[app] for app in apps)]
        width = 0.76 / len(searched)
        for index, variant in enumerate(searched):
            offset = (index - (len(searched) - 1) / 2) * width
            heights = [throughput[app][variant]["sustained_rate"] or 0 for app in apps]
            bars = right.bar([i + offset for i in range(len(apps))], heights, width, label=variant)
            for bar, app in zip(bars, apps, strict=True):
                entry = throughput[app][variant]
                if entry["sustained_rate"]:
                    label = f"{entry['sustained_rate']:,.0f}"
                elif entry["lowest_failing_rate"]:
                    label = f"< {entry['lowest_failing_rate']:,.0f}"
                else:
                    label = "n/a"
                right.annotate(
                    label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom"
                )
        entries = [throughput[app][variant] for app in apps for variant in searched]
        highest = max(entry["sustained_rate"] or entry["lowest_failing_rate"] or 0 for entry in entries)
        # Headroom for the labels; a chart of nothing but "< x" bars is scaled to the x.
        right.set_ylim(0, max(highest, 1.0) * 1.15)
        right.set_xticks(range(len(apps)), apps)
        right.set_ylabel("sustained input records/s")
        right.set_title("Sustained throughput (p95 batch <= trigger)")
        right.legend()
        right.grid(axis="y", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return path


# --------------------------------------------------------------------------- entry point


def start_rates(text: str) -> dict[str, float]:
    """``app=rate,app=rate``."""
    rates = {}
    for item in text.split(","):
        app, _, rate = item.partition("=")
        if app.strip() not in APPS:
            raise argparse.ArgumentTypeError(f"unknown app {app.strip()!r}; use {', '.join(APPS)}")
        rates[app.strip()] = positive_float(rate)
    return rates


def build_parser() -> argparse.ArgumentParser:
    from stream_pipelines.config import add_config_arguments

    parser = benchmark_parser("stream_pipelines.devtools.benchmarks.streaming", __doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run of a few minutes: 5 s triggers, one rate step per variant, coarse state batches",
    )
    mode.add_argument(
        "--knee",
        action="store_true",
        help="find each app's knee: the tuned queries only, up to 14 rate steps within 30 min per app, "
        "no naive variant and no state replay",
    )
    parser.add_argument(
        "--apps", nargs="+", choices=APPS, default=list(APPS), help="apps to load (default: both)"
    )
    parser.add_argument(
        "--start-rate",
        type=start_rates,
        default={},
        metavar="APP=RATE,...",
        help="first rate per app, records/s (default: "
        + ", ".join(f"{app}={rate:g}" for app, rate in DEFAULT_START_RATES.items())
        + ")",
    )
    parser.add_argument(
        "--measure-seconds", type=positive_float, help="window per rate step (full: 30, quick: 10)"
    )
    parser.add_argument(
        "--search-seconds", type=positive_float, help="time budget per app and variant (full: 120, quick: 25)"
    )
    parser.add_argument(
        "--max-steps", type=positive_int, help="rate steps per app and variant (full: 4, quick: 1)"
    )
    parser.add_argument(
        "--state-keys", type=positive_int, default=50, help="sensors in the state replay (default: 50)"
    )
    parser.add_argument(
        "--state-batch-seconds",
        type=positive_int,
        help="event time per state batch; must divide the slide (full: 60, quick: 150)",
    )
    parser.add_argument("--skip-state", action="store_true", help="leave out the state-vs-delay replays")
    add_results_argument(parser, DEFAULT_OUT)
    parser.add_argument("--plot", type=Path, help="plot PNG (default: the JSON's path with .png)")
    # --set can change Spark and Kafka settings; the broker, its ports and the data root are always private.
    add_config_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def finish(results: dict[str, Any]) -> int:
        print(format_table(results))
        out = write_results(args.out, results)
        picture = plot(results, args.plot or args.out.with_suffix(".png"))
        print(f"results: {out}, plot: {picture}")
        return 0

    return run_main("bench-streaming", lambda interrupts: run_benchmark(args, interrupts), finish)


if __name__ == "__main__":
    sys.exit(main())
