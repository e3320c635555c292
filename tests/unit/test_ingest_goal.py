"""The ingest benchmark's efficiency figure: the raw archive's rate over Spark's own source-to-noop
rate, medians from the same run; no figure when a path was not measured."""

from __future__ import annotations

from stream_pipelines.devtools.benchmarks.ingest import BatchStep, archive_to_noop, one_batch, one_batch_lines


def path(median: float) -> dict:
    return {"rows_per_s": {"median": median, "min": median, "max": median, "count": 3}}


def test_the_archive_is_measured_against_noop_from_the_same_run() -> None:
    assert archive_to_noop({"noop": path(150_000), "parse": path(75_000), "archive": path(60_000)}) == 0.4


def test_without_both_paths_there_is_no_ratio() -> None:
    assert archive_to_noop({"noop": path(150_000)}) is None


def step(name: str, cpu_s: float, wall_s: float, warmup: bool = False) -> BatchStep:
    return BatchStep(name, 0, warmup, 1_000_000, cpu_s, wall_s)


def test_one_batch_gives_cpu_per_row_and_the_read_over_the_archive_at_equal_cpu() -> None:
    figures = one_batch(
        [
            step("read", 9.0, 1.0, warmup=True),
            step("read", 1.5, 1.0),
            step("read", 1.7, 1.2),
            step("columns", 1.9, 1.3),
            step("parquet", 4.0, 2.5),
        ]
    )
    assert figures["read"]["cpu_us_per_row"]["median"] == 1.6  # the warm-up round is left out
    assert figures["parquet"]["rows_per_s"]["median"] == 400_000
    assert figures["archive_to_read_at_equal_cpu"] == 0.4
    table = "\n".join(one_batch_lines(figures))
    assert "+ Parquet, partitioned as the app" in table
    assert "archive / read at equal CPU" in table
    assert "0.40" in table


def test_without_the_one_batch_steps_the_table_has_no_such_section() -> None:
    assert one_batch([]) == {}
    assert one_batch_lines({}) == []
