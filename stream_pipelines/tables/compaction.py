"""Compaction of closed days: each file sink's small files, rewritten per day into a few big ones.

A streaming sink writes a few files per batch (the archive about 7: 60,000 a day at the default
trigger), and its log lists each one. Once a day is closed (nothing of it can still arrive:
``Dataset.unit_closes_at`` plus ``compaction.settle``), this job, per file sink and day (a *unit*,
compacted_days.py):

    load       the files the sink's log lists, and which units each holds rows of (a partitioned
               sink's from its folder names; the others' from a read of their day column)
    choose     the closed units with files that the unit's newest compacted version does not hold
    rewrite    that version's rows plus the new files' rows of the unit, into files of about
               ``compaction.target_file_mb``, in a folder of their own
    verify     the rows read back from the new files against the rows read from the sources: equal
               counts and checksums, or nothing is published
    publish    the new version's manifest, by one exclusive create (compacted_days.publish)

Readers switch to the unit's compacted files at the publish, whole: before it they read the sink's
files, after it the compacted ones plus only the sink files the version does not hold. The sink's own
files stay until the output sweep removes them: once the log has forgotten them and every unit they hold
is compacted (maintenance.py). The job never writes where the streaming sink writes, so it needs no
coordination with a running stream on any store.

Reported, and the run fails once every sink is done, for a person to look at: files the log has
forgotten that no compacted version holds (their rows have left the readers' view; the sweep keeps
them); a listed file that will leave the log within ``AT_RISK_MARGIN`` while a unit it holds is not
compacted; a sink whose compaction raised (the others go on).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.core import registry, store
from stream_pipelines.core.config import add_config_arguments, config_or_report
from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.driver.runtime import get_spark
from stream_pipelines.tables import compacted_days, maintenance
from stream_pipelines.tables.day_reader import read_files, sink_log_names

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stream_pipelines.core.config import PipelineConfig

APP = "compact"
# A listed file this close to leaving its sink's log, with a unit it holds not compacted, fails the run.
AT_RISK_MARGIN = timedelta(days=2)


class CompactionMismatch(RuntimeError):
    """The rows written differ from the rows read: nothing was published."""


@dataclass
class UnitCompaction:
    """One unit's compaction in this run."""

    unit: str
    version: int
    new_sources: int
    rows: int = 0
    checksum: str = ""
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    # published, would compact (dry run), or lost (another compaction published this version first).
    outcome: str = "would compact"

    def summary(self) -> str:
        if self.outcome == "would compact":
            return f"  {self.unit}: would compact {self.new_sources} new file(s) into version {self.version}"
        return (
            f"  {self.unit}: version {self.version} {self.outcome}: {self.rows} rows from {self.new_sources} "
            f"new file(s) into {self.files} file(s), {self.bytes / 1e6:.1f} MB, checksum {self.checksum}, "
            f"{self.seconds:.1f} s"
        )


@dataclass
class DatasetCompaction:
    """What the job found and did in one file sink."""

    dataset: str
    listed_files: int = 0
    units: list[UnitCompaction] = field(default_factory=list)
    # Closed units whose every listed file some compacted version already holds.
    up_to_date: int = 0
    # Units not closed yet (their files stay listed until they are).
    open_units: list[str] = field(default_factory=list)
    at_risk: list[str] = field(default_factory=list)
    # Files that left the sink's log before a compacted version held them (docs/operations.md).
    lost: list[str] = field(default_factory=list)
    # Why the dataset's compaction stopped (an error), if it did.
    failed: str | None = None

    @property
    def ok(self) -> bool:
        return self.failed is None and not self.at_risk and not self.lost

    def problems(self) -> list[str]:
        found = [f"FAILED: {self.failed}"] if self.failed else []
        if self.lost:
            found.append(
                f"LOST FROM VIEW: {len(self.lost)} file(s) left the sink's log before a compacted version "
                f"held their days (first: {self.lost[0]}); readers no longer see their rows, and the "
                "reconciliation refuses their days: see docs/operations.md#compaction"
            )
        return found + [f"AT RISK: {risk}" for risk in self.at_risk]

    def lines(self) -> list[str]:
        head = (
            f"{self.dataset}: {self.listed_files} file(s) in the sink's log; {len(self.units)} unit(s) "
            f"compacted or to compact, {self.up_to_date} compacted already, {len(self.open_units)} not "
            "closed yet"
        )
        return [head, *(unit.summary() for unit in self.units), *(f"  {p}" for p in self.problems())]


