"""Checkpoint preflight, inspection and reset for the streaming apps' queries.

What Spark 4.1 keeps in a query's checkpoint folder (``config.checkpoint_dir(app, query)``):

  metadata        ``{"id": "<query id>"}``, written at the first start.
  offsets/N       ``v1``, then the batch's metadata (watermark, timestamp and the SQL conf the query is
                  pinned to, shuffle partitions and state store provider included), then one line per
                  source in source order: Kafka ``{"topic": {"partition": next offset}}``, files
                  ``{"logOffset": n}``. Written *before* batch N runs; it holds N's end offsets.
  commits/N       ``v1``, then ``{"nextBatchWatermarkMs": ...}``. Written once N's output is committed.
  sources/<i>/    Kafka: ``0`` holds the offsets the query first started from; files: the seen-files log.
  state/<op>/<partition>[/<store>]/  the state store; version V is the state after batch V-1.

Spark 4.1 records no Spark version anywhere in it (the conf only pins state format versions), so
``record_fingerprints`` writes ``pipeline_fingerprint.json`` next to Spark's files: the settings that
shape the query's state, and the Spark version that started it.

``preflight`` runs before every start. It refuses, naming the query, the file and what to do, where Spark
would otherwise die with a stack trace (an unreadable or half-written log) or silently go wrong (a
state-shaping setting changed; a file sink whose own log would make it skip the new batches).
``reset`` builds a new checkpoint that starts exactly at the chosen offsets with empty state, without
any change to the app's configuration; its docstring says how and why. ``inspect`` is the read-only part
of both, and the front door's ``pipelinectl checkpoint inspect APP``.

Only local (or ``file://``) checkpoint locations are read; for others, inspection says it was skipped.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
import sys
import time
import uuid
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from stream_pipelines import registry
from stream_pipelines.config import PipelineConfig
from stream_pipelines.registry import APP_NAMES

FINGERPRINT_FILE = "pipeline_fingerprint.json"
FINGERPRINT_FORMAT = 1
# The launcher's exit code when preflight refuses: a supervisor must not retry it, a person has to act.
EXIT_CHECKPOINT_REFUSED = 4

ResetFrom = Literal["committed", "offsets", "time"]
RESET_FROM: tuple[str, ...] = ("committed", "offsets", "time")

# The classes runtime.spark_conf sets for config.spark.state_store (runtime imports pyspark, this must not).
STATE_STORE_PROVIDERS = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}
_PROVIDER_NAMES = {value: key for key, value in STATE_STORE_PROVIDERS.items()}
_SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
_PROVIDER_CLASS = "spark.sql.streaming.stateStore.providerClass"
_STATE_CODEC = "spark.sql.streaming.stateStore.compression.codec"

# The SQL conf Spark 4.1.3 pins in offsets/N of a new query. Used only when a reset has no readable
# offsets file to copy it from: a key missing here would make Spark assume its oldest state format.
_SPARK_41_PINNED_CONF = {
    "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5",
    "spark.sql.streaming.stateStore.encodingFormat": "unsaferow",
    "spark.sql.streaming.statefulOperator.useStrictDistribution": "true",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
    "spark.sql.streaming.aggregation.stateFormatVersion": "2",
    "spark.sql.streaming.join.stateFormatVersion": "2",
    _STATE_CODEC: "lz4",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": "false",
}

# Stateful operators per query as Spark 4.1 numbers them (read off real checkpoints of these apps).
# A reset creates an empty state store for each, so the new checkpoint can continue the batch numbering.
_JOIN_STORES = (
    "left-keyToNumValues",
    "left-keyWithIndexToValue",
    "right-keyToNumValues",
    "right-keyWithIndexToValue",
)
_STATE_LAYOUT: dict[str, dict[int, tuple[str, ...]]] = {
    "sensor_aggregation.tumbling": {0: ("default",)},
    "sensor_aggregation.sliding": {0: ("default",)},
    "ad_matching.matches": {0: _JOIN_STORES, 1: ("default",), 2: ("default",)},
    "ad_matching.ctr": {0: ("default",), 1: ("default",), 2: ("default",)},
}

# What Spark's HDFS-backed provider writes for an empty map with the lz4 codec: one raw LZ4Block holding
# the end marker (int -1), then the empty end block. Copied from a delta file Spark 4.1.3 wrote.
_LZ4_BLOCK_MAGIC = b"LZ4Block"
_EMPTY_HDFS_STATE_FILE = (
    # token (raw, level 5), compressed and original length 4, xxhash32 checksum, int -1
    _LZ4_BLOCK_MAGIC
    + bytes.fromhex("150400000004000000db804d08ffffffff")
    # the end block: raw, lengths and checksum 0
    + _LZ4_BLOCK_MAGIC
    + bytes.fromhex("15000000000000000000000000")
)
# An empty RocksDB checkpoint: no SST files; RocksDB creates the database when Spark opens it.
_EMPTY_ROCKSDB_METADATA = (
    'v1\n{"sstFiles":[],"numKeys":0,"numInternalKeys":0,"columnFamilyMapping":{},'
    '"columnFamilyTypeMap":{},"maxColumnFamilyId":0}'
)


class CheckpointError(RuntimeError):
    """A checkpoint that must not be started from, or a reset that was refused; the message says why."""

    def __init__(self, message: str, report: AppCheckpointReport | None = None) -> None:
        super().__init__(message)
        self.report = report


# --------------------------------------------------------------------------- the apps' queries


@dataclass(frozen=True)
class QuerySpec:
    """What this module needs to know about one query, derived from config (no Spark needed)."""

    app: str
    name: str
    source_kind: str
    # The topics each Spark source reads, in the order Spark numbers the sources (offsets/N lines).
    sources: tuple[tuple[str, ...], ...]
    # A file sink's folder: its _spark_metadata log numbers batches too, and skips ids it already has.
    output_path: str | None
    state_layout: Mapping[int, tuple[str, ...]] = field(default_factory=dict)

    @property
    def stateful(self) -> bool:
        return bool(self.state_layout)

    @property
    def topics(self) -> list[str]:
        return [topic for source in self.sources for topic in source]


def query_specs(config: PipelineConfig, app: str) -> list[QuerySpec]:
    """The app's queries in the order its build_sinks returns them."""
    _check_app(app)
    topics, kind = config.kafka.topics, config.source.kind
    quarantine = f"{config.data_path('quarantine')}/{app}"

    def spec(name: str, sources: tuple[tuple[str, ...], ...], output: str | None) -> QuerySpec:
        return QuerySpec(app, name, kind, sources, output, _STATE_LAYOUT.get(f"{app}.{name}", {}))

    if app == "raw_archive":
        inputs = tuple(topic.name for topic in topics.inputs())
        # One Kafka source subscribes to all three topics; the files source is one source per folder.
        sources = (inputs,) if kind == "kafka" else tuple((name,) for name in inputs)
        return [spec("archive", sources, config.data_path("archive"))]
    if app == "sensor_aggregation":
        sensors = ((topics.sensors.name,),)
        return [
            spec("tumbling", sensors, config.output_dir("sensor_windows")),
            spec("sliding", sensors, None),
            spec("quarantine", sensors, quarantine),
        ]
    both = ((topics.impressions.name,), (topics.clicks.name,))
    return [
        spec("matches", both, config.output_dir("ad_matches")),
        spec("ctr", both, config.output_dir("ad_ctr")),
        spec("quarantine", both, quarantine),
    ]


