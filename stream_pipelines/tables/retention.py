"""Retention: how long each kind of data is kept, and the daily removal of what has outlived it.

``config.retention`` states a life for every kind; each dataset names its kind in the registry. What
removes what, each run of the daily maintenance DAG (``output_maintenance``), through the file layer so
the same code serves a local disk, S3 and HDFS:

    file sinks       the sink's log forgets a file once it is older than ``compaction.sink_log``
                     (runtime.sink_log_options); the output sweep then removes it once its days are
                     compacted, or once it is past the dataset's retention (moving the dataset's
                     marker forward; maintenance.py). Readers never meet a missing file: they read
                     the log, and the log no longer lists it.
    compacted days   a day past the dataset's retention goes whole (moving the marker); replaced
                     versions and failed attempts after the grace period (``sweep_compacted``)
    batch log        per query, the batches committed before the cutoff, except the newest of them
                     (its end offsets and watermark are where the next batch starts)
    reset copies     the checkpoints a reset moved aside (``<checkpoint>.reset-<UTC time>``)
    records          the maintenance records under reports/maintenance
    kept             compliance datasets and the nightly reports (``forever`` by default)

Nothing in use is touched: a file a sink's log lists stays (readers and the next batches rely on it),
as does the batch log's newest entries and a live checkpoint; and the config refuses a retention of
the reconciliation's inputs shorter than its late horizon + 4 days, so a day not yet finally reconciled
keeps its inputs.

Every removal of data (from a dataset, or a query's batch log) moves a marker, ``_retention.json`` in
that dataset's or batch log's folder, to the newest moment it removed data from. The reconciliation
reads them (``maintenance.refuse_if_expired``, which also counts files a sink's log forgot and the
sweep has not removed yet): a rerun of a day whose inputs are gone fails with the reason, instead of
reporting on half a day.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.core import registry, store
from stream_pipelines.driver.batch_log import query_log_dir
from stream_pipelines.tables import compacted_days

if TYPE_CHECKING:
    from pathlib import Path

    from stream_pipelines.core.config import PipelineConfig

MARKER = "_retention.json"
RESET_COPY = re.compile(r"^(?P<query>.+)\.reset-(?P<stamp>\d{8}T\d{6}Z)(?:-\d+)?$")
RECORD_FOLDER = "maintenance"
# The batch-log queries the reconciliation reads, and the datasets.
RECONCILED_QUERIES = (
    (registry.SENSOR_AGGREGATION.name, "tumbling"),
    (registry.SENSOR_AGGREGATION.name, "sliding"),
    (registry.AD_MATCHING.name, "matches"),
)
RECONCILED_DATASETS = (registry.ARCHIVE, registry.SENSOR_WINDOWS, registry.AD_MATCHES)


class RetentionPassed(ValueError):
    """A day's inputs have outlived their retention: part of them is gone."""


# --------------------------------------------------------------------------- markers


def removed_before(folder: Path) -> datetime | None:
    """The newest moment data was removed from ``folder`` by retention (None: nothing was)."""
    document = store.read_json(folder / MARKER)
    if not document:
        return None
    return datetime.fromisoformat(document["removed_before"])


def move_marker(folder: Path, moment: datetime, detail: dict[str, Any]) -> None:
    """Record that data up to ``moment`` left ``folder``; the marker only moves forward."""

    def forward(document: dict[str, Any] | None) -> dict[str, Any]:
        if document and datetime.fromisoformat(document["removed_before"]) >= moment:
            return document
        return {"removed_before": moment.isoformat(), "updated_at": datetime.now(UTC).isoformat(), **detail}

    store.update_json(folder / MARKER, forward)


def inputs_start(day: date) -> datetime:
    """The first moment the reconciliation of ``day`` reads: arrivals from D-1 00:00 UTC."""
    return datetime.combine(day - timedelta(days=1), datetime.min.time(), tzinfo=UTC)


# --------------------------------------------------------------------------- removals


