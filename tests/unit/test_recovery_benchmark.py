"""The recovery benchmark's arithmetic: which seconds of a chaos report go into which figure."""

from __future__ import annotations

from stream_pipelines.devtools.benchmarks.recovery import GOALS, format_table, timings


def fault(kind: str, next_batch_s: float | None, recovered: bool = True, **more) -> dict:
    return {"fault": kind, "next_batch_s": next_batch_s, "recovered": recovered, **more}


def test_a_query_failure_is_timed_from_the_failure_and_a_kill_also_to_the_new_spark_submit():
    report = {
        "faults": [
            fault("query-failure", 9.5, query_failed_s=2.5),
            fault("query-failure", 30.0, recovered=False, query_failed_s=1.0),  # not recovered: left out
            fault("driver-freeze", 41.0),
            fault("driver-kill", 14.0, new_driver_s=6.0),
            fault("driver-kill", 12.0),  # no new spark-submit seen: only the whole figure
            fault("runner-kill", 0.5),  # not a figure of this benchmark
        ]
    }
    assert timings(report) == {
        "query-failure": [7.0],
        "driver-freeze": [41.0],
        "driver-kill": [14.0, 12.0],
        "driver-kill-supervision": [6.0],
    }


def test_the_table_puts_before_and_after_side_by_side_with_the_ratio_and_the_goal():
    results = {
        "app": "raw_archive",
        "rounds": 2,
        "machine": {"usable_cpus": 2},
        "figures": {
            "before": {
                "query-failure": [20.0, 24.0],
                "driver-freeze": [180.0],
                "driver-kill": [14.0],
                "driver-kill-supervision": [6.0],
            },
            "after": {
                "query-failure": [5.0, 7.0],
                "driver-freeze": [45.0],
                "driver-kill": [13.0],
                "driver-kill-supervision": [],
            },
        },
        "problems": {"before": [], "after": ["fault 3 (driver-kill): not recovered"]},
    }
    table = format_table(results)
    query_line = next(line for line in table.splitlines() if line.startswith("query failure"))
    assert "22.0 (20.0-24.0)" in query_line and "6.0 (5.0-7.0)" in query_line and "0.27" in query_line
    assert query_line.rstrip().endswith(f"<= {GOALS['query-failure']:.0f}")
    spark_submit = next(line for line in table.splitlines() if "replacement's spark-submit" in line)
    assert " - " in spark_submit and "<= 5" in spark_submit  # no after figure: no ratio
    assert "after: fault 3 (driver-kill): not recovered" in table
