"""Ingest benchmark: how close Spark's Kafka ingest comes to what Kafka itself delivers on this machine.

One run starts a private broker, produces N realistic sensor readings (the generator's payloads, ~1%
malformed) to the ``sensors`` topic, then measures, interleaved round by round so that machine noise
hits every path alike:

  ceiling  Kafka's own consumer benchmark (ConsumerPerformance, i.e. kafka-consumer-perf-test)
  noop     Spark's Kafka source (read_raw) into the noop sink
  parse    read_raw -> parse_events (JSON parse and quality checks, every column kept) into noop
  archive  the raw-archive app's transform and Parquet sink, partitioned exactly as the app does

Each Spark path starts from a fresh checkpoint with an available-now trigger on the project's real
config, and must read exactly N rows. Spark's rate is N over the summed ``triggerExecution`` of its
batches, which leaves out query start-up; the ceiling's rate is the tool's fetch.nMsg.sec, which
leaves out its consumer-group join (Spark's source assigns partitions and never joins a group).

Each round then reads the same N records again in one batch, with no stream, in three steps: the
read alone, the archive's columns added, and the Parquet write partitioned as the app added. The CPU
of the driver JVM (which runs the tasks) per row of each step shows what the archive's rows cost
with no per-batch cost at all.
Results: a table on stdout and JSON in data/bench/ingest.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines.core import registry
from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig
from stream_pipelines.devtools.benchmarks.common import (
    BenchmarkError,
    Interrupts,
    Summary,
    add_results_argument,
    benchmark_parser,
    load_average,
    log,
    machine_info,
    non_negative_int,
    own_spark_jvm_or_fail,
    positive_int,
    private_broker,
    run_and_report,
    stop_session,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stream_pipelines.devtools.generator import Record

APP = "bench_ingest"
DEFAULT_OUT = PROJECT_ROOT / "data" / "bench" / "ingest.json"
DEFAULT_EVENTS = 1_000_000
DEFAULT_REPEATS = 3
PARTITIONS = 3
CEILING = "ceiling"
# The efficiency issue's goal: the raw archive at least this share of Spark's own source-to-noop rate.
GOAL_ARCHIVE_TO_NOOP = 0.8
SPARK_PATHS = ("noop", "parse", "archive")
LABELS = {
    CEILING: "kafka-consumer-perf-test (ceiling)",
    "noop": "Kafka source -> noop",
    "parse": "Kafka source -> JSON parse -> noop",
    "archive": "raw archive -> Parquet",
}
# The one-batch steps, each one more stage of the archive than the one before.
BATCH_STEPS = {
    "read": "Kafka read -> noop",
    "columns": "+ the archive's columns",
    "parquet": "+ Parquet, partitioned as the app",
}
CONSUMER_PERFORMANCE = "org.apache.kafka.tools.ConsumerPerformance"
# kafka-consumer-perf-test.sh runs the tool with this heap; the same keeps the ceiling comparable.
CEILING_HEAP = "512M"
# Readings per second of event time: only shapes timestamps; the run is as long as N requires.
SENSOR_RATE = 2_000.0
# Many sensors so that key hashing spreads records evenly over the partitions; with the generator's
# default 50, one partition can hold noticeably more and the last task of every batch runs alone.
SENSOR_COUNT = 1_000
MEBIBYTE = 1024 * 1024


@dataclass
class Sample:
    """One timed run of one path. ``seconds`` is the engine's own time, ``wall_seconds`` the outside view."""

    path: str
    round: int
    warmup: bool
    rows: int
    seconds: float
    wall_seconds: float
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


@dataclass
class BatchStep:
    """One step of the one-batch decomposition: the driver JVM's CPU and the wall time it took."""

    step: str
    round: int
    warmup: bool
    rows: int
    cpu_seconds: float
    wall_seconds: float

    @property
    def cpu_us_per_row(self) -> float:
        return self.cpu_seconds / self.rows * 1e6


@dataclass
class Dataset:
    events: int
    topic: str
    partitions: int
    bytes_total: int  # keys plus values, as ConsumerPerformance counts them
    value_bytes_total: int
    kinds: dict[str, int]
    produce_seconds: float


