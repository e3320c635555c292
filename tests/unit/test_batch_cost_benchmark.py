"""The per-batch cost benchmark's arithmetic and table: medians of Spark's durationMs parts per query,
the slowest query as the app's batch time, CPU per batch, and the goal only beside its own figure."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from stream_pipelines.core.procfs import process_age_s
from stream_pipelines.devtools.benchmarks.batch_cost import format_table, main, median_parts
from stream_pipelines.devtools.benchmarks.common import BenchmarkError
from stream_pipelines.devtools.benchmarks.streaming.load import Batch, LoadedApp
from stream_pipelines.devtools.processes import cpu_seconds


def batch(query: str, trigger_ms: int, add_batch_ms: int) -> Batch:
    return Batch(
        query=query,
        run=1,
        batch_id=0,
        started=0.0,
        rows=50,
        backlog=0,
        seen_at=0.0,
        durations={"triggerExecution": trigger_ms, "addBatch": add_batch_ms},
    )


def test_each_duration_part_is_the_median_over_the_batches_in_seconds() -> None:
    batches = [batch("q", 3000, 2500), batch("q", 1000, 800), batch("q", 2000, 1500)]
    assert median_parts(batches) == {"addBatch": 1.5, "triggerExecution": 2.0}


def results(app_batch_s: float) -> dict:
    size = {
        "size": 50,
        "queries": {
            "sensor_aggregation.tumbling": {
                "batches": 4,
                "rows_median": 49,
                "seconds_median": {"triggerExecution": app_batch_s, "addBatch": app_batch_s - 0.3},
            }
        },
        "app_batch_s": app_batch_s,
        "jvm_age_s": 150.0,
        "cpu_s_per_batch": 4.4,
        "cores": 0.44,
    }
    other = {**size, "size": 500, "jvm_age_s": 750.0}
    return {
        "batches": 4,
        "warmup": 2,
        "machine": {"usable_cpus": 2},
        "goal": {"app": "sensor_aggregation", "size": 50, "app_batch_s": 1.0},
        "apps": {"sensor_aggregation": {"trigger_s": 10.0, "sizes": [size, other]}},
    }


def test_the_table_shows_each_query_and_the_goal_beside_the_50_row_sensor_batch_only() -> None:
    table = format_table(results(2.61))
    goal_lines = [line for line in table.splitlines() if line.rstrip().endswith("<= 1")]
    assert len(goal_lines) == 1 and "~50 rows" in goal_lines[0] and "2.61" in goal_lines[0]
    assert "  sensor_aggregation.tumbling" in table
    assert "4.40   = 0.44 cores at a 10s trigger" in table


def test_each_size_says_how_long_the_jvm_had_run_when_it_was_measured() -> None:
    cpu_lines = [line for line in format_table(results(2.61)).splitlines() if "CPU per batch" in line]
    assert [line.split("trigger, ")[-1] for line in cpu_lines] == ["JVM up 2.5 min", "JVM up 12.5 min"]


def test_a_process_age_is_read_from_proc_and_none_once_it_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(1.2)
        age = process_age_s(child.pid)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert age is not None and 1.0 <= age < 30.0
    assert process_age_s(child.pid) is None


def test_cpu_seconds_counts_a_busy_child_and_nothing_for_a_gone_one() -> None:
    spin = "import time\nstart = time.time()\nwhile time.time() - start < 1.0: pass"
    busy = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.5)
        before = cpu_seconds({busy.pid})
        busy.wait(timeout=10)
    finally:
        busy.kill()
    assert before > 0.0
    assert cpu_seconds({os.getpid() + 10_000_000}) == 0.0


def test_the_cpu_is_read_from_the_spark_driver_not_the_private_brokers_jvm() -> None:
    from stream_pipelines.devtools.benchmarks.common import spark_driver_jvm
    from stream_pipelines.devtools.processes import Proc

    broker = Proc(
        10, 1, "S", ("/usr/bin/java", "-Xmx512m", "-cp", "/jars/*", "kafka.Kafka", "server.properties")
    )
    spark = Proc(
        20,
        1,
        "S",
        (
            "/usr/lib/jvm/bin/java",
            "-cp",
            "/spark/jars/*",
            "org.apache.spark.deploy.SparkSubmit",
            "pyspark-shell",
        ),
    )
    worker = Proc(30, 20, "S", ("/venv/bin/python", "-m", "pyspark.daemon"))
    table = {proc.pid: proc for proc in (broker, spark, worker)}
    # Either order: the set of descendants has none.
    assert spark_driver_jvm(table, [10, 20, 30]) == 20
    assert spark_driver_jvm(table, [30, 20, 10]) == 20
    assert spark_driver_jvm(table, [10, 30]) is None


def test_a_subset_of_queries_is_measured_without_the_goal_which_is_for_all_of_them() -> None:
    table = format_table({**results(0.61), "queries": ["tumbling"]})
    assert "only the queries tumbling, so no goal is shown" in table.splitlines()[0]
    assert not [line for line in table.splitlines() if line.rstrip().endswith("<= 1")]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--queries", "tumbling"], "--queries needs exactly one app in --apps"),
        (
            ["--apps", "sensor_aggregation", "--queries", "tumbling", "windows"],
            "sensor_aggregation has no query windows; its queries: tumbling, sliding, quarantine",
        ),
    ],
)
def test_queries_that_cannot_be_run_are_refused_before_anything_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_loaded_app_refuses_a_query_its_app_does_not_have() -> None:
    with pytest.raises(BenchmarkError, match="ad_matching has no query tumbling; its queries: matches, ctr"):
        LoadedApp(None, None, "ad_matching", "run", None, None, only=["tumbling"])  # type: ignore[arg-type]
