"""What an app's checkpoints say, and whether the app may start from them.

``QuerySpec`` and the fingerprints are derived from the registry's declaration of each query. Spark
4.1 records no Spark version in a checkpoint (the conf only pins state format versions), so
``record_fingerprints`` writes ``pipeline_fingerprint.json`` next to Spark's files: the settings that
shape the query's state, and the Spark version that started it.

``preflight`` runs before every start. It refuses, naming the query, the file and what to do, where Spark
would otherwise die with a stack trace (an unreadable or half-written log) or silently go wrong (a
state-shaping setting changed; a file sink whose own log would make it skip the new batches).
``inspect`` is its read-only part, and the front door's ``pipelinectl checkpoint inspect APP``.

Only local (or ``file://``) checkpoint locations are read; for others, inspection says it was skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stream_pipelines.checkpoint.format import (
    PROVIDER_CLASS,
    PROVIDER_NAMES,
    SHUFFLE_PARTITIONS,
    STATE_STORE_PROVIDERS,
    OffsetsEntry,
    UnreadableFile,
    batch_ids,
    kafka_offsets,
    read_commit,
    read_initial_offsets,
    read_offsets,
    read_query_id,
    sink_log_latest_batch,
    state_operators,
)
from stream_pipelines.core import registry
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.registry import App
from stream_pipelines.core.store import location as location_of
from stream_pipelines.core.store import write_json

FINGERPRINT_FILE = "pipeline_fingerprint.json"
FINGERPRINT_FORMAT = 1


class CheckpointError(RuntimeError):
    """A checkpoint that must not be started from, or a reset that was refused; the message says why."""

    def __init__(self, message: str, report: AppCheckpointReport | None = None) -> None:
        super().__init__(message)
        self.report = report


# --------------------------------------------------------------------------- the apps' queries


@dataclass(frozen=True)
class QuerySpec:
    """One query as inspection and reset see it: its registry declaration resolved against the config."""

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


def query_specs(config: PipelineConfig, app: App) -> list[QuerySpec]:
    """The app's queries in the order its build_sinks returns them, as the registry declares them."""
    return [
        QuerySpec(
            app.name,
            query.name,
            config.source.kind,
            query.source_topics(config),
            query.sink.location(config) if query.sink is not None else None,
            query.state_layout,
        )
        for query in app.queries
    ]