def query_fingerprints(config: PipelineConfig, app: str) -> dict[str, dict[str, Any]]:
    """Per query, the settings that shape its offsets and state; a change to any of them is incompatible.

    Watermark delays are left out on purpose: Spark accepts a changed delay on restart.
    """
    sensors, ads = config.sensors, config.ads
    both_sides = {"watermark_columns": ["shown_at", "clicked_at"], "dedup_keys": ["event_id"]}
    state_shapes: dict[str, dict[str, Any]] = {
        "sensor_aggregation.tumbling": {
            "watermark_column": "ts",
            "grouping_keys": ["window(ts)", "sensor_id"],
            "window": str(sensors.window),
        },
        "sensor_aggregation.sliding": {
            "watermark_column": "ts",
            "grouping_keys": ["window(ts)", "sensor_id"],
            "window": str(sensors.sliding_window),
            "slide": str(sensors.slide),
        },
        "ad_matching.matches": {
            **both_sides,
            "join": "left outer on ad_id, user_id",
            "join_time_range": f"clicked_at between shown_at and shown_at + {ads.match_interval}",
        },
        "ad_matching.ctr": {
            **both_sides,
            "grouping_keys": ["window(event_time)", "ad_id"],
            "window": str(ads.ctr_window),
        },
    }
    return {
        spec.name: {
            "source": spec.source_kind,
            "source_topics": [list(source) for source in spec.sources],
            **state_shapes.get(f"{app}.{spec.name}", {}),
        }
        for spec in query_specs(config, app)
    }


def fingerprint_changes(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Each setting that differs, as ``name: old -> new``."""
    changes = []
    for key in sorted(set(stored) | set(current)):
        old, new = stored.get(key), current.get(key)
        if old != new:
            changes.append(f"{key}: {_show(old)} -> {_show(new)}")
    return changes


def _show(value: Any) -> str:
    if value is None:
        return "(not set)"
    return value if isinstance(value, str) else json.dumps(value)


def record_fingerprints(config: PipelineConfig, app: str) -> list[str]:
    """Record the current fingerprint in each checkpoint that has none yet; returns the files written.

    Call it right before the queries start. A checkpoint with no batch planned yet gets the current
    fingerprint even if it had one, because nothing in it depends on the old settings.
    """
    written = []
    fingerprints = query_fingerprints(config, app)
    for spec in query_specs(config, app):
        checkpoint = _local_path(config.checkpoint_dir(app, spec.name))
        if checkpoint is None:
            continue
        target = checkpoint / FINGERPRINT_FILE
        if target.exists() and _batch_ids(checkpoint / "offsets"):
            continue
        _write_fingerprint(target, app, spec.name, fingerprints[spec.name])
        written.append(str(target))
    return written


def _write_fingerprint(
    target: Path, app: str, query: str, fingerprint: Mapping[str, Any], reset: Mapping[str, Any] | None = None
) -> None:
    document: dict[str, Any] = {
        "format": FINGERPRINT_FORMAT,
        "app": app,
        "query": f"{app}.{query}",
        "spark_version": running_spark_version(),
        "recorded_at": _iso(datetime.now(UTC)),
        "fingerprint": dict(fingerprint),
    }
    if reset is not None:
        document["reset"] = dict(reset)
    _write_atomically(target, json.dumps(document, indent=2, sort_keys=True).encode())


def running_spark_version() -> str | None:
    """The installed PySpark's version, without importing it (Airflow workers may not have it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyspark")
    except PackageNotFoundError:
        return None


# --------------------------------------------------------------------------- reading checkpoint files


class _Unreadable(Exception):
    """A checkpoint file Spark could not use; the message completes 'offsets/7 ...'."""


@dataclass
class _OffsetsEntry:
    batch: int
    watermark_ms: int
    timestamp_ms: int | None
    conf: dict[str, str]
    # One per Spark source: the parsed JSON line, or None where Spark wrote "-" (no offset yet).
    sources: list[dict[str, Any] | None]


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise _Unreadable(f"cannot be read: {error.strerror or error}") from None
    _verify_checksum(path, data)
    return data


def _verify_checksum(path: Path, data: bytes) -> None:
    """Hadoop's .<name>.crc (CRC32 per chunk): Spark's reader fails on a file that no longer matches it."""
    crc_file = path.with_name(f".{path.name}.crc")
    if not crc_file.is_file():
        return
    raw = crc_file.read_bytes()
    if len(raw) < 8 or raw[:4] != b"crc\x00":
        raise _Unreadable(f"has a damaged checksum file {crc_file.name}")
    chunk = struct.unpack(">i", raw[4:8])[0]
    if chunk <= 0:
        raise _Unreadable(f"has a damaged checksum file {crc_file.name}")
    actual = b"".join(
        struct.pack(">I", zlib.crc32(data[start : start + chunk])) for start in range(0, len(data), chunk)
    )
    if actual != raw[8:]:
        raise _Unreadable(
            f"does not match its checksum file {crc_file.name}: it was changed or cut short after Spark "
            "wrote it, and Spark refuses to read it"
        )


def _read_text(path: Path) -> str:
    data = _read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Unreadable("is not UTF-8 text (garbage)") from None


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise _Unreadable(
            f"has {what} that is not valid JSON ({error.msg} at column {error.colno})"
        ) from None
    if not isinstance(value, dict):
        raise _Unreadable(f"has {what} that is not a JSON object")
    return value


def _version_lines(path: Path, minimum_lines: int) -> list[str]:
    text = _read_text(path)
    if not text.strip():
        raise _Unreadable("is empty (written only partly)")
    lines = text.split("\n")
    if not re.fullmatch(r"v\d+", lines[0]):
        raise _Unreadable(f"does not start with a log version line such as 'v1' (found {lines[0][:20]!r})")
    if lines[0] != "v1":
        raise _Unreadable(f"has log version {lines[0]}, newer than this Spark's v1")
    if len(lines) < minimum_lines:
        raise _Unreadable("ends after its version line (written only partly)")
    return lines


def _parse_offsets(path: Path, expected_sources: int) -> _OffsetsEntry:
    lines = _version_lines(path, 2)
    metadata = _json_object(lines[1], "a batch metadata line")
    if not isinstance(metadata.get("batchWatermarkMs"), int):
        raise _Unreadable("has a batch metadata line without batchWatermarkMs")
    source_lines = lines[2:]
    if len(source_lines) != expected_sources:
        raise _Unreadable(
            f"has {len(source_lines)} source line(s) where the query has {expected_sources} source(s) "
            "(cut short, or written by a query with other sources)"
        )
    sources: list[dict[str, Any] | None] = []
    for index, line in enumerate(source_lines):
        if line == "-":
            sources.append(None)
            continue
        offsets = _json_object(line, f"a line for source {index}")
        if "logOffset" not in offsets:
            _check_kafka_offsets(offsets, f"source {index}")
        sources.append(offsets)
    conf = metadata.get("conf") or {}
    return _OffsetsEntry(
        batch=int(path.name),
        watermark_ms=int(metadata["batchWatermarkMs"]),
        timestamp_ms=metadata.get("batchTimestampMs")
        if isinstance(metadata.get("batchTimestampMs"), int)
        else None,
        conf={str(key): str(value) for key, value in conf.items()},
        sources=sources,
    )


def _check_kafka_offsets(offsets: Mapping[str, Any], what: str) -> None:
    for topic, partitions in offsets.items():
        if not isinstance(partitions, dict) or not all(
            str(partition).isdigit() and isinstance(offset, int) for partition, offset in partitions.items()
        ):
            raise _Unreadable(f"has offsets for {what}, topic {topic!r}, that are not partition -> offset")


def _parse_commit(path: Path) -> int:
    lines = _version_lines(path, 2)
    metadata = _json_object(lines[1], "a commit line")
    if not isinstance(metadata.get("nextBatchWatermarkMs"), int):
        raise _Unreadable("has a commit line without nextBatchWatermarkMs")
    return int(metadata["nextBatchWatermarkMs"])


def _parse_query_metadata(path: Path) -> str:
    text = _read_text(path).strip()
    if not text:
        raise _Unreadable("is empty (written only partly)")
    value = _json_object(text.split("\n")[0], "content")
    if not isinstance(value.get("id"), str):
        raise _Unreadable("has no query id")
    return value["id"]


def _parse_initial_offsets(path: Path) -> dict[str, Any]:
    """sources/<i>/0 of a Kafka source: a zero byte (kept for Spark 2.1 compatibility), 'v1', JSON."""
    data = _read_bytes(path)
    text = data[1:] if data[:1] == b"\x00" else data
    try:
        lines = text.decode("utf-8").split("\n", 1)
    except UnicodeDecodeError:
        raise _Unreadable("is not UTF-8 text (garbage)") from None
    if len(lines) != 2 or lines[0] != "v1":
        raise _Unreadable("is not 'v1' followed by the starting offsets (written only partly?)")
    offsets = _json_object(lines[1], "starting offsets")
    _check_kafka_offsets(offsets, "the source")
    return offsets


def _batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(entry.name) for entry in folder.iterdir() if entry.name.isdigit())


