"""The recovery benchmark's arithmetic: which seconds of a chaos report go into which figure."""

from __future__ import annotations

from stream_pipelines.devtools.benchmarks.recovery import GOALS, LABELS, format_table, timings


def fault(kind: str, next_batch_s: float | None, recovered: bool = True, **more) -> dict:
    return {"fault": kind, "next_batch_s": next_batch_s, "recovered": recovered, **more}


def test_a_query_failure_is_timed_from_the_failure_and_a_kill_is_split_at_the_new_spark_submit():
    report = {
        "cold_start_s": {"raw_archive": 9.0},
        "faults": [
            fault("query-failure", 9.5, query_failed_s=2.5),
            fault("query-failure", 30.0, recovered=False, query_failed_s=1.0),  # not recovered: left out
            fault("driver-freeze", 41.0),
            fault("driver-kill", 14.0, new_driver_s=6.0),
            fault("driver-kill", 12.0),  # no new spark-submit seen: only the whole figure
            fault("runner-kill", 0.5),  # not a figure of this benchmark
        ],
    }
    assert timings(report) == {
        "query-failure": [7.0],
        "driver-freeze": [41.0],
        "driver-kill": [14.0, 12.0],
        # The kill less the new driver's own cold start is supervision's share: the two add up.
        "driver-kill-new-driver": [8.0],
        "driver-kill-supervision": [6.0],
    }


def results_with(before: dict, after: dict, **more) -> dict:
    empty = {key: [] for key in LABELS}
    return {
        "app": "raw_archive",
        "rounds": 2,
        "machine": {"usable_cpus": 2},
        "figures": {"before": {**empty, **before}, "after": {**empty, **after}},
        "problems": {},
        **more,
    }


def test_the_table_puts_before_and_after_side_by_side_with_the_ratio_and_the_goal():
    results = results_with(
        {"query-failure": [20.0, 24.0], "driver-freeze": [180.0], "driver-kill-supervision": [6.0]},
        {"query-failure": [5.0, 7.0], "driver-freeze": [45.0]},
        first_start_s={"before": 9.0, "after": None},
        problems={"before": [], "after": ["fault 3 (driver-kill): not recovered"]},
    )
    table = format_table(results)
    query_line = next(line for line in table.splitlines() if line.startswith("query failure"))
    assert "22.0 (20.0-24.0)" in query_line and "6.0 (5.0-7.0)" in query_line and "0.27" in query_line
    assert query_line.rstrip().endswith(f"<= {GOALS['query-failure']:.0f}")
    supervision = next(line for line in table.splitlines() if line.startswith("kill -9 -> the new launch"))
    assert " - " in supervision and supervision.rstrip().endswith("<= 5")  # no after figure: no ratio
    assert "before 9.0s, after not measured" in table
    assert "after: fault 3 (driver-kill): not recovered" in table


def test_a_before_figure_of_zero_seconds_gives_no_ratio_rather_than_a_crash():
    table = format_table(results_with({"driver-kill-supervision": [0.0]}, {"driver-kill-supervision": [1.5]}))
    line = next(row for row in table.splitlines() if row.startswith("kill -9 -> the new launch"))
    assert line.split()[-7:] == ["0.0", "(0.0-0.0)", "1.5", "(1.5-1.5)", "-", "<=", "5"]


def test_a_run_left_out_is_an_empty_column_not_an_error(monkeypatch):
    from stream_pipelines.devtools.benchmarks import recovery

    report = {"cold_start_s": {"raw_archive": 9.0}, "faults": [fault("driver-kill", 14.0, new_driver_s=1.5)]}
    monkeypatch.setattr(recovery, "chaos_run", lambda folder, args, settings: report)
    results = recovery.run_benchmark(recovery.build_parser().parse_args(["--runs", "after"]), None)
    assert results["figures"]["before"]["driver-kill"] == []
    assert results["figures"]["after"]["driver-kill-new-driver"] == [12.5]
    assert results["first_start_s"] == {"after": 9.0}
    line = next(row for row in format_table(results).splitlines() if row.startswith("kill -9 of the driver"))
    assert line.split()[-4:] == ["-", "14.0", "(14.0-14.0)", "-"]


def test_versus_cluster_puts_a_kill_on_the_worker_beside_a_container_kill_in_yarn(monkeypatch):
    from stream_pipelines.devtools.benchmarks import recovery

    reports = {
        "local": {
            "cold_start_s": {"raw_archive": 9.0},
            "faults": [fault("driver-kill", 10.0, new_driver_s=1.0)],
        },
        "yarn": {
            "cold_start_s": {"raw_archive": 30.0},
            "faults": [fault("container-kill", 30.0, new_driver_s=9.0), fault("container-kill", 34.0)],
        },
    }
    asked: dict[str, list[str]] = {}

    def chaos_run(folder, args, arguments):
        asked[folder.name] = list(arguments)
        return reports[folder.name]

    monkeypatch.setattr(recovery, "chaos_run", chaos_run)
    results = recovery.run_benchmark(recovery.build_parser().parse_args(["--versus", "cluster"]), None)
    assert asked == {
        "local": ["--classes", "driver-kill"],
        "yarn": ["--cluster", "yarn", "--classes", "container-kill"],
    }
    assert results["figures"]["yarn"]["driver-kill"] == [30.0, 34.0]
    assert results["figures"]["yarn"]["driver-kill-new-driver"] == [21.0]
    table = format_table(results)
    header = table.splitlines()[1]
    assert header.split() == ["figure", "local", "yarn", "yarn/local", "goal"]
    kill = next(row for row in table.splitlines() if row.startswith("kill -9 of the driver"))
    assert "10.0 (10.0-10.0)" in kill and "32.0 (30.0-34.0)" in kill and "3.20" in kill
    # Faults this comparison does not inject have no row.
    assert not any(row.startswith(("query failure", "SIGSTOP")) for row in table.splitlines())
    assert "local 9.0s, yarn 30.0s" in table
