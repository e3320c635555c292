"""`make chaos` in small: one fault of each class against raw_archive on a private stack whose data
root, checkpoints, lease and control records are in a bucket of a loopback S3 server.

The same script as `make chaos CHAOS_ARGS="--store s3"` (a real broker, PostgreSQL, Airflow's api-server, two
schedulers and the dag-processor with the LocalExecutor, the live generator, spark-submit drivers), with
one fault of each class that store allows in turn, and the same verification at the end: every produced
offset archived exactly once, no gap, never two drivers of the app in any one-second sample of the
process table. Two classes are left out: the graceful scheduler restart (the kill -9 of a scheduler is
the harder case of the same takeover) and the failed query, which needs a checkpoint on the local disk
(a query restarted inside its driver is tests/test_lifecycle.py's).

The task-runner fault is also the adoption test: kill -9 of the task runner above a running app; the
task is retried and adopts the orphaned driver (no second spark-submit, one driver per app at every
sample, no restart counted); after the orphan is stopped gracefully, supervision goes on normally (a new
run starts one new driver, which commits). The frozen driver is found by its JVM's silence and killed
without a drain; the killed one restarts from its checkpoint; either way the archive is exact. Neither
a scheduler's death nor the metadata database's restart starts a driver. The S3 server frozen for
30-60 s leaves every request hanging until its timeout: the app rides it out or its supervisor restarts
it, and the watchdog, which cannot read the lease either, does not take it for a stuck driver.
"""

from __future__ import annotations

import re

import pytest

from stream_pipelines.devtools.chaos import fault_classes
from tests.chaos_run import run_chaos

# One limit for every test: whichever runs first starts the module's chaos stack and pays for it. The soak
# tier (make test-soak), not make test: CI's time (docs/development.md, "The soak tier").
pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(2700)]


STORE = "s3"
# Each class costs the smoke a minute or more (see the module's docstring for the one left out).
SMOKE_CLASSES = tuple(c for c in fault_classes(None, STORE) if c != "scheduler-restart")
# The smoke's waits: 1-3 s between one fault's recovery and the next, and PostgreSQL down for 10-15 s
# (`make chaos` draws 3-15 s and 10-60 s): a seven-fault smoke spends its minutes on the faults.
SMOKE_TIMINGS = ("--gap", "1", "3", "--db-down", "10", "15")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    return run_chaos(
        tmp_path_factory.mktemp("chaos"),
        *("--store", STORE, "--apps", "raw_archive", "--classes", ",".join(SMOKE_CLASSES)),
        *("--each-once", "--stop-orphans", "--seed", "11", *SMOKE_TIMINGS),
        timeout_s=2400,
    )


def faults_by_class(report: dict) -> dict[str, dict]:
    return {fault["fault"]: fault for fault in report["faults"]}


def test_each_fault_class_once_loses_and_duplicates_nothing(smoke):
    report, output = smoke
    tail = output[-6000:]
    assert "aborted" not in report, f"{report.get('aborted')}\n{tail}"
    assert sorted(faults_by_class(report)) == sorted(SMOKE_CLASSES), tail
    for fault in report["faults"]:
        assert fault["recovered"], f"fault {fault['fault']} not recovered: {fault['notes']}\n{tail}"
    archive = report["verification"]["archive"]
    assert archive["produced"] > 0
    assert (archive["lost"], archive["duplicated"], archive["unexpected"]) == (0, 0, 0), archive["examples"]
    drivers = report["drivers"]
    assert drivers["samples"] > 100
    assert drivers["max_per_app"] == {"raw_archive": 1}, drivers["violations"]
    assert report["end"] == {"drained": True, "stopped_gracefully": True}
    kill = faults_by_class(report)["driver-kill"]
    assert kill["restarts"] >= 1 and kill["new_drivers"] >= 1, kill
    # The app's first start on this stack, which bench-recovery prints beside a restart's: from its first
    # spark-submit to its first batch, so at least the JVM's start and a batch, and within the wait.
    assert 2 < report["cold_start_s"]["raw_archive"] < 900, report["cold_start_s"]
    assert report["problems"] == [], tail


def test_the_stacks_start_fails_no_try_of_the_supervisor(smoke):
    """The schedulers start once the api-server answers: a task handed out before then fails its first
    try and waits out a retry delay (stack.start_components)."""
    report, _ = smoke
    assert report["startup_tries"] == {"raw_archive": {"wait_until_wanted": 1, "run_app": 1}}