def _sink_log_latest_batch(output: str | None) -> int | None:
    folder = _local_path(output) if output else None
    if folder is None:
        return None
    log = folder / "_spark_metadata"
    if not log.is_dir():
        return None
    ids = [int(m.group(1)) for e in log.iterdir() if (m := re.fullmatch(r"(\d+)(?:\.compact)?", e.name))]
    return max(ids, default=None)


def _state_operators(checkpoint: Path) -> dict[int, dict[str, Any]]:
    """Operator id -> name, store names and partitions, from Spark's state metadata (or the folders)."""
    state = checkpoint / "state"
    operators: dict[int, dict[str, Any]] = {}
    if not state.is_dir():
        return operators
    for folder in sorted((e for e in state.iterdir() if e.name.isdigit()), key=lambda e: int(e.name)):
        partitions = [e for e in folder.iterdir() if e.name.isdigit()]
        described: dict[str, Any] = {"name": None, "stores": [], "partitions": len(partitions)}
        try:
            lines = _version_lines(folder / "_metadata" / "metadata", 2)
            metadata = _json_object(lines[1], "operator metadata")
            described["name"] = metadata.get("operatorInfo", {}).get("operatorName")
            stores = metadata.get("stateStoreInfo", [])
            described["stores"] = [store["storeName"] for store in stores]
            described["partitions"] = max((store.get("numPartitions", 0) for store in stores), default=0)
        except (_Unreadable, KeyError, TypeError):
            # Spark writes the operator metadata after the first batch; before that, the folders tell.
            sample = partitions[0] if partitions else None
            if sample is not None:
                named = [e.name for e in sample.iterdir() if e.is_dir() and not e.name.startswith("_")]
                described["stores"] = sorted(named) or ["default"]
        operators[int(folder.name)] = described
    return operators


# --------------------------------------------------------------------------- inspection


@dataclass
class QueryCheckpoint:
    """What one query's checkpoint says, and what is wrong with it."""

    app: str
    query: str
    path: str
    exists: bool = False
    query_id: str | None = None
    last_offsets_batch: int | None = None
    last_committed_batch: int | None = None
    # Planned (offsets/N written) but not committed: a restart runs it again over the same offsets.
    batch_in_flight: int | None = None
    # The resume point: next offset to read per topic and partition, after the last committed batch.
    committed_offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    # The same per Spark source index, as Spark wrote it (files sources: {"logOffset": n}).
    committed_source_offsets: list[dict[str, Any] | None] = field(default_factory=list)
    committed_watermark_ms: int | None = None
    committed_watermark: str | None = None
    # Kafka sources/<i>/0: where the query started on its first run (or where a reset started it).
    initial_offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)
    shuffle_partitions: int | None = None
    state_store_provider: str | None = None
    # Spark does not record it; this is the version our launcher recorded at the first start.
    writer_spark_version: str | None = None
    running_spark_version: str | None = None
    stored_fingerprint: dict[str, Any] | None = None
    current_fingerprint: dict[str, Any] = field(default_factory=dict)
    fingerprint_changes: list[str] = field(default_factory=list)
    state_operators: dict[int, dict[str, Any]] = field(default_factory=dict)
    output_latest_batch: int | None = None
    last_reset: dict[str, Any] | None = None
    # Where a query without a checkpoint starts reading.
    fresh_start_from: str | None = None
    # Reasons preflight refuses to start; notes are worth reading but do not stop anything.
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Whether `reset --from committed` can resume exactly at the committed offsets.
    committed_resume_available: bool = False

    @property
    def name(self) -> str:
        return f"{self.app}.{self.query}"

    def describe(self) -> str:
        lines = [f"{self.name}: {self.path}"]
        if not self.exists and self.initial_offsets:
            lines.append("  no batch yet; the first batch starts at (sources/<i>/0):")
            lines.extend(f"    {line}" for line in _offset_lines(self.initial_offsets))
        elif not self.exists:
            lines.append(
                f"  no checkpoint: fresh start from {self.fresh_start_from or 'the configured start'}"
            )
        else:
            lines.append(f"  query id {self.query_id or '(unknown)'}")
            if self.last_committed_batch is None:
                lines.append("  no batch committed yet")
            else:
                watermark = self.committed_watermark or "none"
                lines.append(f"  last committed batch {self.last_committed_batch} (watermark {watermark})")
            if self.batch_in_flight is not None:
                lines.append(
                    f"  batch {self.batch_in_flight} in flight: a restart runs it again, same offsets"
                )
            if self.committed_offsets:
                lines.append("  resume point (next offset per partition):")
                lines.extend(f"    {line}" for line in _offset_lines(self.committed_offsets))
            for index, source in enumerate(self.committed_source_offsets):
                if source is not None and "logOffset" in source:
                    lines.append(f"  resume point of files source {index}: log offset {source['logOffset']}")
            if self.initial_offsets and self.last_committed_batch is None:
                lines.append("  first batch will start at:")
                lines.extend(f"    {line}" for line in _offset_lines(self.initial_offsets))
            settings = []
            if self.shuffle_partitions is not None:
                settings.append(f"shuffle partitions {self.shuffle_partitions}")
            if self.state_store_provider:
                provider = _PROVIDER_NAMES.get(self.state_store_provider, self.state_store_provider)
                settings.append(f"state store {provider}")
            if self.state_operators:
                names = ", ".join(
                    f"{op}:{info['name']}" if info["name"] else str(op)
                    for op, info in self.state_operators.items()
                )
                settings.append(f"stateful operators {names}")
            if settings:
                lines.append(f"  pinned in the checkpoint: {'; '.join(settings)}")
            written_by = self.writer_spark_version or "not recorded"
            lines.append(
                f"  Spark that started it: {written_by}; running: {self.running_spark_version or '?'}"
            )
            if self.stored_fingerprint is None:
                lines.append("  fingerprint: none stored yet")
            elif not self.fingerprint_changes:
                lines.append("  fingerprint: matches the current configuration")
        if self.last_reset:
            lines.append(
                f"  created by a reset at {self.last_reset.get('at')}: {self.last_reset.get('summary')}"
            )
        lines.extend(f"  note: {note}" for note in self.notes)
        lines.extend(f"  PROBLEM: {problem}" for problem in self.problems)
        return "\n".join(lines)


@dataclass
class AppCheckpointReport:
    app: str
    queries: list[QueryCheckpoint]

    @property
    def problems(self) -> list[str]:
        return [f"{query.name}: {problem}" for query in self.queries for problem in query.problems]

    @property
    def ok(self) -> bool:
        return not self.problems

    def query(self, name: str) -> QueryCheckpoint:
        for query in self.queries:
            if query.query == name:
                return query
        raise KeyError(name)

    def describe(self) -> str:
        verdict = "ok to start" if self.ok else f"{len(self.problems)} problem(s): refusing to start"
        header = f"checkpoint preflight for {self.app} ({len(self.queries)} queries): {verdict}"
        return "\n".join([header, *(query.describe() for query in self.queries)])

    def to_dict(self) -> dict[str, Any]:
        return {"app": self.app, "ok": self.ok, "queries": [_jsonable(asdict(q)) for q in self.queries]}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


def _offset_lines(offsets: Mapping[str, Mapping[int, int]]) -> list[str]:
    return [
        f"{topic}: " + "  ".join(f"p{partition}={offset}" for partition, offset in sorted(partitions.items()))
        for topic, partitions in sorted(offsets.items())
    ]


def inspect(config: PipelineConfig, app: str) -> AppCheckpointReport:
    """Read every query checkpoint of the app; never raises for what it finds, it reports it."""
    specs = query_specs(config, app)
    fingerprints = query_fingerprints(config, app)
    return AppCheckpointReport(app, [_inspect_query(config, spec, fingerprints[spec.name]) for spec in specs])


