"""One typed configuration for every app, DAG and command, selected by environment.

Sources, lowest precedence first:
  1. ``conf/<env>.yaml`` (``env`` from ``--env``, else ``PIPELINE_ENV``, else ``local``);
  2. environment variables ``PIPELINE__<SECTION>__<KEY>=value`` (double underscores separate levels);
  3. ``--set section.key=value`` on the command line.
Override values are read as YAML scalars, so ``--set kafka.max_offsets_per_trigger=500`` is an int.
``${VAR}`` inside any string is replaced from the environment; that is the only way secrets enter.
Everything is validated at load time and errors name the key and the problem.

``PIPELINE_ENVIRONMENT_FILE`` names a JSON object of variables layered over the process's environment:
how a driver in a YARN container reads the variables its launcher's config read
(``launching/driver_bundle.py``), without them on a command line or in the container's launch script.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from stream_pipelines.core.kafka_security import KafkaSecurity, refuse_security_properties
from stream_pipelines.core.store import DEFAULT_FS, SERVED_SCHEMES, STORED_PATHS, StoreError, s3_options

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONF_DIR = PROJECT_ROOT / "conf"
ENV_VARIABLE = "PIPELINE_ENV"
CONF_DIR_VARIABLE = "PIPELINE_CONF_DIR"
OVERRIDE_PREFIX = "PIPELINE__"
ENVIRONMENT_FILE_VARIABLE = "PIPELINE_ENVIRONMENT_FILE"
# The ``paths`` entries that live on the host, never on the shared store.
LOCAL_PATHS = ("scratch", "broker", "hdfs", "yarn")
# A config file's top-level key naming the file it extends (``base: local``): its sections are merged
# over that file's, key by key.
BASE_KEY = "base"


class ConfigError(ValueError):
    """A configuration problem, phrased for the person who has to fix it."""


# --------------------------------------------------------------------------- durations

_UNIT_SECONDS = {
    "millisecond": 0.001,
    "ms": 0.001,
    "second": 1,
    "sec": 1,
    "s": 1,
    "minute": 60,
    "min": 60,
    "m": 60,
    "hour": 3600,
    "h": 3600,
    "day": 86400,
    "d": 86400,
}
_DURATION_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")


@dataclass(frozen=True, order=True)
class Duration:
    """A length of time written the way Spark writes intervals: ``"2 minutes"``."""

    seconds: float

    @classmethod
    def parse(cls, text: object) -> Duration:
        if isinstance(text, Duration):
            return text
        if isinstance(text, bool) or not isinstance(text, str | int | float):
            raise ValueError(f"expected a duration such as '2 minutes', got {text!r}")
        if isinstance(text, int | float):
            raise ValueError(f"a duration needs a unit: write '{text} seconds' or '{text} minutes'")
        match = _DURATION_PATTERN.match(text)
        if not match:
            raise ValueError(f"bad duration {text!r}: expected '<number> <unit>', such as '2 minutes'")
        amount, unit = float(match.group(1)), match.group(2).lower()
        singular = unit[:-1] if unit.endswith("s") and unit[:-1] in _UNIT_SECONDS else unit
        if singular not in _UNIT_SECONDS:
            raise ValueError(
                f"bad duration {text!r}: unknown unit {unit!r}; "
                "use milliseconds, seconds, minutes, hours or days"
            )
        return cls(amount * _UNIT_SECONDS[singular])

    @property
    def milliseconds(self) -> int:
        return round(self.seconds * 1000)

    def spark(self) -> str:
        """The interval string that withWatermark, window and triggers accept."""
        if self.milliseconds % 1000 == 0:
            return f"{self.milliseconds // 1000} seconds"
        return f"{self.milliseconds} milliseconds"

    def __str__(self) -> str:
        for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60), ("seconds", 1)):
            if self.seconds >= size and self.seconds % size == 0:
                return f"{int(self.seconds // size)} {unit}"
        return f"{self.milliseconds} milliseconds"


def _positive_duration(value: object) -> Duration:
    duration = Duration.parse(value)
    if duration.seconds <= 0:
        raise ValueError(f"must be longer than zero, got {value!r}")
    return duration


PositiveDuration = Annotated[Duration, BeforeValidator(_positive_duration), PlainSerializer(str)]
NonNegativeDuration = Annotated[Duration, BeforeValidator(Duration.parse), PlainSerializer(str)]


# --------------------------------------------------------------------------- sections


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _property_text(value: object) -> object:
    """A Spark or Kafka property as its own settings spell it: YAML reads `false` and `500` as a bool
    and an int, which Spark and Kafka want as the strings "false" and "500"."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    return value


# Spark and Kafka property values: strings, whatever YAML made of them.
PropertyValue = Annotated[str, BeforeValidator(_property_text)]


class SparkSettings(_Section):
    master: str = "local[2]"
    deploy_mode: Literal["client", "cluster"] = "client"
    shuffle_partitions: int = Field(4, ge=1)
    state_store: Literal["rocksdb", "hdfs"] = "rocksdb"
    changelog_checkpointing: bool = True
    ui_enabled: bool = False
    driver_memory: str = "1g"
    # Map the driver JVM's class-data archive, which `make setup` builds
    # (stream_pipelines/launching/class_archive.py).
    class_archive: bool = True
    # Anything else Spark accepts, passed through verbatim (e.g. spark.jars.packages on a cluster).
    extra_conf: dict[str, PropertyValue] = Field(default_factory=dict)


