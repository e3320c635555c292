"""The thin edge around the pure transforms: Spark session, sources, sinks, triggers.

Nothing here computes business results; apps compose ``read_raw`` -> pure transforms -> ``StreamSink``
(``file_sink``/``kafka_sink`` take the location from the query's registry declaration), and
``lifecycle.run_streams`` starts them with ``start_sink``. The session's settings come from
``spark_conf``; a dataset's event day is read by ``day_reader``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from stream_pipelines.core import registry
from stream_pipelines.core.config import PipelineConfig, TopicSettings
from stream_pipelines.core.procfs import process_age_s
from stream_pipelines.inputs.parsing import RAW_SCHEMA
from stream_pipelines.launching.spark_conf import spark_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from stream_pipelines.core.registry import App, Query
    from stream_pipelines.launching.submit import TriggerMode

# The master of a session opened in-process on a config whose drivers run in YARN (get_spark).
IN_PROCESS_MASTER = "local[2]"


@dataclass(frozen=True)
class Cleared:
    """What ``clear_scratch`` removed, and what it could not."""

    entries: int = 0
    size: int = 0  # bytes
    failed: tuple[str, ...] = ()

    def describe(self) -> str:
        text = f"cleared {self.entries} entries ({self.size / 1e6:.1f} MB) left by earlier runs"
        return text + (f"; could not remove {', '.join(self.failed)}" if self.failed else "")


def clear_scratch(folder: Path, started_at: float) -> Cleared:
    """Remove what earlier runs left in an app's scratch folder: every entry last changed before
    ``started_at`` (when this driver's JVM started; what it made since is this run's own).

    Only for the lease holder: the lease says no other driver of the app is alive to need them.
    """
    if not folder.is_dir():
        return Cleared()
    entries, size, failed = 0, 0, []
    for entry in sorted(folder.iterdir()):
        try:
            if entry.lstat().st_mtime >= started_at:
                continue
            entry_size = _size(entry)
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except FileNotFoundError:
            continue
        except OSError:
            failed.append(entry.name)
            continue
        entries, size = entries + 1, size + entry_size
    return Cleared(entries, size, tuple(failed))


def _size(entry: Path) -> int:
    if not entry.is_dir() or entry.is_symlink():
        return entry.lstat().st_size
    return sum(path.lstat().st_size for path in entry.rglob("*") if not path.is_dir() or path.is_symlink())


def driver_started_at() -> float:
    """When this driver's JVM started, as a wall-clock time.

    Under spark-submit the JVM came first and started this Python process (so it is the parent, and it
    may already have made its launch folder in the scratch); otherwise the JVM starts later, from here.
    """

    now = time.time()
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return now
    # Without /proc, clear everything: at worst the launcher's folder goes, which it no longer needs.
    jvm_age_s = process_age_s(os.getppid())
    return now if jvm_age_s is None else now - jvm_age_s


def get_spark(config: PipelineConfig, app_name: str, *, own_scratch: bool = False) -> SparkSession:
    """The session for an app; under spark-submit the master and deploy mode come from the launcher.

    ``own_scratch``: a streaming app's driver, whose scratch goes to the app's folder (``scratch_conf``).
    """
    from pyspark.sql import SparkSession

    # Spark's Python planner for data sources ignores spark.pyspark.* and reads only the environment,
    # which the JVM inherits when it starts; without this it falls back to whatever `python3` is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if not under_spark_submit:
        # A session opened in a process of ours, not under spark-submit (the nightly quality gates, the
        # demo's summary): on a config whose drivers run in YARN it runs here, on local cores, reading
        # the same stores, rather than as a client-mode YARN application of the launcher's host.
        builder = builder.master(IN_PROCESS_MASTER if config.drivers_in_cluster else config.spark.master)
    scratch = config.scratch_dir(app_name) if own_scratch else None
    if scratch is not None:
        # It is the JVM's java.io.tmpdir too, which must exist before the JVM unpacks a native library.
        Path(scratch).mkdir(parents=True, exist_ok=True)
    # A driver in its YARN container got every setting from its spark-submit; the launcher's paths (the
    # JVM artifacts, its Python) are not on the node, so nothing is worked out again here.
    in_container = under_spark_submit and config.drivers_in_cluster
    settings = {} if in_container else spark_conf(config, app_name if own_scratch else None)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


# --------------------------------------------------------------------------- sources


def read_raw(
    spark: SparkSession, config: PipelineConfig, topics: Sequence[TopicSettings], *, streaming: bool = True
) -> DataFrame:
    """Raw records (RAW_SCHEMA) from Kafka or from JSON-lines files, as ``source.kind`` says."""
    if config.source.kind == "kafka":
        return _read_kafka(spark, config, topics, streaming=streaming)
    frames = [_read_source_files(spark, config, topic, streaming=streaming) for topic in topics]
    combined = frames[0]
    for frame in frames[1:]:
        combined = combined.unionByName(frame)
    return combined


# A consumer fetches ahead after each poll; at the end of a batch's range the broker holds that fetch
# until data arrives or this wait ends, and the next batch's task must wait it out before it can
# fetch at its own offset: Kafka's default of 500 ms made every read task of every batch that much
# slower (bench-batch-cost). A short wait costs one more empty fetch per task, nothing while idle.
SOURCE_FETCH_MAX_WAIT_MS = 50


def kafka_source_options(config: PipelineConfig, topics: Sequence[TopicSettings]) -> dict[str, str]:
    kafka = config.kafka
    options = {
        "subscribe": ",".join(topic.name for topic in topics),
        "startingOffsets": kafka.starting_offsets,
        "failOnDataLoss": str(kafka.fail_on_data_loss).lower(),
        "kafka.fetch.max.wait.ms": str(SOURCE_FETCH_MAX_WAIT_MS),
        # The deployment's client properties last: a fetch.max.wait.ms of its own wins.
        **_java_client_options(config),
    }
    if kafka.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(kafka.max_offsets_per_trigger)
    return options


def kafka_sink_options(config: PipelineConfig, topic: TopicSettings) -> dict[str, str]:
    return {"topic": topic.name, **_java_client_options(config)}


def _java_client_options(config: PipelineConfig) -> dict[str, str]:
    """The Kafka client's properties as Spark's source and sink take them: ``kafka.<name>``."""
    return {f"kafka.{name}": value for name, value in config.kafka.java_client_properties().items()}


def _read_kafka(
    spark: SparkSession, config: PipelineConfig, topics: Sequence[TopicSettings], *, streaming: bool
) -> DataFrame:
    from pyspark.sql import functions as F

    options = kafka_source_options(config, topics)
    if streaming:
        reader = spark.readStream.format("kafka").options(**options)
    else:
        options.pop("maxOffsetsPerTrigger", None)
        reader = spark.read.format("kafka").options(**options)
    return reader.load().select(
        F.col("key").cast("string").alias("key"),
        "value",
        "topic",
        "partition",
        "offset",
        F.col("timestamp").alias("kafka_timestamp"),
        F.lit(None).cast("string").alias("source_file"),
    )


def _read_source_files(
    spark: SparkSession, config: PipelineConfig, topic: TopicSettings, *, streaming: bool
) -> DataFrame:
    from pyspark.sql import functions as F

    folder = f"{config.project_path(config.source.files_dir).rstrip('/')}/{topic.name}"
    if streaming:
        reader = spark.readStream.format("text")
        if config.source.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", str(config.source.max_files_per_trigger))
    else:
        reader = spark.read.format("text")
    lines = reader.option("pathGlobFilter", "*.jsonl").load(folder)
    return lines.select(
        F.lit(None).cast("string").alias("key"),
        F.col("value").cast("binary").alias("value"),
        F.lit(topic.name).alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.lit(None).cast("long").alias("offset"),
        F.col("_metadata.file_modification_time").alias("kafka_timestamp"),
        F.col("_metadata.file_path").alias("source_file"),
    ).select(*RAW_SCHEMA.fieldNames())


# --------------------------------------------------------------------------- sinks and running


@dataclass
class StreamSink:
    """One streaming query: a DataFrame, where it goes, and how."""

    name: str
    frame: DataFrame
    output_mode: Literal["append", "update", "complete"] = "append"
    format: str = "parquet"
    path: str | None = None
    partition_by: Sequence[str] = ()
    options: dict[str, str] = field(default_factory=dict)
    foreach_batch: Callable[[DataFrame, int], None] | None = None


def file_sink(config: PipelineConfig, query: Query, frame: DataFrame) -> StreamSink:
    """A query appending to its registry dataset (Parquet file sink, exactly once with its checkpoint)."""
    if query.sink is None:
        raise ValueError(f"query {query.name} has no sink dataset in the registry")
    return StreamSink(
        name=query.name,
        frame=frame,
        path=query.sink.location(config),
        partition_by=query.sink.partition_by,
        options=sink_log_options(config, query.sink),
    )


def sink_log_options(config: PipelineConfig, dataset: registry.Dataset) -> dict[str, str]:
    """The file sink's ``retention``: its ``_spark_metadata`` log forgets a file once it is older than
    ``Dataset.sink_log_kept`` (when it next compacts, every 10 batches), so the log lists the last days,
    not all that was ever written. Readers take older days from their compacted files (compaction.py);
    the daily sweep removes a forgotten file once its days are compacted or past the dataset's retention
    (maintenance.py)."""
    return {"retention": f"{dataset.sink_log_kept(config).milliseconds}ms"}


def kafka_sink(
    config: PipelineConfig, query: Query, frame: DataFrame, output_mode: Literal["append", "update"]
) -> StreamSink:
    """A query writing key/value records to its registry sink topic."""
    topic = query.sink_topic_settings(config)
    if topic is None:
        raise ValueError(f"query {query.name} has no sink topic in the registry")
    return StreamSink(
        name=query.name,
        frame=frame,
        output_mode=output_mode,
        format="kafka",
        options=kafka_sink_options(config, topic),
    )


def start_sink(config: PipelineConfig, app: App, sink: StreamSink, trigger: TriggerMode) -> StreamingQuery:
    writer = (
        sink.frame.writeStream.queryName(registry.spark_query_name(app.name, sink.name))
        .outputMode(sink.output_mode)
        .option("checkpointLocation", config.checkpoint_dir(app.name, sink.name))
        .options(**sink.options)
    )
    if sink.foreach_batch is not None:
        writer = writer.foreachBatch(sink.foreach_batch)
    else:
        writer = writer.format(sink.format)
        if sink.path:
            writer = writer.option("path", sink.path)
        if sink.partition_by:
            writer = writer.partitionBy(*sink.partition_by)
    if trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=app.trigger_interval(config).spark())
    return writer.start()


def parse_offsets(value: object) -> dict:
    """A source's start/end/latest offsets as a dict.

    PySpark 4 hands them over as text: JSON from the JVM listener, but Python's repr of a dict when
    the progress came through ``query.lastProgress`` (it applies ``str`` to the parsed JSON).
    """
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    text = str(value)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        import ast

        return ast.literal_eval(text)