def _inspect_query(config: PipelineConfig, spec: QuerySpec, fingerprint: dict[str, Any]) -> QueryCheckpoint:
    location = config.checkpoint_dir(spec.app, spec.name)
    result = QueryCheckpoint(
        spec.app,
        spec.name,
        location,
        current_fingerprint=fingerprint,
        running_spark_version=running_spark_version(),
    )
    checkpoint = _local_path(location)
    if checkpoint is None:
        result.exists = True
        result.notes.append("not on a local filesystem: inspection skipped, Spark will read it as it is")
        return result
    result.output_latest_batch = _sink_log_latest_batch(spec.output_path)
    _read_fingerprint(checkpoint, result)
    offsets_ids = _batch_ids(checkpoint / "offsets")
    commit_ids = _batch_ids(checkpoint / "commits")
    has_metadata = (checkpoint / "metadata").exists()
    result.exists = bool(has_metadata or offsets_ids or commit_ids)
    if not result.exists:
        result.fresh_start_from = (
            f"kafka.starting_offsets={config.kafka.starting_offsets}"
            if spec.source_kind == "kafka"
            else f"every file under {config.project_path(config.source.files_dir)}"
        )
        _check_fresh_start(spec, result)
        _read_initial_offsets(checkpoint, spec, result)
        return result

    def problem(file: str, error: _Unreadable | str) -> None:
        result.problems.append(f"{checkpoint / file} {error}")

    if has_metadata:
        try:
            result.query_id = _parse_query_metadata(checkpoint / "metadata")
        except _Unreadable as error:
            problem("metadata", error)
    elif offsets_ids:
        problem("metadata", "is missing while offsets exist (a half-written or partly copied checkpoint)")

    result.last_offsets_batch = offsets_ids[-1] if offsets_ids else None
    result.last_committed_batch = commit_ids[-1] if commit_ids else None
    _check_sequences(offsets_ids, commit_ids, problem)

    # What a restart reads: the newest offsets, the one before it (its start), the newest commit.
    entries: dict[int, _OffsetsEntry] = {}
    needed = {result.last_offsets_batch, result.last_committed_batch}
    if result.last_offsets_batch:
        needed.add(result.last_offsets_batch - 1)
    for batch in sorted(b for b in needed if b is not None and b in offsets_ids):
        try:
            entries[batch] = _parse_offsets(checkpoint / "offsets" / str(batch), len(spec.sources))
        except _Unreadable as error:
            problem(f"offsets/{batch}", error)
    if result.last_offsets_batch and result.last_offsets_batch - 1 not in offsets_ids:
        problem(
            f"offsets/{result.last_offsets_batch - 1}",
            f"is missing: Spark needs it to restart at batch {result.last_offsets_batch}",
        )
    newest = entries.get(result.last_offsets_batch) or entries.get(result.last_committed_batch)
    if newest is not None:
        result.spark_conf = newest.conf
        partitions = newest.conf.get(_SHUFFLE_PARTITIONS)
        result.shuffle_partitions = int(partitions) if partitions and partitions.isdigit() else None
        result.state_store_provider = newest.conf.get(_PROVIDER_CLASS)

    committed = result.last_committed_batch
    if committed is not None:
        if committed in offsets_ids and committed < (result.last_offsets_batch or 0):
            result.batch_in_flight = result.last_offsets_batch
        try:
            result.committed_watermark_ms = _parse_commit(checkpoint / "commits" / str(committed))
            result.committed_watermark = _watermark_text(result.committed_watermark_ms)
        except _Unreadable as error:
            problem(f"commits/{committed}", error)
        entry = entries.get(committed)
        if entry is not None:
            result.committed_source_offsets = entry.sources
            result.committed_offsets = _merge_kafka_offsets(entry.sources)
            result.committed_resume_available = _same_topics(spec, entry.sources)
    _read_initial_offsets(checkpoint, spec, result)
    result.state_operators = _state_operators(checkpoint)
    _check_compatibility(config, spec, result, bool(offsets_ids))
    _check_sources(spec, result, entries.get(committed) if committed is not None else newest)
    _check_sink_log(spec, result)
    return result


def _check_sequences(
    offsets_ids: list[int], commit_ids: list[int], problem: Callable[[str, str], None]
) -> None:
    for name, ids in (("offsets", offsets_ids), ("commits", commit_ids)):
        missing = sorted(set(range(ids[0], ids[-1] + 1)) - set(ids)) if ids else []
        if missing:
            problem(name, f"has gaps: batch(es) {_ranges(missing)} missing between {ids[0]} and {ids[-1]}")
    # Spark purges old offsets and commits separately, so commits older than the oldest offsets are fine.
    lowest = offsets_ids[0] if offsets_ids else 0
    orphans = [batch for batch in commit_ids if batch >= lowest and batch not in set(offsets_ids)]
    if orphans:
        problem("commits", f"has commit(s) {_ranges(orphans)} without offsets/N: the offsets log lost them")
    if offsets_ids and commit_ids and offsets_ids[-1] - commit_ids[-1] > 1:
        problem(
            "offsets",
            f"runs to batch {offsets_ids[-1]} but the last commit is {commit_ids[-1]}: Spark plans at most "
            "one batch ahead of its commits, so the logs do not belong together",
        )


def _ranges(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:5])
    return shown + (f" ... ({len(numbers)} in all)" if len(numbers) > 5 else "")


def _merge_kafka_offsets(sources: Iterable[dict[str, Any] | None]) -> dict[str, dict[int, int]]:
    merged: dict[str, dict[int, int]] = {}
    for source in sources:
        if source is None or "logOffset" in source:
            continue
        for topic, partitions in source.items():
            merged.setdefault(topic, {}).update({int(p): int(o) for p, o in partitions.items()})
    return merged


def _same_topics(spec: QuerySpec, sources: list[dict[str, Any] | None]) -> bool:
    if spec.source_kind != "kafka":
        return all(source is not None for source in sources)
    return all(
        source is not None and set(source) == set(expected)
        for source, expected in zip(sources, spec.sources, strict=True)
    )


def _read_fingerprint(checkpoint: Path, result: QueryCheckpoint) -> None:
    target = checkpoint / FINGERPRINT_FILE
    if not target.is_file():
        return
    try:
        document = json.loads(target.read_text())
        result.stored_fingerprint = dict(document["fingerprint"])
    except (OSError, ValueError, KeyError, TypeError):
        result.notes.append(f"{target} is unreadable: the current settings will be recorded at start")
        return
    result.writer_spark_version = document.get("spark_version")
    result.last_reset = document.get("reset")


def _read_initial_offsets(checkpoint: Path, spec: QuerySpec, result: QueryCheckpoint) -> None:
    if spec.source_kind != "kafka":
        return
    for index in range(len(spec.sources)):
        path = checkpoint / "sources" / str(index) / "0"
        if not path.exists():
            continue
        try:
            offsets = _parse_initial_offsets(path)
        except _Unreadable as error:
            result.problems.append(f"{path} {error}")
            continue
        for topic, partitions in _merge_kafka_offsets([offsets]).items():
            result.initial_offsets.setdefault(topic, {}).update(partitions)


def _check_fresh_start(spec: QuerySpec, result: QueryCheckpoint) -> None:
    if result.output_latest_batch is not None:
        result.problems.append(
            f"there is no checkpoint, but the file sink at {spec.output_path} has committed batches up to "
            f"{result.output_latest_batch}: a fresh start would number its batches from 0 and the sink would "
            f"silently skip batches 0..{result.output_latest_batch}. Create a checkpoint that continues "
            "after them with a reset from a time or from offsets"
        )


