"""What `make demo` prints: its own lines on the terminal, native noise in a log, progress while it waits."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import start_http_server

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.devtools.demo import ProgressLine
from stream_pipelines.devtools.processes import free_port
from stream_pipelines.observability.metrics import ProgressRecorder


def test_native_output_goes_to_the_log_and_python_prints_to_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / "native.log"
    script = textwrap.dedent(
        f"""
        import os, subprocess, sys
        from pathlib import Path
        from stream_pipelines.devtools.demo import native_output_to

        print("before", flush=True)
        with native_output_to(Path({str(log)!r})):
            print("python says hello", flush=True)
            print("python warns", file=sys.stderr, flush=True)
            os.write(2, b"native write to fd 2\\n")
            subprocess.run(["sh", "-c", "echo child stdout; echo child stderr >&2"], check=True)
        print("after", flush=True)
        """
    )
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.split() == ["before", "python", "says", "hello", "after"]
    assert finished.stderr.strip() == "python warns"
    logged = log.read_text()
    assert "native write to fd 2" in logged
    assert "child stdout" in logged and "child stderr" in logged
    assert "python says hello" not in logged


def _progress(name: str, batch: int, watermark: str) -> object:
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    return StreamingQueryProgress.fromJson(
        {
            "id": "00000000-0000-0000-0000-000000000007",
            "runId": "00000000-0000-0000-0000-000000000008",
            "name": name,
            "timestamp": "2026-11-24T10:00:00.000Z",
            "batchId": batch,
            "batchDuration": 1000,
            "durationMs": {"triggerExecution": 900},
            "eventTime": {"watermark": watermark},
            "stateOperators": [],
            "sources": [],
            "sink": {"description": "noop", "numOutputRows": 0},
            "numInputRows": 120,
            "inputRowsPerSecond": 60.0,
            "processedRowsPerSecond": 100.0,
            "observedMetrics": {},
        }
    )


def test_the_progress_line_reads_batch_rows_watermark_from_the_endpoint_and_restarts_from_the_store(
    tmp_path: Path, capsys
) -> None:
    port = free_port()
    # ad_matching's port too: its default is a running stack's, whose exporter would answer.
    silent_port = free_port()
    config = load_config(
        "local",
        [
            f"paths.data_root={tmp_path}",
            f"metrics.ports.sensor_aggregation={port}",
            f"metrics.ports.ad_matching={silent_port}",
        ],
    )
    recorder = ProgressRecorder(config, declared_app("sensor_aggregation"))
    registry = CollectorRegistry()
    registry.register(recorder)
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        recorder.query_progress(_progress("sensor_aggregation.tumbling", 41, "2026-11-24T09:58:30.000Z"))
        ControlStore(config).record_restart("sensor_aggregation", cause="exit 137")
        line = ProgressLine(config)
        assert line.describe("sensor_aggregation") == (
            "sensor_aggregation batch 41 rows 120 watermark 09:58:30, restarts 1"
        )
        assert line.describe("ad_matching") == "ad_matching not running, restarts 0"
        line()
        line()  # within the interval: no second line
        printed = capsys.readouterr().out.splitlines()
        assert len(printed) == 1 and "sensor_aggregation batch 41" in printed[0]
    finally:
        server.shutdown()
        thread.join(5)


def test_a_demo_starts_by_stopping_what_an_interrupted_one_left_running(tmp_path: Path, monkeypatch) -> None:
    # A demo killed mid-run leaves its drivers (detached from their tasks) running; they carry the
    # demo's root in their environment, and the next demo stops them before it starts anything.
    from stream_pipelines.devtools import demo
    from stream_pipelines.devtools.processes import alive

    root = tmp_path / "demo"
    monkeypatch.setattr(demo, "DEMO_ROOT", root)
    left = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={"PIPELINE__PATHS__LOCAL_ROOT": str(root)},
        start_new_session=True,
    )
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={"PIPELINE__PATHS__LOCAL_ROOT": str(tmp_path / "elsewhere")},
    )
    try:
        demo._stop_a_previous_run()
        left.wait(timeout=15)
        assert not alive(left.pid)
        assert other.poll() is None
    finally:
        for process in (left, other):
            process.kill()
            process.wait()