class TopicSettings(_Section):
    name: str = Field(min_length=1)
    partitions: int = Field(3, ge=1)
    # Log compaction keeps the latest value per key: right for keyed, upserted outputs.
    compacted: bool = False


class Topics(_Section):
    sensors: TopicSettings = TopicSettings(name="sensors", partitions=3)
    impressions: TopicSettings = TopicSettings(name="impressions", partitions=3)
    clicks: TopicSettings = TopicSettings(name="clicks_ads", partitions=3)
    # Output: the live sliding-window averages (update mode), keyed by sensor and window.
    sliding_averages: TopicSettings = TopicSettings(name="sensor_sliding_avg", partitions=3, compacted=True)

    def inputs(self) -> list[TopicSettings]:
        """The event topics the apps read (and the raw archive keeps)."""
        return [self.sensors, self.impressions, self.clicks]

    def all(self) -> list[TopicSettings]:
        return [*self.inputs(), self.sliding_averages]


def _starting_offsets(value: object) -> str:
    """earliest, latest, or per-partition offsets (a mapping, or its JSON text) as Spark takes them."""
    import json

    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, str) and value not in ("earliest", "latest"):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ValueError(
                f"expected earliest, latest or a JSON object of topic -> partition -> offset, got {value!r}"
            )
    return value


class KafkaSettings(_Section):
    bootstrap_servers: str = Field(min_length=1)
    starting_offsets: Annotated[str, BeforeValidator(_starting_offsets)] = "earliest"
    max_offsets_per_trigger: int | None = Field(50_000, ge=1)
    fail_on_data_loss: bool = True
    # Authentication and encryption, once for every client (kafka_security.py derives each one's spelling).
    security: KafkaSecurity = KafkaSecurity()
    # Other client properties, passed verbatim to Spark as kafka.<name> and to the project's own
    # (librdkafka) clients as <name>: only properties both families take under the same name, such as
    # fetch.max.wait.ms or client.id. Security settings are refused here and belong in ``security``.
    client_properties: dict[str, PropertyValue] = Field(default_factory=dict)
    topics: Topics = Topics()

    @field_validator("client_properties")
    @classmethod
    def _no_security_properties(cls, value: dict[str, str]) -> dict[str, str]:
        refuse_security_properties(value)
        return value

    def librdkafka_config(self) -> dict[str, str]:
        """Properties for the project's own clients (confluent-kafka: admin, consumer, producer)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            **self.security.librdkafka_properties(),
            **self.client_properties,
        }

    def java_client_properties(self) -> dict[str, str]:
        """Properties for Kafka's Java client (Spark's source and sink add their ``kafka.`` prefix)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            **self.security.java_properties(),
            **self.client_properties,
        }


class BrokerSettings(_Section):
    """The single-node KRaft broker that ``pipelinectl broker start`` runs for local work."""

    manage_local: bool = True
    port: int = Field(9092, ge=1, le=65535)
    controller_port: int = Field(9093, ge=1, le=65535)
    heap: str = "512m"
    ready_timeout: PositiveDuration = Duration(60)

    @model_validator(mode="after")
    def _distinct_ports(self) -> BrokerSettings:
        if self.port == self.controller_port:
            raise ValueError(f"port and controller_port must differ (both are {self.port})")
        return self


class LocalHdfsSettings(_Section):
    """A single-node HDFS on loopback that `make up` and `make demo` start, as they start the broker, for
    local work on the lab's layout (conf/hdfs.yaml). Its NameNode answers at spark.hadoop.fs.defaultFS."""

    manage_local: bool = False


class SourceSettings(_Section):
    kind: Literal["kafka", "files"] = "kafka"
    # For kind=files: JSON lines under <files_dir>/<topic name>/, one event per line.
    files_dir: str = "data/replay"
    max_files_per_trigger: int | None = Field(None, ge=1)


class PathSettings(_Section):
    """Where data lives. data_root resolves against the project root; the others, when relative,
    against data_root, so that one override moves everything (tests do that)."""

    data_root: str
    # Host-local state: Spark's scratch, the local broker's log, a local HDFS's files and the dev stack's
    # Airflow home. `scratch`, `broker` and `hdfs` resolve against it when relative. Unset: data_root.
    local_root: str | None = None
    archive: str = "archive"
    quarantine: str = "quarantine"
    checkpoints: str = "checkpoints"
    outputs: str = "outputs"
    batch_log: str = "batch_log"
    control: str = "control"
    broker: str = "kafka"
    hdfs: str = "hdfs"  # a local HDFS's config, metadata, blocks and logs (devtools.hdfs)
    yarn: str = "yarn"  # a local YARN's client config (conf/), its daemons' state and logs (devtools.yarn)
    reports: str = "reports"
    compliance: str = "compliance"
    gx: str = "gx"
    # Spark's scratch space of each streaming app's driver, one folder per app; it must be local to the
    # driver's host, so with a remote data_root make this an absolute local path.
    scratch: str = "scratch"


class AppSettings(_Section):
    """What every streaming app's section has (the registry names each app's section)."""

    trigger: PositiveDuration = Duration(10)


class ArchiveSettings(AppSettings):
    pass


