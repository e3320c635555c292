"""Every streaming app and every dataset, declared once; everything else reads these declarations.

A ``Dataset`` is a place data lives: its location (a ``paths`` entry plus a sub-folder), its columns,
its partitioning and how to select event day D from it. An ``App`` is a streaming application: its
queries (each with its sink dataset or sink topic, the topics each of its Spark sources reads, its
stateful operators and the settings that shape its state), its trigger, its watermarks per input
stream, its metrics port and the function that builds its queries (``build_sinks``, in its app module).

Checkpoint specs and fingerprints, the metrics exporter, the supervisor DAGs, the demo, the quality
gates and the nightly reconciliation read these. Adding an app: write its module under
``stream_pipelines/apps/`` (pure transforms plus ``build_sinks``), declare it in ``APPS`` below, and
give it a config section with its ``trigger``.

Importing this module is cheap (no pyspark): the DAG files import it when Airflow parses them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from stream_pipelines.core.config import Duration, PipelineConfig, TopicSettings

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType


# --------------------------------------------------------------------------- datasets

# Spark SQL type names used in the column lists below, and the pyspark type each stands for.
# spark-submit's entry points ship inside the package (stream_pipelines.spark_apps): an installed wheel
# finds them beside this module wherever it is installed, never in a source tree.
SPARK_APPS_DIR = Path(__file__).resolve().parents[1] / "spark_apps"


def entry_point(script: str) -> str:
    """The file spark-submit runs for ``script`` (an app's name, ``reconcile`` or ``compact``)."""
    return str(SPARK_APPS_DIR / f"{script}.py")


_SPARK_TYPES = {
    "string": "StringType",
    "binary": "BinaryType",
    "int": "IntegerType",
    "bigint": "LongType",
    "double": "DoubleType",
    "boolean": "BooleanType",
    "timestamp": "TimestampType",
}

DayRule = Literal["event_time", "arrival_window", "partition"]
# The ``retention`` entry (config.RetentionSettings) that says how long a dataset is kept.
RetentionKind = Literal["archive", "outputs", "quarantine", "compliance"]


def struct_type(ddl: str) -> StructType:
    """A schema from Spark DDL of simple types, without a SparkSession (``StructType.fromDDL`` needs one)."""
    from pyspark.sql import types

    fields = []
    for column in ddl.split(","):
        name, _, kind = column.strip().partition(" ")
        if kind.strip() not in _SPARK_TYPES:
            raise ValueError(
                f"column {column.strip()!r}: expected '<name> <type>', type one of {', '.join(_SPARK_TYPES)}"
            )
        fields.append(types.StructField(name, getattr(types, _SPARK_TYPES[kind.strip()])()))
    return types.StructType(fields)


@dataclass(frozen=True)
class Dataset:
    """Where a dataset lives, what it holds, and how day D is selected from it."""

    name: str
    # The ``paths`` entry it lives under, and the folder below that ("" for the entry itself).
    root: str
    folder: str
    # Spark DDL ("name type, ..."), with the simple types of _SPARK_TYPES only.
    schema_ddl: str
    partition_by: tuple[str, ...] = ()
    # event_time: the UTC date of ``day_column`` is D; partition: the ``day_column`` partition is D;
    # arrival_window: arrival days D-1 .. D+late_horizon (the raw archive: events arrive late).
    day_rule: DayRule = "event_time"
    day_column: str = ""
    retention: RetentionKind = "outputs"

    def kept_for(self, config: PipelineConfig) -> Duration | None:
        """How long the dataset's files are kept (None: forever)."""
        return getattr(config.retention, self.retention)

    def sink_log_kept(self, config: PipelineConfig) -> Duration:
        """How long its file sink's log lists a file: ``compaction.sink_log``, or the dataset's own
        retention where that is shorter."""
        kept = self.kept_for(config)
        log = config.compaction.sink_log
        return log if kept is None or log < kept else kept

    def location(self, config: PipelineConfig) -> str:
        base = config.data_path(self.root)
        return f"{base}/{self.folder}" if self.folder else base

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        return tuple((field.name, field.dataType.simpleString()) for field in self.schema().fields)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    def ddl(self) -> str:
        return self.schema_ddl

    def schema(self) -> StructType:
        return struct_type(self.ddl())

    # ------------------------------------------------------------------ compaction units

    def day_units(self, day: date, config: PipelineConfig) -> list[str]:
        """The days of the dataset's own day column that can hold event day D's rows: the units it is
        compacted in (compaction.py), one folder each."""
        if self.day_rule == "arrival_window":
            return arrival_dates(day, config.reconciliation.late_horizon)
        return [day.isoformat()]

    def unit_column(self) -> Column:
        """A row's compaction unit: the UTC date of its day column (YYYY-MM-DD)."""
        from pyspark.sql import functions as F

        if self.day_rule == "event_time":
            return F.to_date(self.day_column).cast("string")
        return F.col(self.day_column).cast("string")

    @property
    def unit_in_path(self) -> bool:
        """A file's unit is in its path (the day column is a partition): no need to open it to know."""
        return self.day_column in self.partition_by

    def unit_of_path(self, name: str) -> str | None:
        """A partitioned file's unit, from its ``<day_column>=<value>`` folder (Spark escapes the value)."""
        from urllib.parse import unquote

        prefix = f"{self.day_column}="
        for part in name.split("/")[:-1]:
            if part.startswith(prefix):
                return unquote(part[len(prefix) :])
        return None

    @staticmethod
    def unit_end(unit: str) -> datetime:
        """The end of a unit's day, UTC."""
        return datetime.combine(date.fromisoformat(unit) + timedelta(days=1), datetime.min.time(), UTC)

    def unit_closes_at(self, unit: str, config: PipelineConfig) -> datetime:
        """When nothing more of ``unit`` can arrive: an arrival day's end; an event day's end plus the
        late horizon (a stream writes a day's rows until its events stop arriving)."""
        end = self.unit_end(unit)
        if self.day_rule == "arrival_window":
            return end
        return end + timedelta(seconds=config.reconciliation.late_horizon.seconds)

    def unit_expired(self, unit: str, config: PipelineConfig, now: float) -> bool:
        """Whether ``unit`` is past the dataset's retention, counted from when it closed."""
        kept = self.kept_for(config)
        return kept is not None and now - self.unit_closes_at(unit, config).timestamp() > kept.seconds

    def day_filter(self, day: date, config: PipelineConfig) -> Column:
        """The condition that selects event day D from this dataset: a row whose unit is one of D's."""
        return self.unit_column().isin(self.day_units(day, config))


def arrival_dates(day: date, horizon: Duration) -> list[str]:
    """The raw archive's arrival days that can hold events of day D: D-1 (clock skew can stamp an event
    after its arrival) through the last day the horizon reaches."""
    last_arrival = arrival_cutoff(day, horizon) - timedelta(microseconds=1)
    return [
        (day + timedelta(days=offset)).isoformat()
        for offset in range(-1, (last_arrival.date() - day).days + 1)
    ]


def arrival_cutoff(day: date, horizon: Duration) -> datetime:
    """Arrivals at or after this moment are outside D's horizon."""
    return datetime.combine(day + timedelta(days=1), datetime.min.time()) + timedelta(seconds=horizon.seconds)


_SENSOR_WINDOW_DDL = (
    "window_start timestamp, window_end timestamp, sensor_id string, avg_temperature double, "
    "max_temperature double, min_temperature double, reading_count bigint, location string, "
    "building string, floor int, known_sensor boolean, metadata_problem string"
)
# As parsing.quarantined_events writes them (parsing.QUARANTINE_SCHEMA is built from this).
_QUARANTINE_DDL = (
    "event_type string, reason string, payload string, raw_value binary, key string, topic string, "
    "partition int, offset bigint, kafka_timestamp timestamp, source_file string, quarantined_at timestamp"
)

ARCHIVE = Dataset(
    "archive",
    "archive",
    "",
    "topic string, partition int, offset bigint, key string, value binary, kafka_timestamp timestamp, "
    "source_file string, archived_at timestamp, arrival_date string",
    partition_by=("topic", "arrival_date"),
    day_rule="arrival_window",
    day_column="arrival_date",
    retention="archive",
)
SENSOR_WINDOWS = Dataset(
    "sensor_windows", "outputs", "sensor_windows", _SENSOR_WINDOW_DDL, day_column="window_start"
)
AD_MATCHES = Dataset(
    "ad_matches",
    "outputs",
    "ad_matches",
    "impression_id string, ad_id string, user_id string, shown_at timestamp, click_id string, "
    "clicked_at timestamp, matched boolean",
    day_column="shown_at",
)
AD_CTR = Dataset(
    "ad_ctr",
    "outputs",
    "ad_ctr",
    "window_start timestamp, window_end timestamp, ad_id string, impressions bigint, clicks bigint, "
    "ctr double",
    day_column="window_start",
)
SENSOR_QUARANTINE, AD_QUARANTINE = (
    Dataset(
        f"{app}_quarantine",
        "quarantine",
        app,
        _QUARANTINE_DDL,
        day_column="kafka_timestamp",
        retention="quarantine",
    )
    for app in ("sensor_aggregation", "ad_matching")
)
COMPLIANCE_WINDOWS = Dataset(
    "compliance_sensor_windows",
    "compliance",
    "sensor_windows",
    f"{_SENSOR_WINDOW_DDL}, event_date string",
    partition_by=("event_date",),
    day_rule="partition",
    day_column="event_date",
    retention="compliance",
)
LATE_EVENT_LEDGER = Dataset(
    "late_event_ledger",
    "compliance",
    "late_event_ledger",
    "query string, event_id string, sensor_id string, event_time timestamp, temperature double, "
    "window_start timestamp, window_end timestamp, arrival_delay_s double, topic string, partition int, "
    "offset bigint, kafka_timestamp timestamp, source_file string, batch_id bigint, "
    "late_filter_watermark timestamp, event_date string",
    partition_by=("event_date",),
    day_rule="partition",
    day_column="event_date",
    retention="compliance",
)

DATASETS: dict[str, Dataset] = {
    dataset.name: dataset
    for dataset in (
        ARCHIVE,
        SENSOR_WINDOWS,
        AD_MATCHES,
        AD_CTR,
        SENSOR_QUARANTINE,
        AD_QUARANTINE,
        COMPLIANCE_WINDOWS,
        LATE_EVENT_LEDGER,
    )
}


# --------------------------------------------------------------------------- apps

# Which input topics one ``read_raw`` call of a query reads (config.kafka.topics attribute names).
TopicRead = tuple[str, ...]


def spark_query_name(app: str, query: str) -> str:
    """The name Spark runs a query under: the ``query`` label of its metrics, the listener's filter."""
    return f"{app}.{query}"


def query_of(spark_name: str) -> str:
    """The query's own name (its sink's) in a name that ``spark_query_name`` made."""
    return spark_name.split(".", 1)[-1]


@dataclass(frozen=True)
class Query:
    """One streaming query of an app: its checkpoint, its sink and what shapes its state."""

    name: str
    # The input topics of each ``read_raw`` call the query's plan makes, in plan order.
    reads: tuple[TopicRead, ...]
    # A file sink's dataset, or None for a Kafka sink (``sink_topic``).
    sink: Dataset | None = None
    sink_topic: str | None = None
    # Stateful operators as Spark 4.1 numbers them, with their state store names (read off real
    # checkpoints of these apps); a reset plants an empty store for each.
    state_layout: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    # The settings that shape the query's state (grouping keys, windows, join), for the fingerprint.
    # Watermark delays are left out on purpose: Spark accepts a changed delay on restart.
    state_shape: Callable[[PipelineConfig], dict[str, Any]] = lambda _config: {}

    @property
    def stateful(self) -> bool:
        return bool(self.state_layout)

    def source_topics(self, config: PipelineConfig) -> tuple[tuple[str, ...], ...]:
        """The topic names each Spark source reads, in the order Spark numbers them (offsets/N lines).

        A Kafka read is one source however many topics it subscribes to; the files source is one
        source per topic folder (``runtime.read_raw`` unions them).
        """
        topics = config.kafka.topics
        sources: list[tuple[str, ...]] = []
        for read in self.reads:
            names = tuple(getattr(topics, attribute).name for attribute in read)
            sources.extend([names] if config.source.kind == "kafka" else [(name,) for name in names])
        return tuple(sources)

    def sink_topic_settings(self, config: PipelineConfig) -> TopicSettings | None:
        return getattr(config.kafka.topics, self.sink_topic) if self.sink_topic else None


@dataclass(frozen=True)
class App:
    """A streaming application, as the lifecycle, the supervisor and the tooling see it."""

    name: str
    description: str
    # The module holding ``build_sinks(spark, config) -> list[StreamSink]`` (imported when needed).
    module: str
    # The config section holding the app's ``trigger`` (and its other settings).
    settings_section: str
    queries: tuple[Query, ...]
    default_metrics_port: int
    # The configured watermark delay of each input stream, by stream name (none for the archive).
    watermarks: Callable[[PipelineConfig], dict[str, Duration]] = lambda _config: {}

    def query(self, name: str) -> Query:
        for query in self.queries:
            if query.name == name:
                return query
        raise KeyError(f"{self.name} has no query {name!r}; its queries: {', '.join(self.query_names)}")

    @property
    def query_names(self) -> tuple[str, ...]:
        return tuple(query.name for query in self.queries)

    @property
    def supervisor_dag_id(self) -> str:
        """The Airflow DAG that keeps this app running (airflow/dags/streaming_supervisors.py)."""
        return f"supervise_{self.name}"

    @property
    def entry_point(self) -> str:
        """The spark-submit script, ``spark_apps/<name>.py`` in the package: it runs ``lifecycle.run_app``."""
        return entry_point(self.name)

    def trigger_interval(self, config: PipelineConfig) -> Duration:
        """How often the app's queries start a batch (its section's ``trigger``); how they run, continuously
        or once over what is there, is the driver's ``TriggerMode``."""
        return getattr(config, self.settings_section).trigger

    def metrics_port(self, config: PipelineConfig) -> int:
        return config.metrics.ports.get(self.name, self.default_metrics_port)

    def source_topic_names(self, config: PipelineConfig) -> set[str]:
        return {name for query in self.queries for source in query.source_topics(config) for name in source}

    def sink_topic_names(self, config: PipelineConfig) -> set[str]:
        return {topic.name for query in self.queries if (topic := query.sink_topic_settings(config))}


def _window_state(column: str, window: Duration, slide: Duration | None = None) -> dict[str, Any]:
    shape = {"watermark_column": column, "grouping_keys": [f"window({column})"], "window": str(window)}
    if slide is not None:
        shape["slide"] = str(slide)
    return shape


def _sensor_window_state(config: PipelineConfig) -> dict[str, Any]:
    shape = _window_state("ts", config.sensors.window)
    shape["grouping_keys"].append("sensor_id")
    return shape


def _sensor_sliding_state(config: PipelineConfig) -> dict[str, Any]:
    shape = _window_state("ts", config.sensors.sliding_window, config.sensors.slide)
    shape["grouping_keys"].append("sensor_id")
    return shape


_AD_INPUTS = {"watermark_columns": ["shown_at", "clicked_at"], "dedup_keys": ["event_id"]}
_JOIN_STORES = (
    "left-keyToNumValues",
    "left-keyWithIndexToValue",
    "right-keyToNumValues",
    "right-keyWithIndexToValue",
)


def _ad_matches_state(config: PipelineConfig) -> dict[str, Any]:
    return {
        **_AD_INPUTS,
        "join": "left outer on ad_id, user_id",
        "join_time_range": f"clicked_at between shown_at and shown_at + {config.ads.match_interval}",
    }


def _ad_ctr_state(config: PipelineConfig) -> dict[str, Any]:
    return {
        **_AD_INPUTS,
        "grouping_keys": ["window(event_time)", "ad_id"],
        "window": str(config.ads.ctr_window),
    }


RAW_ARCHIVE = App(
    name="raw_archive",
    description="every record of every input topic to Parquet, as it arrived, exactly once",
    module="stream_pipelines.apps.raw_archive",
    settings_section="archive",
    queries=(Query("archive", reads=(("sensors", "impressions", "clicks"),), sink=ARCHIVE),),
    default_metrics_port=9401,
)
SENSOR_AGGREGATION = App(
    name="sensor_aggregation",
    description="sensor readings in tumbling (compliance) and sliding (live) event-time windows",
    module="stream_pipelines.apps.sensor_aggregation",
    settings_section="sensors",
    queries=(
        Query(
            "tumbling",
            reads=(("sensors",),),
            sink=SENSOR_WINDOWS,
            state_layout={0: ("default",)},
            state_shape=_sensor_window_state,
        ),
        Query(
            "sliding",
            reads=(("sensors",),),
            sink_topic="sliding_averages",
            state_layout={0: ("default",)},
            state_shape=_sensor_sliding_state,
        ),
        Query("quarantine", reads=(("sensors",),), sink=SENSOR_QUARANTINE),
    ),
    default_metrics_port=9402,
    watermarks=lambda config: {"sensors": config.sensors.watermark},
)
AD_MATCHING = App(
    name="ad_matching",
    description="ad impressions matched to clicks (stream-stream join) and CTR per ad per window",
    module="stream_pipelines.apps.ad_matching",
    settings_section="ads",
    queries=(
        Query(
            "matches",
            reads=(("impressions",), ("clicks",)),
            sink=AD_MATCHES,
            state_layout={0: _JOIN_STORES, 1: ("default",), 2: ("default",)},
            state_shape=_ad_matches_state,
        ),
        Query(
            "ctr",
            reads=(("impressions",), ("clicks",)),
            sink=AD_CTR,
            state_layout={0: ("default",), 1: ("default",), 2: ("default",)},
            state_shape=_ad_ctr_state,
        ),
        Query("quarantine", reads=(("impressions",), ("clicks",)), sink=AD_QUARANTINE),
    ),
    default_metrics_port=9403,
    watermarks=lambda config: {
        "impressions": config.ads.impressions_watermark,
        "clicks": config.ads.clicks_watermark,
    },
)

APPS: dict[str, App] = {app.name: app for app in (RAW_ARCHIVE, SENSOR_AGGREGATION, AD_MATCHING)}
APP_NAMES: tuple[str, ...] = tuple(APPS)


def app(name: str) -> App:
    """The app of that name; a clear error listing the apps otherwise."""
    try:
        return APPS[name]
    except KeyError:
        raise ValueError(f"unknown app {name!r}; the apps are: {', '.join(APP_NAMES)}") from None