def _check_sources(spec: QuerySpec, result: QueryCheckpoint, entry: _OffsetsEntry | None) -> None:
    """The offsets themselves, for checkpoints without a fingerprint or changes it does not cover."""
    if entry is None or spec.source_kind != "kafka":
        return
    if any(change.startswith("source") for change in result.fingerprint_changes):
        return
    for index, (source, expected) in enumerate(zip(entry.sources, spec.sources, strict=True)):
        if source is not None and "logOffset" in source:
            result.problems.append(
                f"source {index} is a files source in the checkpoint, but source.kind is kafka now"
            )
        elif source is not None and set(source) != set(expected):
            result.problems.append(
                f"source {index} has offsets for topics {sorted(source)}, but the query now reads "
                f"{sorted(expected)}: Spark would read the new topics from the configured starting "
                "offsets and forget the old ones"
            )


def _check_compatibility(
    config: PipelineConfig, spec: QuerySpec, result: QueryCheckpoint, has_offsets: bool
) -> None:
    if result.stored_fingerprint is not None:
        result.fingerprint_changes = fingerprint_changes(
            result.stored_fingerprint, result.current_fingerprint
        )
    if result.fingerprint_changes and has_offsets:
        kind = "its state and offsets" if spec.stateful else "its offsets"
        result.problems.append(
            f"written by an incompatible query ({kind} were built with other settings): "
            + "; ".join(result.fingerprint_changes)
        )
    elif result.fingerprint_changes:
        result.notes.append("settings changed before any batch ran; the new fingerprint is recorded at start")
    elif result.stored_fingerprint is None and has_offsets:
        result.notes.append("no fingerprint stored (checkpoint older than fingerprinting): recorded at start")

    wanted_partitions = config.spark.shuffle_partitions
    if result.shuffle_partitions is not None and result.shuffle_partitions != wanted_partitions:
        change = (
            f"spark.sql.shuffle.partitions is {result.shuffle_partitions} in the checkpoint but "
            f"spark.shuffle_partitions={wanted_partitions} in the configuration"
        )
        if spec.stateful:
            result.problems.append(
                f"{change}: Spark cannot repartition state, it would keep {result.shuffle_partitions} "
                "silently. Revert the setting, or reset the checkpoint to apply it (state is rebuilt)"
            )
        else:
            result.notes.append(f"{change}; Spark keeps the checkpoint's value (harmless here, no state)")
    wanted_provider = STATE_STORE_PROVIDERS[config.spark.state_store]
    if spec.stateful and result.state_store_provider and result.state_store_provider != wanted_provider:
        current = _PROVIDER_NAMES.get(result.state_store_provider, result.state_store_provider)
        result.notes.append(
            f"the checkpoint keeps the {current} state store; spark.state_store={config.spark.state_store} "
            "applies only to a new checkpoint (after a reset)"
        )

    writer, running = (
        _version_tuple(result.writer_spark_version),
        _version_tuple(result.running_spark_version),
    )
    if writer and running and writer[:2] > running[:2]:
        result.problems.append(
            f"started by Spark {result.writer_spark_version}, newer than the running "
            f"{result.running_spark_version}: Spark cannot read checkpoints of newer versions. Run the "
            "newer Spark, or reset the checkpoint"
        )
    elif writer and running and writer[:2] != running[:2]:
        result.notes.append(
            f"started by Spark {result.writer_spark_version}, now running {result.running_spark_version}"
        )


def _check_sink_log(spec: QuerySpec, result: QueryCheckpoint) -> None:
    latest = result.output_latest_batch
    if latest is None or result.last_offsets_batch is None or latest <= result.last_offsets_batch:
        return
    result.problems.append(
        f"the file sink at {spec.output_path} has committed batches up to {latest}, beyond this "
        f"checkpoint's last batch {result.last_offsets_batch}: the sink would silently skip the next "
        f"{latest - result.last_offsets_batch} batch(es). The checkpoint is older than the output "
        "(restored or replaced?)"
    )


def _version_tuple(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    numbers = re.findall(r"\d+", text)
    return tuple(int(n) for n in numbers[:3]) if numbers else None


def _watermark_text(milliseconds: int) -> str | None:
    if milliseconds <= 0:
        return None
    return _iso(datetime.fromtimestamp(milliseconds / 1000, UTC))


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --------------------------------------------------------------------------- preflight


def preflight(config: PipelineConfig, app: str) -> AppCheckpointReport:
    """Inspect before a start; raises CheckpointError when a query must not be started from its checkpoint.

    The returned report's ``describe()`` is the resume point to log. A missing checkpoint is a fresh start.
    """
    report = inspect(config, app)
    if report.ok:
        return report
    lines = [f"checkpoint preflight refuses to start {app}:"]
    for query in report.queries:
        if not query.problems:
            continue
        lines.append(f"  {query.name} (checkpoint {query.path}):")
        lines.extend(f"    - {problem}" for problem in query.problems)
    lines.append("What to do: if it was an accident, undo it (revert the setting, restore the checkpoint).")
    lines.append(
        "Otherwise reset the checkpoint: state is lost, but no input is skipped or read twice. "
        "Inspect first with `pipelinectl checkpoint inspect " + app + "`, then:"
    )
    for query in report.queries:
        if query.problems:
            lines.append(f"  {_reset_hint(app, query)}")
    lines.append(f"(or the checkpoint reset DAG with app={app}, the query, `from` and confirm={app}).")
    raise CheckpointError("\n".join(lines), report)


def _reset_hint(app: str, query: QueryCheckpoint) -> str:
    command = f"pipelinectl checkpoint reset {app} --query {query.query}"
    if query.committed_resume_available:
        return f"{command} --from committed --confirm {app}"
    if query.current_fingerprint.get("source") != "kafka":
        return f"{query.name}: a files source resumes only from a readable committed position: restore it"
    return (
        f"{command} --from time --time <ISO time> --confirm {app}   "
        f"(or --from offsets --offsets '<JSON>': the committed offsets are unusable here)"
    )


# --------------------------------------------------------------------------- reset


@dataclass
class QueryReset:
    query: str
    path: str
    # Where the old checkpoint was moved (never deleted); None when there was none.
    old_checkpoint: str | None
    # The first batch id the new checkpoint runs; > 0 when it continues the old numbering.
    first_batch: int
    start_offsets: dict[str, dict[int, int]]
    start_source_offsets: list[dict[str, Any] | None]
    watermark_ms: int
    empty_state_stores: int
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"{self.query}: new checkpoint at {self.path}"]
        if self.old_checkpoint:
            lines.append(f"  old checkpoint kept at {self.old_checkpoint}")
        lines.append(f"  starts with batch {self.first_batch} from:")
        lines.extend(f"    {line}" for line in _offset_lines(self.start_offsets))
        for index, source in enumerate(self.start_source_offsets):
            if source is not None and "logOffset" in source:
                lines.append(f"    files source {index}: log offset {source['logOffset']}")
        watermark = _watermark_text(self.watermark_ms) or "none (starts from the data)"
        lines.append(
            f"  watermark {watermark}; state starts empty ({self.empty_state_stores} store partitions)"
        )
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


@dataclass
class ResetResult:
    app: str
    reset_from: str
    queries: list[QueryReset]
    skipped: list[str] = field(default_factory=list)

    def describe(self) -> str:
        header = f"reset {len(self.queries)} checkpoint(s) of {self.app} from {self.reset_from}:"
        skipped = [f"skipped {reason}" for reason in self.skipped]
        return "\n".join([header, *(query.describe() for query in self.queries), *skipped])

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))


@dataclass
class _ResetPlan:
    spec: QuerySpec
    checkpoint: Path
    # None: nothing to continue, so Spark's own first start is used (batch 0, sources/<i>/0).
    continue_after: int | None
    sources: list[dict[str, Any] | None]
    # The watermark the planted last batch "ran with" (late-row filter of the next batch) and the one
    # its commit hands on (emission and eviction in the next batch), as Spark would have them.
    batch_watermark_ms: int
    watermark_ms: int
    batch_timestamp_ms: int | None
    conf: dict[str, str]
    state_stores: list[tuple[int, str]]
    copy_source_logs: list[int]
    # The planted last batch is the old one itself: offsets/B-1 can be copied as it is.
    reuse_previous_offsets: bool
    notes: list[str]


