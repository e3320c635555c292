"""Sweep of the streaming file sinks' outputs: remove the data files their ``_spark_metadata`` log does
not list, so that readers other than Spark (pyarrow, DuckDB, pandas, Trino) see only committed rows.

A batch that dies between writing its files and committing them to the sink's log leaves those files
in the folder. Spark's readers skip them (they read the log); a plain Parquet reader counts them, or
fails on a zero-byte one. The sweep, per file sink declared in the registry:

    list       every data file in the output folder, with its size and modification time
    read log   the files the sink's log lists (read after the listing: a batch that commits meanwhile
               keeps its files)
    decide     an unlisted file older than the grace period is debris; a younger one may belong to a
               batch still in flight, and stays
    remove     the debris (and Hadoop's ``.crc`` beside it on a local disk), then record what went

An unlisted file older than the shortest retention the sink's log can have run with
(``left_the_log_after``) may be one the log listed and forgot (its ``retention`` option,
runtime.sink_log_options), not debris. It goes once every day it holds is compacted (compaction.py), or
once it is past the dataset's retention (moving the dataset's ``_retention.json`` marker forward,
retention.py); otherwise it is kept and reported, since readers no longer see its rows. A listed file
is never removed, however old: Spark's readers would fail on it.

It runs through the file layer, so the same code serves a local disk, S3 and HDFS. A folder whose log
lists none of its files is refused, not emptied: that is a moved or copied folder, not debris (unless
every one of them is old enough for the log to have forgotten it).

``maintain`` is the daily run (the output_maintenance DAG, ``pipelinectl maintain``): the sweep of every
file sink, then of their compacted days, then the rest of retention (retention.py), in one record under
reports/maintenance.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.core import registry, store
from stream_pipelines.driver.batch_log import query_log_dir
from stream_pipelines.tables import compacted_days, retention

if TYPE_CHECKING:
    from pathlib import Path

    from stream_pipelines.core.config import PipelineConfig

SINK_LOG = checkpoint_format.SINK_LOG


@dataclass
class SinkSweep:
    """What the sweep found and did in one file sink's output folder."""

    dataset: str
    location: str
    committed_files: int = 0
    # Each removed file, with ``expired`` true for one that outlived the dataset's retention (the rest
    # are debris of interrupted batches).
    removed: list[dict[str, Any]] = field(default_factory=list)
    # Unlisted files younger than the grace period: possibly a batch in flight, left alone.
    young: list[str] = field(default_factory=list)
    # Files the log has forgotten while a unit they hold is not compacted: kept, and the run fails.
    uncompacted: list[str] = field(default_factory=list)
    refused: str | None = None

    @property
    def removed_bytes(self) -> int:
        return sum(item["bytes"] for item in self.removed)

    @property
    def expired(self) -> int:
        return sum(1 for item in self.removed if item.get("expired"))

    def summary(self, verb: str = "removed") -> str:
        if self.refused:
            return f"{self.dataset}: NOT swept: {self.refused}"
        return (
            f"{self.dataset}: {self.committed_files} committed file(s) kept; {verb} {len(self.removed)} "
            f"unlisted file(s) ({self.expired} past the dataset's retention), {self.removed_bytes} bytes; "
            f"{len(self.young)} unlisted file(s) younger than the grace period left ({self.location})"
            + (
                f"; {len(self.uncompacted)} file(s) KEPT that the log forgot before their days were "
                f"compacted (readers no longer see them; first: {self.uncompacted[0]})"
                if self.uncompacted
                else ""
            )
        )

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "removed_bytes": self.removed_bytes}


def file_sinks() -> list[registry.Dataset]:
    """Every dataset a streaming query writes with a file sink (so it has a ``_spark_metadata`` log)."""
    sinks = [query.sink for app in registry.APPS.values() for query in app.queries if query.sink]
    return list({dataset.name: dataset for dataset in sinks}.values())