# --------------------------------------------------------------------------- data


def produce_dataset(config: PipelineConfig, events: int, interrupts: Interrupts) -> Dataset:
    """Write exactly ``events`` generator sensor readings to the sensors topic, in delivery order."""
    from stream_pipelines.devtools import generator

    topic = config.kafka.topics.sensors
    spec = generator.ScenarioSpec(
        ad_rate=0.0,
        sensor_rate=SENSOR_RATE,
        sensor_count=SENSOR_COUNT,
        # Duplicates and malformed extras add records, so N/rate seconds always yield at least N;
        # the margin covers the deliveries that late records push past the end.
        duration_s=math.ceil(events / SENSOR_RATE) + 60,
        topics=generator.TopicNames(sensors=topic.name),
        partitions=generator.PartitionCounts(sensors=topic.partitions),
    )
    kinds: Counter[str] = Counter()
    sizes = {"key": 0, "value": 0}

    def counted(records: Iterable[Record]) -> Iterator[Record]:
        for record in records:
            kinds[record.kind] += 1
            sizes["key"] += len(record.key.encode()) if record.key else 0
            sizes["value"] += len(record.value)
            yield record

    started = time.monotonic()

    def progress(sent: int) -> None:
        interrupts.check()
        log(f"  produced {sent:,}/{events:,} ({sent / max(time.monotonic() - started, 1e-6):,.0f}/s)")

    sent = generator.produce_to_kafka(
        counted(itertools.islice(generator.iter_generate(spec), events)),
        config.kafka_client_config(),
        progress=progress,
    )
    if sent != events:
        raise BenchmarkError(f"the generator yielded {sent} records, not {events}; lengthen its scenario")
    return Dataset(
        events=events,
        topic=topic.name,
        partitions=topic.partitions,
        bytes_total=sizes["key"] + sizes["value"],
        value_bytes_total=sizes["value"],
        kinds=dict(sorted(kinds.items())),
        produce_seconds=time.monotonic() - started,
    )


# --------------------------------------------------------------------------- the ceiling


def run_ceiling(
    config: PipelineConfig, dataset: Dataset, round_: int, warmup: bool, interrupts: Interrupts
) -> Sample:
    from stream_pipelines.launching import jvm

    command = [
        jvm.java_executable(),
        f"-Xmx{CEILING_HEAP}",
        "-cp",
        jvm.kafka_classpath(),
        CONSUMER_PERFORMANCE,
        "--bootstrap-server",
        config.kafka.bootstrap_servers,
        "--topic",
        dataset.topic,
        "--messages",
        str(dataset.events),
        # A new group each time: no committed offsets, so every run reads the topic from the start.
        "--group",
        f"{APP}-ceiling-{'warmup' if warmup else 'round'}-{round_}",
        "--timeout",
        "60000",
    ]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    # Ctrl-C reaches the tool too; that is an interrupt, not a failed measurement.
    interrupts.check()
    if result.returncode != 0:
        raise BenchmarkError(
            f"{CONSUMER_PERFORMANCE} exited with {result.returncode}:\n"
            f"{(result.stderr or result.stdout)[-3000:]}"
        )
    stats = parse_consumer_performance(result.stdout)
    rows = int(stats["data.consumed.in.nMsg"])
    if rows != dataset.events:
        raise BenchmarkError(f"the ceiling run consumed {rows:,} messages, expected {dataset.events:,}")
    fetch_ms = float(stats["fetch.time.ms"])
    if fetch_ms <= 0:
        raise BenchmarkError(f"the ceiling run reported a fetch time of {fetch_ms} ms; use more --events")
    return Sample(CEILING, round_, warmup, rows, fetch_ms / 1000, wall, detail=stats)


