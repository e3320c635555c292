"""The stack benchmark's bookkeeping: which part of the stack each process belongs to, CPU per part
between two readings, when a tumbling window became visible, freshness against its floor, and the
config handed to the stack through the environment."""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stream_pipelines.devtools.benchmarks.stack_cost import (
    BROKER,
    TASK_RUNNERS,
    TumblingWatcher,
    airflow_setups,
    app_label,
    component_roots,
    cpu_by_label,
    environment_overrides,
    format_table,
    freshness_summary,
    label_processes,
    memory_by_label,
)
from stream_pipelines.devtools.processes import Proc


def proc(pid: int, ppid: int) -> Proc:
    return Proc(pid, ppid, "S", ("x",))


# 1 is init; 10 the benchmark; 20 the scheduler; 21 an idle executor worker; 22 the worker running the
# task, 23 the task, 30 the app's JVM, 31 its Python driver, 32 the Python daemon, 33 a worker; 40 the
# broker; 50 a process of nobody's.
TABLE = {
    pid: proc(pid, parent)
    for pid, parent in {
        1: 0,
        10: 1,
        20: 10,
        21: 20,
        22: 20,
        23: 22,
        30: 23,
        31: 30,
        32: 30,
        33: 32,
        40: 10,
        50: 1,
    }.items()
}


def test_each_process_belongs_to_its_nearest_labelled_ancestor() -> None:
    labels = label_processes(TABLE, {20: "airflow-scheduler", 40: BROKER}, {30: "sensor_aggregation"})
    assert labels == {
        20: "airflow-scheduler",
        21: "airflow-scheduler",
        22: TASK_RUNNERS,
        23: TASK_RUNNERS,
        30: app_label("sensor_aggregation"),
        31: app_label("sensor_aggregation"),
        32: app_label("sensor_aggregation"),
        33: app_label("sensor_aggregation"),
        40: BROKER,
    }


def test_a_kept_scheduler_is_its_own_part_and_only_what_runs_tasks_under_it_is_the_task_runners() -> None:
    """Under a keeper (60), the scheduler (20) is the keeper's child: the walk up from the app's JVM
    stops at the scheduler, not at the keeper, so the scheduler's own CPU is not the task runners'."""
    kept = {**TABLE, 60: proc(60, 10), 20: proc(20, 60)}
    roots = component_roots(kept, {60: "airflow-scheduler"}, kept_pids={60})
    assert roots == {60: "airflow-scheduler", 20: "airflow-scheduler"}
    labels = label_processes(kept, roots, {30: "sensor_aggregation"})
    assert labels[20] == labels[21] == labels[60] == "airflow-scheduler"
    assert labels[22] == labels[23] == TASK_RUNNERS


def test_cpu_per_part_counts_new_processes_whole_and_ended_ones_not_at_all() -> None:
    labels = {20: "airflow-scheduler", 30: "app a", 31: "app a"}
    start = {20: 100.0, 30: 50.0, 99: 7.0}
    # 31 started within the window; 99 ended within it.
    end = {20: 103.0, 30: 60.5, 31: 2.0}
    assert cpu_by_label(labels, start, end) == {"airflow-scheduler": 3.0, "app a": 12.5}


def test_freshness_is_visible_time_past_window_end_plus_delay_for_windows_seen_after_since() -> None:
    ends = {
        float(end): float(end) + 120 + lag
        for end, lag in zip(range(0, 2000, 100), range(11, 31), strict=True)
    }
    ends[-500.0] = -1.0  # visible before `since`: left out
    summary = freshness_summary(ends, delay_s=120, trigger_s=10, since=0)
    assert summary["windows"] == 20
    assert summary["median_s"] == 20.5
    # Nearest rank: the 19th of 20 lags (11..30).
    assert summary["p95_s"] == 29
    assert summary["p95_above_floor_s"] == 19
    assert summary["p95_above_floor_triggers"] == 1.9


def test_no_window_closed_gives_no_figures() -> None:
    assert freshness_summary({}, delay_s=120, trigger_s=10, since=0) == {
        "windows": 0,
        "floor_s": 10,
        "lags_s": [],
    }


def write_sink_entry(output: Path, batch: int, files: list[str], mtime: float, action: str = "add") -> None:
    log_dir = output / "_spark_metadata"
    log_dir.mkdir(parents=True, exist_ok=True)
    lines = ["v1", *(json.dumps({"path": f"file://{path}", "action": action}) for path in files)]
    entry = log_dir / str(batch)
    entry.write_text("\n".join(lines))
    os.utime(entry, (mtime, mtime))


def write_windows(path: Path, *ends: datetime) -> str:
    # Naive timestamps, as Spark's INT96 columns read back.
    pq.write_table(pa.table({"window_end": pa.array(list(ends), pa.timestamp("us"))}), path)
    return str(path)


def test_a_window_is_visible_when_the_sink_log_first_lists_a_file_holding_it(tmp_path: Path) -> None:
    first, second = datetime(2026, 11, 24, 10, 5), datetime(2026, 11, 24, 10, 10)
    watcher = TumblingWatcher(tmp_path)
    write_sink_entry(tmp_path, 0, [write_windows(tmp_path / "a.parquet", first)], mtime=1000.0)
    watcher.poll()
    # A later batch with rows of the same window does not make it fresher; a deleted file adds nothing.
    write_sink_entry(tmp_path, 1, [write_windows(tmp_path / "b.parquet", first, second)], mtime=2000.0)
    write_sink_entry(
        tmp_path, 2, [write_windows(tmp_path / "c.parquet", datetime(2030, 1, 1))], 3000.0, "delete"
    )
    watcher.poll()
    assert watcher.visible_at == {
        first.replace(tzinfo=UTC).timestamp(): 1000.0,
        second.replace(tzinfo=UTC).timestamp(): 2000.0,
    }


