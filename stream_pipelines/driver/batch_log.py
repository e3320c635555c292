"""A durable log of every micro-batch's offsets and watermark, for the nightly reconciliation.

Spark keeps only the last ~100 batches in a checkpoint, but the reconciliation needs, for every
event of a day, the batch that read it and the watermark that batch filtered late rows with. The
recorder copies each query's ``offsets/N``, ``commits/N`` and file-source lists (``sources/<i>/*``)
into ``<paths.batch_log>/<app>/<query>/`` as they appear, so the history outlives the checkpoint.

Spark 4 semantics the records encode (pinned by tests/test_sensor_semantics.py): batch N reads, per
source, the offsets after the end offsets of batch N-1 up to its own end offsets; its late-row filter
uses the watermark batch N-1 ran with, while emission and eviction use its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.core import store
from stream_pipelines.core.registry import query_of

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from stream_pipelines.core.config import PipelineConfig

COPIED_LOGS = ("offsets", "commits", "sources")
POLL_SECONDS = 1.0


@dataclass(frozen=True)
class BatchRecord:
    """One micro-batch as the reconciliation sees it."""

    batch_id: int
    # (topic, partition) -> [start, end) of the Kafka offsets this batch read.
    kafka_ranges: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # Files a files-source batch read (normalised paths, see checkpoint_format.normalise_path).
    files: frozenset[str] = frozenset()
    # The watermark the late-row filter used (batch N-1's), and the one emission/eviction used.
    # None when the previous batch's entry is not in the log (the recorder started late).
    late_filter_watermark_ms: int | None = 0
    eviction_watermark_ms: int = 0
    committed: bool = False


def query_log_dir(config: PipelineConfig, app: str, query: str) -> Path:
    return store.location(config.spark.extra_conf, config.data_path("batch_log")) / app / query


# --------------------------------------------------------------------------- recording


class BatchLogRecorder:
    """Copies the checkpoint logs of an app's queries into the batch log while they run."""

    def __init__(self, config: PipelineConfig, app: str, poll_seconds: float = POLL_SECONDS) -> None:
        self.config = config
        self.app = app
        self.poll_seconds = poll_seconds
        self._queries: list[str] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, queries: Iterable[StreamingQuery | str]) -> BatchLogRecorder:
        """Begin polling; ``queries`` are StreamingQuery objects named ``<app>.<query>`` or query names."""
        for query in queries:
            name = query if isinstance(query, str) else (query.name or "")
            self._queries.append(query_of(name) if name.startswith(f"{self.app}.") else name)
        self._thread = threading.Thread(target=self._poll, name=f"batch-log-{self.app}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and take a final sweep, so batches committed at the very end are kept too."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.sweep()

    def sweep(self) -> int:
        """Copy whatever is new or changed; returns how many files were written."""
        return sum(
            copy_checkpoint_logs(
                store.location(self.config.spark.extra_conf, self.config.checkpoint_dir(self.app, query)),
                query_log_dir(self.config, self.app, query),
            )
            for query in self._queries
        )

    def _poll(self) -> None:
        while not self._stopping.wait(self.poll_seconds):
            try:
                self.sweep()
            except OSError as error:
                # A checkpoint file being rewritten or cleaned up mid-copy: the next sweep retries.
                print(f"batch log ({self.app}): sweep skipped: {error}", flush=True)


def copy_checkpoint_logs(checkpoint: Path, target: Path) -> int:
    """Idempotent copy of offsets/, commits/ and sources/<i>/ entries; each write is atomic.

    One listing per folder on each side decides what to copy: an entry the copy lacks, or one whose
    size differs or that was written after its copy. On an object store that is a LIST, not a GET per
    entry, at every sweep."""
    written = 0
    if not checkpoint.is_dir():
        return 0
    for log in COPIED_LOGS:
        base = checkpoint / log
        # Relative names, the same on every store: offsets, commits, sources/<i>.
        if log != "sources":
            folders = {log: base}
        elif base.is_dir():
            folders = {f"{log}/{folder.name}": folder for folder in base.iterdir() if folder.is_dir()}
        else:
            folders = {}
        for relative, folder in folders.items():
            copy_folder = target / relative
            copies = store.entries(copy_folder)
            for name, (size, modified) in store.entries(folder).items():
                if not checkpoint_format.is_log_entry(name):
                    continue
                copied = copies.get(name)
                if copied is not None and copied[0] == size and copied[1] >= modified:
                    continue
                try:
                    content = (folder / name).read_bytes()
                except FileNotFoundError:
                    continue  # cleaned up by Spark between listing and reading
                store.write_atomically(copy_folder / name, content)
                written += 1
    return written


def clear_batch_log(config: PipelineConfig, app: str, query: str) -> None:
    store.remove_tree(query_log_dir(config, app, query))


# --------------------------------------------------------------------------- reading


def load_batches(config: PipelineConfig, app: str, query: str) -> list[BatchRecord]:
    """Every logged batch of one query, in order, with its read ranges and watermarks."""
    return parse_batch_log(query_log_dir(config, app, query))


@dataclass(frozen=True)
class CommittedProgress:
    """Where one query stands by its newest committed batch: what the day states read."""

    batch_id: int
    # The watermark that batch emitted and evicted with: every window ending at or before it is written.
    watermark_ms: int
    # When Spark planned the batch (the offsets log's batchTimestampMs); None in an old log.
    planned_at_ms: int | None
    # (topic, partition) -> the end offset the batch read to (exclusive).
    kafka_ends: dict[tuple[str, int], int]


def newest_committed(config: PipelineConfig, app: str, query: str) -> CommittedProgress | None:
    """The newest batch of a query that both its offsets and its commits log hold; None before the first.

    Reads one offsets entry whatever the log's length: the day states ask this every few minutes."""
    folder = query_log_dir(config, app, query)
    committed = set(checkpoint_format.batch_files(folder / "commits"))
    offsets = checkpoint_format.batch_files(folder / "offsets")
    newest = max(committed & set(offsets), default=None)
    if newest is None:
        return None
    entry = checkpoint_format.read_offsets(offsets[newest], lenient=True)
    return CommittedProgress(
        batch_id=newest,
        watermark_ms=entry.watermark_ms,
        planned_at_ms=entry.timestamp_ms,
        kafka_ends=_by_partition(checkpoint_format.kafka_offsets(entry.sources)),
    )


def parse_batch_log(folder: Path) -> list[BatchRecord]:
    offsets = checkpoint_format.batch_files(folder / "offsets")
    if not offsets:
        return []
    commits = set(checkpoint_format.batch_files(folder / "commits"))
    parsed = {batch: _parse_offsets_file(path) for batch, path in offsets.items()}
    files_by_batch = _files_by_batch(folder / "sources")
    initial_kafka = _initial_kafka_offsets(folder / "sources")

    records = []
    for batch in sorted(parsed):
        watermark, ends = parsed[batch]
        previous = parsed.get(batch - 1)
        if batch == 0:
            late_filter: int | None = 0
            starts = initial_kafka
        elif previous is not None:
            late_filter, starts = previous[0], previous[1]
        else:
            late_filter, starts = None, {}
        ranges = {
            coordinate: (starts.get(coordinate, 0 if batch == 0 else end), end)
            for coordinate, end in ends.items()
        }
        records.append(
            BatchRecord(
                batch_id=batch,
                kafka_ranges={c: r for c, r in ranges.items() if r[1] > r[0]},
                files=frozenset(files_by_batch.get(batch, ())),
                late_filter_watermark_ms=late_filter,
                eviction_watermark_ms=watermark,
                committed=batch in commits,
            )
        )
    return records


def _parse_offsets_file(path: Path) -> tuple[int, dict[tuple[str, int], int]]:
    """(batchWatermarkMs, Kafka end offsets) of one offsets/N entry; files-source lines are skipped."""
    entry = checkpoint_format.read_offsets(path, lenient=True)
    return entry.watermark_ms, _by_partition(checkpoint_format.kafka_offsets(entry.sources))


def _by_partition(offsets: dict[str, dict[int, int]]) -> dict[tuple[str, int], int]:
    return {(topic, p): o for topic, partitions in offsets.items() for p, o in partitions.items()}


def _files_by_batch(sources: Path) -> dict[int, set[str]]:
    """Batch id -> files it read, from file-source logs (plain and compacted entries carry batchId)."""
    files: dict[int, set[str]] = {}
    if not sources.is_dir():
        return files
    for folder in sources.iterdir():
        for _, entry in checkpoint_format.log_entries(folder):
            for item in checkpoint_format.read_file_log(entry):
                if "path" in item and "batchId" in item:
                    files.setdefault(int(item["batchId"]), set()).add(
                        checkpoint_format.normalise_path(item["path"])
                    )
    return files


def _initial_kafka_offsets(sources: Path) -> dict[tuple[str, int], int]:
    """Where a Kafka source started: sources/<i>/0 holds the resolved initial offsets as JSON."""
    starts: dict[tuple[str, int], int] = {}
    if not sources.is_dir():
        return starts
    for folder in sources.iterdir():
        initial = folder / "0"
        if not initial.is_file():
            continue
        # None: a files source's log, not Kafka offsets.
        offsets = checkpoint_format.read_initial_offsets(initial, lenient=True)
        starts.update(_by_partition(checkpoint_format.kafka_offsets([offsets])))
    return starts