def reset(
    config: PipelineConfig,
    app: str,
    query_or_all: str,
    *,
    from_: ResetFrom,
    offsets: Mapping[str, Mapping[str | int, int]] | None = None,
    timestamp_ms: int | None = None,
    confirm: str | None,
    quiet_period_s: float | None = None,
) -> ResetResult:
    """Replace a query's checkpoint (or all of the app's) with one that starts exactly where asked.

    ``from_``: "committed" resumes after the last batch whose output was committed; "offsets" starts at
    ``offsets`` ({"topic": {"partition": offset}}, -2 = earliest, -1 = latest); "time" starts at the first
    offset whose Kafka timestamp is at or after ``timestamp_ms``. State is lost; from "committed" no input
    is skipped or read twice. ``confirm`` must be the app's name. The app must be stopped.

    How: the old folder is moved aside to ``<checkpoint>.reset-<UTC time>`` (never deleted). The new one
    continues the batch numbering: offsets/B-1 and offsets/B ending at the start offsets, commits/B, and
    an empty state store at version B+1 for each stateful operator, so Spark's next batch, B+1, reads
    from exactly there with empty state. For a file sink, B is the last batch in its _spark_metadata
    log: the sink skips ids it already has and its readers need the log gapless. Other queries get two
    ids above the old ones. Only without any history does Spark start at batch 0, from a planted
    sources/<i>/0 (a new checkpoint at batch 0 over an existing file sink log would lose batches).
    """
    _check_app(app)
    if confirm != app:
        raise CheckpointError(
            f"reset of {app} not confirmed: a reset moves the checkpoint aside and rebuilds state from "
            f"scratch. Type the app name to confirm (--confirm {app}, or confirm={app} in the DAG); "
            f"got {confirm!r}"
        )
    _check_reset_arguments(from_, offsets, timestamp_ms)
    specs = _selected_queries(config, app, query_or_all)
    report = inspect(config, app)
    skipped = []
    if from_ == "committed" and query_or_all == "all":
        # Nothing committed and no output: the query's next start is a fresh one anyway.
        untouched = {q.query for q in report.queries if not q.exists and q.output_latest_batch is None}
        skipped = [f"{app}.{name}: no checkpoint, nothing to reset" for name in sorted(untouched)]
        specs = [spec for spec in specs if spec.name not in untouched]
    fingerprints = query_fingerprints(config, app)
    wanted = _resolve_kafka_offsets(config, specs, from_, offsets, timestamp_ms)
    plans = [
        _plan_reset(config, spec, report.query(spec.name), from_, wanted.get(spec.name)) for spec in specs
    ]
    for plan in plans:
        _refuse_if_running(config, app, plan.checkpoint, quiet_period_s)

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    summary = {"committed": "the last committed offsets", "offsets": "given offsets", "time": "a time"}[from_]
    results = []
    for plan in plans:
        first_batch = 0 if plan.continue_after is None else plan.continue_after + 1
        aside = _free_name(plan.checkpoint.with_name(f"{plan.checkpoint.name}.reset-{stamp}"))
        kept = aside if plan.checkpoint.exists() else None
        reset_info = {
            "at": _iso(datetime.now(UTC)),
            "from": from_,
            "timestamp_ms": timestamp_ms,
            "summary": f"reset from {summary}, first batch {first_batch}",
            "first_batch": first_batch,
            # Planted by the reset, never run: readers of copied offsets logs must not treat them as reads.
            "planted_batches": [b for b in (first_batch - 2, first_batch - 1) if b >= 0 and first_batch > 0],
            "start_offsets": plan.sources,
            "old_checkpoint": str(kept) if kept else None,
        }
        _replace_checkpoint(plan, kept, fingerprints[plan.spec.name], reset_info)
        results.append(
            QueryReset(
                query=f"{app}.{plan.spec.name}",
                path=str(plan.checkpoint),
                old_checkpoint=str(kept) if kept else None,
                first_batch=first_batch,
                start_offsets=_merge_kafka_offsets(plan.sources),
                start_source_offsets=plan.sources,
                watermark_ms=plan.watermark_ms,
                empty_state_stores=0
                if plan.continue_after is None
                else len(plan.state_stores) * _partitions(plan.conf),
                notes=plan.notes,
            )
        )
    return ResetResult(app, from_, results, skipped)


def _check_reset_arguments(from_: str, offsets: Mapping[str, Any] | None, timestamp_ms: int | None) -> None:
    if from_ not in RESET_FROM:
        raise CheckpointError(f"reset from {from_!r}: choose one of {', '.join(RESET_FROM)}")
    if from_ == "offsets" and not offsets:
        raise CheckpointError('reset from offsets needs the offsets: {"topic": {"partition": offset}}')
    if from_ == "time" and timestamp_ms is None:
        raise CheckpointError("reset from time needs the time (ISO-8601, e.g. 2026-01-01T00:00:00Z)")
    if from_ != "offsets" and offsets:
        raise CheckpointError(f"offsets were given but the reset is from {from_}: use --from offsets")
    if from_ != "time" and timestamp_ms is not None:
        raise CheckpointError(f"a time was given but the reset is from {from_}: use --from time")


def _selected_queries(config: PipelineConfig, app: str, query_or_all: str) -> list[QuerySpec]:
    specs = query_specs(config, app)
    if query_or_all == "all":
        return specs
    name = query_or_all.removeprefix(f"{app}.")
    chosen = [spec for spec in specs if spec.name == name]
    if not chosen:
        raise CheckpointError(
            f"{app} has no query {query_or_all!r}; its queries: {', '.join(s.name for s in specs)}, or all"
        )
    return chosen


def _plan_reset(
    config: PipelineConfig,
    spec: QuerySpec,
    found: QueryCheckpoint,
    from_: str,
    kafka_start: list[dict[str, Any]] | None,
) -> _ResetPlan:
    checkpoint = _local_path(found.path)
    if checkpoint is None:
        raise CheckpointError(f"{found.name}: {found.path} is not on a local filesystem; reset it by hand")
    notes: list[str] = []
    copy_source_logs: list[int] = []
    batch_watermark_ms = watermark_ms = 0
    batch_timestamp_ms: int | None = None
    resumed: int | None = None
    if from_ == "committed":
        entry, watermark_ms, resumed = _committed_start(checkpoint, spec, found)
        sources, batch_watermark_ms, batch_timestamp_ms = (
            entry.sources,
            entry.watermark_ms,
            entry.timestamp_ms,
        )
        if resumed != found.last_committed_batch:
            notes.append(
                f"batch {resumed} was already committed by the file sink (not yet in the checkpoint's "
                "commit log): the new checkpoint starts after it, so it is not written twice"
            )
        copy_source_logs = [i for i, s in enumerate(sources) if s is not None and "logOffset" in s]
    else:
        assert kafka_start is not None
        sources = list(kafka_start)
        notes.append("the watermark starts over: events older than the old watermark are not dropped as late")

    if spec.output_path:
        # A file sink skips batch ids its _spark_metadata log already has, and readers need that log
        # gapless from 0: so the numbering continues right after the sink's last batch, or starts at 0.
        continue_after = found.output_latest_batch
        if continue_after is None and copy_source_logs:
            raise CheckpointError(
                f"{found.name}: the file sink's log at {spec.output_path} is gone, so the query must start "
                "at batch 0, where a files source cannot be told to resume; restore the output's log"
            )
    else:
        history = [b for b in (found.last_offsets_batch, found.last_committed_batch) if b is not None]
        # Two unused ids for the planted batches: no batch id of the old checkpoint gets other content.
        continue_after = max(history) + 2 if history else None
    conf = dict(found.spark_conf) or {**_SPARK_41_PINNED_CONF}
    conf[_SHUFFLE_PARTITIONS] = str(config.spark.shuffle_partitions)
    conf[_PROVIDER_CLASS] = STATE_STORE_PROVIDERS[config.spark.state_store]
    stores: set[tuple[int, str]] = {(op, s) for op, names in spec.state_layout.items() for s in names}
    if spec.stateful:
        # Old operators too: an extra empty store costs nothing, a missing one fails the first batch.
        stores |= {(op, s) for op, info in found.state_operators.items() for s in info["stores"]}
    hdfs = config.spark.state_store == "hdfs"
    if stores and continue_after is not None and hdfs and conf.get(_STATE_CODEC, "lz4") != "lz4":
        raise CheckpointError(
            f"{found.name}: cannot create empty HDFS-backed state with the {conf[_STATE_CODEC]} codec; "
            "switch spark.state_store to rocksdb for the reset"
        )
    if continue_after is None:
        notes.append("no batch history to continue: Spark starts at batch 0 from the planted start offsets")
    return _ResetPlan(
        spec,
        checkpoint,
        continue_after,
        sources,
        batch_watermark_ms,
        watermark_ms,
        batch_timestamp_ms if resumed == continue_after else None,
        conf,
        sorted(stores),
        copy_source_logs,
        resumed is not None and resumed == continue_after,
        notes,
    )


