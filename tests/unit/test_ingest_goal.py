"""The ingest benchmark's efficiency figure: the raw archive's rate over Spark's own source-to-noop
rate, medians from the same run; no figure when a path was not measured."""

from __future__ import annotations

from stream_pipelines.devtools.benchmarks.ingest import archive_to_noop


def path(median: float) -> dict:
    return {"rows_per_s": {"median": median, "min": median, "max": median, "count": 3}}


def test_the_archive_is_measured_against_noop_from_the_same_run() -> None:
    assert archive_to_noop({"noop": path(150_000), "parse": path(75_000), "archive": path(60_000)}) == 0.4


def test_without_both_paths_there_is_no_ratio() -> None:
    assert archive_to_noop({"noop": path(150_000)}) is None