def sweep_outputs(
    config: PipelineConfig,
    grace_s: float,
    *,
    dry_run: bool = False,
    now: float | None = None,
    datasets: list[registry.Dataset] | None = None,
) -> list[SinkSweep]:
    """Sweep every file sink's output (or ``datasets``); ``now`` is for tests that age files."""
    if grace_s < 0:
        raise ValueError(f"grace period {grace_s} s: must be zero or more")
    moment = time.time() if now is None else now
    return [sweep_folder(config, dataset, grace_s, moment, dry_run) for dataset in datasets or file_sinks()]


def sweep_folder(
    config: PipelineConfig, dataset: registry.Dataset, grace_s: float, now: float, dry_run: bool
) -> SinkSweep:
    url = dataset.location(config)
    folder = store.location(config.spark.extra_conf, url)
    result = SinkSweep(dataset.name, url)
    listed = data_files(folder)
    if not listed:
        return result
    log = folder / SINK_LOG
    if not store.entries(log):
        result.refused = f"{url} has data files but no {SINK_LOG} log: not a file sink's folder"
        return result
    logged = checkpoint_format.sink_files(folder)
    committed = checkpoint_format.committed_names(logged, url)
    result.committed_files = len(committed)
    forgotten = forgotten_files(config, dataset, listed, committed, now)

    # A log that lists files, none of them here, belongs to another folder. A log that lists nothing has
    # forgotten every file: they may go by the rules below only if every one of them is old enough.
    all_forgotten = not logged and set(listed) <= set(forgotten.files)
    if not committed & set(listed) and not all_forgotten:
        result.refused = (
            f"the sink's log lists none of the {len(listed)} data file(s) in {url} (it names files "
            "elsewhere): a moved or copied folder, not debris; nothing removed"
        )
        return result
    removed_expired: list[float] = []
    for name, (size, modified) in sorted(listed.items()):
        if name in committed:
            continue
        age = now - modified
        # Younger than the grace period: maybe a batch in flight. Younger than the shortest retention the
        # log can have run with: the log would list it if a batch had committed it, so it is debris.
        # Older: the log may have forgotten it; it goes once the grace period has passed since then (a
        # reader that listed the log just before is done with it), if it is past the dataset's retention
        # or every unit it holds is compacted. Otherwise it is kept, and reported: its rows are out of
        # the readers' view.
        if age < grace_s:
            result.young.append(name)
            continue
        expired = forgotten.expired(name)
        if name in forgotten.files:
            # Past retention: it goes once the grace period has passed since. Not compacted: kept, and
            # reported. Compacted: it goes once the log has forgotten it by the retention it runs with
            # and the grace period has passed since (a reader that listed the log just before is done).
            waits_until = forgotten.kept_for_s if expired else forgotten.log_kept_s
            if not expired and not forgotten.covered.get(name):
                result.uncompacted.append(name)
                continue
            if waits_until is not None and age < waits_until + grace_s:
                result.young.append(name)
                continue
        result.removed.append(
            {
                "file": name,
                "bytes": size,
                "age_s": round(age, 1),
                "expired": expired,
                "compacted": name in forgotten.files and not expired,
            }
        )
        if expired:
            removed_expired.append(modified)
    if dry_run:
        return result
    # The marker moves before the files go: a sweep killed midway leaves a marker that claims a little
    # more than was removed (a rerun is refused), never less (a day reported on in part).
    if removed_expired:
        retention.move_marker(
            folder,
            datetime.fromtimestamp(max(removed_expired), UTC),
            {"retention": str(dataset.kept_for(config))},
        )
    for item in result.removed:
        remove_data_file(folder, item["file"])
    return result