def _committed_start(
    checkpoint: Path, spec: QuerySpec, found: QueryCheckpoint
) -> tuple[_OffsetsEntry, int, int]:
    """The resumed batch's offsets entry, the watermark its commit hands on, and its id."""
    if found.last_committed_batch is None:
        raise CheckpointError(
            f"{found.name}: no batch was ever committed ({found.path}), so there is no committed position; "
            "reset from a time or from offsets instead"
        )
    resumed = found.last_committed_batch
    watermark_ms = found.committed_watermark_ms or 0
    # A file sink commits its own log before Spark writes commits/N: after a crash in between, the
    # sink already holds batch N, and resuming before it would write N's rows a second time.
    latest_in_sink = found.output_latest_batch
    if spec.output_path and latest_in_sink is not None and latest_in_sink > resumed:
        resumed = latest_in_sink
    try:
        entry = _parse_offsets(checkpoint / "offsets" / str(resumed), len(spec.sources))
    except _Unreadable as error:
        raise CheckpointError(
            f"{found.name}: the committed position is unreadable: {checkpoint}/offsets/{resumed} {error}. "
            "Reset from a time or from offsets instead"
        ) from None
    if not _same_topics(spec, entry.sources):
        raise CheckpointError(
            f"{found.name}: the committed offsets are for other sources than the query reads now "
            f"({_describe_sources(entry.sources)} vs {[list(s) for s in spec.sources]}); "
            "reset from a time or from offsets instead"
        )
    if resumed != found.last_committed_batch:
        watermark_ms = entry.watermark_ms
    return entry, watermark_ms, resumed


def _describe_sources(sources: list[dict[str, Any] | None]) -> str:
    return json.dumps([sorted(s) if s and "logOffset" not in s else s for s in sources])


def _partitions(conf: Mapping[str, str]) -> int:
    return int(conf[_SHUFFLE_PARTITIONS])


def _refuse_if_running(
    config: PipelineConfig, app: str, checkpoint: Path, quiet_period_s: float | None
) -> None:
    """A reset under a running query would be overwritten by it: refuse while the app looks alive."""
    written = [
        entry.stat().st_mtime
        for folder in (checkpoint / "offsets", checkpoint / "commits")
        if folder.is_dir()
        for entry in folder.iterdir()
    ]
    if not written:
        return
    last_write = max(written)
    exit_state = Path(config.data_path("control")) / f"{app}.exit.json"
    if exit_state.is_file() and exit_state.stat().st_mtime >= last_write:
        return  # the app recorded its exit after its last batch
    quiet = (
        quiet_period_s
        if quiet_period_s is not None
        else max(60.0, 3 * registry.app(app).trigger(config).seconds)
    )
    age = time.time() - last_write
    if age < quiet:
        raise CheckpointError(
            f"{app} looks like it is running: {checkpoint} was written {age:.0f}s ago and the app has not "
            f"recorded an exit since. Stop it first (`pipelinectl stop {app}`), then retry the reset"
        )


def _replace_checkpoint(
    plan: _ResetPlan, aside: Path | None, fingerprint: Mapping[str, Any], reset_info: Mapping[str, Any]
) -> None:
    """Build the new checkpoint beside the old one, then swap them; the old one is only renamed."""
    checkpoint = plan.checkpoint
    staging = _free_name(checkpoint.with_name(f".{checkpoint.name}.reset-staging"))
    staging.mkdir(parents=True)
    try:
        _write_new_checkpoint(staging, plan, old=checkpoint)
        _write_fingerprint(staging / FINGERPRINT_FILE, plan.spec.app, plan.spec.name, fingerprint, reset_info)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if aside is not None:
        checkpoint.rename(aside)
    try:
        staging.rename(checkpoint)
    except BaseException:
        if aside is not None:
            aside.rename(checkpoint)
        raise


def _free_name(path: Path) -> Path:
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}-{number}")
    return candidate


def _write_new_checkpoint(target: Path, plan: _ResetPlan, *, old: Path) -> None:
    for index, source in enumerate(plan.sources):
        if source is not None and "logOffset" not in source:
            # Spark's Kafka source reads this on a first start; after that it records where we began.
            folder = target / "sources" / str(index)
            folder.mkdir(parents=True)
            (folder / "0").write_bytes(b"\x00v1\n" + json.dumps(source, separators=(",", ":")).encode())
    for index in plan.copy_source_logs:
        # A files source's offsets point into its own seen-files log, so the log travels with them.
        shutil.copytree(old / "sources" / str(index), target / "sources" / str(index), dirs_exist_ok=True)
    if plan.continue_after is None:
        return
    batch = plan.continue_after
    (target / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}, separators=(",", ":")))
    metadata = {
        "batchWatermarkMs": plan.batch_watermark_ms,
        "batchTimestampMs": plan.batch_timestamp_ms or int(time.time() * 1000),
        "conf": plan.conf,
    }
    # Spark's own layout (compact JSON, no trailing newline): resuming from the committed batch, the
    # planted files equal the old ones unless the conf changed, so copies of the log stay consistent.
    lines = ["v1", json.dumps(metadata, separators=(",", ":"))]
    lines += ["-" if s is None else json.dumps(s, separators=(",", ":")) for s in plan.sources]
    (target / "offsets").mkdir()
    (target / "commits").mkdir()
    (target / "offsets" / str(batch)).write_text("\n".join(lines))
    if batch > 0:
        # Spark restarts after the last commit and reads the batch before it, for that batch's start.
        previous = old / "offsets" / str(batch - 1)
        if plan.reuse_previous_offsets and _readable_offsets(previous, len(plan.sources)):
            shutil.copyfile(previous, target / "offsets" / str(batch - 1))
        else:
            (target / "offsets" / str(batch - 1)).write_text("\n".join(lines))
    commit = json.dumps({"nextBatchWatermarkMs": plan.watermark_ms}, separators=(",", ":"))
    (target / "commits" / str(batch)).write_text(f"v1\n{commit}")
    _write_empty_state(target, plan, version=batch + 1)


def _readable_offsets(path: Path, sources: int) -> bool:
    try:
        _parse_offsets(path, sources)
    except _Unreadable:
        return False
    return True


def _write_empty_state(target: Path, plan: _ResetPlan, *, version: int) -> None:
    """Batch V loads state version V; Spark 4.1 has no way to say 'start empty at V', so write it."""
    partitions = _partitions(plan.conf)
    hdfs = plan.conf[_PROVIDER_CLASS] == STATE_STORE_PROVIDERS["hdfs"]
    for operator, store in plan.state_stores:
        for partition in range(partitions):
            folder = target / "state" / str(operator) / str(partition)
            if store != "default":
                folder = folder / store
            folder.mkdir(parents=True, exist_ok=True)
            if hdfs:
                (folder / f"{version}.snapshot").write_bytes(_EMPTY_HDFS_STATE_FILE)
            else:
                with zipfile.ZipFile(folder / f"{version}.zip", "w") as archive:
                    archive.writestr("metadata", _EMPTY_ROCKSDB_METADATA)


# --------------------------------------------------------------------------- Kafka offsets for a reset