def parse_consumer_performance(output: str) -> dict[str, Any]:
    """The summary line of ConsumerPerformance (run without --show-detailed-stats), keyed by its header."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for index, line in enumerate(lines[:-1]):
        if "nMsg.sec" in line:
            names = [name.strip() for name in line.split(",")]
            values = [value.strip() for value in lines[index + 1].split(",")]
            if len(values) == len(names):
                return {name: _number(value) for name, value in zip(names, values, strict=True)}
    raise BenchmarkError(
        f"could not find the summary in the output of {CONSUMER_PERFORMANCE}:\n{output[-2000:]}"
    )


def _number(text: str) -> float | int | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


# --------------------------------------------------------------------------- the Spark paths


def run_spark_path(
    spark: SparkSession,
    config: PipelineConfig,
    dataset: Dataset,
    path: str,
    round_: int,
    warmup: bool,
    interrupts: Interrupts,
) -> Sample:
    from stream_pipelines.apps.raw_archive import archive_rows
    from stream_pipelines.core.registry import ARCHIVE
    from stream_pipelines.driver.runtime import StreamSink, read_raw, start_sink
    from stream_pipelines.inputs.parsing import SENSOR_READING, parse_events

    run = f"{path}-{'warmup' if warmup else 'round'}-{round_}"
    app = f"{APP}-{run}"
    raw = read_raw(spark, config, [config.kafka.topics.sensors])
    output: Path | None = None
    if path == "noop":
        sink = StreamSink(name=path, frame=raw, format="noop")
    elif path == "parse":
        # Every parsed column goes to the sink, quarantine_reason included, so no part of the parse
        # can be pruned away.
        sink = StreamSink(name=path, frame=parse_events(raw, SENSOR_READING, config.quality), format="noop")
    elif path == "archive":
        output = Path(config.data_path("archive")) / run
        sink = StreamSink(
            name=path, frame=archive_rows(raw), path=str(output), partition_by=ARCHIVE.partition_by
        )
    else:
        raise ValueError(f"unknown path {path!r}")

    started = time.perf_counter()
    # A query of its own under the archive's declaration: its own name, checkpoint and output.
    query = start_sink(config, dataclasses.replace(registry.RAW_ARCHIVE, name=app), sink, "available-now")
    try:
        # Short waits, so that an interrupt is acted on within a second and never inside a py4j call.
        while not query.awaitTermination(0.5):
            interrupts.check()
    finally:
        if query.isActive:
            query.stop()
    wall = time.perf_counter() - started
    if query.exception() is not None:
        raise BenchmarkError(f"the {path} query failed: {query.exception()}")
    progress = list(query.recentProgress)

    shutil.rmtree(config.checkpoint_dir(app, sink.name), ignore_errors=True)
    if output is not None:
        shutil.rmtree(output, ignore_errors=True)

    batch_ids = sorted({int(update["batchId"]) for update in progress})
    if batch_ids != list(range(len(batch_ids))):
        raise BenchmarkError(
            f"the {path} run kept progress for batches {batch_ids[:3]}..{batch_ids[-3:]} only; "
            "spark.sql.streaming.numRecentProgressUpdates is too small for this many batches"
        )
    rows = sum(int(update["numInputRows"]) for update in progress)
    if rows != dataset.events:
        raise BenchmarkError(f"the {path} run read {rows:,} rows, expected exactly {dataset.events:,}")
    durations: Counter[str] = Counter()
    for update in progress:
        durations.update({name: int(ms) for name, ms in update["durationMs"].items()})
    return Sample(
        path,
        round_,
        warmup,
        rows,
        durations["triggerExecution"] / 1000,
        wall,
        detail={"batches": len(batch_ids), "duration_ms_sum": dict(sorted(durations.items()))},
    )


def run_batch_step(
    spark: SparkSession, config: PipelineConfig, dataset: Dataset, step: str, round_: int, warmup: bool
) -> BatchStep:
    """The topic's N records in one batch job, through the first ``step`` stages of the archive."""
    from stream_pipelines.apps.raw_archive import archive_rows
    from stream_pipelines.core.registry import ARCHIVE
    from stream_pipelines.devtools.processes import tree_cpu_seconds
    from stream_pipelines.driver.runtime import read_raw

    jvm = own_spark_jvm_or_fail()
    raw = read_raw(spark, config, [config.kafka.topics.sensors], streaming=False)
    output = Path(config.data_path("archive")) / f"batch-{step}-{round_}"
    cpu_before, started = tree_cpu_seconds(jvm), time.perf_counter()
    if step == "read":
        raw.write.format("noop").mode("overwrite").save()
    elif step == "columns":
        archive_rows(raw).write.format("noop").mode("overwrite").save()
    elif step == "parquet":
        archive_rows(raw).write.partitionBy(*ARCHIVE.partition_by).parquet(str(output))
    else:
        raise ValueError(f"unknown step {step!r}")
    wall = time.perf_counter() - started
    cpu = tree_cpu_seconds(jvm) - cpu_before
    if step == "parquet":
        rows = spark.read.parquet(str(output)).count()
        shutil.rmtree(output, ignore_errors=True)
        if rows != dataset.events:
            raise BenchmarkError(f"the one-batch archive wrote {rows:,} rows, expected {dataset.events:,}")
    return BatchStep(step, round_, warmup, dataset.events, cpu, wall)