@dataclass(frozen=True)
class Forgotten:
    """A file sink's unlisted files that are old enough for its log to have listed them once and
    forgotten them, with what decides their fate."""

    files: dict[str, float]  # name -> modified
    covered: dict[str, bool]  # by the compacted versions of the units they can hold
    log_kept_s: float  # the log's retention as configured
    kept_for_s: float | None
    now: float

    def expired(self, name: str) -> bool:
        return (
            name in self.files
            and self.kept_for_s is not None
            and self.now - self.files[name] > self.kept_for_s
        )

    def uncompacted(self) -> list[str]:
        """Within the dataset's retention, and no compacted version holds them whole: their rows are out
        of the readers' view."""
        return sorted(name for name in self.files if not self.expired(name) and not self.covered.get(name))

    def out_of_view(self) -> list[float]:
        """When each file whose rows readers no longer see was written: the uncompacted, and the expired."""
        return [
            modified
            for name, modified in self.files.items()
            if self.expired(name) or not self.covered.get(name)
        ]


def left_the_log_after(config: PipelineConfig, dataset: registry.Dataset) -> float:
    """The age (seconds) after which an unlisted file may be one the sink's log listed and forgot: the
    shortest log retention the sink can have run with. A changed ``compaction.sink_log`` reaches a
    running sink only when it restarts, so this config's value alone could take a file the log forgot
    at the old value for debris; the config refuses any value below the floor."""
    return min(dataset.sink_log_kept(config).seconds, config.sink_log_floor().seconds)


def forgotten_files(
    config: PipelineConfig,
    dataset: registry.Dataset,
    on_disk: dict[str, tuple[int, float]],
    committed: set[str],
    now: float,
) -> Forgotten:
    """The unlisted files of ``on_disk`` the log may have forgotten, and whether compaction holds them."""
    left_after = left_the_log_after(config, dataset)
    files = {
        name: modified
        for name, (_, modified) in on_disk.items()
        if name not in committed and now - modified > left_after
    }
    kept_for = dataset.kept_for(config)
    return Forgotten(
        files=files,
        covered=compacted_days.covered(compacted_days.newest_near(config, dataset, files)),
        log_kept_s=dataset.sink_log_kept(config).seconds,
        kept_for_s=None if kept_for is None else kept_for.seconds,
        now=now,
    )


def taken_out_before(
    config: PipelineConfig, dataset: registry.Dataset, now: float | None = None
) -> datetime | None:
    """The newest moment up to which retention has taken data of ``dataset`` out of its readers' view:
    what it removed (the marker), and files still on disk that the sink's log no longer lists while no
    compacted version holds their days, or that are past the dataset's retention (forgotten, not yet
    swept). None: nothing."""
    folder = store.location(config.spark.extra_conf, dataset.location(config))
    marker = retention.removed_before(folder)
    moment = time.time() if now is None else now
    on_disk = data_files(folder)
    if not on_disk:
        return marker
    committed = checkpoint_format.committed_names(
        checkpoint_format.sink_files(folder), dataset.location(config)
    )
    out = forgotten_files(config, dataset, on_disk, committed, moment).out_of_view()
    if out:
        newest = datetime.fromtimestamp(max(out), UTC)
        marker = newest if marker is None else max(marker, newest)
    return marker


def refuse_if_expired(config: PipelineConfig, day: date, now: float | None = None) -> None:
    """Raise RetentionPassed when retention has taken any of what the reconciliation of ``day`` reads out
    of its readers' view: the archive and the outputs it reconciles, and the batch logs."""
    start = retention.inputs_start(day)
    gone = []
    for dataset in retention.RECONCILED_DATASETS:
        moment = taken_out_before(config, dataset, now)
        if moment is not None and moment > start:
            gone.append(f"{dataset.name} (retention.{dataset.retention} {dataset.kept_for(config)})")
    for app, query in retention.RECONCILED_QUERIES:
        moment = retention.removed_before(query_log_dir(config, app, query))
        if moment is not None and moment > start:
            gone.append(f"the batch log of {app}.{query} (retention.batch_log {config.retention.batch_log})")
    if gone:
        raise retention.RetentionPassed(
            f"event day {day} cannot be reconciled again: its inputs from {start:%Y-%m-%d %H:%M} UTC on "
            f"have been removed by retention from {', '.join(gone)}; its last report stands "
            f"({config.data_path('reports')}/reconciliation/{day})"
        )


