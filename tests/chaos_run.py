"""One `make chaos` run as the tests make it: the script in a child process, on a private stack under
``folder``, its output in ``folder/chaos.log``, its JSON report read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from stream_pipelines.core.config import PROJECT_ROOT


def run_chaos(folder: Path, *arguments: str, timeout_s: float) -> tuple[dict, str]:
    """The report and the run's output; the run's faults and apps come from ``arguments``."""
    report_path, log_path = folder / "chaos.json", folder / "chaos.log"
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    command = [
        sys.executable,
        "-m",
        "stream_pipelines.devtools.chaos",
        *arguments,
        "--gap",
        "1",
        "2",
        "--recover-timeout",
        "420",
        "--root",
        str(folder / "stack"),
        "--json",
        str(report_path),
    ]
    with log_path.open("w") as log:
        subprocess.run(
            command, env=environment, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
        )
    output = log_path.read_text(errors="replace")
    assert report_path.exists(), f"no report written; the run's output:\n{output[-6000:]}"
    return json.loads(report_path.read_text()), output