@dataclass
class Removal:
    """What retention removed (or would remove) from one place."""

    kind: str
    location: str
    kept_for: str
    removed: list[dict[str, Any]] = field(default_factory=list)
    kept: int = 0

    def summary(self, verb: str) -> str:
        return (
            f"{self.kind}: {verb} {len(self.removed)} item(s) older than {self.kept_for}, kept {self.kept} "
            f"({self.location})"
        )

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def prune_batch_log(config: PipelineConfig, app: str, query: str, now: float, dry_run: bool) -> Removal:
    """Remove one query's batch-log entries of batches committed before the cutoff, but the newest of
    them, which the next batch starts from."""
    kept_for = config.retention.batch_log
    folder = query_log_dir(config, app, query)
    removal = Removal(f"batch log {app}.{query}", str(folder), str(kept_for))
    offsets = store.entries(folder / "offsets")
    batches = {
        int(name): modified
        for name, (_, modified) in offsets.items()
        if checkpoint_format.is_log_entry(name) and not name.endswith(".compact")
    }
    removal.kept = len(batches)
    if kept_for is None:
        return removal
    old = sorted(batch for batch, modified in batches.items() if now - modified > kept_for.seconds)
    if len(old) < 2:
        return removal
    anchor, going = old[-1], old[:-1]
    removal.kept = len(batches) - len(going)
    for batch in going:
        removal.removed.append({"batch": batch, "age_s": round(now - batches[batch], 1)})
    if dry_run:
        return removal
    # Events the anchor batch read are no longer attributable (its start offsets go with the batch
    # before it): the data removed runs up to the anchor's own offsets. The marker moves first, so a run
    # killed midway over-claims (a rerun is refused) and never under-claims.
    move_marker(
        folder,
        datetime.fromtimestamp(batches[anchor], UTC),
        {"through_batch": going[-1], "first_whole_batch": anchor + 1},
    )
    for batch in going:
        for log in ("offsets", "commits"):
            store.remove_file(folder / log / str(batch))
        _remove_source_entries(folder / "sources", batch)
    return removal


def _remove_source_entries(sources: Path, batch: int) -> None:
    """A files source's per-batch entries (never ``0``: a Kafka source's initial offsets live there)."""
    if batch == 0:
        return
    for folder in _subfolders(sources):
        store.remove_file(folder / str(batch))