class SensorSettings(AppSettings):
    watermark: NonNegativeDuration = Duration(120)
    window: PositiveDuration = Duration(300)
    sliding_window: PositiveDuration = Duration(600)
    slide: PositiveDuration = Duration(300)
    # CSV of sensor_id,location,building,floor, re-read every micro-batch (so a change shows up
    # within one trigger). Relative paths resolve against the project root; Python workers open it,
    # so on a cluster it must be on a filesystem every worker mounts.
    metadata_path: str = "conf/sensor_metadata.csv"

    @model_validator(mode="after")
    def _slide_divides_window(self) -> SensorSettings:
        if self.slide > self.sliding_window:
            raise ValueError(
                f"slide ({self.slide}) is longer than sliding_window ({self.sliding_window}); "
                "it must be at most the window"
            )
        if self.sliding_window.milliseconds % self.slide.milliseconds:
            raise ValueError(
                f"slide ({self.slide}) does not divide sliding_window ({self.sliding_window}); "
                "pick a slide that fits a whole number of times"
            )
        return self


class AdSettings(AppSettings):
    impressions_watermark: NonNegativeDuration = Duration(600)
    clicks_watermark: NonNegativeDuration = Duration(600)
    match_interval: PositiveDuration = Duration(300)
    ctr_window: PositiveDuration = Duration(300)


class QualitySettings(_Section):
    """Range checks the parsing layer applies; a record outside them is quarantined with the reason."""

    temperature_min: float = -60.0
    temperature_max: float = 150.0
    earliest_event_time: str = "2000-01-01T00:00:00Z"
    # An event stamped further ahead of its arrival than this would drag the watermark forward and
    # make every honest event look late, so it is quarantined instead.
    max_clock_skew: PositiveDuration = Duration(3600)

    @model_validator(mode="after")
    def _ordered_range(self) -> QualitySettings:
        if self.temperature_min >= self.temperature_max:
            raise ValueError(f"temperature_min ({self.temperature_min}) must be below temperature_max")
        return self


class SupervisionSettings(_Section):
    """How Airflow keeps the streaming apps running."""

    spark_conn_id: str = "spark_pipeline"
    # A crash is retried after retry_delay * backoff_multiplier^(n-1), n the restarts within the
    # crash-loop window, plus up to as much again of jitter, capped (a failed query restarted inside its
    # driver waits the same without the jitter; the first restart of a driver killed by a signal is at
    # once). A first restart comes quickly (each second of it is data freshness lost); a loop backs off
    # fast enough that the guard below trips only after 10-17 minutes of crashes, as long as a broker's
    # rolling restart may take.
    retry_delay: PositiveDuration = Duration(5)
    backoff_multiplier: float = Field(3.0, ge=1.0)
    max_retry_delay: PositiveDuration = Duration(600)
    # The crash-loop guard: this many restarts within the window stop the restarts, loudly.
    max_restarts: int = Field(5, ge=1)
    crash_loop_window: PositiveDuration = Duration(3600)
    # While an app is stopped or paused, its supervisor run waits and looks again this often.
    poll_interval: PositiveDuration = Duration(30)
    # How long a deliberate stop may take to drain the batch in flight before it is forced.
    drain_timeout: PositiveDuration = Duration(300)
    # The driver renews its lease this often; a lease not renewed for lease_timeout is stale and may be
    # taken over (on the same host a dead driver's lease is stale at once).
    heartbeat_interval: PositiveDuration = Duration(5)
    lease_timeout: PositiveDuration = Duration(45)
    # The liveness watchdog: an app whose queries make no progress for this many trigger intervals
    # (and never less than the minimum window, which covers a slow first batch after a restart) while
    # offsets wait in their source is stuck, and is stopped, killed if need be, and restarted.
    watchdog_triggers: int = Field(6, ge=1)
    watchdog_min_window: PositiveDuration = Duration(120)
    # A driver whose JVM has not answered a call through the gateway for this long is frozen (SIGSTOP,
    # a stop-the-world pause that never ends): killed at once, without a drain it could not do. A live
    # JVM answers within milliseconds, in the middle of a slow batch too (a stop-the-world pause longer
    # than this counts as frozen, and restarts from the checkpoint).
    jvm_answer_timeout: PositiveDuration = Duration(15)
    # A failed query is restarted from its checkpoint inside the running driver (no new JVM) up to this
    # many times within the crash-loop window; then, or when the JVM is unhealthy, the driver exits for
    # its supervisor to restart. 0: every failure restarts the driver.
    in_driver_restarts: int = Field(3, ge=0)

    def restart_delay(self, restarts: int, jitter: float) -> float:
        """The wait before restart number ``restarts`` within the crash-loop window: retry_delay x
        backoff_multiplier^(restarts - 1), plus ``jitter`` (0 to 1) as much again, capped."""
        base = self.retry_delay.seconds * self.backoff_multiplier ** max(restarts - 1, 0)
        return min(base * (1 + jitter), self.max_retry_delay.seconds)

    @model_validator(mode="after")
    def _lease_outlives_heartbeats(self) -> SupervisionSettings:
        if self.lease_timeout.seconds < 3 * self.heartbeat_interval.seconds:
            raise ValueError(
                f"lease_timeout ({self.lease_timeout}) must be at least 3 heartbeat_intervals "
                f"({self.heartbeat_interval}): one late renewal must not hand the app to a second driver"
            )
        if self.jvm_answer_timeout.seconds < 2 * self.heartbeat_interval.seconds:
            raise ValueError(
                f"jvm_answer_timeout ({self.jvm_answer_timeout}) must be at least 2 heartbeat_intervals "
                f"({self.heartbeat_interval}): the driver asks its JVM once a heartbeat"
            )
        return self