def _resolve_kafka_offsets(
    config: PipelineConfig,
    specs: list[QuerySpec],
    from_: str,
    offsets: Mapping[str, Mapping[str | int, int]] | None,
    timestamp_ms: int | None,
) -> dict[str, list[dict[str, Any]]]:
    """Per query, one {"topic": {"partition": offset}} per Spark source, checked against the cluster."""
    if from_ == "committed":
        return {}
    not_kafka = [spec.name for spec in specs if spec.source_kind != "kafka"]
    if not_kafka:
        raise CheckpointError(
            f"reset from {from_} needs Kafka sources; source.kind is {config.source.kind} "
            "(reset from committed works for files sources)"
        )
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    topics = sorted({topic for spec in specs for topic in spec.topics})
    consumer = Consumer(
        {
            **config.kafka_client_config(),
            # Never subscribes or commits: the group exists only as a client-side formality.
            "group.id": f"pipeline-checkpoint-reset-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    try:
        bounds = _partition_bounds(consumer, topics, TopicPartition)
        if from_ == "offsets":
            assert offsets is not None
            starts = _given_offsets(offsets, bounds)
        else:
            assert timestamp_ms is not None
            starts = _offsets_for_time(consumer, bounds, timestamp_ms, TopicPartition)
    except KafkaException as error:
        raise CheckpointError(
            f"could not resolve offsets on {config.kafka.bootstrap_servers}: {error}"
        ) from None
    finally:
        consumer.close()
    return {
        spec.name: [
            {topic: {str(p): o for p, o in sorted(starts[topic].items())} for topic in source}
            for source in spec.sources
        ]
        for spec in specs
    }


def _partition_bounds(
    consumer: Any, topics: list[str], topic_partition: Any
) -> dict[str, dict[int, tuple[int, int]]]:
    bounds: dict[str, dict[int, tuple[int, int]]] = {}
    for topic in topics:
        metadata = consumer.list_topics(topic, timeout=15).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            reason = metadata.error if metadata is not None else "unknown topic"
            raise CheckpointError(f"topic {topic} is not available on the cluster: {reason}")
        bounds[topic] = {
            partition: consumer.get_watermark_offsets(topic_partition(topic, partition), timeout=15)
            for partition in sorted(metadata.partitions)
        }
    return bounds


def _given_offsets(
    offsets: Mapping[str, Mapping[str | int, int]], bounds: Mapping[str, Mapping[int, tuple[int, int]]]
) -> dict[str, dict[int, int]]:
    starts: dict[str, dict[int, int]] = {}
    problems = []
    for topic, partitions in bounds.items():
        given = offsets.get(topic)
        if given is None:
            problems.append(f"{topic}: missing (give every partition of every topic the query reads)")
            continue
        given_by_partition = {int(p): int(o) for p, o in given.items()}
        missing = sorted(set(partitions) - set(given_by_partition))
        unknown = sorted(set(given_by_partition) - set(partitions))
        if missing or unknown:
            problems.append(f"{topic}: partitions missing {missing}, unknown {unknown}")
            continue
        starts[topic] = {}
        for partition, (low, high) in partitions.items():
            wanted = given_by_partition[partition]
            offset = low if wanted == -2 else high if wanted == -1 else wanted
            if not low <= offset <= high:
                problems.append(f"{topic}[{partition}]: {wanted} is outside the retained range {low}..{high}")
            starts[topic][partition] = offset
    extra = sorted(set(offsets) - set(bounds))
    if extra:
        problems.append(f"topics the query does not read: {extra}")
    if problems:
        raise CheckpointError("reset from offsets refused:\n  " + "\n  ".join(problems))
    return starts


def _offsets_for_time(
    consumer: Any,
    bounds: Mapping[str, Mapping[int, tuple[int, int]]],
    timestamp_ms: int,
    topic_partition: Any,
) -> dict[str, dict[int, int]]:
    wanted = [topic_partition(topic, p, timestamp_ms) for topic, parts in bounds.items() for p in parts]
    found = consumer.offsets_for_times(wanted, timeout=15)
    starts: dict[str, dict[int, int]] = {}
    for item in found:
        if item.error is not None:
            raise CheckpointError(
                f"offsets_for_times failed for {item.topic}[{item.partition}]: {item.error}"
            )
        # -1: no record at or after the time yet, so start at the end (the next record to arrive).
        offset = item.offset if item.offset >= 0 else bounds[item.topic][item.partition][1]
        starts.setdefault(item.topic, {})[item.partition] = offset
    return starts


# --------------------------------------------------------------------------- command line


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """``checkpoint inspect|reset APP [...]`` arguments, for pipelinectl's checkpoint command."""
    parser.add_argument("action", choices=["inspect", "reset"])
    parser.add_argument("app", choices=APP_NAMES)
    parser.add_argument("--json", action="store_true", help="inspect: print the report as JSON")
    parser.add_argument("--query", default="all", help="reset: one query (sink name), or all (default)")
    parser.add_argument(
        "--from",
        dest="reset_from",
        choices=RESET_FROM,
        default=None,
        help="reset: committed = after the last committed batch; offsets = --offsets; time = --time",
    )
    parser.add_argument(
        "--offsets",
        default=None,
        metavar="JSON",
        help='reset --from offsets: {"topic": {"partition": offset}} (-2 earliest, -1 latest), or @file',
    )
    parser.add_argument(
        "--time",
        dest="reset_time",
        default=None,
        metavar="ISO",
        help="reset --from time: e.g. 2026-01-01T00:00Z",
    )
    parser.add_argument("--confirm", default=None, metavar="APP", help="reset: the app's name, to confirm")


def cli_inspect(config: PipelineConfig, app: str, *, as_json: bool = False) -> int:
    """Print the report; exit 0 when the app may start, else EXIT_CHECKPOINT_REFUSED (as preflight)."""
    report = inspect(config, app)
    print(json.dumps(report.to_dict(), indent=2) if as_json else report.describe())
    return 0 if report.ok else EXIT_CHECKPOINT_REFUSED


def cli_reset(config: PipelineConfig, app: str, args: argparse.Namespace) -> int:
    """Run a reset from parsed arguments; asks for the confirmation on a terminal when it is not given."""
    confirm = args.confirm
    if confirm is None and sys.stdin is not None and sys.stdin.isatty():
        confirm = input(f"Resetting {app} ({args.query}) loses its state. Type {app} to confirm: ").strip()
    try:
        if args.reset_from is None:
            raise CheckpointError("reset needs --from committed, --from offsets or --from time")
        result = reset(
            config,
            app,
            args.query,
            from_=args.reset_from,
            offsets=parse_offsets_argument(args.offsets) if args.offsets else None,
            timestamp_ms=parse_reset_time(args.reset_time) if args.reset_time else None,
            confirm=confirm,
        )
    except CheckpointError as error:
        print(f"pipelinectl: {error}", file=sys.stderr)
        return 1
    print(result.describe())
    return 0


def parse_offsets_argument(text: str) -> dict[str, dict[str, int]]:
    """The --offsets value (or the DAG param): JSON text, or @path to a file holding it."""
    raw = Path(text[1:]).read_text() if text.startswith("@") else text
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        raise CheckpointError(f"--offsets is not valid JSON: {error.msg}") from None
    if not isinstance(value, dict) or not all(
        isinstance(parts, dict) and all(isinstance(o, int) for o in parts.values())
        for parts in value.values()
    ):
        raise CheckpointError('--offsets must look like {"topic": {"0": 42, "1": 17}}')
    return value


def parse_reset_time(text: str) -> int:
    """ISO-8601 (UTC when no zone is given) to epoch milliseconds."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise CheckpointError(
            f"--time {text!r} is not an ISO-8601 time such as 2026-01-01T00:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


# --------------------------------------------------------------------------- helpers


def _check_app(app: str) -> None:
    if app not in APP_NAMES:
        raise CheckpointError(f"unknown app {app!r}; the apps are {', '.join(APP_NAMES)}")


def _local_path(location: str | None) -> Path | None:
    if not location:
        return None
    if location.startswith("file://"):
        return Path(location.removeprefix("file://"))
    return None if "://" in location else Path(location)


def _write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_bytes(data)
    temporary.replace(target)
