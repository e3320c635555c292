"""A new checkpoint for a query that starts exactly at the chosen offsets with empty state.

``reset`` replaces a query's checkpoint (or all of an app's) without any change to the app's
configuration; its docstring says how and why. The offsets come from the old checkpoint's committed
position, from given offsets or from a time (looked up on the Kafka cluster). Spark 4.1 cannot be
told to start empty at batch B, so the reset writes the empty state stores itself.
"""

from __future__ import annotations

import io
import json
import time
import uuid
import zipfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from stream_pipelines.checkpoint.format import (
    PROVIDER_CLASS,
    SHUFFLE_PARTITIONS,
    STATE_CODEC,
    STATE_STORE_PROVIDERS,
    OffsetsEntry,
    UnreadableFile,
    kafka_offsets,
    read_offsets,
)
from stream_pipelines.checkpoint.inspect import (
    FINGERPRINT_FILE,
    CheckpointError,
    QueryCheckpoint,
    QuerySpec,
    inspect,
    iso_utc,
    jsonable,
    offset_lines,
    query_fingerprints,
    query_specs,
    same_topics,
    watermark_text,
    write_fingerprint,
)
from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.control.lease import live_owner
from stream_pipelines.core import registry, store
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.registry import App
from stream_pipelines.kafka.clients import check_access, offset_reader

ResetFrom = Literal["committed", "offsets", "time"]
RESET_FROM: tuple[str, ...] = ("committed", "offsets", "time")

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
    STATE_CODEC: "lz4",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": "false",
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
        lines.extend(f"    {line}" for line in offset_lines(self.start_offsets))
        for index, source in enumerate(self.start_source_offsets):
            if source is not None and "logOffset" in source:
                lines.append(f"    files source {index}: log offset {source['logOffset']}")
        watermark = watermark_text(self.watermark_ms) or "none (starts from the data)"
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
        return jsonable(asdict(self))


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
    app: App,
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
    app_name = app.name
    if confirm != app_name:
        raise CheckpointError(
            f"reset of {app_name} not confirmed: a reset moves the checkpoint aside and rebuilds state from "
            f"scratch. Type the app name to confirm (--confirm {app_name}, or confirm={app_name} in the "
            f"DAG); got {confirm!r}"
        )
    _check_reset_arguments(from_, offsets, timestamp_ms)
    specs = _selected_queries(config, app, query_or_all)
    report = inspect(config, app)
    skipped = []
    if from_ == "committed" and query_or_all == "all":
        # Nothing committed and no output: the query's next start is a fresh one anyway.
        untouched = {q.query for q in report.queries if not q.exists and q.output_latest_batch is None}
        skipped = [
            f"{registry.spark_query_name(app_name, name)}: no checkpoint, nothing to reset"
            for name in sorted(untouched)
        ]
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
            "at": iso_utc(datetime.now(UTC)),
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
                query=registry.spark_query_name(app_name, plan.spec.name),
                path=str(plan.checkpoint),
                old_checkpoint=str(kept) if kept else None,
                first_batch=first_batch,
                start_offsets=kafka_offsets(plan.sources),
                start_source_offsets=plan.sources,
                watermark_ms=plan.watermark_ms,
                empty_state_stores=0
                if plan.continue_after is None
                else len(plan.state_stores) * _partitions(plan.conf),
                notes=plan.notes,
            )
        )
    return ResetResult(app_name, from_, results, skipped)


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


def _selected_queries(config: PipelineConfig, app: App, query_or_all: str) -> list[QuerySpec]:
    specs = query_specs(config, app)
    if query_or_all == "all":
        return specs
    name = query_or_all.removeprefix(f"{app.name}.")
    chosen = [spec for spec in specs if spec.name == name]
    if not chosen:
        raise CheckpointError(
            f"{app.name} has no query {query_or_all!r}; its queries: "
            f"{', '.join(s.name for s in specs)}, or all"
        )
    return chosen


def _plan_reset(
    config: PipelineConfig,
    spec: QuerySpec,
    found: QueryCheckpoint,
    from_: str,
    kafka_start: list[dict[str, Any]] | None,
) -> _ResetPlan:
    checkpoint = store.location(config.spark.extra_conf, found.path)
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
    conf[SHUFFLE_PARTITIONS] = str(config.spark.shuffle_partitions)
    conf[PROVIDER_CLASS] = STATE_STORE_PROVIDERS[config.spark.state_store]
    stores: set[tuple[int, str]] = {(op, s) for op, names in spec.state_layout.items() for s in names}
    if spec.stateful:
        # Old operators too: an extra empty store costs nothing, a missing one fails the first batch.
        stores |= {(op, s) for op, info in found.state_operators.items() for s in info["stores"]}
    hdfs = config.spark.state_store == "hdfs"
    if stores and continue_after is not None and hdfs and conf.get(STATE_CODEC, "lz4") != "lz4":
        raise CheckpointError(
            f"{found.name}: cannot create empty HDFS-backed state with the {conf[STATE_CODEC]} codec; "
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
) -> tuple[OffsetsEntry, int, int]:
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
        entry = read_offsets(checkpoint / "offsets" / str(resumed), len(spec.sources))
    except UnreadableFile as error:
        raise CheckpointError(
            f"{found.name}: the committed position is unreadable: {checkpoint}/offsets/{resumed} {error}. "
            "Reset from a time or from offsets instead"
        ) from None
    if not same_topics(spec, entry.sources):
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
    return int(conf[SHUFFLE_PARTITIONS])