def compact(
    spark: SparkSession,
    config: PipelineConfig,
    *,
    dry_run: bool = False,
    now: float | None = None,
    datasets: Sequence[registry.Dataset] | None = None,
    progress: Callable[[str], None] = print,
) -> list[DatasetCompaction]:
    """Compact every file sink's closed units (or those of ``datasets``); ``now`` is for tests."""
    moment = time.time() if now is None else now
    results = []
    for dataset in datasets or maintenance.file_sinks():
        try:
            result = compact_dataset(spark, config, dataset, moment, dry_run, progress)
        except Exception as error:  # one sink's failure must not stop the others
            result = DatasetCompaction(dataset.name, failed=f"{type(error).__name__}: {error}")
        for line in result.lines():
            progress(line)
        results.append(result)
    return results


def compact_dataset(
    spark: SparkSession,
    config: PipelineConfig,
    dataset: registry.Dataset,
    now: float,
    dry_run: bool,
    progress: Callable[[str], None] = print,
) -> DatasetCompaction:
    result = DatasetCompaction(dataset.name)
    # load: the log after the listing, as the sweep does (a batch committing meanwhile stays listed)
    on_disk = maintenance.data_files(store.location(config.spark.extra_conf, dataset.location(config)))
    listed = sink_log_names(config, dataset)
    result.listed_files = len(listed)
    # Files that left the log before a compacted version held them: reported (the run fails), and the
    # other files compacted as usual; readers lost those rows already, a compaction loses nothing more.
    result.lost = maintenance.forgotten_files(config, dataset, on_disk, set(listed), now).uncompacted()
    # The earliest the log can forget a file (a raised compaction.sink_log reaches a sink at its restart).
    leaves_after = maintenance.left_the_log_after(config, dataset)
    # A file a compacted version names has its units in that manifest: only the others are read.
    written = {name: on_disk[name][1] for name in listed if name in on_disk}
    # The newest version of each unit the listed files can hold, read once; kept current as this run
    # publishes, for the at-risk summary.
    newest = compacted_days.newest_near(config, dataset, written)
    known = compacted_days.claimed_units(newest)
    unknown = [name for name in listed if name not in known]
    units_of = {name: known[name] for name in listed if name in known}
    units_of.update(file_units(spark, config, dataset, unknown, on_disk))

    # choose: closed units with listed files their newest version does not hold
    by_unit: dict[str, list[str]] = {}
    for name, held in units_of.items():
        for unit in held:
            by_unit.setdefault(unit, []).append(name)
    settle = config.compaction.settle.seconds
    for unit, names in sorted(by_unit.items()):
        closes = dataset.unit_closes_at(unit, config).timestamp() + settle
        if now < closes:
            result.open_units.append(unit)
            continue
        if dataset.unit_expired(unit, config, now):
            continue  # past the dataset's retention: the sweep removes it, nothing to keep compact
        previous = newest[unit] if unit in newest else compacted_days.latest(config, dataset, unit)
        new = sorted(name for name in names if previous is None or name not in previous.sources)
        if not new:
            result.up_to_date += 1
            continue
        version = 1 if previous is None else previous.version + 1
        compaction = UnitCompaction(unit, version, len(new))
        if not dry_run:
            progress(f"{dataset.name} {unit}: compacting {len(new)} new file(s) into version {version}")
            sources = {**(previous.sources if previous else {}), **{name: units_of[name] for name in new}}
            published = compact_unit(spark, config, dataset, compaction, previous, new, sources, on_disk)
            if published is not None:
                newest[unit] = published
        result.units.append(compaction)

    # summarize: listed files about to leave the log with a unit not compacted
    covered = compacted_days.covered(newest)
    for name in listed:
        modified = on_disk.get(name, (0, now))[1]
        if now - modified > leaves_after - AT_RISK_MARGIN.total_seconds() and not covered.get(name):
            leaves = datetime.fromtimestamp(modified + leaves_after, UTC)
            result.at_risk.append(
                f"{name} (units {', '.join(units_of.get(name, [])) or 'unknown'}) leaves the sink's log "
                f"at {leaves:%Y-%m-%d %H:%M} UTC and is not compacted"
            )
    return result


