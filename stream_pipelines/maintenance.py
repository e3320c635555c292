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

It runs through the file layer, so the same code serves a local disk and s3a://. A folder whose log
lists none of its files is refused, not emptied: that is a moved or copied folder, not debris.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from stream_pipelines import registry, store
from stream_pipelines.batch_log import normalise_path
from stream_pipelines.checkpoint import format as checkpoint_format

if TYPE_CHECKING:
    from pathlib import Path

    from stream_pipelines.config import PipelineConfig

SINK_LOG = "_spark_metadata"


@dataclass
class SinkSweep:
    """What the sweep found and did in one file sink's output folder."""

    dataset: str
    location: str
    committed_files: int = 0
    removed: list[dict[str, Any]] = field(default_factory=list)
    # Unlisted files younger than the grace period: possibly a batch in flight, left alone.
    young: list[str] = field(default_factory=list)
    refused: str | None = None

    @property
    def removed_bytes(self) -> int:
        return sum(item["bytes"] for item in self.removed)

    def summary(self, verb: str = "removed") -> str:
        if self.refused:
            return f"{self.dataset}: NOT swept: {self.refused}"
        return (
            f"{self.dataset}: {self.committed_files} committed file(s) kept; {verb} {len(self.removed)} "
            f"unlisted file(s), {self.removed_bytes} bytes; {len(self.young)} unlisted file(s) younger "
            f"than the grace period left ({self.location})"
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
    folder = store.location(config, url)
    result = SinkSweep(dataset.name, url)
    listed = data_files(folder)
    if not listed:
        return result
    log = folder / SINK_LOG
    if not store.entries(log):
        result.refused = f"{url} has data files but no {SINK_LOG} log: not a file sink's folder"
        return result
    committed = committed_names(checkpoint_format.sink_files(folder), url)
    result.committed_files = len(committed)
    if not committed & set(listed):
        result.refused = (
            f"the sink's log lists none of the {len(listed)} data file(s) in {url} (it names files "
            "elsewhere): a moved or copied folder, not debris; nothing removed"
        )
        return result
    for name, (size, modified) in sorted(listed.items()):
        if name in committed:
            continue
        age = now - modified
        if age < grace_s:
            result.young.append(name)
            continue
        if not dry_run:
            remove_data_file(folder, name)
        result.removed.append({"file": name, "bytes": size, "age_s": round(age, 1)})
    return result


def data_files(folder: Path) -> dict[str, tuple[int, float]]:
    """Relative name -> (size, modified) of every data file under ``folder``: Hadoop's hidden names
    (a path part starting with ``_`` or ``.``: the sink log, checksums, temporary files) are not data."""
    return {
        name: stat
        for name, stat in store.tree_entries(folder).items()
        if not any(part.startswith(("_", ".")) for part in name.split("/"))
    }


def committed_names(urls: list[str], folder_url: str) -> set[str]:
    """The log's file URLs as names relative to the output folder (the log holds absolute URLs, as
    Spark wrote them: ``file:/x``, ``s3a://bucket/key``, percent-encoded)."""
    base = _key(folder_url).rstrip("/") + "/"
    names = set()
    for url in urls:
        key = _key(unquote(url))
        if key.startswith(base):
            names.add(key[len(base) :])
    return names


def _key(url: str) -> str:
    if store.scheme(url) in store.OBJECT_STORE_SCHEMES:
        return url.split("://", 1)[1]
    if store.scheme(url) == "hdfs":
        # The path alone: a config's hdfs:///x (fs.defaultFS) and the log's hdfs://host:port/x are one
        # file, and one config reaches one HDFS.
        return "/" + url.split("://", 1)[1].partition("/")[2]
    return os.path.abspath(normalise_path(url))


def remove_data_file(folder: Path, name: str) -> None:
    target = folder / name
    if store.on_object_store(target):
        target.fs.rm_file(target.path)
        return
    target.unlink(missing_ok=True)
    # Hadoop's local filesystem writes a checksum beside each file; it goes with it.
    target.with_name(f".{target.name}.crc").unlink(missing_ok=True)


def record_sweep(config: PipelineConfig, sweeps: list[SinkSweep], grace_s: float, dry_run: bool) -> str:
    """Write the sweep's record under ``reports/maintenance`` (an audit trail); returns its URL."""
    moment = datetime.now(UTC)
    url = f"{config.data_path('reports')}/maintenance/sweep-{moment.strftime('%Y%m%dT%H%M%S%fZ')}.json"
    document = {
        "swept_at": moment.isoformat(),
        "grace_s": grace_s,
        "dry_run": dry_run,
        "sinks": [sweep.as_json() for sweep in sweeps],
    }
    store.write_atomically(store.location(config, url), json.dumps(document, indent=2))
    return url


@dataclass
class SweepOutcome:
    """One sweep of every file sink, as recorded: what the CLI prints and the DAG task returns."""

    sweeps: list[SinkSweep]
    record: str
    dry_run: bool

    @property
    def ok(self) -> bool:
        return not any(sweep.refused for sweep in self.sweeps)

    def lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        lines = []
        for sweep in self.sweeps:
            lines.append(sweep.summary(verb))
            lines += [
                f"  {verb} {item['file']} ({item['bytes']} bytes, {item['age_s']:.0f} s old)"
                for item in sweep.removed
            ]
        lines.append(f"record: {self.record}")
        return lines

    def as_json(self) -> dict[str, Any]:
        return {"record": self.record, "dry_run": self.dry_run, "sinks": [s.as_json() for s in self.sweeps]}


def sweep_and_record(config: PipelineConfig, grace_s: float, *, dry_run: bool = False) -> SweepOutcome:
    """Sweep every file sink and write the record (the front door and the DAG both call this)."""
    sweeps = sweep_outputs(config, grace_s, dry_run=dry_run)
    return SweepOutcome(sweeps, record_sweep(config, sweeps, grace_s, dry_run), dry_run)