class ReconciliationTolerances(_Section):
    """How far a streaming figure may be from the exact one and still count as equal."""

    count: int = Field(0, ge=0)
    avg: float = Field(1e-9, ge=0)
    max: float = Field(1e-9, ge=0)
    min: float = Field(1e-9, ge=0)


class ReconciliationSettings(_Section):
    # Events of day D that arrive up to this long after D are taken in.
    late_horizon: PositiveDuration = Duration(2 * 86400)
    # Day D's final reconciliation is overdue this long after D's end + the late horizon: the
    # ReconciliationOverdue alert pages on-call (its runbook: docs/runbooks.md#reconciliationoverdue).
    final_deadline: PositiveDuration = Duration(12 * 3600)
    # A run the day states asked for and that recorded no outcome is asked for again after this (a failed
    # run, one still running); the reconciliation DAG skips a run whose outcome is already recorded.
    request_retry: PositiveDuration = Duration(3600)
    # An ask that no run has claimed is repeated sooner: after this, doubling with each ask, up to
    # request_retry. Its asset event travels with the watcher task's report of success, which a metadata
    # database down at that moment loses. A repeat that crosses a run queued behind another day's is
    # skipped at its claim once the first run's outcome is recorded; after a run that failed before its
    # report, it is that run's retry.
    claim_wait: PositiveDuration = Duration(900)
    tolerances: ReconciliationTolerances = ReconciliationTolerances()
    # Recommended watermark = p99 of the arrival delay x (1 + margin).
    watermark_margin: float = Field(0.4, ge=0.3, le=0.5)
    what_if_delays: tuple[PositiveDuration, ...] = tuple(Duration(m * 60) for m in (1, 2, 5, 10, 30))
    report_ledger_rows: int = Field(1000, ge=0)


def _retention(value: object) -> Duration | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == KEPT):
        return None
    return _positive_duration(value)


# A retention of ``forever`` (or null): kept; anything else is a duration such as '400 days'.
KEPT = "forever"
Retention = Annotated[
    Duration | None,
    BeforeValidator(_retention),
    PlainSerializer(lambda value: KEPT if value is None else str(value)),
]
# Days a dataset the reconciliation reads must outlive its late horizon by: event day D's final run
# reads arrivals from D-1 (so files written then) at D + 1 day + horizon; 2 more days let it run a day
# late, at any hour of that day.
RETENTION_FLOOR_DAYS = 4


class RetentionSettings(_Section):
    """How long each kind of data is kept; ``forever`` keeps it. Each dataset names its kind in the
    registry (``Dataset.retention``); the daily maintenance DAG enforces them (docs/operations.md)."""

    # Every event as it arrived: the compliance recompute's input.
    archive: Retention = Duration(400 * 86400)
    # The streaming outputs (sensor windows, ad matches, CTR): as long as their consumers need them.
    outputs: Retention = Duration(30 * 86400)
    quarantine: Retention = Duration(90 * 86400)
    # The reconciled figures, the late-event ledger and the nightly reports: the compliance record.
    compliance: Retention = None
    reports: Retention = None
    # Every batch's offsets and watermark, copied from the checkpoints for the reconciliation.
    batch_log: Retention = Duration(7 * 86400)
    # The checkpoints a reset moved aside (``<checkpoint>.reset-<time>``) and the maintenance records.
    reset_copies: Retention = Duration(30 * 86400)
    maintenance_records: Retention = Duration(90 * 86400)
    # The validation results the Data Docs site shows (each report keeps its gates' outcomes); every
    # nightly run rebuilds the site from them, so this bounds its size and the rebuild's time.
    data_docs: Retention = Duration(90 * 86400)


class CompactionSettings(_Section):
    """Closed days of every file sink, rewritten into files of a target size and published whole
    (compaction.py); a reader takes a compacted day from there, every other day through the sink's log."""

    # How long a file sink's log lists a file (its ``retention`` option, unless the dataset's own is
    # shorter). Compacted days are read from their own files, so the log need only cover the days not
    # yet compacted: it stays this size however long the dataset is kept.
    sink_log: PositiveDuration = Duration(7 * 86400)
    # A day is compacted this long after nothing of it can still arrive (its end, plus the late horizon
    # for a day of event time), so its last batches have been written.
    settle: PositiveDuration = Duration(6 * 3600)
    target_file_mb: int = Field(128, ge=1, le=4096)


class MaintenanceSettings(_Section):
    # An output file that its sink's log does not list is removed once it is this old: longer than any
    # micro-batch takes to write and commit, so the files of a batch in flight are never touched.
    orphan_grace: PositiveDuration = Duration(6 * 3600)


def _http_url(value: object) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"https?://[^/\s]+(/\S*)?", value):
        raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:9090, got {value!r}")
    return value.rstrip("/")


# Bind addresses that mean every interface of the host: no one can reach an exporter by them.
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


