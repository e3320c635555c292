"""A killed task runner must not leave its supervisor waiting on the orphaned driver.

Airflow 3 runs a task in a process whose stdin is a socket to its supervisor; the supervisor finishes
the try (and lets the retry start, which adopts the driver) when that socket closes. spark-submit used
to inherit the socket as its stdin, so after a kill -9 of the task process the orphaned driver kept it
open and the supervisor waited for the driver to die: in a 20-fault chaos run, the retry that should
have adopted ad_matching came 11 minutes late, when the driver was killed by the next fault.

Here the task process is a real Python process launching through the operator's real SparkSubmitHook,
with a socket as its stdin; spark-submit is a stand-in that only sleeps (no JVM needed).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.conftest import wait_for

TASK = textwrap.dedent(
    """
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from stream_pipelines.airflow.drivers import submit_detached

    submit_detached(SparkSubmitHook(conn_id="spark_detached_test"), "app.py")
    """
)


def test_a_killed_task_process_does_not_leave_its_supervisors_socket_open_in_the_driver(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    started = tmp_path / "spark-submit.pid"
    fake = bin_dir / "spark-submit"
    fake.write_text(f"#!/bin/sh\necho $$ > {started}\nexec sleep 300\n")
    fake.chmod(0o755)
    supervisor_end, task_end = socket.socketpair()
    environment = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "AIRFLOW_CONN_SPARK_DETACHED_TEST": json.dumps({"conn_type": "spark", "host": "local"}),
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    task = subprocess.Popen([sys.executable, "-c", TASK], stdin=task_end, env=environment)
    task_end.close()
    driver = None
    try:
        wait_for(started.exists, 120, "the stand-in spark-submit to start")
        wait_for(lambda: started.read_text().strip().isdigit(), 10, "its pid")
        driver = int(started.read_text())
        stdin_of_driver = os.readlink(f"/proc/{driver}/fd/0")
        task.send_signal(signal.SIGKILL)
        task.wait(30)
        supervisor_end.settimeout(10)
        began = time.monotonic()
        try:
            closed = supervisor_end.recv(1) == b""
        except TimeoutError:
            closed = False
        assert closed, (
            f"the supervisor's socket stayed open {time.monotonic() - began:.0f}s after the task died: "
            f"the orphaned driver holds it (its stdin is {stdin_of_driver})"
        )
        assert stdin_of_driver == "/dev/null"
        assert Path(f"/proc/{driver}").exists(), "the driver itself lives on, for the retry to adopt"
    finally:
        supervisor_end.close()
        if task.poll() is None:
            task.kill()
        if driver is not None:
            os.killpg(driver, signal.SIGKILL)
