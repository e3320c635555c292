"""`make chaos` pieces that need no stack: driver counting, the seeded draw, the table and the verdict."""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from stream_pipelines.core.registry import APPS
from stream_pipelines.devtools import chaos
from stream_pipelines.devtools.chaos import (
    APP_FAULTS,
    FAULT_CLASSES,
    WORKER_SUBMIT_LIMIT_S,
    YARN_FAULTS,
    DriverSampler,
    FaultResult,
    Proc,
    draw_schedule,
    drivers_in,
    fault_classes,
    fault_table,
    main,
    task_runner,
    verdict,
    worker_launches,
)


def table(*procs: Proc) -> dict[int, Proc]:
    return {proc.pid: proc for proc in procs}


def test_a_driver_is_the_topmost_process_naming_the_entry_script():
    script = APPS["raw_archive"].entry_point
    other = APPS["ad_matching"].entry_point
    found = drivers_in(
        table(
            Proc(10, 1, "S", ("airflow worker -- 0190",)),
            # spark-submit's JVM and its Python child: one driver
            Proc(11, 10, "S", ("java", "org.apache.spark.deploy.SparkSubmit", script, "--trigger")),
            Proc(12, 11, "S", ("python", script, "--trigger")),
            # a frozen one counts, a zombie does not
            Proc(20, 1, "T", ("java", "org.apache.spark.deploy.SparkSubmit", other)),
            Proc(30, 1, "Z", ("java", "org.apache.spark.deploy.SparkSubmit", script)),
            # an orphaned Python driver is a driver of its own
            Proc(40, 1, "S", ("python", script)),
        ),
        ["raw_archive", "ad_matching", "sensor_aggregation"],
    )
    assert found == {"raw_archive": [11, 40], "ad_matching": [20], "sensor_aggregation": []}


def test_the_draw_is_seeded_and_targets_an_app_only_for_app_faults():
    apps = list(APPS)
    first = draw_schedule(random.Random(7), 20, FAULT_CLASSES, apps, each_once=False)
    assert first == draw_schedule(random.Random(7), 20, FAULT_CLASSES, apps, each_once=False)
    assert len(first) == 20 and {fault for fault, _ in first} <= set(FAULT_CLASSES)
    assert all((app is not None) == (fault in APP_FAULTS) for fault, app in first)
    once = draw_schedule(random.Random(1), 0, FAULT_CLASSES, ["raw_archive"], each_once=True)
    assert [fault for fault, _ in once] == list(FAULT_CLASSES)


def test_the_table_per_class_and_the_verdict():
    results = [
        FaultResult(1, "driver-kill", "a", "t", recovered=True, next_batch_s=40.0, restarts=1, new_drivers=1),
        FaultResult(2, "driver-kill", "a", "t", recovered=True, next_batch_s=20.0, restarts=1, new_drivers=1),
        FaultResult(3, "runner-kill", "a", "t", recovered=False, expectations=["no adoption"]),
    ]
    rows = {row["class"]: row for row in fault_table(results)}
    assert rows["driver-kill"]["count"] == 2 and rows["driver-kill"]["next_batch_median_s"] == 30.0
    assert rows["driver-kill"]["next_batch_max_s"] == 40.0 and rows["driver-kill"]["failed"] == 0
    assert rows["runner-kill"]["failed"] == 1 and rows["runner-kill"]["next_batch_median_s"] is None
    report = {
        "faults": [{**vars(r)} for r in results],
        "drivers": {"max_per_app": {"raw_archive": 2}},
        "verification": {"archive": {"lost": 0, "duplicated": 3, "unexpected": 0}},
        "end": {"drained": True, "stopped_gracefully": True},
        "startup_tries": {"raw_archive": {"wait_until_wanted": 2, "run_app": 1}, "ad_matching": {}},
    }
    problems = verdict(report)
    assert "archive: 3 offsets duplicated" in problems
    assert "raw_archive: 2 drivers at once" in problems
    assert "fault 3 (runner-kill): not recovered" in problems
    assert "fault 3 (runner-kill): no adoption" in problems
    assert (
        "raw_archive: the stack's start failed a try of its supervisor's wait_until_wanted (try 2)"
        in problems
    )
    assert len(problems) == 5


def test_the_runner_of_an_adopted_driver_is_found_by_its_task_instance_id():
    """The database spells the id without dashes; the runner's title with them. The executor's pool
    worker that forked the runner names the same id and is not the runner."""
    processes = table(
        Proc(5, 2, "S", ("airflow worker -- LocalExecutor: 01a20cd3-30eb-70d6-a7e9-b9a5b3bf8cae",)),
        Proc(6, 5, "S", ("airflow worker -- 01a20cd3-30eb-70d6-a7e9-b9a5b3bf8cae",)),
        Proc(7, 5, "S", ("airflow worker -- 01a20cd3-30c1-7ce5-83ca-d5838eaea94c",)),
    )
    assert task_runner(processes, "01a20cd330eb70d6a7e9b9a5b3bf8cae") == 6
    assert task_runner(processes, "01a20cd3-30c1-7ce5-83ca-d5838eaea94c") == 7
    assert task_runner(processes, "01a20cd3ffffffffffffffffffffffff") is None
    assert task_runner(processes, None) is None