def file_units(
    spark: SparkSession,
    config: PipelineConfig,
    dataset: registry.Dataset,
    names: list[str],
    on_disk: dict[str, tuple[int, float]],
) -> dict[str, list[str]]:
    """Listed file -> the units it holds rows of. A partitioned sink's from its folder names; the others'
    from one read of the files' day column. A file without rows (a batch that wrote none) goes with the
    unit of the day it was written, so that a compaction names it and the sweep can remove it. A file
    with a row whose day is unknown holds no unit and is never compacted: the sweep keeps it until the
    dataset's retention."""
    if dataset.unit_in_path:
        return {name: [unit] for name in names if (unit := dataset.unit_of_path(name)) is not None}
    location = dataset.location(config)
    frame = read_files(spark, dataset, [f"{location}/{name}" for name in names], base=location)
    if frame is None:
        return {}
    from pyspark.sql import functions as F

    pairs = (
        frame.select(F.col("_metadata.file_path").alias("file"), dataset.unit_column().alias("unit"))
        .distinct()
        .collect()
    )
    units: dict[str, set[str | None]] = {}
    for row in pairs:
        [name] = checkpoint_format.committed_names([row.file], location) or [row.file]
        units.setdefault(name, set()).add(row.unit)
    for name in names:
        if name not in units and name in on_disk:
            units[name] = {datetime.fromtimestamp(on_disk[name][1], UTC).date().isoformat()}
    return {name: sorted(held) for name, held in units.items() if None not in held}  # type: ignore[type-var]


def compact_unit(
    spark: SparkSession,
    config: PipelineConfig,
    dataset: registry.Dataset,
    compaction: UnitCompaction,
    previous: compacted_days.Manifest | None,
    new: list[str],
    sources: dict[str, list[str]],
    on_disk: dict[str, tuple[int, float]],
) -> compacted_days.Manifest | None:
    """Rewrite ``previous``'s rows and the unit's rows of ``new`` into one new version; verify; publish.
    Returns the version published (None: another compaction published it first)."""
    started = time.monotonic()
    location = dataset.location(config)
    frames = [
        read_files(spark, dataset, previous.file_urls(config, dataset) if previous else []),
        read_files(spark, dataset, [f"{location}/{name}" for name in new], base=location),
    ]
    found = [frame for frame in frames if frame is not None]
    rows = found[0] if len(found) == 1 else found[0].unionByName(found[1])
    rows = rows.where(dataset.unit_column() == compaction.unit)
    count, checksum = row_digest(rows)
    source_bytes = (previous.bytes if previous else 0) + sum(on_disk.get(name, (0, 0))[0] for name in new)
    target = config.compaction.target_file_mb * 1024 * 1024
    files = max(1, math.ceil(source_bytes / target))
    attempt = f"a{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    attempt_url = f"{compacted_days.unit_url(config, dataset, compaction.unit)}/{attempt}"
    rows.repartition(files).write.mode("errorifexists").parquet(attempt_url)

    written = {
        name: size
        for name, (size, _) in maintenance.data_files(
            store.location(config.spark.extra_conf, attempt_url)
        ).items()
        if name.endswith(".parquet")
    }
    back = read_files(spark, dataset, [f"{attempt_url}/{name}" for name in sorted(written)])
    got = row_digest(back) if back is not None else (0, "0")
    if got != (count, checksum):
        raise CompactionMismatch(
            f"{dataset.name} {compaction.unit}: read {count} rows (checksum {checksum}) from the sources but "
            f"{got[0]} rows (checksum {got[1]}) back from {attempt_url}; not published"
        )
    manifest = compacted_days.Manifest(
        dataset=dataset.name,
        unit=compaction.unit,
        version=compaction.version,
        folder=attempt,
        files=tuple(sorted(written)),
        rows=count,
        checksum=checksum,
        bytes=sum(written.values()),
        sources=sources,
    )
    published = compacted_days.publish(config, dataset, manifest)
    compaction.rows, compaction.checksum = count, checksum
    compaction.files, compaction.bytes = len(written), manifest.bytes
    compaction.outcome = "published" if published else "lost (another compaction published it first)"
    compaction.seconds = time.monotonic() - started
    return manifest if published else None


def row_digest(frame: DataFrame) -> tuple[int, str]:
    """Row count and the sum of every row's xxhash64 over all its columns: two multisets of rows with
    equal digests are equal but for a hash collision (a row lost, doubled or changed moves the sum)."""
    from pyspark.sql import functions as F

    row = frame.agg(
        F.count(F.lit(1)).alias("rows"),
        F.coalesce(F.sum(F.xxhash64(*frame.columns).cast("decimal(38,0)")), F.lit(0)).alias("sum"),
    ).first()
    return int(row["rows"]), str(row["sum"])


# --------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=APP, description=__doc__)
    add_config_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="say what would be compacted; write nothing")
    args = parser.parse_args(argv)
    config = config_or_report(args, APP)
    if config is None:
        return ExitCode.BAD_CONFIG
    spark = get_spark(config, APP)
    results = compact(spark, config, dry_run=args.dry_run, progress=lambda line: print(line, flush=True))
    failed = [result for result in results if not result.ok]
    for result in failed:
        print(f"{APP}: {result.dataset}: {'; '.join(result.problems())}", file=sys.stderr)
    return ExitCode.FAILED if failed else ExitCode.OK