def _subfolders(folder: Path) -> list[Path]:
    try:
        return [child for child in folder.iterdir() if child.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def remove_reset_copies(config: PipelineConfig, now: float, dry_run: bool) -> Removal:
    """The checkpoints a reset moved aside, once older than retention.reset_copies (by their name's time)."""
    kept_for = config.retention.reset_copies
    root = store.location(config.spark.extra_conf, config.data_path("checkpoints"))
    removal = Removal("reset copies", str(root), str(kept_for))
    for app in registry.APP_NAMES:
        for folder in _subfolders(root / app):
            match = RESET_COPY.match(folder.name)
            if not match:
                continue
            made = datetime.strptime(match["stamp"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
            if kept_for is None or now - made <= kept_for.seconds:
                removal.kept += 1
                continue
            removal.removed.append({"folder": f"{app}/{folder.name}", "age_s": round(now - made, 1)})
            if not dry_run:
                store.remove_tree(folder)
    return removal


def remove_old_records(config: PipelineConfig, now: float, dry_run: bool) -> Removal:
    """The maintenance records themselves, once older than retention.maintenance_records."""
    kept_for = config.retention.maintenance_records
    folder = store.location(config.spark.extra_conf, f"{config.data_path('reports')}/{RECORD_FOLDER}")
    removal = Removal("maintenance records", str(folder), str(kept_for))
    for name, (_, modified) in sorted(store.entries(folder).items()):
        if kept_for is None or now - modified <= kept_for.seconds:
            removal.kept += 1
            continue
        removal.removed.append({"file": name, "age_s": round(now - modified, 1)})
        if not dry_run:
            store.remove_file(folder / name)
    return removal


def sweep_compacted(
    config: PipelineConfig, dataset: registry.Dataset, grace_s: float, now: float, dry_run: bool
) -> Removal:
    """A file sink's compacted days (compacted_days.py): a day past the dataset's retention (counted
    from when it closed) goes whole, moving the dataset's marker to the day's end; of the rest, a
    version a newer one replaced goes once the grace period has passed since the newer was published (a
    reader that took the old manifest just before is done with it), and an attempt no manifest names (a
    compaction that failed or lost the race to publish) once it is older than the grace period."""
    kept_for = dataset.kept_for(config)
    removal = Removal(
        f"compacted days of {dataset.name}",
        compacted_days.folder_url(config, dataset),
        str(kept_for or "forever"),
    )
    expired_until: datetime | None = None
    for unit in compacted_days.units(config, dataset):
        folder = store.location(config.spark.extra_conf, compacted_days.unit_url(config, dataset, unit))
        if dataset.unit_expired(unit, config, now):
            removal.removed.append({"unit": unit, "what": "the whole day, past retention"})
            day_end = dataset.unit_end(unit)
            expired_until = day_end if expired_until is None else max(expired_until, day_end)
            continue
        removal.kept += 1
        versions = compacted_days.versions(config, dataset, unit)
        attempts: dict[str, float] = {}
        for name, (_, modified) in store.tree_entries(folder).items():
            if "/" in name:
                attempt = name.split("/", 1)[0]
                attempts[attempt] = max(attempts.get(attempt, 0.0), modified)
        if len(versions) == 1 and len(attempts) <= 1:
            continue  # one version and its files: nothing replaced, nothing failed (and no manifest read)
        manifests = {
            version: compacted_days.read_manifest(config, dataset, unit, version) for version in versions
        }
        newest = manifests[versions[-1]] if versions else None
        replaced_at = datetime.fromisoformat(newest.published_at).timestamp() if newest else now
        named = {manifest.folder: version for version, manifest in manifests.items()}
        going: list[tuple[str | None, str | None]] = []  # (manifest name, attempt folder)
        for version in versions[:-1]:
            if now - replaced_at > grace_s:
                going.append((compacted_days.manifest_name(version), manifests[version].folder))
        for attempt, modified in attempts.items():
            if attempt not in named and now - modified > grace_s:
                going.append((None, attempt))
        for manifest, attempt in going:
            removal.removed.append({"unit": unit, "what": manifest or f"unpublished attempt {attempt}"})
            if dry_run:
                continue
            if manifest:
                store.remove_file(folder / manifest)
            if attempt:
                store.remove_tree(folder / attempt)
    if dry_run or expired_until is None:
        return removal
    # The marker first, as everywhere: a run killed midway over-claims, never under-claims.
    move_marker(
        store.location(config.spark.extra_conf, dataset.location(config)),
        expired_until,
        {"retention": str(kept_for)},
    )
    for item in removal.removed:
        if item["what"].startswith("the whole day"):
            store.remove_tree(
                store.location(
                    config.spark.extra_conf, compacted_days.unit_url(config, dataset, item["unit"])
                )
            )
    return removal


def enforce(config: PipelineConfig, *, dry_run: bool = False, now: float | None = None) -> list[Removal]:
    """Every removal retention makes besides the file sinks' (the output sweep makes those)."""
    moment = time.time() if now is None else now
    removals = [
        prune_batch_log(config, app.name, query.name, moment, dry_run)
        for app in registry.APPS.values()
        for query in app.queries
    ]
    removals.append(remove_reset_copies(config, moment, dry_run))
    removals.append(remove_old_records(config, moment, dry_run))
    return removals


def stated(config: PipelineConfig) -> dict[str, str]:
    """Every dataset's retention as the config states it (shown in the maintenance record and task log)."""
    kept = {
        dataset.name: str(dataset.kept_for(config) or "forever") for dataset in registry.DATASETS.values()
    }
    for name in ("batch_log", "reset_copies", "maintenance_records", "reports", "data_docs"):
        kept[name] = str(getattr(config.retention, name) or "forever")
    return kept
