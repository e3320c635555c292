"""The start-up benchmark's phase clock: driver lines close phases in order; a missing one is an error."""

from __future__ import annotations

import io
import time

import pytest

from stream_pipelines.core.config import load_config
from stream_pipelines.devtools.benchmarks.common import BenchmarkError, Interrupts
from stream_pipelines.devtools.benchmarks.startup import PHASES, StartTimeline, first_batch
from stream_pipelines.devtools.processes import alive

DRIVER_OUTPUT = b"""WARNING: Using incubator modules: jdk.incubator.vector
checkpoint preflight for raw_archive (1 queries): ok to start
archive: /tmp/x/checkpoints/raw_archive/archive
[2026-11-24 13:38:20Z] raw_archive: lease taken (pid 12)
[2026-11-24 13:38:26Z] raw_archive: Spark session ready (local-1795527500000)
[2026-11-24 13:38:28Z] raw_archive: started 1 queries (processing): raw_archive.archive
"""


def test_driver_lines_close_the_phases_in_order_and_the_log_keeps_every_line() -> None:
    timeline = StartTimeline()
    timeline.mark("launcher")
    copy = io.StringIO()
    timeline.read_lines(io.BytesIO(DRIVER_OUTPUT), copy)
    timeline.mark("first batch")
    phases = timeline.phases()
    assert list(phases) == [*PHASES, "total"]
    assert all(seconds >= 0 for seconds in phases.values())
    assert phases["total"] == pytest.approx(sum(phases[name] for name in PHASES))
    assert copy.getvalue() == DRIVER_OUTPUT.decode()


def test_a_start_that_never_reached_a_phase_is_an_error_not_a_number() -> None:
    timeline = StartTimeline()
    timeline.mark("launcher")
    timeline.read_lines(io.BytesIO(DRIVER_OUTPUT.split(b"[2026-11-24 13:38:26Z]")[0]), io.StringIO())
    with pytest.raises(BenchmarkError, match="session, query start, first batch"):
        timeline.phases()


def test_a_launcher_that_exits_before_the_first_batch_leaves_no_process_of_its_group(tmp_path):
    # spark-submit's JVM dying under its Python driver: the launcher is gone, a child of its group is not.
    config = load_config("local", [f"paths.data_root={tmp_path}"], environ={})
    child_pid = tmp_path / "child.pid"
    command = ["bash", "-c", f"sleep 60 & echo $! > {child_pid}; exit 3"]
    with (
        pytest.raises(BenchmarkError, match="exited with 3 before its first batch"),
        first_batch(config, "raw_archive", command, "none.py", tmp_path / "start.log", Interrupts()),
    ):
        pass
    child = int(child_pid.read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child), "the launcher's child outlived the benchmark's start"