def _batches_per_run(config: PipelineConfig, events: int) -> int:
    limit = config.kafka.max_offsets_per_trigger
    return 1 if not limit else math.ceil(events / limit)


# --------------------------------------------------------------------------- orchestration


def run_benchmark(args: argparse.Namespace, interrupts: Interrupts) -> dict[str, Any]:
    from stream_pipelines.driver.runtime import get_spark

    # Taken before anything of ours runs, so it shows what else was keeping the machine busy.
    load_before = load_average()
    overrides = [
        f"kafka.topics.sensors.partitions={PARTITIONS}",
        *args.overrides,
        "kafka.starting_offsets=earliest",
    ]
    with private_broker(args.env, overrides, conf_dir=args.conf_dir, prefix=f"{APP}-") as config:
        log(f"private broker on {config.kafka.bootstrap_servers}, data under {config.paths.data_root}")
        log(f"producing {args.events:,} sensor readings to {config.kafka.topics.sensors.name} ...")
        dataset = produce_dataset(config, args.events, interrupts)
        interrupts.check()
        per_record = dataset.bytes_total / dataset.events
        log(f"produced in {dataset.produce_seconds:.1f}s ({per_record:.0f} B/record)")

        spark = get_spark(config, APP)
        interrupts.install()
        try:
            interrupts.check()
            # The row check needs every batch's progress; Spark keeps only the last 100 by default.
            retained = max(100, _batches_per_run(config, args.events) + 10)
            spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(retained))
            samples: list[Sample] = []
            steps: list[BatchStep] = []
            rounds = [(index, True) for index in range(args.warmup)]
            rounds += [(index, False) for index in range(args.repeats)]
            for round_, warmup in rounds:
                for path in (CEILING, *SPARK_PATHS):
                    name = f"{'warm-up' if warmup else 'round'} {round_ + 1}"
                    log(f"{name}: {LABELS[path]} ...")
                    if path == CEILING:
                        sample = run_ceiling(config, dataset, round_, warmup, interrupts)
                    else:
                        sample = run_spark_path(spark, config, dataset, path, round_, warmup, interrupts)
                    log(f"{name}: {LABELS[path]}: {sample.rows_per_s:,.0f} rows/s ({sample.seconds:.2f}s)")
                    samples.append(sample)
                for step, label in BATCH_STEPS.items():
                    interrupts.check()
                    steps.append(run_batch_step(spark, config, dataset, step, round_, warmup))
                    log(f"{name}: one batch, {label}: {steps[-1].cpu_us_per_row:.2f} CPU us per row")
        finally:
            stop_session(spark)
        results = build_results(config, args, dataset, samples, steps)
        results["load_average"] = {"before": load_before, "after": load_average()}
        return results