def data_files(folder: Path) -> dict[str, tuple[int, float]]:
    """Relative name -> (size, modified) of every data file under ``folder``: Hadoop's hidden names
    (a path part starting with ``_`` or ``.``: the sink log, checksums, temporary files) are not data."""
    return {
        name: stat
        for name, stat in store.tree_entries(folder).items()
        if not any(part.startswith(("_", ".")) for part in name.split("/"))
    }


def remove_data_file(folder: Path, name: str) -> None:
    target = folder / name
    store.remove_file(target)
    # A partition folder the removal emptied goes too (object stores have no folders to leave behind).
    parent = target.parent
    while parent != folder and not store.on_object_store(parent) and _empty(parent):
        store.remove_empty_folder(parent)
        parent = parent.parent


def _empty(folder: Path) -> bool:
    try:
        return not any(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return False


def record_sweep(
    config: PipelineConfig,
    sweeps: list[SinkSweep],
    grace_s: float,
    dry_run: bool,
    removals: list[retention.Removal] | None = None,
) -> str:
    """Write the run's record under ``reports/maintenance`` (an audit trail); returns its URL."""
    moment = datetime.now(UTC)
    url = (
        f"{config.data_path('reports')}/{retention.RECORD_FOLDER}/"
        f"sweep-{moment.strftime('%Y%m%dT%H%M%S%fZ')}.json"
    )
    document = {
        "swept_at": moment.isoformat(),
        "grace_s": grace_s,
        "dry_run": dry_run,
        "retention": retention.stated(config),
        "sinks": [sweep.as_json() for sweep in sweeps],
        "removals": [removal.as_json() for removal in removals or []],
    }
    store.write_atomically(store.location(config.spark.extra_conf, url), json.dumps(document, indent=2))
    return url


@dataclass
class SweepOutcome:
    """One maintenance run, as recorded: what the CLI prints and the DAG task returns."""

    sweeps: list[SinkSweep]
    record: str
    dry_run: bool
    removals: list[retention.Removal] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(sweep.refused or sweep.uncompacted for sweep in self.sweeps)

    def lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        lines = []
        for sweep in self.sweeps:
            lines.append(sweep.summary(verb))
            lines += [
                f"  {verb} {item['file']} ({item['bytes']} bytes, {item['age_s']:.0f} s old"
                f"{', past retention' if item.get('expired') else ''})"
                for item in sweep.removed
            ]
        lines += [removal.summary(verb) for removal in self.removals]
        lines.append(f"record: {self.record}")
        return lines

    def as_json(self) -> dict[str, Any]:
        return {
            "record": self.record,
            "dry_run": self.dry_run,
            "sinks": [s.as_json() for s in self.sweeps],
            "removals": [r.as_json() for r in self.removals],
        }


def sweep_and_record(config: PipelineConfig, grace_s: float, *, dry_run: bool = False) -> SweepOutcome:
    """Sweep every file sink and write the record (``pipelinectl outputs sweep``)."""
    sweeps = sweep_outputs(config, grace_s, dry_run=dry_run)
    return SweepOutcome(sweeps, record_sweep(config, sweeps, grace_s, dry_run), dry_run)


def maintain(
    config: PipelineConfig, grace_s: float, *, dry_run: bool = False, now: float | None = None
) -> SweepOutcome:
    """The daily run: sweep every file sink (debris and files past their retention), then enforce the
    rest of retention (batch log, reset copies, records), and write one record of both."""
    moment = time.time() if now is None else now
    sweeps = sweep_outputs(config, grace_s, dry_run=dry_run, now=moment)
    removals = [
        retention.sweep_compacted(config, dataset, grace_s, moment, dry_run) for dataset in file_sinks()
    ]
    removals += retention.enforce(config, dry_run=dry_run, now=moment)
    return SweepOutcome(sweeps, record_sweep(config, sweeps, grace_s, dry_run, removals), dry_run, removals)