def test_the_storage_outage_is_drawn_only_on_a_store_with_a_server_and_the_query_failure_on_the_local_disk():
    assert "storage-outage" not in fault_classes(None, "local")
    assert set(fault_classes(None, "local")) == set(FAULT_CLASSES) - {"storage-outage"} - YARN_FAULTS
    remote = set(FAULT_CLASSES) - {"query-failure"} - YARN_FAULTS
    assert set(fault_classes(None, "hdfs")) == set(fault_classes(None, "s3")) == remote
    assert fault_classes("storage-outage,driver-kill", "s3") == ("storage-outage", "driver-kill")


def test_on_yarn_the_faults_are_the_containers_the_nodemanager_the_runner_the_scheduler_and_the_broker():
    drawn = set(fault_classes(None, "hdfs", "yarn"))
    airflow = {"runner-kill", "scheduler-restart", "scheduler-kill", "metadata-db-restart"}
    assert drawn == YARN_FAULTS | airflow | {"driver-freeze", "broker-restart"}
    assert {"container-kill", "nodemanager-restart"} == YARN_FAULTS
    assert not drawn & {"driver-kill", "query-failure"}


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["--cluster", "yarn", "--classes", "driver-kill"], "on YARN the drivers run in containers"),
        (["--cluster", "yarn", "--store", "s3"], "on YARN the data root is on the cluster's HDFS"),
        (["--classes", "nodemanager-restart"], "nodemanager-restart need YARN: add --cluster yarn"),
        (["--store", "hdfs", "--classes", "container-kill"], "container-kill need YARN"),
        (["--db-down", "30", "10"], r"--db-down 30 10: needs 0 <= MIN <= MAX"),
        (["--gap", "-1", "3"], r"--gap -1 3: needs 0 <= MIN <= MAX"),
    ],
)
def test_a_fault_the_cluster_cannot_take_is_refused_before_anything_starts(tmp_path, argv, refusal):
    with pytest.raises(SystemExit, match=refusal):
        main([*argv, "--root", str(tmp_path / "stack")])
    assert not (tmp_path / "stack").exists()


def test_on_yarn_a_spark_submit_that_stays_on_the_airflow_worker_fails_the_run():
    worker = DriverSampler(["raw_archive"], Path("/nonexistent"))
    worker.seen = {
        11: {
            "app": "raw_archive",
            "kind": "launch",
            "started": 100.0,
            "first_seen": 101.0,
            "last_seen": 104.0,
        },
        12: {
            "app": "raw_archive",
            "kind": "launch",
            "started": 200.0,
            "first_seen": 200.5,
            "last_seen": 210.0,
        },
    }
    quick = worker_launches(worker)
    assert quick == {
        "spark_submits": 2,
        "longest_s": 10.0,
        "python_drivers": 0,
        "limit_s": WORKER_SUBMIT_LIMIT_S,
    }
    report = {"faults": [], "drivers": {"max_per_app": {"raw_archive": 1}}, "worker": quick}
    assert verdict(report) == []
    worker.seen[13] = {"app": "raw_archive", "kind": "launch", "started": 300.0, "first_seen": 301.0}
    worker.seen[13]["last_seen"] = 300.0 + WORKER_SUBMIT_LIMIT_S + 60
    worker.seen[14] = {"app": "raw_archive", "kind": "python", "started": 400.0, "first_seen": 400.0}
    held = verdict({**report, "worker": worker_launches(worker)})
    assert held == [
        "the Airflow worker ran 1 Python driver(s)",
        f"a spark-submit stayed 180s on the Airflow worker (a driver held there; the limit is "
        f"{WORKER_SUBMIT_LIMIT_S:.0f}s)",
    ]


def test_a_query_failure_asked_of_a_store_server_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(SystemExit, match="query-failure blocks a checkpoint write on the local disk"):
        main(["--classes", "query-failure", "--store", "s3", "--root", str(tmp_path / "stack")])
    assert not (tmp_path / "stack").exists()


def test_a_storage_outage_asked_of_the_local_disk_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(SystemExit, match="storage-outage needs a store server to stop: add --store hdfs"):
        main(["--classes", "storage-outage", "--root", str(tmp_path / "stack")])
    assert not (tmp_path / "stack").exists()


def test_a_drivers_launch_is_when_its_process_started_not_when_the_sampler_first_saw_it(
    monkeypatch, tmp_path
):
    # A real process, started 2 s before the sampler first looks, stands for a spark-submit.
    before = time.time()
    launcher = subprocess.Popen(["sleep", "60"], env={**os.environ, chaos.ROOT_VARIABLES[0]: str(tmp_path)})
    after = time.time()
    try:
        time.sleep(2)
        script = APPS["raw_archive"].entry_point
        monkeypatch.setattr(
            chaos,
            "process_table",
            lambda: table(
                Proc(launcher.pid, 1, "S", ("java", "org.apache.spark.deploy.SparkSubmit", script))
            ),
        )
        sampler = DriverSampler(["raw_archive", "ad_matching"], tmp_path)
        sampler.sample()
        # The clock ticks of /proc's start time (10 ms) and two clocks read apart: a little slack.
        assert before - 0.1 <= sampler.first_launch("raw_archive") <= after + 0.1
        assert sampler.seen[launcher.pid]["first_seen"] >= after + 2
        assert sampler.first_launch("ad_matching") is None
    finally:
        launcher.kill()
        launcher.wait()