def build_results(
    config: PipelineConfig,
    args: argparse.Namespace,
    dataset: Dataset,
    samples: Sequence[Sample],
    steps: Sequence[BatchStep] = (),
) -> dict[str, Any]:
    measured = [sample for sample in samples if not sample.warmup]
    paths: dict[str, dict[str, Any]] = {}
    for path in (CEILING, *SPARK_PATHS):
        runs = [sample for sample in measured if sample.path == path]
        rate = Summary.of(sample.rows_per_s for sample in runs)
        paths[path] = {
            "label": LABELS[path],
            "rows_per_s": rate.as_dict(),
            "mb_per_s_median": rate.median * dataset.bytes_total / dataset.events / MEBIBYTE,
            "seconds": Summary.of(sample.seconds for sample in runs).as_dict(),
            "wall_seconds": Summary.of(sample.wall_seconds for sample in runs).as_dict(),
        }
    ceiling_runs = [sample for sample in measured if sample.path == CEILING]
    ceiling = paths[CEILING]["rows_per_s"]["median"]
    paths[CEILING]["ratio_to_ceiling"] = 1.0
    paths[CEILING]["including_group_join"] = {
        "rows_per_s": Summary.of(float(run.detail["nMsg.sec"]) for run in ceiling_runs).as_dict(),
        "mb_per_s": Summary.of(float(run.detail["MB.sec"]) for run in ceiling_runs).as_dict(),
        "group_join_ms": Summary.of(float(run.detail["rebalance.time.ms"]) for run in ceiling_runs).as_dict(),
    }
    for path in SPARK_PATHS:
        paths[path]["ratio_to_ceiling"] = paths[path]["rows_per_s"]["median"] / ceiling
    return {
        "benchmark": "ingest",
        "archive_to_noop": archive_to_noop(paths),
        "goal": {"archive_to_noop": GOAL_ARCHIVE_TO_NOOP},
        "machine": machine_info(),
        "settings": {
            "events": args.events,
            "repeats": args.repeats,
            "warmup_rounds": args.warmup,
            "env": config.env,
            "topic": dataset.topic,
            "partitions": dataset.partitions,
            "spark_master": config.spark.master,
            "shuffle_partitions": config.spark.shuffle_partitions,
            "driver_memory": config.spark.driver_memory,
            "max_offsets_per_trigger": config.kafka.max_offsets_per_trigger,
            "batches_per_spark_run": _batches_per_run(config, args.events),
            "overrides": list(args.overrides),
        },
        "dataset": asdict(dataset),
        "method": {
            "spark_rows_per_s": "rows / sum of durationMs.triggerExecution over the query's batches",
            "ceiling_rows_per_s": "ConsumerPerformance fetch.nMsg.sec (excludes its consumer-group join)",
            "ratio_to_ceiling": "median rows/s of the path / median rows/s of the ceiling",
            "wall_seconds": "query start() to termination; for the ceiling, the whole java process",
            "order": "per round: ceiling, noop, parse, archive, then the one-batch steps; warm-up rounds "
            "are not in the summaries",
        },
        "paths": paths,
        "one_batch": one_batch(steps),
        "samples": [{**asdict(sample), "rows_per_s": sample.rows_per_s} for sample in samples],
        "one_batch_samples": [asdict(step) for step in steps],
    }


def one_batch(steps: Sequence[BatchStep]) -> dict[str, Any]:
    """Per step, the median CPU per row and wall rows/s of the measured rounds; and the read's CPU per
    row over the archive's (what the archive's share of the read rate would be at equal CPU)."""
    measured = [step for step in steps if not step.warmup]
    figures: dict[str, Any] = {}
    for name, label in BATCH_STEPS.items():
        runs = [step for step in measured if step.step == name]
        if runs:
            figures[name] = {
                "label": label,
                "cpu_us_per_row": Summary.of(step.cpu_us_per_row for step in runs).as_dict(),
                "rows_per_s": Summary.of(step.rows / step.wall_seconds for step in runs).as_dict(),
            }
    if "read" in figures and "parquet" in figures:
        read, archive = (figures[name]["cpu_us_per_row"]["median"] for name in ("read", "parquet"))
        figures["archive_to_read_at_equal_cpu"] = read / archive
    return figures


def archive_to_noop(paths: dict[str, Any]) -> float | None:
    """The raw archive's median rows/s over Spark's source-to-noop median, both from the same run."""
    if "archive" not in paths or "noop" not in paths:
        return None
    return paths["archive"]["rows_per_s"]["median"] / paths["noop"]["rows_per_s"]["median"]


