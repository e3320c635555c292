"""The recovery benchmark's arithmetic: which seconds of a chaos report go into which figure."""

from __future__ import annotations

from stream_pipelines.devtools.benchmarks.recovery import GOALS, LABELS, format_table, timings


def fault(kind: str, next_batch_s: float | None, recovered: bool = True, **more) -> dict:
    return {"fault": kind, "next_batch_s": next_batch_s, "recovered": recovered, **more}


def test_a_query_failure_is_timed_from_the_failure_and_a_kill_also_to_the_new_spark_submit():
    report = {
        "cold_start_s": {"raw_archive": 9.0, "sensor_aggregation": 30.0},
        "faults": [
            fault("query-failure", 9.5, query_failed_s=2.5),
            fault("query-failure", 30.0, recovered=False, query_failed_s=1.0),  # not recovered: left out
            fault("driver-freeze", 41.0),
            fault("driver-kill", 14.0, new_driver_s=6.0),
            fault("driver-kill", 12.0),  # no new spark-submit seen: only the whole figure
            fault("runner-kill", 0.5),  # not a figure of this benchmark
        ],
    }
    assert timings(report, "raw_archive") == {
        "query-failure": [7.0],
        "driver-freeze": [41.0],
        "driver-kill": [14.0, 12.0],
        "driver-kill-beyond-cold-start": [5.0, 3.0],
        "driver-kill-supervision": [6.0],
    }


def test_without_the_apps_cold_start_a_kill_is_not_read_against_it():
    report = {"cold_start_s": {}, "faults": [fault("driver-kill", 14.0, new_driver_s=6.0)]}
    assert timings(report, "raw_archive")["driver-kill-beyond-cold-start"] == []


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
                "driver-kill-beyond-cold-start": [5.0],
                "driver-kill-supervision": [6.0],
            },
            "after": {
                "query-failure": [5.0, 7.0],
                "driver-freeze": [45.0],
                "driver-kill": [13.0],
                "driver-kill-beyond-cold-start": [],
                "driver-kill-supervision": [],
            },
        },
        "cold_start_s": {"before": 9.0, "after": None},
        "problems": {"before": [], "after": ["fault 3 (driver-kill): not recovered"]},
    }
    table = format_table(results)
    query_line = next(line for line in table.splitlines() if line.startswith("query failure"))
    assert "22.0 (20.0-24.0)" in query_line and "6.0 (5.0-7.0)" in query_line and "0.27" in query_line
    assert query_line.rstrip().endswith(f"<= {GOALS['query-failure']:.0f}")
    beyond = next(line for line in table.splitlines() if "less the app's cold start" in line)
    assert " - " in beyond and beyond.rstrip().endswith("<= 5")  # no after figure: no ratio
    assert "before 9.0s, after not measured" in table
    assert "after: fault 3 (driver-kill): not recovered" in table


def test_a_restart_faster_than_the_first_start_reads_as_a_negative_range():
    results = {
        "app": "raw_archive",
        "rounds": 2,
        "machine": {"usable_cpus": 2},
        "figures": {
            "before": {key: [] for key in LABELS},
            "after": {
                "query-failure": [],
                "driver-freeze": [],
                "driver-kill": [7.9, 9.1],
                "driver-kill-beyond-cold-start": [-1.3, -0.1],
                "driver-kill-supervision": [],
            },
        },
        "problems": {},
    }
    line = next(row for row in format_table(results).splitlines() if "less the app's cold start" in row)
    assert "-0.7 (-1.3 to -0.1)" in line


def test_a_run_left_out_is_an_empty_column_not_an_error(monkeypatch):
    from stream_pipelines.devtools.benchmarks import recovery

    report = {"cold_start_s": {"raw_archive": 9.0}, "faults": [fault("driver-kill", 14.0, new_driver_s=1.5)]}
    monkeypatch.setattr(recovery, "chaos_run", lambda folder, args, settings: report)
    results = recovery.run_benchmark(recovery.build_parser().parse_args(["--runs", "after"]), None)
    assert results["figures"]["before"]["driver-kill"] == []
    assert results["figures"]["after"]["driver-kill-beyond-cold-start"] == [5.0]
    line = next(row for row in format_table(results).splitlines() if row.startswith("kill -9 of the driver"))
    assert line.split()[-4:] == ["-", "14.0", "(14.0-14.0)", "-"]