def test_a_killed_task_runner_is_retried_and_adopts_the_orphaned_driver(smoke):
    report, _ = smoke
    runner = faults_by_class(report)["runner-kill"]
    before, after = runner["task_before"], runner["task_after"]
    # The same supervisor run, a later try of run_app, running: the task was retried ...
    assert after["run_id"] == before["run_id"] and after["try_number"] > before["try_number"], runner
    # ... and that try followed the orphaned driver: no second spark-submit, one driver at every sample.
    assert runner["adoptions"] >= 1, runner
    assert runner["spark_submits_until_adopted"] == 0, runner
    assert report["drivers"]["max_per_app"]["raw_archive"] == 1, report["drivers"]["violations"]
    lines = report["log_lines"]["raw_archive"]
    assert any(line.startswith("adopting raw_archive:") for line in lines), lines
    # Stopped gracefully, the orphan ends the adopting run; the next run starts one new driver, which commits.
    assert runner["expectations"] == [], runner
    assert any("stopped gracefully (stopped)" in note for note in runner["notes"]), runner["notes"]
    assert runner["restarts"] == 0, "an adoption is not a crash"


def test_a_frozen_driver_is_found_by_its_silent_jvm_and_killed_without_a_drain(smoke):
    report, _ = smoke
    freeze = faults_by_class(report)["driver-freeze"]
    assert freeze["watchdog_kills"] >= 1, freeze
    assert freeze["restarts"] >= 1, freeze
    verdicts = [
        line for line in report["log_lines"]["raw_archive"] if line.startswith("watchdog: raw_archive")
    ]
    frozen = [line for line in verdicts if "JVM has not answered" in line]
    assert frozen, verdicts
    # Found by the JVM's silence once it reached jvm_answer_timeout, within a few of the watchdog's looks
    # (every 5 s here) and long before its 2-minute no-progress window; killed without asking for a drain
    # that a frozen JVM cannot do.
    for line in frozen:
        silent_s, timeout_s = (
            int(re.search(pattern, line).group(1))
            for pattern in (r"has not answered for (\d+)s", r"jvm_answer_timeout (\d+)s")
        )
        assert timeout_s <= silent_s <= timeout_s + 15, line
        assert "killing it at once" in line and "asking it to stop" not in line, line
    assert freeze["expectations"] == [], freeze
    print(f"\ndriver-freeze: SIGSTOP to the next committed batch {freeze['next_batch_s']}s")


def test_a_frozen_object_store_is_ridden_out_or_the_app_restarted_and_no_stuck_driver_is_seen(smoke):
    report, output = smoke
    assert report["store"] == STORE
    outage = faults_by_class(report)["storage-outage"]
    assert "not injected" not in outage["target"], outage
    assert outage["recovered"] and outage["expectations"] == [], f"{outage['notes']}\n{output[-6000:]}"
    # An outage of the store is not a stuck driver: the watchdog, which could not read the lease either,
    # does not stop the app for the heartbeat the outage kept it from renewing.
    assert outage["watchdog_kills"] == 0, (outage, report["log_lines"])
    how = "restarted by its supervisor" if outage["restarts"] else "rode it out"
    print(
        f"\n{STORE}: {outage['target']}; raw_archive {how} (restarts {outage['restarts']}, new drivers "
        f"{outage['new_drivers']}); next committed batch {outage['next_batch_s']}s after the outage began"
    )


def test_a_scheduler_killed_with_minus_nine_is_started_again_and_no_driver_starts_or_doubles(smoke):
    """The scheduler running the app's supervisor task dies (kill -9); its keeper starts it again. Its task
    runs on, orphaned, until the other scheduler finds it dead and resets it; the task's end leaves the
    driver running, and the next try adopts it: no new driver, never two."""
    report, _ = smoke
    kill = faults_by_class(report)["scheduler-kill"]
    assert kill["recovered"] and kill["expectations"] == [], kill
    assert kill["tasks_hit"] == ["raw_archive"], kill
    assert kill["adoptions"] >= 1 and kill["new_drivers"] == 0 and kill["restarts"] == 0, kill
    assert any("started again by its keeper" in note for note in kill["notes"]), kill["notes"]
    assert report["drivers"]["max_per_app"]["raw_archive"] == 1, report["drivers"]["violations"]


def test_a_metadata_database_restart_leaves_the_driver_streaming_and_airflow_comes_back(smoke):
    """PostgreSQL stopped for 10-15 s: the driver does not need it and streams on (no restart, no new
    driver); Airflow's components ride it out or are started again by their keepers, and the supervisor's
    task is running again once it is back."""
    report, _ = smoke
    restart = faults_by_class(report)["metadata-db-restart"]
    assert restart["recovered"] and restart["expectations"] == [], restart
    assert restart["new_drivers"] == 0 and restart["restarts"] == 0, restart
    assert any(note.startswith("database down ") for note in restart["notes"]), restart["notes"]
    print(f"\nmetadata-db-restart: {restart['notes']}; next batch {restart['next_batch_s']}s")