def test_the_config_reaches_the_stack_through_the_environment_and_is_taken_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PIPELINE__SENSORS__TRIGGER", "5 seconds")
    monkeypatch.delenv("PIPELINE_ENV", raising=False)
    with environment_overrides("local", None, ["paths.data_root=/tmp/x", "broker.port=1234"]):
        assert os.environ["PIPELINE__PATHS__DATA_ROOT"] == "/tmp/x"
        assert os.environ["PIPELINE__BROKER__PORT"] == "1234"
        assert os.environ["PIPELINE_ENV"] == "local"
    assert "PIPELINE__PATHS__DATA_ROOT" not in os.environ
    assert "PIPELINE_ENV" not in os.environ
    assert os.environ["PIPELINE__SENSORS__TRIGGER"] == "5 seconds"


def test_the_goals_stand_beside_their_figures() -> None:
    app = {"cpu_s": 90.0, "cpu_s_per_min": 18.0, "cores": 0.3, "pss_mib": 700.0}
    lines = format_table(
        results_of(measured_run("postgres", 2, {"app sensor_aggregation": app}))
    ).splitlines()
    assert lines[0].endswith("Airflow on postgres, 2 scheduler(s)")
    total = next(line for line in lines if line.startswith("stack total"))
    assert total.split()[-2:] == ["<=", "0.5"]
    restart = next(line for line in lines if line.startswith("kill -9"))
    assert "median 45.0s (40.0-50.0, 3 kills)" in restart and restart.endswith("goal <= 20s")
    fresh = next(line for line in lines if line.startswith("freshness"))
    assert "p95 30.0s" in fresh and "above the floor 20.0s = 2.00 triggers" in fresh
    assert any("ad_matching not running at its end" in line for line in lines)


def results_of(*runs: dict) -> dict:
    """A bench-stack result around ``runs``, one per Airflow setup."""
    return {
        "goal": {"stack_cores": 0.5, "restart_s": 20.0, "freshness_p95_above_floor_triggers": 1.0},
        "settle_s": 240,
        "machine": {"usable_cpus": 2},
        "kill_app": "sensor_aggregation",
        "runs": list(runs),
    }


def measured_run(metadata: str, schedulers: int, parts: dict) -> dict:
    return {
        "airflow": {"metadata": metadata, "schedulers": schedulers},
        "idle": {
            "window_s": 300.0,
            "parts": parts,
            "spark_cores": 0.3,
            "stack_cores": sum(part["cores"] for part in parts.values()),
            "stack_pss_mib": sum(part["pss_mib"] for part in parts.values()),
            "machine_cores": 0.4,
            "apps_restarted_in_window": [],
            "apps_not_running_at_end": ["ad_matching"],
        },
        "restarts": [{"seconds": 40.0}, {"seconds": 50.0}, {"seconds": 45.0}],
        "freshness": freshness_summary({0.0: 150.0}, delay_s=120, trigger_s=10, since=0) | {"window_s": 300},
    }


def test_two_airflow_setups_are_tabled_each_and_then_side_by_side_part_by_part() -> None:
    app = {"cpu_s": 90.0, "cpu_s_per_min": 18.0, "cores": 0.3, "pss_mib": 700.0}
    results = results_of(
        measured_run("sqlite", 1, {"app raw_archive": app}),
        measured_run(
            "postgres",
            2,
            {
                "app raw_archive": app,
                "postgres (Airflow's metadata)": {
                    "cpu_s": 6.0,
                    "cpu_s_per_min": 1.2,
                    "cores": 0.02,
                    "pss_mib": 95.0,
                },
            },
        ),
    )
    table = format_table(results)
    side = table.split("side by side")[1].splitlines()
    assert "sqlite, 1 scheduler(s)" in side[1] and "postgres, 2 scheduler(s)" in side[1]
    assert side[1].index("sqlite") < side[1].index("postgres"), "in the order they ran"
    database = next(line for line in side if line.startswith("postgres (Airflow's metadata)"))
    # Absent under SQLite: a dash, not a zero.
    assert database.split()[-6:] == ["-", "/", "-", "0.02", "/", "95"]
    total = next(line for line in side if line.startswith("stack total"))
    assert total.split()[-6:] == ["0.30", "/", "700", "0.32", "/", "795"]


def test_an_unknown_airflow_setup_is_refused_naming_the_choices() -> None:
    with pytest.raises(
        argparse.ArgumentTypeError, match="unknown Airflow setup mysql: choose from postgres, sqlite"
    ):
        airflow_setups("sqlite,mysql")
    assert [setup.name for setup in airflow_setups("sqlite,postgres")] == ["sqlite", "postgres"]


def test_a_port_whose_closed_connection_lingers_in_time_wait_counts_as_free():
    # The servers bind with SO_REUSEADDR; a connection the server closed first leaves TIME_WAIT, which
    # must not make the benchmark refuse to start (it did, right after a previous run's stack stopped).
    import socket

    from stream_pipelines.devtools.benchmarks.stack_cost import busy_ports

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its end goes to TIME_WAIT
    client.close()
    server.close()
    assert busy_ports([port]) == []
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert busy_ports([listening.getsockname()[1]]) == [listening.getsockname()[1]]


def test_memory_is_each_process_proportional_share_and_nothing_for_one_that_is_gone() -> None:
    ours = {os.getpid(): "pytest", 2**22 + 7: "gone"}
    held = memory_by_label(ours)
    # This interpreter with pyarrow loaded holds tens of MiB at least, and less than the machine.
    assert 20 < held["pytest"] < 24 * 1024
    assert held["gone"] == 0.0