def _refuse_if_running(
    config: PipelineConfig, app: App, checkpoint: Path, quiet_period_s: float | None
) -> None:
    """A reset under a running query would be overwritten by it: refuse while the app owns its lease, or
    (for a driver from before leases) while its checkpoint is being written."""

    owner = live_owner(config, app.name)
    if owner is not None:
        raise CheckpointError(
            f"{app.name} is running ({owner.describe()}). Stop it first (`pipelinectl stop {app.name}`), "
            "then retry the reset"
        )
    written = [
        entry.stat().st_mtime
        for folder in (checkpoint / "offsets", checkpoint / "commits")
        if folder.is_dir()
        for entry in folder.iterdir()
    ]
    if not written:
        return
    last_write = max(written)
    exit_recorded_at = ControlStore(config).exit_recorded_at(app.name)
    if exit_recorded_at is not None and exit_recorded_at >= last_write:
        return  # the app recorded its exit after its last batch
    quiet = (
        quiet_period_s if quiet_period_s is not None else max(60.0, 3 * app.trigger_interval(config).seconds)
    )
    age = time.time() - last_write
    if age < quiet:
        raise CheckpointError(
            f"{app.name} looks like it is running: {checkpoint} was written {age:.0f}s ago and the app "
            f"has not recorded an exit since. Stop it first (`pipelinectl stop {app.name}`), then retry "
            "the reset"
        )


def _replace_checkpoint(
    plan: _ResetPlan, aside: Path | None, fingerprint: Mapping[str, Any], reset_info: Mapping[str, Any]
) -> None:
    """Build the new checkpoint beside the old one, then swap them; the old one is only renamed."""
    checkpoint = plan.checkpoint
    staging = _free_name(checkpoint.with_name(f".{checkpoint.name}.reset-staging"))
    staging.mkdir(parents=True, exist_ok=True)
    try:
        _write_new_checkpoint(staging, plan, old=checkpoint)
        write_fingerprint(staging / FINGERPRINT_FILE, plan.spec.app, plan.spec.name, fingerprint, reset_info)
    except BaseException:
        store.remove_tree(staging)
        raise
    if aside is not None:
        store.move(checkpoint, aside)
    try:
        store.move(staging, checkpoint)
    except BaseException:
        if aside is not None:
            store.move(aside, checkpoint)
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
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "0").write_bytes(b"\x00v1\n" + json.dumps(source, separators=(",", ":")).encode())
    for index in plan.copy_source_logs:
        # A files source's offsets point into its own seen-files log, so the log travels with them.
        store.copy_tree(old / "sources" / str(index), target / "sources" / str(index))
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
    (target / "offsets").mkdir(exist_ok=True)
    (target / "commits").mkdir(exist_ok=True)
    (target / "offsets" / str(batch)).write_text("\n".join(lines))
    if batch > 0:
        # Spark restarts after the last commit and reads the batch before it, for that batch's start.
        previous = old / "offsets" / str(batch - 1)
        if plan.reuse_previous_offsets and _readable_offsets(previous, len(plan.sources)):
            store.copy_tree(previous, target / "offsets" / str(batch - 1))
        else:
            (target / "offsets" / str(batch - 1)).write_text("\n".join(lines))
    commit = json.dumps({"nextBatchWatermarkMs": plan.watermark_ms}, separators=(",", ":"))
    (target / "commits" / str(batch)).write_text(f"v1\n{commit}")
    _write_empty_state(target, plan, version=batch + 1)


def _readable_offsets(path: Path, sources: int) -> bool:
    try:
        read_offsets(path, sources)
    except UnreadableFile:
        return False
    return True


def _write_empty_state(target: Path, plan: _ResetPlan, *, version: int) -> None:
    """Batch V loads state version V; Spark 4.1 has no way to say 'start empty at V', so write it."""
    partitions = _partitions(plan.conf)
    hdfs = plan.conf[PROVIDER_CLASS] == STATE_STORE_PROVIDERS["hdfs"]
    for operator, store_name in plan.state_stores:
        for partition in range(partitions):
            folder = target / "state" / str(operator) / str(partition)
            if store_name != "default":
                folder = folder / store_name
            folder.mkdir(parents=True, exist_ok=True)
            if hdfs:
                (folder / f"{version}.snapshot").write_bytes(_EMPTY_HDFS_STATE_FILE)
            else:
                packed = io.BytesIO()
                with zipfile.ZipFile(packed, "w") as archive:
                    # A fixed date: the same empty store is the same bytes, on every store and run.
                    archive.writestr(
                        zipfile.ZipInfo("metadata", (1980, 1, 1, 0, 0, 0)), _EMPTY_ROCKSDB_METADATA
                    )
                (folder / f"{version}.zip").write_bytes(packed.getvalue())


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
    from confluent_kafka import KafkaException, TopicPartition

    check_access(config)
    topics = sorted({topic for spec in specs for topic in spec.topics})
    consumer = offset_reader(config, f"checkpoint-reset-{uuid.uuid4().hex[:8]}")
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
