"""Compacted days: where they live, how one is published, and which one a reader takes.

A file sink's closed day is rewritten into a few big files (compaction.py) beside the sink's own files,
in a folder Spark's and every Hive-style reader skip (its name starts with ``_``):

    <dataset>/_compacted/<unit>/<attempt>/part-*.parquet    one compaction's files
    <dataset>/_compacted/<unit>/v00001.json                  version 1 of the unit: its manifest

A unit is one day of the dataset's own day column (``Dataset.day_units``). A version is published by one
exclusive create of its manifest, which names the attempt's files, their rows and checksum, and every
sink file whose rows of the unit it holds (``sources``, with each source's units). Until then the files
are invisible; after it, a reader takes the unit from the newest manifest, and from the sink's log only
the files that manifest does not name, so it never sees the unit doubled or in part. A later version
(a late batch wrote more of the unit) holds all of the previous one plus the new files.

Only the store layer is used: the same code serves a local disk, S3 and HDFS.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from stream_pipelines.core import store

if TYPE_CHECKING:
    from pathlib import Path

    from stream_pipelines.core.config import PipelineConfig
    from stream_pipelines.core.registry import Dataset

FOLDER = "_compacted"
MANIFEST = re.compile(r"^v(?P<version>\d{5})\.json$")


@dataclass(frozen=True)
class Manifest:
    """One published version of a compacted unit."""

    dataset: str
    unit: str
    version: int
    # The attempt folder under the unit's folder, and its Parquet files (names relative to it).
    folder: str
    files: tuple[str, ...]
    rows: int
    # The sum of every row's xxhash64 over all columns: equal multisets of rows, equal checksums.
    checksum: str
    bytes: int
    # Sink file (relative to the dataset's folder) -> every unit it holds rows of.
    sources: dict[str, list[str]] = field(default_factory=dict)
    published_at: str = ""

    def file_urls(self, config: PipelineConfig, dataset: Dataset) -> list[str]:
        base = f"{unit_url(config, dataset, self.unit)}/{self.folder}"
        return [f"{base}/{name}" for name in self.files]

    def as_json(self) -> dict[str, Any]:
        document = asdict(self)
        document["files"] = list(self.files)
        return document

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Manifest:
        return cls(**{**document, "files": tuple(document["files"])})


def folder_url(config: PipelineConfig, dataset: Dataset) -> str:
    return f"{dataset.location(config)}/{FOLDER}"


def unit_url(config: PipelineConfig, dataset: Dataset, unit: str) -> str:
    return f"{folder_url(config, dataset)}/{unit}"


def _unit_folder(config: PipelineConfig, dataset: Dataset, unit: str) -> Path:
    return store.location(config.spark.extra_conf, unit_url(config, dataset, unit))


def manifest_name(version: int) -> str:
    return f"v{version:05d}.json"


def versions(config: PipelineConfig, dataset: Dataset, unit: str) -> list[int]:
    """The unit's published versions, oldest first."""
    names = store.entries(_unit_folder(config, dataset, unit))
    return sorted(int(match["version"]) for name in names if (match := MANIFEST.match(name)))


def read_manifest(config: PipelineConfig, dataset: Dataset, unit: str, version: int) -> Manifest:
    document = store.read_json(_unit_folder(config, dataset, unit) / manifest_name(version))
    if document is None:
        raise FileNotFoundError(f"{unit_url(config, dataset, unit)}/{manifest_name(version)}")
    return Manifest.from_json(document)


def latest(config: PipelineConfig, dataset: Dataset, unit: str) -> Manifest | None:
    """The unit's newest published version (None: not compacted)."""
    published = versions(config, dataset, unit)
    return read_manifest(config, dataset, unit, published[-1]) if published else None


def units(config: PipelineConfig, dataset: Dataset) -> list[str]:
    """Every unit with a folder under ``_compacted`` (published or not), oldest first."""
    folder = store.location(config.spark.extra_conf, folder_url(config, dataset))
    return sorted({name.split("/", 1)[0] for name in store.tree_entries(folder) if "/" in name})


def latest_of_units(config: PipelineConfig, dataset: Dataset, wanted: list[str]) -> dict[str, Manifest]:
    found = {unit: latest(config, dataset, unit) for unit in wanted}
    return {unit: manifest for unit, manifest in found.items() if manifest is not None}


def publish(config: PipelineConfig, dataset: Dataset, manifest: Manifest) -> bool:
    """Publish ``manifest`` as its unit's version, by one exclusive create; False when that version is
    already published (another compaction won): this one's files are then left for the sweep."""
    document = {**manifest.as_json(), "published_at": datetime.now(UTC).isoformat()}
    target = _unit_folder(config, dataset, manifest.unit) / manifest_name(manifest.version)
    return store.create_exclusive(target, json.dumps(document, indent=1)) is not None


def candidate_units(config: PipelineConfig, dataset: Dataset, name: str, modified: float) -> set[str]:
    """The units a sink file written at ``modified`` can hold rows of: a partitioned sink's from its
    path; the others', the days from the late horizon before it was written to the day after (a row
    stamped outside them, by a clock far off, is not found, so its file counts as not compacted)."""
    if dataset.unit_in_path:
        unit = dataset.unit_of_path(name)
        return {unit} if unit else set()
    written = datetime.fromtimestamp(modified, UTC).date()
    reach = math.ceil(config.reconciliation.late_horizon.seconds / 86400) + 2
    return {(written - timedelta(days=back)).isoformat() for back in range(-1, reach + 1)}


def newest_near(config: PipelineConfig, dataset: Dataset, files: Mapping[str, float]) -> dict[str, Manifest]:
    """The newest version of every unit the given sink files (name -> modified) can hold rows of: what
    the readers, the compaction and the sweep need to know about those files, and no more (a dataset
    kept 400 days has 400 units, each naming tens of thousands of files)."""
    wanted: set[str] = set()
    for name, modified in files.items():
        wanted |= candidate_units(config, dataset, name, modified)
    newest = latest_of_units(config, dataset, sorted(wanted))
    # And every other unit a manifest says one of these files holds, to know whether it is covered.
    claimed = claimed_units(newest)
    more = {unit for name in files for unit in claimed.get(name, ())} - wanted
    return {**newest, **latest_of_units(config, dataset, sorted(more))}


def claimed_units(newest: Mapping[str, Manifest]) -> dict[str, list[str]]:
    """Sink file -> the units it holds rows of, as the manifests that name it record them."""
    claimed: dict[str, list[str]] = {}
    for manifest in newest.values():
        claimed.update(manifest.sources)
    return claimed


def covered(newest: Mapping[str, Manifest]) -> dict[str, bool]:
    """Sink file -> whether the newest version of every unit it holds rows of names it (of the units in
    ``newest``): a file for which this is true is read from compacted files only, so it may leave the
    sink's folder once its log has forgotten it. Files no manifest names are absent."""
    return {
        source: all(unit in newest and source in newest[unit].sources for unit in held)
        for source, held in claimed_units(newest).items()
    }
