"""Reading a dataset's event day: each of its units from its newest compacted version where there is one
(``compacted_days``), and from the file sink's log the files no such version holds.

The nightly reconciliation, the quality gates and the compaction read days through here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.core import registry, store
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.inputs.local_rows import empty_frame
from stream_pipelines.tables import compacted_days

if TYPE_CHECKING:
    from datetime import date

    from pyspark.sql import DataFrame, SparkSession

# How often a reader reads a day's compacted versions and its sink's log again when a compaction
# publishes in between (one publish per unit per daily run: a second attempt is all it takes).
READ_ATTEMPTS = 3


def read_dataset_day(
    spark: SparkSession, config: PipelineConfig, dataset: registry.Dataset, day: date
) -> DataFrame:
    """The rows of event day D, by the dataset's day rule: each of its units (compacted_days.py) from
    the unit's newest compacted version where there is one, and from the sink's log the files no such
    version holds, so a unit is read from one place, whole, and never twice."""
    location = dataset.location(config)
    folder = store.location(config.spark.extra_conf, location)
    if not store.entries(folder / checkpoint_format.SINK_LOG):
        # No sink's log: a folder a batch job wrote (a backfill, a copy), read whole; nothing in it is
        # compacted (the compaction takes only what a sink's log lists).
        plain = read_files(spark, dataset, [location], base=location) if store.tree_entries(folder) else None
        rows = plain if plain is not None else empty_frame(spark, dataset.schema())
        return rows.where(dataset.day_filter(day, config))
    units = dataset.day_units(day, config)
    # The manifests, then the log, then the manifests again: a version published in between (its
    # sources then possibly forgotten by the log) would leave the two reads out of step; read again.
    for _ in range(READ_ATTEMPTS):
        published = compacted_days.latest_of_units(config, dataset, units)
        listed = sink_log_names(config, dataset)
        newest = {unit: compacted_days.versions(config, dataset, unit)[-1:] for unit in units}
        if newest == {unit: [published[unit].version] if unit in published else [] for unit in units}:
            break
    else:
        raise RuntimeError(f"{dataset.name} {day}: compacted versions kept changing while it was read")
    compacted = {source for manifest in published.values() for source in manifest.sources}
    pending = [
        name
        for name in listed
        if name not in compacted and (not dataset.unit_in_path or dataset.unit_of_path(name) in units)
    ]
    compacted_files = [url for manifest in published.values() for url in manifest.file_urls(config, dataset)]
    frames = [
        read_files(spark, dataset, compacted_files),
        read_files(spark, dataset, [f"{location}/{name}" for name in pending], base=location),
    ]
    found = [frame for frame in frames if frame is not None]
    if not found:
        return empty_frame(spark, dataset.schema())
    rows = found[0] if len(found) == 1 else found[0].unionByName(found[1])
    return rows.where(dataset.day_filter(day, config))


def sink_log_names(config: PipelineConfig, dataset: registry.Dataset) -> list[str]:
    """The files a file sink's log lists, relative to its folder; none without a log."""
    folder = store.location(config.spark.extra_conf, dataset.location(config))
    return sorted(
        checkpoint_format.committed_names(checkpoint_format.sink_files(folder), dataset.location(config))
    )


def read_files(
    spark: SparkSession, dataset: registry.Dataset, urls: list[str], *, base: str | None = None
) -> DataFrame | None:
    """Exactly these Parquet files, in the dataset's columns (a sink's partition columns from their
    folders under ``base``); None for no files."""
    if not urls:
        return None
    reader = spark.read.schema(dataset.schema())
    if base is not None and dataset.partition_by:
        reader = reader.option("basePath", base)
    return reader.parquet(*urls).select(*dataset.column_names)