class MetricsSettings(_Section):
    enabled: bool = True
    host: str = "127.0.0.1"
    # Per app; an app not listed here serves on its registry default (registry.App.default_metrics_port).
    ports: dict[str, int] = Field(default_factory=dict)
    # Where Prometheus and Alertmanager answer their HTTP APIs (read by the Airflow "Streaming pipeline"
    # page); unset: the page reads the apps' metrics endpoints alone and shows no alerts.
    prometheus_url: Annotated[str, BeforeValidator(_http_url)] | None = None
    alertmanager_url: Annotated[str, BeforeValidator(_http_url)] | None = None

    @property
    def binds_every_interface(self) -> bool:
        """The exporters listen on every interface: reached by the host's name, or on loopback from it."""
        return self.host in WILDCARD_HOSTS


class YarnSettings(_Section):
    """YARN, when ``spark.master`` is ``yarn``: where its ResourceManager answers (the supervisor follows
    each app's application there) and the Hadoop client configuration spark-submit reads."""

    # `make up` and `make demo` start a ResourceManager and a NodeManager on loopback (devtools.yarn),
    # beside the config's local HDFS; a real cluster's is not ours to start.
    manage_local: bool = False
    # The ResourceManager's web address (its REST API). With manage_local: http://127.0.0.1:<port>.
    resourcemanager_url: Annotated[str, BeforeValidator(_http_url)] | None = None
    # HADOOP_CONF_DIR for spark-submit (yarn-site.xml names the ResourceManager's RPC address). Unset: the
    # environment's HADOOP_CONF_DIR, or with manage_local the local YARN's <paths.yarn>/conf.
    hadoop_conf_dir: str | None = None
    # The container log lines a supervisor or a job shows from a driver that ended (the tail of its stderr).
    driver_log_bytes: int = Field(16384, ge=0)
    # What the containers run on, from `pipelinectl pack-env` (uploaded once per version, each named by
    # its content): the drivers' and executors' Python, interpreter included, and Spark's jars. URLs on
    # a store every node reaches (hdfs://, s3a://). Unset: the Python at the launcher's path and the
    # launcher's jars, which then every node must have at the same paths.
    python_environment: str | None = None
    spark_jars_archive: str | None = None