def query_fingerprints(config: PipelineConfig, app: App) -> dict[str, dict[str, Any]]:
    """Per query, the settings that shape its offsets and state; a change to any of them is incompatible.

    Stored in every checkpoint and compared at each start, so the keys and values must not change for
    the same configuration (tests/unit/test_checkpoint_reader.py pins them).
    """
    return {
        query.name: {
            "source": config.source.kind,
            "source_topics": [list(source) for source in query.source_topics(config)],
            **query.state_shape(config),
        }
        for query in app.queries
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


def record_fingerprints(config: PipelineConfig, app: App) -> list[str]:
    """Record the current fingerprint in each checkpoint that has none yet; returns the files written.

    Call it right before the queries start. A checkpoint with no batch planned yet gets the current
    fingerprint even if it had one, because nothing in it depends on the old settings.
    """
    written = []
    fingerprints = query_fingerprints(config, app)
    for spec in query_specs(config, app):
        checkpoint = location_of(config.spark.extra_conf, config.checkpoint_dir(app.name, spec.name))
        target = checkpoint / FINGERPRINT_FILE
        if target.exists() and batch_ids(checkpoint / "offsets"):
            continue
        write_fingerprint(target, app.name, spec.name, fingerprints[spec.name])
        written.append(str(target))
    return written


def write_fingerprint(
    target: Path, app: str, query: str, fingerprint: Mapping[str, Any], reset: Mapping[str, Any] | None = None
) -> None:
    document: dict[str, Any] = {
        "format": FINGERPRINT_FORMAT,
        "app": app,
        "query": registry.spark_query_name(app, query),
        "spark_version": running_spark_version(),
        "recorded_at": iso_utc(datetime.now(UTC)),
        "fingerprint": dict(fingerprint),
    }
    if reset is not None:
        document["reset"] = dict(reset)
    write_json(target, document)


def running_spark_version() -> str | None:
    """The installed PySpark's version, without importing it (Airflow workers may not have it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyspark")
    except PackageNotFoundError:
        return None


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
            lines.extend(f"    {line}" for line in offset_lines(self.initial_offsets))
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
                lines.extend(f"    {line}" for line in offset_lines(self.committed_offsets))
            for index, source in enumerate(self.committed_source_offsets):
                if source is not None and "logOffset" in source:
                    lines.append(f"  resume point of files source {index}: log offset {source['logOffset']}")
            if self.initial_offsets and self.last_committed_batch is None:
                lines.append("  first batch will start at:")
                lines.extend(f"    {line}" for line in offset_lines(self.initial_offsets))
            settings = []
            if self.shuffle_partitions is not None:
                settings.append(f"shuffle partitions {self.shuffle_partitions}")
            if self.state_store_provider:
                provider = PROVIDER_NAMES.get(self.state_store_provider, self.state_store_provider)
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
        return {"app": self.app, "ok": self.ok, "queries": [jsonable(asdict(q)) for q in self.queries]}


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return value


def offset_lines(offsets: Mapping[str, Mapping[int, int]]) -> list[str]:
    return [
        f"{topic}: " + "  ".join(f"p{partition}={offset}" for partition, offset in sorted(partitions.items()))
        for topic, partitions in sorted(offsets.items())
    ]


def inspect(config: PipelineConfig, app: App) -> AppCheckpointReport:
    """Read every query checkpoint of the app; never raises for what it finds, it reports it."""
    specs = query_specs(config, app)
    fingerprints = query_fingerprints(config, app)
    return AppCheckpointReport(
        app.name, [_inspect_query(config, spec, fingerprints[spec.name]) for spec in specs]
    )


def _inspect_query(config: PipelineConfig, spec: QuerySpec, fingerprint: dict[str, Any]) -> QueryCheckpoint:
    folder = config.checkpoint_dir(spec.app, spec.name)
    result = QueryCheckpoint(
        spec.app,
        spec.name,
        folder,
        current_fingerprint=fingerprint,
        running_spark_version=running_spark_version(),
    )
    checkpoint = location_of(config.spark.extra_conf, folder)
    result.output_latest_batch = (
        None
        if spec.output_path is None
        else sink_log_latest_batch(location_of(config.spark.extra_conf, spec.output_path))
    )
    _read_fingerprint(checkpoint, result)
    offsets_ids = batch_ids(checkpoint / "offsets")
    commit_ids = batch_ids(checkpoint / "commits")
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

    def problem(file: str, error: UnreadableFile | str) -> None:
        result.problems.append(f"{checkpoint / file} {error}")

    if has_metadata:
        try:
            result.query_id = read_query_id(checkpoint / "metadata")
        except UnreadableFile as error:
            problem("metadata", error)
    elif offsets_ids:
        problem("metadata", "is missing while offsets exist (a half-written or partly copied checkpoint)")

    result.last_offsets_batch = offsets_ids[-1] if offsets_ids else None
    result.last_committed_batch = commit_ids[-1] if commit_ids else None
    _check_sequences(offsets_ids, commit_ids, problem)

    # What a restart reads: the newest offsets, the one before it (its start), the newest commit.
    entries: dict[int, OffsetsEntry] = {}
    needed = {result.last_offsets_batch, result.last_committed_batch}
    if result.last_offsets_batch:
        needed.add(result.last_offsets_batch - 1)
    for batch in sorted(b for b in needed if b is not None and b in offsets_ids):
        try:
            entries[batch] = read_offsets(checkpoint / "offsets" / str(batch), len(spec.sources))
        except UnreadableFile as error:
            problem(f"offsets/{batch}", error)
    if result.last_offsets_batch and result.last_offsets_batch - 1 not in offsets_ids:
        problem(
            f"offsets/{result.last_offsets_batch - 1}",
            f"is missing: Spark needs it to restart at batch {result.last_offsets_batch}",
        )
    newest = entries.get(result.last_offsets_batch) or entries.get(result.last_committed_batch)
    if newest is not None:
        result.spark_conf = newest.conf
        partitions = newest.conf.get(SHUFFLE_PARTITIONS)
        result.shuffle_partitions = int(partitions) if partitions and partitions.isdigit() else None
        result.state_store_provider = newest.conf.get(PROVIDER_CLASS)

    committed = result.last_committed_batch
    if committed is not None:
        if committed in offsets_ids and committed < (result.last_offsets_batch or 0):
            result.batch_in_flight = result.last_offsets_batch
        try:
            result.committed_watermark_ms = read_commit(checkpoint / "commits" / str(committed))
            result.committed_watermark = watermark_text(result.committed_watermark_ms)
        except UnreadableFile as error:
            problem(f"commits/{committed}", error)
        entry = entries.get(committed)
        if entry is not None:
            result.committed_source_offsets = entry.sources
            result.committed_offsets = kafka_offsets(entry.sources)
            result.committed_resume_available = same_topics(spec, entry.sources)
    _read_initial_offsets(checkpoint, spec, result)
    result.state_operators = state_operators(checkpoint)
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


def same_topics(spec: QuerySpec, sources: list[dict[str, Any] | None]) -> bool:
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
            offsets = read_initial_offsets(path)
        except UnreadableFile as error:
            result.problems.append(f"{path} {error}")
            continue
        for topic, partitions in kafka_offsets([offsets]).items():
            result.initial_offsets.setdefault(topic, {}).update(partitions)


def _check_fresh_start(spec: QuerySpec, result: QueryCheckpoint) -> None:
    if result.output_latest_batch is not None:
        result.problems.append(
            f"there is no checkpoint, but the file sink at {spec.output_path} has committed batches up to "
            f"{result.output_latest_batch}: a fresh start would number its batches from 0 and the sink would "
            f"silently skip batches 0..{result.output_latest_batch}. Create a checkpoint that continues "
            "after them with a reset from a time or from offsets"
        )


def _check_sources(spec: QuerySpec, result: QueryCheckpoint, entry: OffsetsEntry | None) -> None:
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
        current = PROVIDER_NAMES.get(result.state_store_provider, result.state_store_provider)
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


def watermark_text(milliseconds: int) -> str | None:
    if milliseconds <= 0:
        return None
    return iso_utc(datetime.fromtimestamp(milliseconds / 1000, UTC))


def iso_utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --------------------------------------------------------------------------- preflight


def preflight(config: PipelineConfig, app: App) -> AppCheckpointReport:
    """Inspect before a start; raises CheckpointError when a query must not be started from its checkpoint.

    The returned report's ``describe()`` is the resume point to log. A missing checkpoint is a fresh start.
    """
    report = inspect(config, app)
    if report.ok:
        return report
    name = app.name
    lines = [f"checkpoint preflight refuses to start {name}:"]
    for query in report.queries:
        if not query.problems:
            continue
        lines.append(f"  {query.name} (checkpoint {query.path}):")
        lines.extend(f"    - {problem}" for problem in query.problems)
    lines.append("What to do: if it was an accident, undo it (revert the setting, restore the checkpoint).")
    lines.append(
        "Otherwise reset the checkpoint: state is lost, but no input is skipped or read twice. "
        "Inspect first with `pipelinectl checkpoint inspect " + name + "`, then:"
    )
    for query in report.queries:
        if query.problems:
            lines.append(f"  {_reset_hint(name, query)}")
    lines.append(f"(or the checkpoint reset DAG with app={name}, the query, `from` and confirm={name}).")
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
