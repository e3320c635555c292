"""Spark's scratch space under repeated kill -9: a crash loop must not fill the disk.

Each run of an app (real spark-submit, real broker) is killed -9 with its whole process group once it
has committed a batch; then it runs once more and stops gracefully. What a dead run left must be gone
once the next run owns the app, the clean exit leaves nothing, and no run writes Spark's folders to
the system temp folder (a private one here, so the shared /tmp of other tests does not blur the count).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.kafka.topics import ensure_topics
from tests.conftest import make_overrides_config, private_source_topics, produce, run_app, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]

APP = "raw_archive"
KILLS = 3


def committed(checkpoint: Path) -> int:
    return len(list((checkpoint / "commits").glob("[0-9]*")))


def entries(folder: Path) -> set[str]:
    return {entry.name for entry in folder.iterdir()} if folder.is_dir() else set()


def megabytes(folder: Path) -> float:
    files = (path for path in folder.rglob("*") if path.is_file() and not path.is_symlink())
    return sum(path.stat().st_size for path in files) / 1e6 if folder.is_dir() else 0.0


def describe(folder: Path) -> str:
    return f"{len(entries(folder))} entries, {megabytes(folder):.1f} MB: {sorted(entries(folder))}"


def test_restarts_clear_what_killed_runs_left_and_nothing_lands_in_the_system_temp_folder(
    broker, make_overrides, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    # Where a driver that was not told otherwise would put its scratch: Python reads TMPDIR, the JVM
    # java.io.tmpdir (JAVA_TOOL_OPTIONS reaches every JVM spark-submit starts; a -D on the command line wins).
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", f"-Djava.io.tmpdir={system_tmp}")

    overrides = make_overrides("archive.trigger=1 seconds", *private_source_topics())
    config = make_overrides_config(overrides)
    ensure_topics(config)
    topic = config.kafka.topics.sensors.name
    checkpoint = Path(config.checkpoint_dir(APP, "archive"))
    scratch = Path(config.scratch_dir(APP))

    left_by_dead_runs: set[str] = set()
    for run in range(1, KILLS + 2):
        before = committed(checkpoint)
        produce(config, topic, [(None, b'{"n": %d}' % run)] * 20)
        driver = run_app(APP, "processing", overrides)
        try:
            wait_for(lambda b=before: committed(checkpoint) > b, 300, f"run {run}'s first batch")
            # While this run owns the app, nothing a dead run left is there any more.
            still_there = left_by_dead_runs & entries(scratch)
            assert not still_there, f"run {run} kept what killed runs left: {sorted(still_there)}"
        except BaseException:
            kill(driver)
            raise
        if run > KILLS:
            break
        kill(driver)
        left_by_dead_runs |= entries(scratch)
        print(f"after kill {run}: scratch {describe(scratch)}; system tmp {describe(system_tmp)}")

    ControlStore(config).request_stop(APP)
    try:
        assert driver.wait(180) == 0
    finally:
        kill(driver)
    # Not just Spark's folders: the native libraries the JVM unpacks are megabytes a run as well.
    assert not entries(system_tmp), f"the runs wrote to the system temp folder: {describe(system_tmp)}"
    assert left_by_dead_runs, "the killed runs had their scratch in the app's folder"
    assert not entries(scratch), f"a clean exit leaves no scratch: {describe(scratch)}"


def kill(driver: subprocess.Popen) -> None:
    """kill -9 of spark-submit's whole process group: the JVM, the Python driver and its workers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(60)