def format_table(results: dict[str, Any]) -> str:
    settings, machine, dataset = results["settings"], results["machine"], results["dataset"]
    paths = results["paths"]
    warmup = f" (+{settings['warmup_rounds']} warm-up)" if settings["warmup_rounds"] else ""
    load = " / ".join(f"{value:.2f}" for value in results["load_average"]["before"]) or "unknown"
    lines = [
        f"Ingest benchmark: {settings['events']:,} sensor readings "
        f"({dataset['bytes_total'] / dataset['events']:.0f} B/record with key) on topic {settings['topic']} "
        f"({settings['partitions']} partitions), {settings['repeats']} rounds{warmup}",
        f"Spark {machine['pyspark']} {settings['spark_master']}, maxOffsetsPerTrigger "
        f"{settings['max_offsets_per_trigger']} ({settings['batches_per_spark_run']} batches per run); "
        f"Kafka {machine['kafka']}; {machine['usable_cpus']} CPUs ({machine['cpu_model']}), "
        f"load average before the run {load}",
        "",
        f"{'path':<37}{'rows/s median':>14}{'min':>12}{'max':>12}{'MB/s':>8}{'vs ceiling':>12}{'wall s':>9}",
    ]
    for entry in paths.values():
        rate = entry["rows_per_s"]
        lines.append(
            f"{entry['label']:<37}{rate['median']:>14,.0f}{rate['min']:>12,.0f}{rate['max']:>12,.0f}"
            f"{entry['mb_per_s_median']:>8.1f}{entry['ratio_to_ceiling']:>11.0%} "
            f"{entry['wall_seconds']['median']:>8.1f}"
        )
    joined = paths[CEILING]["including_group_join"]
    ratio = results.get("archive_to_noop")
    if ratio is not None:
        lines.append(
            f"{'raw archive / Spark source to noop':<37}{ratio:>14.2f}"
            f"{'goal >= ' + format(results['goal']['archive_to_noop'], 'g'):>24}"
        )
    lines += one_batch_lines(results.get("one_batch", {}))
    lines += [
        "",
        f"ceiling = fetch.nMsg.sec; counting the consumer-group join (median "
        f"{joined['group_join_ms']['median'] / 1000:.1f}s) it is "
        f"{joined['rows_per_s']['median']:,.0f} rows/s.",
        "Spark rows/s = rows / summed triggerExecution of the query's batches; wall s = start() to end "
        "(ceiling: whole java process).",
    ]
    return "\n".join(lines)


def one_batch_lines(figures: dict[str, Any]) -> list[str]:
    if "read" not in figures:
        return []
    lines = [
        "",
        "the same records in one batch, no stream (driver JVM CPU, which runs the tasks):",
        f"{'step':<37}{'CPU us/row':>14}{'rows/s':>12}",
    ]
    for name in BATCH_STEPS:
        if name in figures:
            step = figures[name]
            lines.append(
                f"{step['label']:<37}{step['cpu_us_per_row']['median']:>14.2f}"
                f"{step['rows_per_s']['median']:>12,.0f}"
            )
    ratio = figures.get("archive_to_read_at_equal_cpu")
    if ratio is not None:
        lines.append(
            f"{'archive / read at equal CPU':<37}{ratio:>14.2f}"
            "   (the archive's share of the read's rate that its rows' own work allows)"
        )
    return lines


# --------------------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    from stream_pipelines.core.config import add_config_arguments

    parser = benchmark_parser("stream_pipelines.devtools.benchmarks.ingest", __doc__)
    parser.add_argument(
        "--events",
        type=positive_int,
        default=DEFAULT_EVENTS,
        help="records to produce and read (default: 1000000)",
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=DEFAULT_REPEATS, help="measured rounds (default: 3)"
    )
    parser.add_argument(
        "--warmup",
        type=non_negative_int,
        default=1,
        help="unmeasured rounds first, to warm up the JVMs (default: 1)",
    )
    add_results_argument(parser, DEFAULT_OUT)
    # --set can change Spark and Kafka settings; the broker, its ports and the data root are always private.
    add_config_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_and_report("bench-ingest", args, run_benchmark, format_table)


if __name__ == "__main__":
    sys.exit(main())
