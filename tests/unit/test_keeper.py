"""The keeper that `make up` and `make chaos` run each Airflow component under: a command that dies is
started again, a stop stops both, and the pause grows while the command keeps failing fast."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from stream_pipelines.core.config import PROJECT_ROOT
from stream_pipelines.devtools.keeper import RESTART_DELAY_S, STABLE_S, kept_pid, next_delay
from stream_pipelines.devtools.processes import alive
from tests.conftest import wait_for

KEEPER = (
    "import sys\n"
    "import stream_pipelines.devtools.keeper as keeper\n"
    "keeper.RESTART_DELAY_S = (0.5, 2.0)\n"
    "keeper.STUCK_GRACE_S = 0.5\n"
    "sys.exit(keeper.main(sys.argv[1:]))\n"
)
STUCK = "waiting for running tasks to finish"


def start_keeper(tmp_path, *command: str) -> tuple[subprocess.Popen, object]:
    log = (tmp_path / "keeper.log").open("w")
    keeper = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KEEPER,
            "--name",
            "sleeper",
            "--kill-on",
            STUCK,
            "--",
            *(command or ("sleep", "600")),
        ],
        cwd=PROJECT_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return keeper, log


def test_a_killed_command_is_started_again_and_a_stop_ends_both(tmp_path):
    keeper, log = start_keeper(tmp_path)
    try:
        wait_for(lambda: kept_pid(keeper.pid) is not None, 10, "the first start")
        first = kept_pid(keeper.pid)
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: kept_pid(keeper.pid) not in (None, first), 10, "the start again")
        second = kept_pid(keeper.pid)
        os.killpg(keeper.pid, signal.SIGTERM)  # as `make down` stops a component: its process group
        assert keeper.wait(10) == 0
        wait_for(lambda: not alive(second), 10, "the kept command to end")
    finally:
        if keeper.poll() is None:
            os.killpg(keeper.pid, signal.SIGKILL)
        log.close()
    lines = (tmp_path / "keeper.log").read_text().splitlines()
    assert f"keeper sleeper: started (pid {first})" in lines[0]
    assert f"pid {first} ended with -9" in lines[1] and "starting again in 0s" in lines[1], lines
    assert f"started (pid {second})" in lines[2]
    assert "stopped" in lines[-1], lines


def test_a_stop_while_waiting_to_start_again_ends_the_keeper_at_once(tmp_path):
    keeper, log = start_keeper(tmp_path)
    try:
        wait_for(lambda: kept_pid(keeper.pid) is not None, 10, "the first start")
        os.kill(kept_pid(keeper.pid), signal.SIGKILL)
        wait_for(lambda: "starting again" in (tmp_path / "keeper.log").read_text(), 10, "the pause")
        started = time.monotonic()
        os.kill(keeper.pid, signal.SIGTERM)
        assert keeper.wait(10) == 0
        assert time.monotonic() - started < 5
    finally:
        if keeper.poll() is None:
            os.killpg(keeper.pid, signal.SIGKILL)
        log.close()


def test_a_command_stuck_after_its_kill_on_line_is_killed_and_started_again(tmp_path):
    # As an Airflow scheduler whose loop failed: it says it waits for its running tasks, and never ends.
    stuck = f"import time; print('the loop failed; {STUCK}', flush=True); time.sleep(600)"
    keeper, log = start_keeper(tmp_path, sys.executable, "-c", stuck)
    try:
        wait_for(lambda: kept_pid(keeper.pid) is not None, 10, "the first start")
        first = kept_pid(keeper.pid)
        wait_for(lambda: kept_pid(keeper.pid) not in (None, first), 20, "the kill and the start again")
    finally:
        os.killpg(keeper.pid, signal.SIGTERM)
        keeper.wait(20)
        log.close()
    output = (tmp_path / "keeper.log").read_text()
    assert f"pid {first} printed {STUCK!r} and did not end: killed, as a crash" in output, output
    assert f"pid {first} ended with -9" in output, output
    assert "the loop failed" in output, "the command's own output reaches the log"


def test_the_pause_doubles_while_the_command_fails_fast_and_resets_after_a_stable_run():
    first, longest = RESTART_DELAY_S
    assert next_delay(None, 1) == first
    assert next_delay(first, 1) == 2 * first
    assert next_delay(longest, 1) == longest
    assert next_delay(4 * first, STABLE_S) == first