class PipelineConfig(_Section):
    env: str
    spark: SparkSettings = SparkSettings()
    kafka: KafkaSettings
    broker: BrokerSettings = BrokerSettings()
    hdfs: LocalHdfsSettings = LocalHdfsSettings()
    yarn: YarnSettings = YarnSettings()
    source: SourceSettings = SourceSettings()
    paths: PathSettings
    archive: ArchiveSettings = ArchiveSettings()
    sensors: SensorSettings = SensorSettings()
    ads: AdSettings = AdSettings()
    quality: QualitySettings = QualitySettings()
    supervision: SupervisionSettings = SupervisionSettings()
    reconciliation: ReconciliationSettings = ReconciliationSettings()
    maintenance: MaintenanceSettings = MaintenanceSettings()
    retention: RetentionSettings = RetentionSettings()
    compaction: CompactionSettings = CompactionSettings()
    metrics: MetricsSettings = MetricsSettings()

    # The folder the config was read from (handed on to drivers as --conf-dir); relative paths resolve
    # against its parent.
    conf_dir: Path = Field(default=DEFAULT_CONF_DIR, exclude=True)
    # The environment variables the load read, with their values (secrets among them): never logged.
    _variables_read: dict[str, str] = PrivateAttr(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        # What a config says, not how it was loaded: the same settings from --set or from variables are
        # the same config, whichever variables each load read.
        if not isinstance(other, PipelineConfig):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = _Section.__hash__

    def variables_read(self) -> dict[str, str]:
        """The environment variables this config was loaded with: its ``PIPELINE__`` overrides, its
        ``${VAR}`` references and the variables its secrets come from, with their values. What another
        host needs, beside the conf dir and the files it names, to load the very same config."""
        return dict(self._variables_read)

    @property
    def base_dir(self) -> Path:
        return self.conf_dir.parent

    def project_path(self, value: str) -> str:
        """An absolute location for a path relative to the project; URIs (s3a://, hdfs://) pass through,
        an ``hdfs:///path`` completed with :meth:`qualified`."""
        return self.qualified(_join(str(self.base_dir), value))

    def qualified(self, location: str) -> str:
        """``hdfs:///path`` as ``hdfs://<namenode>:<port>/path`` when ``spark.hadoop.fs.defaultFS`` names
        the NameNode: Spark's checkpoint manager (Hadoop's FileContext) refuses an HDFS URI without one,
        and a location spelled one way everywhere compares equal to itself."""
        default_fs = self.spark.extra_conf.get(DEFAULT_FS, "")
        named = urllib.parse.urlsplit(default_fs)
        if location.startswith("hdfs:///") and named.scheme == "hdfs" and named.hostname:
            return f"{default_fs.rstrip('/')}/{location.removeprefix('hdfs:///')}"
        return location

    def data_path(self, name: str) -> str:
        """The location of one of the ``paths`` entries (archive, checkpoints, ...); the host-local ones
        (``LOCAL_PATHS``) under :meth:`local_root`."""
        root = self.local_root() if name in LOCAL_PATHS else self.project_path(self.paths.data_root)
        return self.qualified(_join(root, getattr(self.paths, name)))

    def local_root(self) -> str:
        """Where host-local state lives: ``paths.local_root``, else the data root (then a remote one leaves
        Spark's scratch to Spark's own default, see :meth:`scratch_dir`)."""
        return self.project_path(self.paths.local_root or self.paths.data_root)

    def checkpoint_dir(self, app: str, query: str) -> str:
        return f"{self.data_path('checkpoints')}/{app}/{query}"

    def scratch_dir(self, app: str) -> str | None:
        """The app's local scratch folder, or None when ``paths.scratch`` is on a remote store (Spark
        can only write its scratch to a local disk, so it keeps its own default there)."""
        location = f"{self.data_path('scratch')}/{app}"
        if location.startswith("file://"):
            return location.removeprefix("file://")
        return None if "://" in location else location

    def output_dir(self, name: str) -> str:
        return f"{self.data_path('outputs')}/{name}"

    def stored_urls(self) -> list[str]:
        """Every location the config reads or writes: the file layer's ``paths`` entries, the files
        source's folder and the sensor metadata."""
        return [
            *(self.data_path(name) for name in STORED_PATHS),
            self.project_path(self.source.files_dir),
            self.project_path(self.sensors.metadata_path),
        ]

    @property
    def on_yarn(self) -> bool:
        return self.spark.master == "yarn"

    @property
    def drivers_in_cluster(self) -> bool:
        """Each driver runs in its YARN application's ApplicationMaster, not beside its launcher."""
        return self.on_yarn and self.spark.deploy_mode == "cluster"

    def hadoop_conf_dir(self) -> str | None:
        """The folder spark-submit reads YARN's and HDFS's client settings from (``HADOOP_CONF_DIR``)."""
        if self.yarn.hadoop_conf_dir:
            return self.project_path(self.yarn.hadoop_conf_dir)
        if self.yarn.manage_local:
            return f"{self.data_path('yarn')}/conf"
        return os.environ.get("HADOOP_CONF_DIR")

    def kafka_client_config(self) -> dict[str, str]:
        """Properties for confluent-kafka clients (producer, admin, consumer) talking to the same cluster."""
        return self.kafka.librdkafka_config()

    @model_validator(mode="after")
    def _stores_served(self) -> PipelineConfig:
        """Every location the project reads itself must be on a store its file layer serves (``store``)."""
        for name in STORED_PATHS:
            location = self.data_path(name)
            kind = location.split("://", 1)[0].lower() if "://" in location else "file"
            if kind not in SERVED_SCHEMES:
                raise ValueError(
                    f"paths.{name}: {location} is on {kind}://, which the checkpoint preflight, the lease, "
                    f"the control records and the batch log cannot read or write; use a local path, "
                    f"file:// (a folder every host mounts), s3a:// or hdfs://<namenode>:<port>/ "
                    f"(see docs/clusters.md#the-file-layer)"
                )
        try:
            s3_options(self.spark.extra_conf)
        except StoreError as error:
            raise ValueError(str(error)) from None
        return self

    @model_validator(mode="after")
    def _local_hdfs_is_on_loopback(self) -> PipelineConfig:
        if not self.hdfs.manage_local:
            return self
        default_fs = self.spark.extra_conf.get(DEFAULT_FS, "")
        parsed = urllib.parse.urlsplit(default_fs)
        # 127.0.0.1 only: the NameNode binds that address, and "localhost" may resolve to ::1 first.
        if parsed.scheme != "hdfs" or parsed.hostname != "127.0.0.1" or not parsed.port:
            raise ValueError(
                f"hdfs.manage_local starts an HDFS on this machine, so spark.extra_conf.{DEFAULT_FS} must "
                f"name it as hdfs://127.0.0.1:<port>, not {default_fs or '(unset)'!r}"
            )
        for name in LOCAL_PATHS:
            if "://" in self.data_path(name):
                raise ValueError(f"paths.{name}: {self.data_path(name)} must be local (set paths.local_root)")
        return self

    @model_validator(mode="after")
    def _yarn_is_named(self) -> PipelineConfig:
        if self.spark.deploy_mode == "cluster" and not self.on_yarn:
            raise ValueError(
                f"spark.deploy_mode: cluster needs spark.master: yarn, not {self.spark.master!r}: Spark "
                "standalone cannot run a Python driver in the cluster, and the supervisor follows a driver "
                "in the cluster through YARN's ResourceManager"
            )
        if self.on_yarn and self.yarn.resourcemanager_url is None:
            raise ValueError(
                "spark.master: yarn needs yarn.resourcemanager_url (the ResourceManager's web address, "
                "e.g. http://resourcemanager.internal:8088): the supervisor follows each app there"
            )
        if self.yarn.manage_local:
            parsed = urllib.parse.urlsplit(self.yarn.resourcemanager_url or "")
            if parsed.hostname != "127.0.0.1" or not parsed.port:
                raise ValueError(
                    "yarn.manage_local starts a YARN on this machine, so yarn.resourcemanager_url must name "
                    f"it as http://127.0.0.1:<port>, not {self.yarn.resourcemanager_url!r}"
                )
            if not self.hdfs.manage_local:
                raise ValueError(
                    "yarn.manage_local runs YARN over the config's local HDFS: set hdfs.manage_local"
                )
        for key in ("python_environment", "spark_jars_archive"):
            archive = getattr(self.yarn, key)
            if archive is not None and not self.on_yarn:
                raise ValueError(f"yarn.{key} is set, but spark.master is {self.spark.master!r}, not yarn")
            if archive is not None and "://" not in archive:
                raise ValueError(
                    f"yarn.{key}: {archive!r} is not a URL: name the archive where every node reaches it "
                    "(hdfs://..., s3a://...), as `pipelinectl pack-env --out` prints it"
                )
        return self

    def sink_log_floor(self) -> Duration:
        """The shortest ``compaction.sink_log`` the config takes: a day is compacted at its end + the late
        horizon + settle, and its files must stay listed until then, with days to spare for a compaction
        that runs late."""
        return Duration(
            self.reconciliation.late_horizon.seconds
            + RETENTION_FLOOR_DAYS * 86400
            + self.compaction.settle.seconds
        )

    @model_validator(mode="after")
    def _retention_outlives_the_reconciliation(self) -> PipelineConfig:
        """What the reconciliation of day D reads must live until D's final run has read it."""
        floor = Duration(self.reconciliation.late_horizon.seconds + RETENTION_FLOOR_DAYS * 86400)
        for name in ("archive", "outputs", "batch_log"):
            kept = getattr(self.retention, name)
            if kept is not None and kept < floor:
                raise ValueError(
                    f"retention.{name} ({kept}) is shorter than reconciliation.late_horizon "
                    f"({self.reconciliation.late_horizon}) + {RETENTION_FLOOR_DAYS} days = {floor}: the "
                    f"final reconciliation of a day reads it until then; keep it at least {floor}"
                )
        log_floor = self.sink_log_floor()
        if self.compaction.sink_log < log_floor:
            raise ValueError(
                f"compaction.sink_log ({self.compaction.sink_log}) is shorter than reconciliation."
                f"late_horizon + {RETENTION_FLOOR_DAYS} days + compaction.settle = {log_floor}: a day's "
                f"files would leave the sink's log before the day is compacted; keep it at least {log_floor}"
            )
        return self

    @model_validator(mode="after")
    def _local_inputs_exist(self) -> PipelineConfig:
        metadata = self.project_path(self.sensors.metadata_path)
        if "://" not in metadata and not Path(metadata).is_file():
            raise ValueError(f"sensors.metadata_path: file not found: {metadata}")
        return self


def _join(base: str, value: str) -> str:
    if "://" in value or value.startswith("/"):
        return value.rstrip("/") or "/"
    if "://" in base:
        return f"{base.rstrip('/')}/{value}"
    return str((Path(base) / value).resolve())


# --------------------------------------------------------------------------- loading


def override_variables(overrides: Iterable[str]) -> dict[str, str]:
    """``section.key=value`` overrides as the ``PIPELINE__SECTION__KEY`` variables ``load_config`` reads:
    how a process started by another (an Airflow task, a stack component) gets the same settings."""
    variables = {}
    for item in overrides:
        key, _, value = item.partition("=")
        section, prop = _split_property(key.strip().split("."))
        # A Spark or Kafka property keeps its case (fs.defaultFS): variable names are case-sensitive.
        name = "__".join([*(part.upper() for part in section), *prop])
        variables[OVERRIDE_PREFIX + name] = value
    return variables


def _split_property(keys: list[str]) -> tuple[list[str], list[str]]:
    """A dotted key as its section path and, inside a property section, the property name's parts."""
    for section in _PROPERTY_SECTIONS:
        if tuple(k.lower() for k in keys[: len(section)]) == section and len(keys) > len(section):
            return keys[: len(section)], keys[len(section) :]
    return keys, []


def _variable_key(name: str) -> str:
    """The dotted key of a ``PIPELINE__...`` variable: sections lower-cased; a property name kept as
    written, unless written all in capitals by hand (``..._EXECUTOR__MEMORY``: spark.executor.memory)."""
    section, prop = _split_property(name[len(OVERRIDE_PREFIX) :].split("__"))
    keys = [part.lower() for part in section]
    if prop:
        written = ".".join(prop)
        keys.append(written.lower() if written.isupper() else written)
    return ".".join(keys)


def load_config(
    env: str | None = None,
    overrides: Iterable[str] = (),
    *,
    conf_dir: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> PipelineConfig:
    """Read, merge and validate the configuration; raises ConfigError with a readable message."""
    environ = _with_environment_file(os.environ if environ is None else environ)
    env = env or environ.get(ENV_VARIABLE) or "local"
    named = conf_dir or environ.get(CONF_DIR_VARIABLE)
    if not named and not DEFAULT_CONF_DIR.is_dir():
        # An installed package has no conf/ beside it: the deployment names its own folder.
        raise ConfigError(
            f"no config folder: set {CONF_DIR_VARIABLE} or pass --conf-dir, naming the folder that holds "
            f"{env}.yaml (only a source checkout has a default one, its conf/)"
        )
    conf_path = Path(named or DEFAULT_CONF_DIR).resolve()
    source = conf_path / f"{env}.yaml"
    raw = _read_config_file(conf_path, env, extended_by=())
    raw.setdefault("env", env)

    read = _ReadVariables(environ)
    for name in sorted(environ):
        if name.startswith(OVERRIDE_PREFIX):
            dotted = _variable_key(name)
            _apply_override(raw, dotted, read[name], origin=f"environment variable {name}")
    for item in overrides:
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ConfigError(f"--set {item!r}: expected key.path=value, e.g. sensors.watermark='10 minutes'")
        _apply_override(raw, key.strip(), value, origin=f"--set {key.strip()}")

    try:
        expanded = _expand_environment(raw, read, trail=())
        config = PipelineConfig.model_validate({**expanded, "conf_dir": conf_path}, context={"environ": read})
    except ValidationError as error:
        raise ConfigError(_describe(error, source)) from None
    config._variables_read = dict(read.values)
    return config


class _ReadVariables(Mapping[str, str]):
    """The environment as the load sees it, noting each variable read (``PipelineConfig.variables_read``)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self.values: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        value = self._environ[name]
        self.values[name] = value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._environ)

    def __len__(self) -> int:
        return len(self._environ)

    def __contains__(self, name: object) -> bool:
        return name in self._environ


def _with_environment_file(environ: Mapping[str, str]) -> Mapping[str, str]:
    """``environ`` with the variables of the file that ``PIPELINE_ENVIRONMENT_FILE`` names over it."""
    location = environ.get(ENVIRONMENT_FILE_VARIABLE)
    if not location:
        return environ
    try:
        variables = json.loads(Path(location).read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{ENVIRONMENT_FILE_VARIABLE}: cannot read {location}: {error}") from None
    if not isinstance(variables, dict) or not all(
        isinstance(name, str) and isinstance(value, str) for name, value in variables.items()
    ):
        raise ConfigError(f"{ENVIRONMENT_FILE_VARIABLE}: {location} is not a JSON object of strings")
    return {**environ, **variables}


def _read_config_file(conf_path: Path, env: str, extended_by: tuple[str, ...]) -> dict[str, Any]:
    """``conf/<env>.yaml`` as a mapping, merged over the file it names as its ``base``, if any."""
    source = conf_path / f"{env}.yaml"
    if not source.is_file():
        available = sorted(p.stem for p in conf_path.glob("*.yaml"))
        what = f"the base of {extended_by[-1]}.yaml" if extended_by else "environment"
        raise ConfigError(f"no config for {what} {env!r}: {source} does not exist (available: {available})")
    try:
        raw = yaml.safe_load(source.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: not valid YAML: {error}") from error
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    base = raw.pop(BASE_KEY, None)
    if base is None:
        return raw
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{source}: {BASE_KEY}: expected the name of another config, e.g. local")
    if base in (*extended_by, env):
        raise ConfigError(f"{source}: {BASE_KEY}: {' -> '.join((*extended_by, env, base))} is a cycle")
    return _merged(_read_config_file(conf_path, base, (*extended_by, env)), raw)


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, mappings merged key by key, anything else replaced."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


# Sections whose keys are themselves dotted (Spark and Kafka property names): everything after the
# section is one key, so `--set spark.extra_conf.spark.executor.memory=1g` does what it says.
_PROPERTY_SECTIONS = (("spark", "extra_conf"), ("kafka", "client_properties"))


def _apply_override(raw: dict[str, Any], dotted: str, text: str, *, origin: str) -> None:
    keys = dotted.split(".")
    for section in _PROPERTY_SECTIONS:
        if tuple(keys[: len(section)]) == section and len(keys) > len(section):
            keys = [*section, ".".join(keys[len(section) :])]
    node = raw
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{origin}: {'.'.join(keys)}: {key!r} is a value, not a section")
        node = child
    try:
        node[keys[-1]] = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        node[keys[-1]] = text


_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand_environment(node: Any, environ: Mapping[str, str], trail: tuple[str, ...]) -> Any:
    if isinstance(node, dict):
        return {key: _expand_environment(value, environ, (*trail, str(key))) for key, value in node.items()}
    if isinstance(node, list):
        return [_expand_environment(value, environ, trail) for value in node]
    if isinstance(node, str):

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in environ:
                raise ConfigError(f"{'.'.join(trail)}: environment variable {name} is not set")
            return environ[name]

        return _ENV_REFERENCE.sub(substitute, node)
    return node


def _describe(error: ValidationError, source: Path) -> str:
    lines = [f"invalid configuration ({source}, with overrides):"]
    for problem in error.errors():
        key = ".".join(str(part) for part in problem["loc"])
        kind = problem["type"]
        if kind == "extra_forbidden":
            message = "unknown key (check its spelling and the section it is in)"
        elif kind == "missing":
            message = "required key is missing"
        else:
            message = problem["msg"].removeprefix("Value error, ")
        lines.append(f"  {key}: {message}" if key else f"  {message}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- command lines


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """--env, --conf-dir and --set, the same on every app, job and command."""
    parser.add_argument("--env", default=None, help="config environment: conf/<env>.yaml (default: local)")
    parser.add_argument("--conf-dir", default=None, help="folder holding <env>.yaml (default: conf/)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set sensors.watermark='10 minutes' (repeatable)",
    )


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    return load_config(args.env, args.overrides, conf_dir=args.conf_dir)


def config_or_report(args: argparse.Namespace, prog: str) -> PipelineConfig | None:
    """The config for a command line, or None after printing what is wrong with it (the caller exits 2)."""
    try:
        return config_from_args(args)
    except ConfigError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return None
